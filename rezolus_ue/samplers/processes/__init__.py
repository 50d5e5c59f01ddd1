"""Per process CPU, memory, IO and context switches for the busiest processes, and a
summary of every process; read only while a consumer has one of its events enabled.

Sources, each publish interval (not oversampled), for every ``<procfs>/<pid>``:

- ``stat``: comm, state, utime, stime, cutime, cstime, num_threads, starttime (clock
  ticks, ``SC_CLK_TCK``, published in ns) and rss (pages, published in bytes);
- ``io`` (read_bytes, write_bytes; Linux >= 2.6.20, CONFIG_TASK_IO_ACCOUNTING), when
  ``top_io`` > 0 and rezolus_process is enabled;
- ``schedstat`` (time on CPU in ns; CONFIG_SCHED_INFO), the gate: a process of one thread
  whose schedstat did not move since the previous walk did not run, so neither did its
  CPU times, io, children's times or thread count, and its stat and io are not read
  again (the file holds the leader thread's time only: processes of several threads are
  always read). What such a process reports can still change without it running: its
  rss (reclaim; a published process's stat is read again for its record) and its state
  (woken but not yet run). Off where schedstat is missing or reads "0 0 0";
- for the published processes only, kept open while they stay published: ``status``
  (real uid, looked up once per uid for the user name; voluntary and involuntary
  context switches) and ``cgroup`` (the ``0::`` line, labelled as the cgroup sampler
  labels groups);
- for the summary: ``<procfs>/stat`` (procs_running, procs_blocked, processes: forks,
  read once per tick with the other samplers) and ``<procfs>/loadavg`` (load x 1000,
  threads).

Ranking: the ``top_cpu`` processes that used the most CPU in the interval, then the
``top_rss`` with the largest resident set and the ``top_io`` that read and wrote the most
storage bytes in the interval, each process once, none with a zero key; ties by pid. A
process is its pid and start time: a reused pid is a new process, never a difference
against the old one. A process first seen that started since the previous walk used all
of its CPU and IO in the interval; one that started before (the first walk after a
consumer arrives, or a process unreadable until now) has no interval figures: it is not
ranked by CPU or IO, and publishes 0 for them. A process that exits while it is read
(ENOENT at open, ESRCH from a kept-open file of a reaped task, also once its pid is
reused) is skipped; one the agent may not read (hidepid: EPERM; the io of another user's
process without CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE: EACCES) is counted in
``unreadable``.

Short-lived processes: ``exited_cpu_ns`` adds, for every process read at two walks in a
row, the growth of its cutime + cstime: the whole CPU time of the children it reaped in
between, however short their lives. Not counted: children reaped by a parent that itself
exits before the next walk, or that the agent cannot read, and children of a parent that
ignores SIGCHLD (the kernel adds no time for them). Counted once: the children a reaped
child had itself reaped are in its cutime, already counted as it grew, so a process that
exits takes its last cutime + cstime off its reaper's growth (at that walk or the next).

Reads: each process's files stay open and are read with ``os.pread`` at offset 0 (procfs
regenerates the text), at most half of RLIMIT_NOFILE of them (beyond, opened and closed
at each walk; ``detail`` says so). bench/process_reads.py, 2-vCPU VM, Linux 6.18, one
walk after a pause (cold caches), CPU time at 200 / 2,000 processes: psutil 13 / 133 ms,
open-read-close of stat and io 4.4 / 39 ms, kept-open 3.1 / 25 ms; this sampler 2.2 /
9.5 ms when the processes are idle (0.95% of a core at 1 s publishing), 4.4 / 29 ms when
every one ran. Most of it is the kernel's: per process, listing 1.2 µs, stat 4.6, io
2.6, schedstat 1.7.

Events: ``rezolus_process`` (one record per published process per interval),
``rezolus_processes`` (one summary record per interval).
"""

from __future__ import annotations

from ...config import IntRange, Option
from ...encoding import REL_STR, U32, char_array
from ...linux.capabilities import Need
from ...metrics.family import Family, Label, counter, gauge
from ...metrics.labels import CGROUP

PID = Label("pid", U32, "process id (with start_ns, tells a reused pid apart)")
COMM = Label("comm", char_array(16), "command name (comm in /proc/<pid>/stat), at most"
             " 15 bytes")
USER = Label("user", REL_STR, "user name of the real uid, else the uid in decimal",
             max_len=33)
