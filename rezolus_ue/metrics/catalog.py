"""The metric catalog: every metric family rezolus-ue publishes, declared once.

Each family becomes one event (``rezolus_ue.schema.EVENTS``); its fields, the event
reference (docs/events.md) and the consumers' decoders all derive from this module.
Names follow Rezolus where it has one; units are in every name or field description.
"""

from __future__ import annotations

from ..encoding import REL_STR, U32, char_array
from .family import Family, Label, counter, gauge, histogram

CPU = Label("cpu", U32, "CPU number")
DEVICE = Label("device", char_array(32), "block device name, e.g. nvme0n1")
INTERFACE = Label("interface", char_array(16), "network interface name")
RESOURCE = Label("resource", char_array(8), "pressure resource: cpu, memory, io or irq")
SAMPLER = Label("sampler", char_array(24), "sampler name (config section)")
CGROUP = Label("cgroup", REL_STR, "cgroup v2 path below the cgroup root", max_len=256)

# --- cpu -------------------------------------------------------------------------------

CPU_USAGE = Family(
    "rezolus_cpu_usage", "cpu_usage",
    "Time each CPU has spent in each state since boot (/proc/stat), and how busy it was."
    " busy_ppm is sampled every sample_interval, so its max shows bursts the interval's"
    " average hides.",
    (CPU,),
    (
        counter("user_ns", "ns", "time in user mode (excluding nice)", dist=False),
        counter("nice_ns", "ns", "time in user mode at positive nice", dist=False),
        counter("system_ns", "ns", "time in kernel mode", dist=False),
        counter("idle_ns", "ns", "idle time", dist=False),
        counter("iowait_ns", "ns", "idle time with IO outstanding", dist=False),
        counter("irq_ns", "ns", "time servicing hardware interrupts", dist=False),
        counter("softirq_ns", "ns", "time servicing softirqs", dist=False),
        counter("steal_ns", "ns", "time stolen by the hypervisor", dist=False),
        gauge("busy_ppm", "ppm", "share of the sample period not idle or iowait"
              " (1000000 = 100%)"),
    ),
)

CPU_CORES = Family(
    "rezolus_cpu_cores", "cpu_usage",
    "CPUs online (/sys/devices/system/cpu/online).",
    (),
    (gauge("online", "cpus", "online CPUs", dist=False),),
)

SOFTIRQ_KINDS = ("hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched",
                 "hrtimer", "rcu")

CPU_SOFTIRQ = Family(
    "rezolus_cpu_softirq", "cpu_softirq",
    "Softirqs handled per CPU, by kind (/proc/softirqs).",
    (CPU,),
    tuple(counter(k, "softirqs", f"{k.upper()} softirqs") for k in SOFTIRQ_KINDS),
)

CPU_FREQUENCY = Family(
    "rezolus_cpu_frequency", "cpu_frequency",
    "Current frequency per CPU (cpufreq scaling_cur_freq, else /proc/cpuinfo 'cpu MHz').",
    (CPU,),
    # Not oversampled: governors change frequency on their own slower clock, and
    # /proc/cpuinfo (the fallback) is expensive to generate.
    (gauge("frequency_hz", "Hz", "current frequency", dist=False),),
)

# --- scheduler -------------------------------------------------------------------------

SCHEDULER = Family(
    "rezolus_scheduler", "scheduler",
    "System-wide scheduler activity (/proc/stat).",
    (),
    (
        counter("context_switches", "switches", "context switches"),
        counter("forks", "processes", "processes and threads created"),
        gauge("procs_running", "tasks", "runnable tasks"),
        gauge("procs_blocked", "tasks", "tasks blocked on IO"),
    ),
)

SCHEDULER_CPU = Family(
    "rezolus_scheduler_cpu", "scheduler",
    "Per-CPU run and run-queue wait time (/proc/schedstat; needs CONFIG_SCHEDSTATS).",
    (CPU,),
    (
        counter("running_ns", "ns", "time tasks spent running on this CPU"),
        counter("waiting_ns", "ns", "time runnable tasks spent waiting for this CPU"),
        counter("timeslices", "timeslices", "timeslices run on this CPU"),
    ),
)

