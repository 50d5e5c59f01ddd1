"""Cost of collecting as the host grows: every procfs/sysfs/netlink/cgroup sampler against
synthetic fixture trees of 2 to 256 CPUs, 1 to 64 block devices, 2 to 64 network
interfaces and 10 to 5,000 cgroups.

    python bench/scale.py [--quick] [--seconds 10] [--against REV] [--only-before-after]

The fixture files have the shapes and sizes of the kernel's at those sizes (/proc/stat with
its intr line of nr_irqs counts, /proc/interrupts with a line per device queue and an 11-
column per CPU, /proc/softirqs, /proc/schedstat with its domain lines, diskstats with
partitions and idle loop devices, cpufreq files per CPU, per-interface statistics files,
a cgroup v2 hierarchy shaped like a Kubernetes node's). Between samples the files whose
counters move on a busy host are rewritten in place (same inode, as procfs regenerates
them), outside the timed part, so caches of unchanged bytes never hit: a busy host.

Per sampler, "µs/s" is its CPU time (thread CPU clock: user + system) over one publish
interval at the default intervals (100 ms sampling, 1 s publishing: nine samples, then
sample + parse + publish), with every event enabled (``_dist`` ones too) and each record
written to /dev/null as bench/collect.py does; a second is 1e6 µs, so µs/s / 10,000 is
the % of one core. These are measured back to back (warm caches). The host profiles'
"agent" figures drive the whole agent on its tick schedule with the sleeps in between
(cold caches, as in production) for --seconds each.

What this cannot measure: the kernel's cost of generating procfs text (a read of a
regular file on tmpfs stands in: at 256 CPUs the kernel's own /proc/interrupts and
/proc/stat take it longer than this), netlink's kernel side (the network sampler's
netlink path runs against a fake socket answering synthetic RTM_GETSTATS dumps of the
size a kernel sends: the decoding is measured, the dump is not), and the perf counter
samplers (perf_event_open per CPU, no fixture root; bench/collect.py measures them on
the host). BPF samplers are bench/overhead.py's. Asserts nothing.

Before/after (the last section) measures, in turn and in one run, the samplers whose
parsing was rewritten for large hosts and the paced agent as they were before
(``old_code``, ``BEFORE``) and as they are; ``--against REV`` adds REV's code (checked
out in a temporary worktree and measured by this script in a process of its own, as
bench/top.py does) in each round: a change's before/after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The tree whose package is measured: this one, or a revision's (``--against``).
TREE = Path(os.environ.get("REZOLUS_UE_BENCH_TREE", ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # for collect, also when imported by the tests
sys.path.insert(0, str(TREE))
# TREE's package first: collect puts ROOT first on sys.path, and rezolus_ue must not be
# imported from there.
__import__("rezolus_ue")

import numpy as np  # noqa: E402
from collect import NullHandle  # noqa: E402

from rezolus_ue import config  # noqa: E402
from rezolus_ue.agent import Agent, SamplerState  # noqa: E402
from rezolus_ue.linux import rtnetlink as rtnl  # noqa: E402
from rezolus_ue.metrics import family  # noqa: E402
from rezolus_ue.samplers import REGISTRY, Roots, SamplerContext, options  # noqa: E402
from rezolus_ue.samplers.base import Sampler, SharedFiles  # noqa: E402
from rezolus_ue.samplers.cpu_interrupts.sampler import parse_interrupts  # noqa: E402
from rezolus_ue.samplers.cpu_softirq.sampler import SoftirqReader  # noqa: E402
from rezolus_ue.samplers.cpu_usage.sampler import busy_ppm, parse_proc_stat_cpus  # noqa: E402
from rezolus_ue.samplers.network import sampler as network_sampler  # noqa: E402
from rezolus_ue.samplers.network.sampler import COUNTERS  # noqa: E402
from rezolus_ue.samplers.scheduler import sampler as scheduler_sampler  # noqa: E402

SAMPLE_NS, PUBLISH_EVERY = 100_000_000, 10  # configs/default.toml: 100 ms, 1 s
#: The sweeps: each dimension grows while the others stay at the small VM's.
CPUS, DISKS, NICS, CGROUPS = (2, 32, 64, 128, 256), (1, 16, 64), (2, 16, 64), (10, 500, 5000)


@dataclass(frozen=True)
class Host:
    """The sizes a fixture tree is generated for."""

    cpus: int = 2
    disks: int = 1
    nics: int = 2
    cgroups: int = 10

    def __str__(self) -> str:
        return (f"{self.cpus} CPUs, {self.disks} disks, {self.nics} NICs,"
                f" {self.cgroups} cgroups")


PROFILES = {
    "small VM": Host(2, 1, 2, 10),
    "64-CPU database host": Host(64, 16, 16, 50),
    "128-CPU Kubernetes node": Host(128, 16, 64, 500),
}
#: Samplers by the dimension their work grows with (the rest do not grow with the host).
BY_CPU = ("cpu_usage", "cpu_softirq", "cpu_frequency", "cpu_interrupts", "scheduler")
BY_DISK, BY_NIC, BY_CGROUP = ("blockio",), ("network", "network/netlink"), ("cgroup",)
FIXED = ("memory", "network_protocol", "agent")
#: Every sampler measured: the registry's, less BPF and perf (see the module docstring).
#: The moving files each sampler reads (the others' files are read as they are: no
#: sampler skips a parse of unchanged bytes there).
MOVING = {"cpu_usage": ("stat",), "scheduler": ("stat", "schedstat"),
          "cpu_softirq": ("softirqs",), "cpu_interrupts": ("interrupts",),
          "memory": ("meminfo", "vmstat", "pressure/cpu", "pressure/memory", "pressure/io"),
          "blockio": ("diskstats",), "network_protocol": ("net/snmp", "net/netstat")}
SAMPLERS = (*BY_CPU, "memory", *BY_DISK, *BY_NIC, "network_protocol", *BY_CGROUP, "agent")


# --- fixture files -----------------------------------------------------------------------

SOFTIRQS = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED",
            "HRTIMER", "RCU")
ARCH_IRQS = (("NMI", "Non-maskable interrupts"), ("LOC", "Local timer interrupts"),
             ("SPU", "Spurious interrupts"), ("PMI", "Performance monitoring interrupts"),
             ("IWI", "IRQ work interrupts"), ("RTR", "APIC ICR read retries"),
             ("RES", "Rescheduling interrupts"), ("CAL", "Function call interrupts"),
             ("TLB", "TLB shootdowns"), ("TRM", "Thermal event interrupts"),
             ("THR", "Threshold APIC interrupts"), ("DFR", "Deferred Error APIC interrupts"),
             ("MCE", "Machine check exceptions"), ("MCP", "Machine check polls"))


def counts(n: int, k: int, seed: int) -> list[int]:
    """Return ``n`` plausible counters, moved on by variant ``k``."""
    return [(seed * 7919 + i * 104729) % 9_000_000 + k * (i % 7 + 1) for i in range(n)]


def nvme_queues(h: Host) -> int:
    """Return the interrupt lines per disk (an NVMe: one queue per CPU up to 64, + admin)."""
    return min(h.cpus, 64) + 1


def device_irqs(h: Host) -> int:
    """Return the device interrupt lines of /proc/interrupts: legacy and ACPI ones, a queue
    per CPU of each disk and physical NIC (virtual ones, veths, have none; 4 at most)."""
    return 24 + h.disks * nvme_queues(h) + min(h.nics, 4) * (min(h.cpus, 64) + 1)


def proc_stat(h: Host, k: int) -> bytes:
    n = h.cpus
    rows = [counts(10, k, c) for c in range(n)]
    total = [sum(col) for col in zip(*rows, strict=True)]
    # The intr line lists every IRQ number up to nr_irqs (x86: ~ 8 + 64 per CPU), mostly 0.
    nr_irqs = 24 + 72 * n
    intr = counts(device_irqs(h), k, 3) + [0] * max(0, nr_irqs - device_irqs(h))
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{c} " + " ".join(map(str, r)) for c, r in enumerate(rows)]
    lines += [f"intr {sum(intr)} " + " ".join(map(str, intr)), f"ctxt {62574383 + k * 999}",
              "btime 1795772986", f"processes {69205 + k}", f"procs_running {1 + k % 5}",
              "procs_blocked 0",
              "softirq " + " ".join(map(str, counts(11, k, 5)))]
    return ("\n".join(lines) + "\n").encode()


def proc_softirqs(h: Host, k: int) -> bytes:
    lines = [" " * 20 + "".join(f"CPU{c:<8d}" for c in range(h.cpus))]
    for i, name in enumerate(SOFTIRQS):
        lines.append(f"{name:>12s}:" + "".join(f" {v:10d}" for v in counts(h.cpus, k, i)))
    return ("\n".join(lines) + "\n").encode()


def proc_interrupts(h: Host, k: int) -> bytes:
    n = h.cpus
    w = len(str(24 + 72 * n))
    lines = [" " * (w + 1) + "".join(f"   CPU{c:<5d}" for c in range(n))]
    for irq in range(device_irqs(h)):
        per = "".join(f" {v:10d}" for v in counts(n, k, irq))
        lines.append(f"{irq + 24:>{w}d}:{per}  PCI-MSIX-0000:3b:00.0 {irq}-edge"
                     f"      nvme0q{irq}")
    for name, text in ARCH_IRQS:
        lines.append(f"{name:>{w}s}:" + "".join(f" {v:10d}" for v in counts(n, k, 99))
                     + f"   {text}")
    lines += [f"{'ERR':>{w}s}: {k:10d}", f"{'MIS':>{w}s}: {0:10d}"]
    return ("\n".join(lines) + "\n").encode()


def proc_schedstat(h: Host, k: int) -> bytes:
    n = h.cpus
    mask = ",".join(["ffffffff"] * max(1, n // 32))
    domains = ("SMT", "MC", "NUMA") if n >= 64 else ("SMT", "MC")
    lines = ["version 17", f"timestamp {4295012345 + k * 25}"]
    for c in range(n):
        lines.append(f"cpu{c} 0 0 " + " ".join(map(str, counts(7, k, c))))
        for d, name in enumerate(domains):
            lines.append(f"domain{d} {name} {mask} " + " ".join(map(str, counts(45, 0, d))))
    return ("\n".join(lines) + "\n").encode()


def disk_names(h: Host) -> list[str]:
    return [f"nvme{i}n1" for i in range(h.disks)]


def proc_diskstats(h: Host, k: int) -> bytes:
    lines = [f"   7       {i} loop{i} " + " ".join(["0"] * 17) for i in range(8)]
    for i, name in enumerate(disk_names(h)):
        for minor, dev in ((0, name), (1, f"{name}p1")):
            c = counts(17, k, i * 2 + minor)
            c[8] = i % 3  # in flight
            lines.append(f" 259 {i * 2 + minor:7d} {dev} " + " ".join(map(str, c)))
    return ("\n".join(lines) + "\n").encode()


def nic_names(h: Host) -> list[str]:
    """Return the interfaces: loopback, physical ones (4 at most), then veths (pods)."""
    phys = [f"eth{i}" for i in range(min(h.nics - 1, 4))]
    return ["lo", *phys, *(f"veth{i:08x}" for i in range(h.nics - 1 - len(phys)))]


def bumped(data: bytes, k: int, pattern: bytes = rb"(?<=[ \t:=])\d+") -> bytes:
    """Return a host file's text with its counters moved on by variant ``k``."""
    return re.sub(pattern, lambda m: str(int(m[0]) + k).encode(), data)