STATE = Label("state", char_array(2), "scheduler state: R, S, D, Z, T, t, I, X")

PROCESS = Family(
    "rezolus_process", __name__,
    "The busiest processes: the top_cpu by CPU in the interval, the top_rss by resident"
    " memory and the top_io by IO bytes in the interval, each once.",
    (PID, COMM, USER, CGROUP, STATE),
    (
        gauge("start_ns", "ns", "start time, since boot", dist=False),
        counter("cpu_user_ns", "ns", "CPU time in user mode", dist=False),
        counter("cpu_system_ns", "ns", "CPU time in kernel mode", dist=False),
        gauge("cpu_interval_ns", "ns", "CPU time (user and kernel) used during the"
              " interval: the CPU ranking's key", dist=False),
        gauge("rss_bytes", "bytes", "resident set size", dist=False),
        counter("io_read_bytes", "bytes", "bytes read from storage (read_bytes)",
                dist=False),
        counter("io_write_bytes", "bytes", "bytes written to storage (write_bytes)",
                dist=False),
        gauge("io_interval_bytes", "bytes", "storage bytes read and written during the"
              " interval: the IO ranking's key", dist=False),
        gauge("threads", "threads", "threads of the process", dist=False),
        counter("ctx_voluntary", "switches", "voluntary context switches (blocked)",
                dist=False),
        counter("ctx_involuntary", "switches", "involuntary context switches (preempted)",
                dist=False),
    ),
)

PROCESSES = Family(
    "rezolus_processes", __name__,
    "Every process: counts by state, threads, forks, the run queue and load, and the CPU"
    " of processes that exited between two samples.",
    (),
    (
        gauge("processes", "processes", "processes (thread group leaders)", dist=False),
        gauge("running", "processes", "processes in state R", dist=False),
        gauge("sleeping", "processes", "processes in state S", dist=False),
        gauge("blocked", "processes", "processes in state D (uninterruptible)",
              dist=False),
        gauge("zombie", "processes", "processes in state Z", dist=False),
        gauge("stopped", "processes", "processes in state T or t", dist=False),
        gauge("idle", "processes", "kernel threads in state I", dist=False),
        gauge("threads", "threads", "threads of every process (/proc/loadavg)",
              dist=False),
        gauge("threads_running", "threads", "runnable threads (/proc/stat procs_running)",
              dist=False),
        gauge("threads_blocked", "threads", "threads blocked on IO (/proc/stat"
              " procs_blocked)", dist=False),
        counter("forks", "processes", "processes and threads created (/proc/stat"
                " processes)", dist=False),
        gauge("load_1m_milli", "1/1000", "1-minute load average x 1000 (/proc/loadavg)",
              dist=False),
        gauge("load_5m_milli", "1/1000", "5-minute load average x 1000", dist=False),
        gauge("load_15m_milli", "1/1000", "15-minute load average x 1000", dist=False),
        counter("exited_cpu_ns", "ns", "CPU time of the children reaped during the"
                " interval, their whole lives' (the growth of their parents' cutime and"
                " cstime): short-lived processes too", dist=False),
        gauge("published", "processes", "processes in this interval's rezolus_process"
              " records", dist=False),
        gauge("unreadable", "processes", "processes whose /proc files could not be read"
              " (hidepid; or io, without ptrace access to the process)", dist=False),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (PROCESS, PROCESSES)

#: This sampler's options (beyond the common ones): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    Option("top_cpu", "int", 20,
           "Processes published that used the most CPU in the interval (0: none).",
           bounds=IntRange(0, 1000)),
    Option("top_rss", "int", 5,
           "Processes published with the largest resident set, beyond the CPU list.",
           bounds=IntRange(0, 1000)),
    Option("top_io", "int", 5,
           "Processes published that read and wrote the most storage bytes in the"
           " interval, beyond the other lists (0 also skips reading /proc/<pid>/io of"
           " processes not otherwise published).",
           bounds=IntRange(0, 1000)),
)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = (
    Need("CAP_DAC_READ_SEARCH", "open /proc/<pid>/io of another user's process (mode 0400,"
         " owned by that user)"),
    Need("CAP_SYS_PTRACE", "read /proc/<pid>/io of a process with other credentials (ptrace"
         " read access), and see other users' /proc/<pid> where /proc hides them (hidepid:"
         " the unit's ProtectProc=invisible)"),
)