# --- memory ----------------------------------------------------------------------------

MEMORY = Family(
    "rezolus_memory", "memory",
    "Memory use (/proc/meminfo).",
    (),
    (
        gauge("total_bytes", "bytes", "usable RAM", dist=False),
        gauge("free_bytes", "bytes", "unused RAM"),
        gauge("available_bytes", "bytes", "RAM available for new work without swapping"),
        gauge("buffers_bytes", "bytes", "block device buffers"),
        gauge("cached_bytes", "bytes", "page cache (excluding swap cache)"),
        gauge("dirty_bytes", "bytes", "waiting to be written back"),
        gauge("writeback_bytes", "bytes", "being written back"),
        gauge("slab_bytes", "bytes", "kernel slab allocations"),
        gauge("swap_total_bytes", "bytes", "swap space", dist=False),
        gauge("swap_free_bytes", "bytes", "unused swap space"),
    ),
)

MEMORY_VMSTAT = Family(
    "rezolus_memory_vmstat", "memory",
    "Paging and NUMA activity (/proc/vmstat).",
    (),
    (
        counter("page_faults", "faults", "page faults (pgfault)"),
        counter("major_page_faults", "faults", "faults that needed IO (pgmajfault)"),
        counter("pages_scanned", "pages", "pages scanned for reclaim (pgscan_kswapd, _direct,"
                " _khugepaged, _proactive; not the anon/file split)"),
        counter("pages_stolen", "pages", "pages reclaimed (pgsteal_kswapd, _direct,"
                " _khugepaged, _proactive)"),
        counter("numa_hit", "pages", "allocations on the intended node"),
        counter("numa_miss", "pages", "allocations on another node than intended"),
        counter("numa_foreign", "pages", "allocations intended here, placed elsewhere"),
        counter("numa_local", "pages", "allocations on the local node"),
        counter("numa_other", "pages", "allocations on a remote node"),
        counter("numa_interleave", "pages", "interleave-policy allocations"),
    ),
)

MEMORY_PRESSURE = Family(
    "rezolus_pressure", "memory",
    "Pressure stall information (/proc/pressure/*; Linux >= 4.20 with CONFIG_PSI).",
    (RESOURCE,),
    (
        # The kernel's own 10 s averages: oversampling them adds nothing; the stall
        # totals' rates are the fine-grained view.
        gauge("some_avg10_ppm", "ppm", "share of time some task stalled, 10 s average",
              dist=False),
        gauge("full_avg10_ppm", "ppm", "share of time all tasks stalled, 10 s average",
              dist=False),
        counter("some_stall_us", "us", "total time some task stalled"),
        counter("full_stall_us", "us", "total time all non-idle tasks stalled"),
    ),
)

# --- block IO --------------------------------------------------------------------------

BLOCKIO = Family(
    "rezolus_blockio_device", "blockio",
    "Per block device IO (/proc/diskstats; discards since 4.18, flushes since 5.5).",
    (DEVICE,),
    (
        counter("reads", "ops", "reads completed"),
        counter("writes", "ops", "writes completed"),
        counter("discards", "ops", "discards completed"),
        counter("flushes", "ops", "flushes completed"),
        counter("read_bytes", "bytes", "bytes read"),
        counter("write_bytes", "bytes", "bytes written"),
        counter("discard_bytes", "bytes", "bytes discarded"),
        counter("read_time_ns", "ns", "time spent reading", dist=False),
        counter("write_time_ns", "ns", "time spent writing", dist=False),
        counter("busy_ns", "ns", "time the device had IO in flight"),
        gauge("in_flight", "ops", "IOs in flight"),
    ),
)

# --- network ---------------------------------------------------------------------------

