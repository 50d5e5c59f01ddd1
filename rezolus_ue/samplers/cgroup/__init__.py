"""Per cgroup v2 CPU time, throttling, memory and IO, for a bounded set of cgroups.

Sources, in each group of the cgroup v2 hierarchy (found as the ``cgroup2`` mount in
``<procfs>/mounts``, preferring ``/sys/fs/cgroup`` then ``/sys/fs/cgroup/unified`` on
hybrid hosts, rebased onto the sysfs root; or the ``root`` option):

- ``cpu.stat``: ``usage_usec``, ``user_usec``, ``system_usec`` (in every group since Linux
  4.15; before that only with the cpu controller), ``nr_throttled``, ``throttled_usec``
  (only where the cpu controller is enabled for the group: 0 otherwise).
- ``memory.current`` (memory controller; never in the root group: 0 there).
- ``io.stat``: ``MAJ:MIN rbytes= wbytes= rios= wios= dbytes= dios=`` per device, summed
  over devices (io controller; ``dbytes``/``dios`` since 5.2 and unused here).

Only groups with a ``cpu.stat`` are published. The label is the group's path below the
hierarchy root as ``/proc/<pid>/cgroup`` shows it (``/`` for the root group,
``/system.slice/cron.service`` below it), truncated to 255 bytes; ``include``/``exclude``
globs (fnmatch, ``*`` also matches ``/``) apply to the full path.

The hierarchy is walked at start and again at most every 10 s (on a read), not on every
publish. When more than ``max_cgroups`` groups match, the ones that used the most CPU
since the previous walk are kept (at the first walk: since they were created), ties by
path; the rest are counted in the sampler's detail. A kept group's files stay open; a group
removed in between (ENODEV/ENOENT on read) is dropped at once and a new one appears at the
next walk. Not oversampled: reading many groups 10x per second costs too much.

Events: ``rezolus_cgroup`` (one record per kept group per interval).
"""

from __future__ import annotations

from ...config import IntRange, Option
from ...metrics.family import Family, counter, gauge
from ...metrics.labels import CGROUP

CGROUP_FAMILY = Family(
    "rezolus_cgroup", __name__,
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

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (CGROUP_FAMILY,)

#: This sampler's options (beyond the common ones): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    Option("root", "path", "",
           "cgroup v2 hierarchy to read; empty means discover the cgroup2 mount in"
           " /proc/mounts (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid hosts)."),
    Option("max_cgroups", "int", 64,
           "Most cgroups published. When more match, those that used the most CPU since"
           " the previous walk of the hierarchy (every 10s at most) are kept.",
           bounds=IntRange(1, 10000)),
    Option("include", "strings", ["*"],
           "Globs on the cgroup path (\"/\" is the root group, e.g."
           " \"/system.slice/*\"; * also matches /): only matching groups are read."),
    Option("exclude", "strings", [],
           "Globs on the cgroup path: matching groups are never read, even if included."),
)