HOST_FILES = {  # under /proc: (path, the counters that move)
    "meminfo": rb"(?<= )\d+(?= kB)",
    "vmstat": rb"(?<= )\d+",
    "net/snmp": rb"(?<= )\d+",
    "net/netstat": rb"(?<= )\d+",
    "pressure/cpu": rb"(?<=total=)\d+",
    "pressure/memory": rb"(?<=total=)\d+",
    "pressure/io": rb"(?<=total=)\d+",
}
PSI_FALLBACK = (b"some avg10=0.00 avg60=0.00 avg300=0.00 total=123456\n"
                b"full avg10=0.00 avg60=0.00 avg300=0.00 total=65432\n")


def host_file(rel: str) -> bytes:
    try:
        return (Path("/proc") / rel).read_bytes()
    except OSError:
        return PSI_FALLBACK if rel.startswith("pressure/") else b""


CPU_STAT = ("usage_usec {0}\nuser_usec {1}\nsystem_usec {2}\ncore_sched.force_idle_usec 0\n"
            "nr_periods {3}\nnr_throttled {4}\nthrottled_usec {5}\nnr_bursts 0\n"
            "burst_usec 0\n")
IO_STAT = ("259:0 rbytes={0} wbytes={1} rios={2} wios={3} dbytes=0 dios=0\n"
           "253:0 rbytes={4} wbytes={5} rios={6} wios={7} dbytes=0 dios=0\n")