NETWORK = Family(
    "rezolus_network_interface", "network",
    "Per network interface traffic (netlink 64-bit link stats; /sys/class/net fallback).",
    (INTERFACE,),
    (
        counter("rx_bytes", "bytes", "bytes received"),
        counter("tx_bytes", "bytes", "bytes transmitted"),
        counter("rx_packets", "packets", "packets received"),
        counter("tx_packets", "packets", "packets transmitted"),
        counter("rx_errors", "packets", "receive errors"),
        counter("tx_errors", "packets", "transmit errors"),
        counter("rx_dropped", "packets", "received packets dropped"),
        counter("tx_dropped", "packets", "transmitted packets dropped"),
    ),
)

TCP = Family(
    "rezolus_tcp", "network_protocol",
    "TCP protocol counters (/proc/net/snmp, /proc/net/netstat).",
    (),
    (
        counter("active_opens", "connections", "connections opened (connect)"),
        counter("passive_opens", "connections", "connections accepted"),
        counter("in_segs", "segments", "segments received"),
        counter("out_segs", "segments", "segments sent"),
        counter("retrans_segs", "segments", "segments retransmitted"),
        counter("in_errs", "segments", "segments received in error"),
        counter("out_rsts", "segments", "resets sent"),
        counter("listen_overflows", "connections", "accept queue overflows"),
        counter("listen_drops", "connections", "SYNs dropped at listen sockets"),
        counter("timeouts", "events", "retransmission timeouts (TCPTimeouts)"),
    ),
)

UDP = Family(
    "rezolus_udp", "network_protocol",
    "UDP protocol counters over IPv4 (/proc/net/snmp; IPv6 UDP is not included).",
    (),
    (
        counter("in_datagrams", "datagrams", "datagrams delivered"),
        counter("out_datagrams", "datagrams", "datagrams sent"),
        counter("in_errors", "datagrams", "datagrams received in error"),
        counter("no_ports", "datagrams", "datagrams to a port with no listener"),
        counter("rcvbuf_errors", "datagrams", "datagrams dropped: receive buffer full"),
        counter("sndbuf_errors", "datagrams", "datagrams dropped: send buffer full"),
    ),
)

# --- perf events -----------------------------------------------------------------------

#: The perf samplers read another CPU's counters with an IPI to it: not every sample_interval
#: unless asked (their ``oversample`` option).
_PERF_DIST = ("every sample_interval only with the sampler's oversample = true; by default"
              " once per publish interval, so value, percentiles and max are the interval's"
              " one rate (each read of another CPU's counters interrupts that CPU).")

PERF_SOFTWARE = Family(
    "rezolus_perf_software", "perf_software",
    "Per-CPU software perf counters (perf_event_open PERF_TYPE_SOFTWARE).",
    (CPU,),
    (
        counter("context_switches", "switches", "context switches"),
        counter("cpu_migrations", "migrations", "tasks migrated to this CPU"),
        counter("page_faults", "faults", "page faults"),
    ),
    dist_sampling=_PERF_DIST,
)

PERF_HARDWARE = Family(
    "rezolus_perf_hardware", "perf_hardware",
    "Per-CPU hardware perf counters (cycles, instructions, branch misses), scaled for"
    " multiplexing; unavailable where the CPU or VM exposes no PMU.",
    (CPU,),
    (
        counter("cycles", "cycles", "CPU cycles"),
        counter("instructions", "instructions", "instructions retired"),
        counter("branch_misses", "branches", "mispredicted branches"),
        gauge("ipc_milli", "1/1000", "instructions per cycle x 1000 over the sample period"),
    ),
    dist_sampling=_PERF_DIST,
)

# --- cgroups ---------------------------------------------------------------------------

