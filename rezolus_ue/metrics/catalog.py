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

PERF_SOFTWARE = Family(
    "rezolus_perf_software", "perf_software",
    "Per-CPU software perf counters (perf_event_open PERF_TYPE_SOFTWARE).",
    (CPU,),
    (
        counter("context_switches", "switches", "context switches"),
        counter("cpu_migrations", "migrations", "tasks migrated to this CPU"),
        counter("page_faults", "faults", "page faults"),
    ),
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
        counter("sampler_errors", "errors", "sampler refreshes that raised an error",
                dist=False),
        gauge("samplers_active", "samplers", "samplers with at least one consumer",
              dist=False),
        gauge("samplers_unavailable", "samplers", "samplers that cannot run here",
              dist=False),
    ),
)

AGENT_SAMPLER = Family(
    "rezolus_agent_sampler", "agent",
    "Each sampler's status and refresh cost.",
    (SAMPLER,),
    (
        gauge("status", "enum", "0 idle (no consumer), 1 active, 2 unavailable, 3 disabled",
              dist=False),
        counter("refreshes", "refreshes", "sample and publish calls", dist=False),
        counter("errors", "errors", "refreshes that raised", dist=False),
        histogram("refresh_us", "us", "wall time of one refresh"),
    ),
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

#: Every family, in documentation order.
FAMILIES: tuple[Family, ...] = (
    CPU_USAGE, CPU_CORES, CPU_SOFTIRQ, CPU_FREQUENCY,
    SCHEDULER, SCHEDULER_CPU,
    MEMORY, MEMORY_VMSTAT, MEMORY_PRESSURE,
    BLOCKIO,
    NETWORK, TCP, UDP,
    PERF_SOFTWARE, PERF_HARDWARE,
    CGROUP_FAMILY,
    AGENT, AGENT_SAMPLER,
    SCHEDULER_RUNQUEUE_LATENCY, SCHEDULER_RUNNING, SCHEDULER_OFFCPU, SCHEDULER_SWITCHES,
)

#: Status codes of AGENT_SAMPLER.status.
STATUS_CODES = {"idle": 0, "active": 1, "unavailable": 2, "disabled": 3}