def cgroup_paths(n: int) -> list[str]:
    """Return ``n`` cgroup paths (the root included) shaped like a Kubernetes node's:
    system services, then pods of QoS classes with two containers each."""
    paths = ["", "/system.slice", "/user.slice", "/kubepods.slice"]
    paths += [f"/system.slice/svc{i}.service" for i in range(min(12, max(0, n - 4)))]
    qos = ["/kubepods.slice/kubepods-burstable.slice", "/kubepods.slice/kubepods-besteffort.slice"]
    pod = 0
    while len(paths) < n:
        if len(paths) < n and qos:
            paths.append(qos.pop(0))
            continue
        slice_ = ("/kubepods.slice/kubepods-burstable.slice" if pod % 3 else
                  "/kubepods.slice/kubepods-besteffort.slice")
        pod_dir = f"{slice_}/kubepods-pod{pod:08x}_1234_5678_9abc_def012345678.slice"
        paths.append(pod_dir)
        for c in range(2):
            if len(paths) < n:
                paths.append(f"{pod_dir}/cri-containerd-{pod:032x}{c:032x}.scope")
        pod += 1
    return paths[:n]


def write_cgroups(sysfs: Path, n: int) -> None:
    root = sysfs / "fs" / "cgroup"
    for i, p in enumerate(cgroup_paths(n)):
        d = root / p[1:] if p else root
        d.mkdir(parents=True, exist_ok=True)
        c = counts(8, 0, i)
        (d / "cpu.stat").write_text(CPU_STAT.format(c[0] + c[1], c[0], c[1], c[2], c[3] % 5,
                                                    c[4] if c[3] % 5 else 0))
        (d / "memory.current").write_text(f"{c[5] * 4096}\n")
        (d / "io.stat").write_text(IO_STAT.format(*counts(8, 0, i + 1)))
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")