CGROUP_FAMILY = Family(
    "rezolus_cgroup", "cgroup",
    "Per cgroup v2 CPU, throttling, memory and IO (cpu.stat, memory.current, io.stat);"
    " bounded by max_cgroups and include/exclude globs.",
    (CGROUP,),
    (
        counter("cpu_usage_ns", "ns", "CPU time", dist=False),
        counter("cpu_user_ns", "ns", "CPU time in user mode", dist=False),
        counter("cpu_system_ns", "ns", "CPU time in kernel mode", dist=False),
        counter("throttled_periods", "periods", "periods in which the group was throttled",
                dist=False),
        counter("throttled_ns", "ns", "time throttled", dist=False),
        gauge("memory_bytes", "bytes", "memory.current", dist=False),
        counter("io_read_bytes", "bytes", "bytes read, all devices", dist=False),
        counter("io_write_bytes", "bytes", "bytes written, all devices", dist=False),
        counter("io_reads", "ops", "read IOs, all devices", dist=False),
        counter("io_writes", "ops", "write IOs, all devices", dist=False),
    ),
)

# --- the agent itself ------------------------------------------------------------------

AGENT = Family(
    "rezolus_agent", "agent",
    "The agent's own health and cost. Counters are cumulative since the agent started;"
    " events_written counts records written before this one.",
    (),
    (
        gauge("pid", "pid", "process id of the agent", dist=False),
        counter("uptime_ns", "ns", "time since the agent started", dist=False),
        counter("cpu_user_ns", "ns", "agent CPU time in user mode", dist=False),
        counter("cpu_system_ns", "ns", "agent CPU time in kernel mode", dist=False),
        gauge("rss_bytes", "bytes", "agent resident set size", dist=False),
        gauge("fds", "fds", "open file descriptors", dist=False),
        gauge("threads", "threads", "threads", dist=False),
        counter("events_written", "records", "records written to user_events", dist=False),
        counter("ebadf_races", "records", "writes dropped because a consumer left between"
                " the enable check and the write (EBADF, benign)", dist=False),
        counter("write_errors", "records", "writes that failed for another reason",
                dist=False),
        counter("sampler_errors", "errors", "errors of all samplers together (the sum of"
                " rezolus_agent_sampler.errors): calls that raised, and activations that"
                " found a sampler cannot run here", dist=False),
        gauge("samplers_active", "samplers", "samplers with at least one consumer",
              dist=False),
        gauge("samplers_unavailable", "samplers", "samplers that cannot run here",
              dist=False),
    ),
)

#: What a sampler is doing, as rezolus_agent_status.state and status.json name it, with
#: the code rezolus_agent_sampler.status gives each.
STATUS_CODES = {"idle": 0, "active": 1, "unavailable": 2, "disabled": 3, "failed": 4}

#: Errors a sampler counts (rezolus_agent_sampler.errors, rezolus_agent_status.errors).
_SAMPLER_ERRORS = ("errors since the agent started: calls that raised (sample, publish,"
                   " activate, deactivate) and an activation that found the sampler cannot run"
                   " here; all samplers' add up to rezolus_agent.sampler_errors")

AGENT_SAMPLER = Family(
    "rezolus_agent_sampler", "agent",
    "Each sampler's status and refresh cost (rezolus_agent_status says why, in words).",
    (SAMPLER,),
    (
        gauge("status", "enum", "0 idle (no consumer), 1 active, 2 unavailable, 3 disabled,"
              " 4 failed (its latest call raised)", dist=False),
        counter("refreshes", "refreshes", "sample and publish calls", dist=False),
        counter("errors", "errors", _SAMPLER_ERRORS, dist=False),
        histogram("refresh_us", "us", "wall time of one refresh"),
    ),
)

#: Longest text of a reason or error, in bytes (the record holds one more, the NUL).
STATUS_TEXT_MAX = 511

SAMPLER_STATE = Label("state", char_array(12), "idle (no consumer), active (sampling), failed"
                      " (active or activating, but its latest call raised; tried again every"
                      " interval), unavailable (cannot run here) or disabled (in the config)")
REASON = Label("reason", REL_STR, "why it is unavailable or disabled, or what it is doing"
               " (e.g. how its BPF programs attach); often empty while idle or active",
               max_len=STATUS_TEXT_MAX + 1)
LAST_ERROR = Label("last_error", REL_STR, "its latest error, one line, kept after it"
                   " recovers (empty: none yet); the failed state's reason",
                   max_len=STATUS_TEXT_MAX + 1)

AGENT_STATUS = Family(
    "rezolus_agent_status", "agent",
    "Each sampler's state and, in words, why: which samplers are failing or cannot run"
    " here, with their errors. The agent's status.json (`rezolus-ue events`) says the same.",
    (SAMPLER, SAMPLER_STATE, REASON, LAST_ERROR),
    (gauge("errors", "errors", "as rezolus_agent_sampler.errors (a level here, labelled"
           " with the state and reason): " + _SAMPLER_ERRORS, dist=False),),
)

# --- scheduler run queue (BPF) ---------------------------------------------------------

_ATTACHED = gauge("attached_ns", "ns", "time the BPF programs were attached during the"
                  " interval this record covers: the publish interval, or less on the"
                  " first record after a consumer arrived (they attach only then)",
                  dist=False)

SCHEDULER_RUNQUEUE_LATENCY = Family(
    "rezolus_scheduler_runqueue_latency", "scheduler_runqueue",
    "Run-queue latency: how long tasks waited, runnable, for a CPU (from wakeup or"
    " preemption to running; BPF on sched_wakeup, sched_wakeup_new, sched_switch).",
    (),
    (_ATTACHED, histogram("latency_ns", "ns", "time from runnable to running")),
)

SCHEDULER_RUNNING = Family(
    "rezolus_scheduler_running", "scheduler_runqueue",
    "How long tasks ran each time they got a CPU (switch-in to switch-out; BPF on"
    " sched_switch).",
    (),
    (_ATTACHED, histogram("running_ns", "ns", "time from switch-in to switch-out")),
)

SCHEDULER_OFFCPU = Family(
    "rezolus_scheduler_offcpu", "scheduler_runqueue",
    "How long tasks were off-CPU between two runs (switch-out to the next switch-in,"
    " run-queue wait included; BPF on sched_switch).",
    (),
    (_ATTACHED, histogram("offcpu_ns", "ns", "time from switch-out to the next switch-in")),
)

SCHEDULER_SWITCHES = Family(
    "rezolus_scheduler_switches", "scheduler_runqueue",
    "Context switches per CPU by kind, counted by BPF on sched_switch while a consumer is"
    " attached (totals since the agent loaded the programs).",
    (CPU,),
    (
        counter("voluntary", "switches", "the task left the CPU to sleep or wait",
                dist=False),
        counter("involuntary", "switches", "the task was preempted (or yielded) and stayed"
                " runnable", dist=False),
        counter("idle", "switches", "switches away from the idle task", dist=False),
    ),
)

# --- syscall (BPF) -------------------------------------------------------------------

SYSCALL_OP = Label("op", char_array(16), "syscall family: read, write, poll, lock, time,"
                   " sleep, socket, yield, filesystem, memory, process, query, ipc, timer,"
                   " event or other")

SYSCALL = Family(
    "rezolus_syscall", "syscall",
    "Syscalls by family, counted by BPF on raw_syscalls:sys_enter while a consumer is"
    " attached (totals since the agent loaded the programs; every family, every interval).",
    (SYSCALL_OP,),
    (counter("calls", "syscalls", "syscalls entered", dist=False),),
)

SYSCALL_LATENCY = Family(
    "rezolus_syscall_latency", "syscall",
    "Syscall latency by family: from a thread's raw_syscalls:sys_enter to its sys_exit"
    " (BPF), of every call or, with option latency_sample = N, of a random 1 in N."
    " Only families with calls returning in the interval have a record.",
    (SYSCALL_OP,),
    (_ATTACHED, histogram("latency_ns", "ns", "time from syscall entry to return")),
)

# --- softirq time, cpu migrations, cgroup scheduler (BPF) ------------------------------

SOFTIRQ_KIND = Label("kind", char_array(16), "softirq kind: " + ", ".join(SOFTIRQ_KINDS))