class Tree:
    """A fixture procfs and sysfs for ``host``; ``step`` moves the counters on."""

    def __init__(self, base: Path, host: Host, populate: bool = True) -> None:
        """Write the tree under ``base`` (``populate`` false: one some other process wrote
        and steps, e.g. bench/memory.py's, whose figures must not include this one's)."""
        self.host = host
        self.procfs, self.sysfs = base / "proc", base / "sys"
        h = host
        gen: dict[Path, Callable[[int], bytes]] = {
            self.procfs / "stat": lambda k: proc_stat(h, k),
            self.procfs / "softirqs": lambda k: proc_softirqs(h, k),
            self.procfs / "interrupts": lambda k: proc_interrupts(h, k),
            self.procfs / "schedstat": lambda k: proc_schedstat(h, k),
            self.procfs / "diskstats": lambda k: proc_diskstats(h, k),
        }
        for rel, pattern in HOST_FILES.items():
            text = host_file(rel)
            gen[self.procfs / rel] = lambda k, t=text, p=pattern: bumped(t, k, p)
        #: How to write each moving file's text at step k (its counters only go up).
        self._gen = {str(p.relative_to(self.procfs)): (p, g) for p, g in gen.items()}
        self._k = 0
        if not populate:
            return
        for p, g in gen.items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(g(0))
        (self.procfs / "mounts").write_text(
            "proc /proc proc rw 0 0\nsysfs /sys sysfs rw 0 0\n"
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n")
        (self.procfs / "self").symlink_to("/proc/self")  # the agent sampler's own files
        cpu = self.sysfs / "devices" / "system" / "cpu"
        cpu.mkdir(parents=True)
        (cpu / "online").write_text(f"0-{h.cpus - 1}\n" if h.cpus > 1 else "0\n")
        for c in range(h.cpus):
            (cpu / f"cpu{c}" / "cpufreq").mkdir(parents=True)
            (cpu / f"cpu{c}" / "cpufreq" / "scaling_cur_freq").write_text(
                f"{2_000_000 + c * 1000}\n")
        block = self.sysfs / "class" / "block"
        block.mkdir(parents=True)
        for name in disk_names(h):
            (block / name).mkdir()
            (block / f"{name}p1").mkdir()
            (block / f"{name}p1" / "partition").write_text("1\n")
        for i in range(8):
            (block / f"loop{i}").mkdir()
        for i, name in enumerate(nic_names(h)):
            stats = self.sysfs / "class" / "net" / name / "statistics"
            stats.mkdir(parents=True)
            for counter, v in zip(COUNTERS, counts(len(COUNTERS), 0, i), strict=True):
                (stats / counter).write_text(f"{v}\n")
        write_cgroups(self.sysfs, h.cgroups)

    def step(self, files: tuple[str, ...] | None = None) -> None:
        """Move the counters on: rewrite the moving files (those under /proc named in
        ``files``; None: all) in place."""
        self._k += 1
        for rel in self._gen if files is None else files:
            path, gen = self._gen[rel]
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(gen(self._k))


@contextlib.contextmanager
def tree(host: Host) -> Iterator[Tree]:
    """Yield a fixture tree for ``host`` in a temporary directory (tmpfs where there is)."""
    shm = Path("/dev/shm")
    base = tempfile.mkdtemp(prefix="rezolus-scale-", dir=shm if shm.is_dir() else None)
    try:
        yield Tree(Path(base), host)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- netlink: a fake socket answering synthetic dumps ------------------------------------

_HDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")
#: struct rtnl_link_stats64 as Linux 6.x sends it: 25 u64.
_STATS64_WORDS = 25


def _msg(mtype: int, seq: int, body: bytes, flags: int = 2) -> bytes:
    m = _HDR.pack(_HDR.size + len(body), mtype, flags, seq, 0) + body
    return m + b"\0" * (-len(m) % 4)


def _attr(atype: int, payload: bytes) -> bytes:
    a = _NLA.pack(4 + len(payload), atype) + payload
    return a + b"\0" * (-len(a) % 4)


def _datagrams(msgs: list[bytes], seq: int, cap: int = 16384) -> list[bytes]:
    """Return ``msgs`` packed into datagrams of at most ``cap`` bytes, NLMSG_DONE last."""
    out, cur = [], b""
    for m in msgs:
        if cur and len(cur) + len(m) > cap:
            out.append(cur)
            cur = b""
        cur += m
    out.append(cur)
    out.append(_msg(rtnl.NLMSG_DONE, seq, struct.pack("=i", 0)))
    return out


class FakeRtnl:
    """Answers RTM_GETLINK and RTM_GETSTATS dumps for the interfaces of a host, as a
    kernel would lay them out (names first; the 64-bit stats struct of 6.x)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.k = 0
        #: CPU time spent making dumps (ns): the kernel's work, taken out of the figures.
        self.spent_ns = 0

    def opener(self, groups: int) -> socket.socket | _FakeSocket:
        if groups:  # the link monitor: a real socket that never has anything to read
            a, b = socket.socketpair()
            b.close()
            a.setblocking(False)
            return a
        return _FakeSocket(self)

    def answer(self, req: bytes) -> list[bytes]:
        t0 = time.thread_time_ns()
        try:
            return self._answer(req)
        finally:
            self.spent_ns += time.thread_time_ns() - t0

    def _answer(self, req: bytes) -> list[bytes]:
        _len, mtype, _flags, seq, _pid = _HDR.unpack_from(req)
        self.k += 1
        msgs = []
        for i, name in enumerate(self.names, 1):
            if mtype == rtnl.RTM_GETLINK:
                body = struct.pack("=BxHiII", socket.AF_UNSPEC, 1, i, 0x1043, 0)
                body += _attr(rtnl.IFLA_IFNAME, name.encode() + b"\0")
                msgs.append(_msg(rtnl.RTM_NEWLINK, seq, body))
            else:
                stats = struct.pack(f"={_STATS64_WORDS}Q", *counts(_STATS64_WORDS, self.k, i))
                body = struct.pack("=BxxxiI", socket.AF_UNSPEC, i, 1)
                body += _attr(rtnl.IFLA_STATS_LINK_64, stats)
                msgs.append(_msg(rtnl.RTM_NEWSTATS, seq, body))
        return _datagrams(msgs, seq)


class _FakeSocket:
    def __init__(self, kernel: FakeRtnl) -> None:
        self.kernel = kernel
        self.queue: list[bytes] = []

    def send(self, req: bytes) -> int:
        self.queue = self.kernel.answer(req)
        return len(req)

    def recv(self, _size: int) -> bytes:
        return self.queue.pop(0)

    def close(self) -> None:
        pass


# --- driving samplers --------------------------------------------------------------------

def start(name: str, t: Tree, agent: Agent | None = None) -> Sampler:
    """Return sampler ``name`` started on ``t`` and bound to always-enabled null handles
    (``network/netlink``: the network sampler reading a synthetic netlink dump)."""
    real = name.split("/")[0]
    cls = REGISTRY[real]
    opts = dict(config.defaults(options()).samplers[real])
    saved = network_sampler.open_rtnetlink
    fake = None
    if name == "network/netlink":
        opts["source"] = "netlink"
        fake = FakeRtnl(nic_names(t.host))
        network_sampler.open_rtnetlink = fake.opener  # type: ignore[assignment]
    try:
        s = cls(SamplerContext(Roots(t.procfs, t.sysfs), opts, agent,
                               agent.shared if agent else SharedFiles()))
        s.start()
    finally:
        network_sampler.open_rtnetlink = saved
    s.bind({e.name: NullHandle() for e in cls.events()})  # type: ignore[misc]
    FAKES[s] = fake
    return s


#: The fake netlink kernel of each sampler started (None: reads files).
FAKES: dict[Sampler, FakeRtnl | None] = {}


def fake_ns(s: Sampler) -> int:
    """Return the CPU ns sampler ``s``'s fake kernel has spent so far."""
    fake = FAKES.get(s)
    return fake.spent_ns if fake is not None else 0


# --- the large-host parsers as they were, for before/after in one run -------------------

class LineInterrupts:
    """cpu_interrupts' parse before InterruptsReader: the line-by-line parse, every read."""

    @staticmethod
    def read(data: bytes | memoryview) -> dict[int, tuple[int, ...]]:
        return parse_interrupts(bytes(data))  # a fresh bytes at each read, as then


class LineTimes:
    """cpu_usage's parse before CpuTimes: line by line, a ``busy_ppm`` call per CPU."""

    def __init__(self, tick_ns: int) -> None:
        self.tick_ns = tick_ns
        self.prev: dict[int, tuple[int, ...]] = {}

    def rows(self, data: bytes) -> dict[tuple, tuple[int, ...]]:
        rows = {}
        for row in parse_proc_stat_cpus(data, self.tick_ns):
            cpu, times = row[0], row[1:]
            rows[(cpu,)] = (*times, busy_ppm(times, self.prev.get(cpu)))
            self.prev[cpu] = times
        return rows


#: How to put a started sampler back as it was before the fixes (sampler -> patch).
BEFORE: dict[str, Callable[[Sampler], None]] = {
    "cpu_interrupts": lambda s: setattr(s, "_reader", LineInterrupts()),
    "cpu_usage": lambda s: setattr(s, "_times", LineTimes(s._times._tick_ns)),  # type: ignore
    # Its read by tokens only (no fixed-width NumPy read at any CPU count).
    "cpu_softirq": lambda s: setattr(s, "_reader", SoftirqReader(min_fixed_cpus=1 << 30)),
}


#: The fixed samplers, and those the Oversampler's NumPy summary speeds up.
FIXED_SAMPLERS = (*BEFORE, "scheduler", "network/netlink")


@contextlib.contextmanager
def old_code(before: bool) -> Iterator[None]:
    """Run the Oversampler (its loop for every family) and the scheduler's parse (every
    line split) as before the fixes if ``before``."""
    saved = family.VECTOR_SERIES, scheduler_sampler._NUMPY_BYTES
    if before:
        family.VECTOR_SERIES = scheduler_sampler._NUMPY_BYTES = 1 << 62
    try:
        yield
    finally:
        family.VECTOR_SERIES, scheduler_sampler._NUMPY_BYTES = saved


def as_before(s: Sampler) -> Sampler:
    """Return ``s`` patched back to its code before the fixes (if it had any)."""
    patch = BEFORE.get(s.name)
    if patch is not None:
        patch(s)
    return s


class Clock:
    """The samplers' own clocks (rescans, refreshes) follow the simulated ticks."""

    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns


def drive(s: Sampler, t: Tree, intervals: int, files: tuple[str, ...] = ()) -> list[float]:
    """Return the thread CPU µs of each of ``intervals`` publish intervals of ``s``, driven
    as the agent does (sample every tick while a _dist event is wanted; on the publish
    tick sample and publish), back to back; the counters move between ticks."""
    clock = Clock()
    for obj in (s, getattr(s, "_sysfs", None)):
        if obj is not None and hasattr(obj, "_clock"):
            obj._clock = clock
    out = []
    cpu = time.thread_time_ns
    for _ in range(intervals):
        used = 0
        for tick in range(PUBLISH_EVERY):
            clock.ns += SAMPLE_NS
            t.step(files)
            publishing = tick == PUBLISH_EVERY - 1
            t0, k0 = cpu(), fake_ns(s)
            if s.dist_wanted or publishing:
                s.sample(clock.ns, publishing)
                if publishing:
                    s.publish()
            used += cpu() - t0 - (fake_ns(s) - k0)
        out.append(used / 1000)
    return out


def rescan_us(s: Sampler, repeats: int) -> float:
    """Return the median µs of the cgroup sampler's walk of the hierarchy (every 10 s)."""
    times = []
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        s.rescan()  # type: ignore[attr-defined]
        times.append((time.thread_time_ns() - t0) / 1000)
    return statistics.median(times)


def per_second(name: str, t: Tree, intervals: int, before: bool = False) -> float:
    """Return sampler ``name``'s CPU µs per second at default intervals on ``t`` (the
    median interval, plus the cgroup walk's share: one every 10 s). The agent sampler
    reports on an agent holding every measured sampler."""
    whole = None
    if name == "agent":
        whole, _ = build_agent(t)
        s = whole.states["agent"].sampler
        assert s is not None
    else:
        s = start(name, t)
    if before:
        as_before(s)
    try:
        files = MOVING.get(name, ())
        drive(s, t, 2, files)  # plans made, caches filled, the first walk done
        cost = statistics.median(drive(s, t, intervals, files))
        if name == "cgroup":
            cost += rescan_us(s, max(3, intervals // 3)) / 10
        return cost
    finally:
        if whole is not None:
            whole.close()
        else:
            s.close()


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Return (slope of the least-squares line, exponent of the power law fitted to the
    growth beyond the smallest size, y - y0 against x - x0): µs per unit, and 1.0 for
    linear growth (2.0 for a cost growing with the square of the size)."""
    slope = float(np.polyfit(xs, ys, 1)[0])
    dx = np.log(np.array(xs[1:], float) - xs[0])
    dy = np.log(np.maximum(np.array(ys[1:]) - ys[0], 1e-3))
    exponent = float(np.polyfit(dx, dy, 1)[0]) if len(xs) > 2 else float("nan")
    return slope, exponent


def sweep(names: tuple[str, ...], hosts: list[Host], unit: str, sizes: list[int],
          intervals: int) -> None:
    """Print each sampler's µs/s at each host, and its growth per ``unit``."""
    got: dict[str, list[float]] = {n: [] for n in names}
    for h in hosts:
        with tree(h) as t:
            for n in names:
                got[n].append(per_second(n, t, intervals))
    print(f"{'sampler':18s} " + "".join(f"{f'{x} {unit}s':>12s}" for x in sizes)
          + f"   {'µs/s per ' + unit:>15s}  power")
    for n, ys in got.items():
        slope, exp = fit(sizes, ys)
        print(f"{n:18s} " + "".join(f"{y:12.1f}" for y in ys) + f"   {slope:15.3f}  {exp:5.2f}")


# --- the whole agent, paced ------------------------------------------------------------------

def build_agent(t: Tree, before: bool = False) -> tuple[Agent, list[Sampler]]:
    """Return an agent with every measured sampler on ``t``; network reads netlink (a
    synthetic dump), as it does by default on a real host; ``before``: as before the
    fixes."""
    conf = config.defaults(options())
    agent = Agent(conf, Path("/nonexistent"))
    started = []
    for name in SAMPLERS:
        if name == "network":
            continue
        s = start(name, t, agent)
        if before:
            as_before(s)
        agent.states[name.split("/")[0]] = SamplerState(name, s, "idle")
        started.append(s)
    return agent, started


def paced(t: Tree, seconds: float, before: bool = False) -> float:
    """Return the agent's CPU share (% of one core) on its tick schedule: sleeping between
    ticks (cold caches, as in production), the counters moving after each tick (untimed)."""
    agent, samplers = build_agent(t, before)
    try:
        now = time.monotonic_ns
        agent.tick(now(), True)
        t.step()
        agent.tick(now(), True)
        used = 0
        t_start = time.monotonic()
        next_at = t_start
        for tick in range(1, max(1, round(seconds)) * PUBLISH_EVERY + 1):
            next_at += SAMPLE_NS / 1e9
            time.sleep(max(0.0, next_at - time.monotonic()))
            c0, k0 = time.thread_time_ns(), sum(map(fake_ns, samplers))
            agent.tick(now(), tick % PUBLISH_EVERY == 0)
            used += time.thread_time_ns() - c0 - (sum(map(fake_ns, samplers)) - k0)
            t.step()
        return 100 * used / 1e9 / (time.monotonic() - t_start)
    finally:
        agent.close()


def profiles(intervals: int, seconds: float) -> None:
    """Print, per host profile, each sampler's µs/s, their sum, and the paced agent."""
    for label, h in PROFILES.items():
        with tree(h) as t:
            costs = {n: per_second(n, t, intervals) for n in SAMPLERS}
            share = paced(t, seconds)
        total = sum(v for n, v in costs.items() if n != "network")
        print(f"\n## {label} ({h})")
        print("  " + ", ".join(f"{n} {v:.0f}" for n, v in costs.items()) + "  (µs/s)")
        print(f"  sum of samplers, warm (network via netlink): {total / 10_000:.3f} % of a core")
        print(f"agent CPU, {label}, 100 ms / 1 s, every event: {share:.3f} % of a core"
              f"   (paced, {seconds:.0f} s; target for the Kubernetes node <= 2%)")


#: The cases of before/after: a label and its host.
CASES = {"128-CPU Kubernetes node": PROFILES["128-CPU Kubernetes node"],
         "256 CPUs": Host(cpus=256)}


def measure(kind: str, case: str, intervals: int, seconds: float) -> dict[str, float]:
    """Return this process's measures of ``case`` (a CASES label) after the fixes: the
    FIXED_SAMPLERS' µs/s (``kind`` "samplers") or the paced agent's % of a core
    ("paced"); what ``--measure`` prints for --against."""
    with tree(CASES[case]) as t:
        if kind == "paced":
            return {"paced": paced(t, seconds)}
        return {n: per_second(n, t, intervals) for n in FIXED_SAMPLERS}


@contextlib.contextmanager
def revision(rev: str | None) -> Iterator[Callable[..., dict[str, float]] | None]:
    """Yield a function measuring ``measure(kind, case)`` with REV's package (checked out
    in a temporary worktree, run by this script in a process of its own), or None."""
    if rev is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="rezolus-scale-") as tmp:
        t = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(t),
                        rev], check=True)

        def run(kind: str, case: str, intervals: int, seconds: float) -> dict[str, float]:
            p = subprocess.run([sys.executable, __file__, "--measure", kind, "--case", case,
                                "--intervals", str(intervals), "--seconds", str(seconds)],
                               capture_output=True, text=True,
                               env={**os.environ, "REZOLUS_UE_BENCH_TREE": str(t)})
            if p.returncode != 0:
                raise SystemExit(f"bench/scale.py on {rev} failed:\n{p.stderr[-3000:]}")
            return json.loads(p.stdout)

        try:
            yield run  # type: ignore[misc]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(t)],
                           check=False)