SOFTIRQ_TIME = Family(
    "rezolus_softirq_time", "cpu_softirq_time",
    "Time spent in softirq handlers per CPU, by kind, measured by BPF on irq:softirq_entry"
    " and irq:softirq_exit while a consumer is attached (totals since the agent loaded the"
    " programs; hard interrupts taken inside a handler count as its time).",
    (CPU,),
    tuple(counter(f"{k}_ns", "ns", f"time in {k.upper()} softirq handlers", dist=False)
          for k in SOFTIRQ_KINDS),
)

SOFTIRQ_DURATION = Family(
    "rezolus_softirq_duration", "cpu_softirq_time",
    "How long each softirq handler run took, by kind, all CPUs together (BPF on"
    " irq:softirq_entry and irq:softirq_exit). Only kinds that ran in the interval have a"
    " record.",
    (SOFTIRQ_KIND,),
    (_ATTACHED, histogram("duration_ns", "ns", "time from softirq_entry to softirq_exit")),
)

CPU_MIGRATIONS = Family(
    "rezolus_cpu_migrations", "cpu_migrations",
    "Tasks moved between CPUs, per CPU and direction, counted by BPF on"
    " sched:sched_migrate_task while a consumer is attached (totals since the agent loaded"
    " the programs).",
    (CPU,),
    (
        counter("from", "migrations", "tasks moved away from this CPU", dist=False),
        counter("to", "migrations", "tasks moved onto this CPU", dist=False),
    ),
)

#: A fixed-size cgroup label: a histogram record's bucket room is computed from its fixed
#: fields, so a histogram family cannot carry the dynamic CGROUP label.
CGROUP_PATH = Label("cgroup", char_array(256), "cgroup v2 path below the cgroup root, or"
                    " \"(other)\" for every cgroup without a slot of its own")

CGROUP_SCHEDULER = Family(
    "rezolus_cgroup_scheduler", "cgroup_scheduler",
    "Per-cgroup scheduler activity measured by BPF (sched_switch, sched_wakeup,"
    " sched_stat_runtime) while a consumer is attached, for at most max_cgroups cgroups"
    " chosen by include/exclude globs; every other cgroup counts in \"(other)\" (totals"
    " since the cgroup got its slot).",
    (CGROUP,),
    (
        counter("cpu_usage_ns", "ns", "on-CPU time of the cgroup's tasks", dist=False),
        counter("runqueue_wait_ns", "ns", "time its tasks waited, runnable, for a CPU",
                dist=False),
        counter("offcpu_ns", "ns", "time its tasks were off-CPU between two runs",
                dist=False),
        counter("voluntary", "switches", "its tasks left a CPU to sleep or wait",
                dist=False),
        counter("involuntary", "switches", "its tasks were preempted (or yielded) and"
                " stayed runnable", dist=False),
    ),
)

CGROUP_RUNQUEUE_LATENCY = Family(
    "rezolus_cgroup_runqueue_latency", "cgroup_scheduler",
    "Run-queue latency per cgroup (as rezolus_scheduler_runqueue_latency, charged to the"
    " cgroup the task was last seen in; BPF). Only cgroups with waits in the interval have"
    " a record.",
    (CGROUP_PATH,),
    (_ATTACHED, histogram("latency_ns", "ns", "time from runnable to running")),
)

# --- network traffic and TCP (BPF) -----------------------------------------------------

DROP_REASON = Label("reason", char_array(32), "why the kernel dropped the packets: enum"
                    " skb_drop_reason without its SKB_DROP_REASON_ prefix (e.g. NO_SOCKET,"
                    " as in kfree_skb's format), or OTHER: a kernel without drop reasons"
                    " (before 5.17) or one outside the table")