def before_after(intervals: int, seconds: float, rounds: int, against: str | None) -> None:
    """Print the fixed samplers and the whole agent before and after the fixes, measured
    in turn (before, after, before, ...) in this run; medians of ``rounds``. ``against``:
    a git revision measured in each round too (its package in a process of its own)."""
    print(f"\n## before / after the fixes (this run, {rounds} interleaved rounds, medians;"
          " before: cpu_interrupts and cpu_usage read line by line, cpu_softirq by tokens,"
          " scheduler splitting every line of /proc/schedstat, and the Oversampler's loop for"
          " every family" + (f"; at {against}: that revision's code" if against else "")
          + ")")
    sides = ("before", *([f"at {against}"] if against else []), "after")
    with revision(against) as rev:
        for what in CASES:
            with tree(CASES[what]) as t:
                got: dict[str, dict[str, list[float]]] = {
                    n: {side: [] for side in sides} for n in FIXED_SAMPLERS}
                for _ in range(rounds):
                    if rev is not None:
                        for name, v in rev("samplers", what, intervals, seconds).items():
                            got[name][sides[1]].append(v)
                    for name in FIXED_SAMPLERS:
                        for b in (True, False):
                            with old_code(b):
                                got[name]["before" if b else "after"].append(
                                    per_second(name, t, intervals, before=b))
            for name, by in got.items():
                med = {side: statistics.median(v) for side, v in by.items()}
                print(f"{name:18s} {what:24s} " + "   ".join(
                    f"{side} {v:9.1f} µs/s" for side, v in med.items())
                    + "   (" + "; ".join(f"{med[side] / med['after']:.1f}x"
                                         for side in sides[:-1]) + ")")
        label = "128-CPU Kubernetes node"
        shares: dict[str, list[float]] = {side: [] for side in sides}
        with tree(PROFILES[label]) as t:
            for _ in range(rounds):
                for b in (True, False):
                    with old_code(b):
                        shares["before" if b else "after"].append(
                            paced(t, seconds / 2, before=b))
                if rev is not None:
                    shares[sides[1]].append(rev("paced", label, intervals, seconds / 2)["paced"])
    med = {side: statistics.median(v) for side, v in shares.items()}
    print(f"agent CPU, {label}, paced: " + ", ".join(f"{side} {v:.3f} % of a core"
                                                     for side, v in med.items())
          + "   (" + "; ".join(f"{med[side] / med['after']:.2f}x" for side in sides[:-1])
          + ")")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few repeats (a smoke test)")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="length of each paced agent run")
    ap.add_argument("--against", metavar="REV",
                    default=os.environ.get("REZOLUS_UE_SCALE_AGAINST") or None,
                    help="in before/after, also measure git revision REV's code in each round"
                    " (default: $REZOLUS_UE_SCALE_AGAINST)")
    ap.add_argument("--only-before-after", action="store_true",
                    help="print only the before/after section")
    ap.add_argument("--measure", choices=("samplers", "paced"), help=argparse.SUPPRESS)
    ap.add_argument("--case", choices=tuple(CASES), help=argparse.SUPPRESS)
    ap.add_argument("--intervals", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:  # one measure of --against's revision, as JSON
        print(json.dumps(measure(args.measure, args.case, args.intervals, args.seconds)))
        return 0
    intervals = 2 if args.quick else 9
    seconds = 2.0 if args.quick else args.seconds
    print(f"# scale  ({platform.node()}, Linux {platform.release()}, {os.cpu_count()} CPUs,"
          f" Python {platform.python_version()}; load average {os.getloadavg()[0]:.2f})")
    print("CPU µs per second at 100 ms sampling / 1 s publishing, every event enabled, warm;"
          " µs/s / 10000 = % of one core. power: growth exponent (1 = linear).")
    if args.only_before_after:
        before_after(intervals, seconds, 1 if args.quick else 3, args.against)
        return 0
    print("\n## by CPUs (1 disk, 2 NICs, 10 cgroups)")
    sweep(BY_CPU, [Host(cpus=n) for n in CPUS], "CPU", list(CPUS), intervals)
    print("\n## by block devices (2 CPUs; each disk has a partition, 8 idle loop devices)")
    sweep(BY_DISK, [Host(disks=n) for n in DISKS], "disk", list(DISKS), intervals)
    print("\n## by network interfaces (2 CPUs; network/netlink: synthetic dumps, the kernel's"
          " side not measured)")
    sweep(BY_NIC, [Host(nics=n) for n in NICS], "NIC", list(NICS), intervals)
    print("\n## by cgroups (2 CPUs; max_cgroups = 64 published, the walk every 10 s reads"
          " every group's cpu.stat)")
    sweep(BY_CGROUP, [Host(cgroups=n) for n in CGROUPS], "cgroup", list(CGROUPS), intervals)
    print("\n## not growing with the host (2 CPUs)")
    with tree(Host()) as t:
        for n in FIXED:
            print(f"{n:18s} {per_second(n, t, intervals):12.1f}")
    print("\nnot measured here: perf_software, perf_hardware (perf_event_open per CPU; no"
          " fixture root: bench/collect.py), BPF samplers (bench/overhead.py)")
    profiles(intervals, seconds)
    before_after(intervals, seconds, 1 if args.quick else 3, args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