NETWORK_TRAFFIC = Family(
    "rezolus_network_traffic", "network_traffic",
    "Network traffic of every interface together, counted by BPF on net:netif_receive_skb,"
    " net:net_dev_start_xmit and skb:kfree_skb while a consumer is attached (totals since"
    " the agent loaded the programs). A packet crossing several devices (veth, bridge, lo)"
    " counts on each; the per-interface kernel counters are in rezolus_network_interface.",
    (),
    (
        counter("rx_bytes", "bytes", "bytes received (skb->len, without the L2 header)",
                dist=False),
        counter("tx_bytes", "bytes", "bytes handed to drivers (skb->len, with the L2 header)",
                dist=False),
        counter("rx_packets", "packets", "packets received (a GRO super-packet counts once)",
                dist=False),
        counter("tx_packets", "packets", "packets handed to drivers (a GSO super-packet"
                " counts once)", dist=False),
        counter("drops", "packets", "packets dropped (kfree_skb), any reason", dist=False),
    ),
)

NETWORK_DROPS = Family(
    "rezolus_network_drops", "network_traffic",
    "Dropped packets by reason, counted by BPF on skb:kfree_skb while a consumer is attached"
    " (totals since the agent loaded the programs; reasons with drops only).",
    (DROP_REASON,),
    (counter("drops", "packets", "packets dropped for this reason", dist=False),),
)

TCP_PACKET_LATENCY = Family(
    "rezolus_tcp_packet_latency", "tcp",
    "TCP packet latency: from a data segment's arrival (tcp:tcp_probe) until the"
    " application read from the socket (tcp:tcp_rcv_space_adjust); the oldest unread"
    " segment per socket is timed (BPF).",
    (),
    (_ATTACHED, histogram("latency_ns", "ns", "time from a segment's arrival to its read")),
)

TCP_SRTT = Family(
    "rezolus_tcp_srtt", "tcp",
    "TCP smoothed round-trip time, sampled from the socket on every received segment of an"
    " established connection (BPF on tcp:tcp_probe).",
    (),
    (_ATTACHED, histogram("srtt_ns", "ns", "the socket's smoothed RTT (srtt_us / 8)")),
)

TCP_JITTER = Family(
    "rezolus_tcp_jitter", "tcp",
    "TCP RTT jitter: the socket's RTT mean deviation, sampled on every received segment of"
    " an established connection (BPF on tcp:tcp_probe).",
    (),
    (_ATTACHED, histogram("jitter_ns", "ns", "the socket's RTT mean deviation (mdev_us / 4)")),
)

TCP_CONNECT_LATENCY = Family(
    "rezolus_tcp_connect_latency", "tcp",
    "TCP connect latency of active opens: SYN_SENT until ESTABLISHED (BPF on"
    " sock:inet_sock_set_state, keyed by socket).",
    (),
    (_ATTACHED, histogram("latency_ns", "ns", "time from SYN sent to connection established")),
)

TCP_RETRANSMIT = Family(
    "rezolus_tcp_retransmit", "tcp",
    "TCP retransmissions, counted by BPF on tcp:tcp_retransmit_skb while a consumer is"
    " attached (totals since the agent loaded the programs).",
    (),
    (
        counter("retransmits", "segments", "segments retransmitted", dist=False),
        counter("retransmit_errors", "segments", "retransmissions that failed (kernels whose"
                " tracepoint reports them, e.g. 6.18; always 0 on older ones)", dist=False),
    ),
)

TCP_TRAFFIC = Family(
    "rezolus_tcp_traffic", "tcp_traffic",
    "TCP payload by direction as applications see it, counted by BPF on the kernel"
    " functions tcp_sendmsg (return) and tcp_cleanup_rbuf (fentry/fexit, else kprobes)"
    " while a consumer is attached (totals since the agent loaded the programs).",
    (),
    (
        counter("rx_bytes", "bytes", "bytes copied to applications by reads", dist=False),
        counter("tx_bytes", "bytes", "bytes accepted from applications by sends",
                dist=False),
        counter("rx_packets", "calls", "reads that copied data (Rezolus's tcp_packets"
                " receive)", dist=False),
        counter("tx_packets", "calls", "sends that accepted data (Rezolus's tcp_packets"
                " transmit)", dist=False),
    ),
)

# --- blockio_requests (BPF) ------------------------------------------------------------

BLOCKIO_OPS = ("read", "write", "flush", "discard", "other")
BLOCKIO_ERROR_KINDS = ("io", "timeout", "nospc", "target", "protection", "unsupported",
                       "other")
BLOCKIO_OP = Label("op", char_array(8), "request operation: read, write, flush, discard"
                   " (secure erase included) or other (write zeroes, zone management,"
                   " driver private)")

BLOCKIO_LATENCY = Family(
    "rezolus_blockio_latency", "blockio_requests",
    "Block IO request latency by operation, every device together: from the request's"
    " issue to the driver (block:block_rq_issue) to its completion (block_rq_complete),"
    " BPF. Operations seen since the agent loaded the programs have a record each interval.",
    (BLOCKIO_OP,),
    (_ATTACHED, histogram("latency_ns", "ns", "time from issue to completion")),
)

BLOCKIO_SIZE = Family(
    "rezolus_blockio_size", "blockio_requests",
    "Block IO request size by operation, every device together, at completion"
    " (block:block_rq_complete, BPF; flushes are 0 bytes).",
    (BLOCKIO_OP,),
    (_ATTACHED, histogram("size_bytes", "bytes", "bytes of each completed request")),
)

BLOCKIO_REQUESTS = Family(
    "rezolus_blockio_requests", "blockio_requests",
    "Completed block IO requests, bytes and errors by operation, every device together,"
    " counted by BPF on block:block_rq_complete while a consumer is attached (totals since"
    " the agent loaded the programs). Errors are blk_status_t codes grouped by kind, as"
    " Rezolus's blockio_errors.",
    (BLOCKIO_OP,),
    (
        counter("operations", "requests", "requests completed", dist=False),
        counter("bytes", "bytes", "bytes completed (partial completions included)",
                dist=False),
        counter("errors_io", "requests", "IO or medium errors (BLK_STS_IOERR, _MEDIUM)",
                dist=False),
        counter("errors_timeout", "requests", "timeouts (BLK_STS_TIMEOUT)", dist=False),
        counter("errors_nospc", "requests", "out of space (BLK_STS_NOSPC)", dist=False),
        counter("errors_target", "requests", "target or reservation errors"
                " (BLK_STS_TARGET, _RESV_CONFLICT)", dist=False),
        counter("errors_protection", "requests", "integrity check failures"
                " (BLK_STS_PROTECTION)", dist=False),
        counter("errors_unsupported", "requests", "operation not supported"
                " (BLK_STS_NOTSUPP)", dist=False),
        counter("errors_other", "requests", "any other error (transport, resource,"
                " offline, zone...)", dist=False),
    ),
)

#: Every family, in documentation order.
FAMILIES: tuple[Family, ...] = (
    CPU_USAGE, CPU_CORES, CPU_SOFTIRQ, CPU_FREQUENCY,
    SCHEDULER, SCHEDULER_CPU,
    MEMORY, MEMORY_VMSTAT, MEMORY_PRESSURE,
    BLOCKIO,
    NETWORK, TCP, UDP,
    PERF_SOFTWARE, PERF_HARDWARE,
    CGROUP_FAMILY,
    AGENT, AGENT_SAMPLER, AGENT_STATUS,
    SCHEDULER_RUNQUEUE_LATENCY, SCHEDULER_RUNNING, SCHEDULER_OFFCPU, SCHEDULER_SWITCHES,
    SYSCALL, SYSCALL_LATENCY,
    SOFTIRQ_TIME, SOFTIRQ_DURATION, CPU_MIGRATIONS, CGROUP_SCHEDULER, CGROUP_RUNQUEUE_LATENCY,
    NETWORK_TRAFFIC, NETWORK_DROPS, TCP_PACKET_LATENCY, TCP_SRTT, TCP_JITTER,
    TCP_CONNECT_LATENCY, TCP_RETRANSMIT, TCP_TRAFFIC,
    BLOCKIO_LATENCY, BLOCKIO_SIZE, BLOCKIO_REQUESTS,
)
