"""Cost of the processes sampler as the process count grows: 200, 2,000 and 20,000
processes, on fixture /proc trees and on real processes, beside ``top -b -n 1`` and
``ps aux`` reading the same processes in the same run.

    python bench/processes.py [--quick] [--intervals 5] [--sizes 200,2000,20000]

Per interval: the CPU time (this thread's clock) of one refresh as the agent makes it at
1 s publishing, with every event enabled at the default options and each record written
to /dev/null (as bench/collect.py): capture (the /proc reads), parse (counters, ranking)
and publish (packing and writing), the median of ``--intervals``, paced a second apart as
the agent sleeps between them (cold caches). A second is 1e9 ns: ms per interval / 10 is
the % of one core.

Fixture trees: ``<pid>/stat``, ``schedstat``, ``io``, ``status``, ``cgroup`` and
``comm`` of every process, shaped as the kernel writes them, on tmpfs; between intervals
(untimed) a tenth of the processes run: their counters move (files rewritten in place),
the others' do not. A regular file's read stands in for the kernel's generating of procfs
text, which the real processes' figures include.

Real processes: sleeping ``sleep`` processes spawned beside those already running, as
many as pid_max and the memory let (what fit is printed). ``top -b -n 1`` and ``ps aux``
run on them with their output to /dev/null; their CPU time (user + system, from wait4)
is the median of 3 runs. The ratios are ours per interval over one run of theirs.

No consumer: an agent holding the sampler, no event enabled, ticking as at 1 s: the
sampler is never called (its calls are counted) and costs nothing; the agent's tick
itself (the enable-word check) is printed beside it.

Prints figures; asserts nothing. Goal: <= 1% of a core at 2,000 processes while watched
at 1 s, 0 while not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from collect import NullHandle  # noqa: E402

from rezolus_ue import config  # noqa: E402
from rezolus_ue.agent import Agent, SamplerState  # noqa: E402
from rezolus_ue.samplers import REGISTRY, Roots, SamplerContext, options  # noqa: E402
from rezolus_ue.samplers.base import Sampler  # noqa: E402

NAME = "processes"
SIZES = (200, 2_000, 20_000)
#: The goal's process count and share of one core while watched at 1 s.
GOAL_PROCESSES, GOAL_PERCENT = 2_000, 1.0
#: The publish interval the agent ships with (configs/default.toml).
PUBLISH_S = 1.0
#: Share of fixture processes whose counters move between two intervals.
BUSY = 10
#: Memory left free after spawning, at least: the host is shared.
KEEP_FREE = 4 << 30
TICK = os.sysconf("SC_CLK_TCK")


# --- fixture trees ---------------------------------------------------------------------

COMMS = ("postgres", "nginx", "java", "python3", "sshd", "bash", "kworker/0:1", "containerd",
         "node", "redis-server")
USERS = (0, 33, 999, 1000, 65534)


def stat_text(pid: int, k: int) -> str:
    """Return /proc/<pid>/stat at step ``k``, the kernel's 52 fields."""
    comm = COMMS[pid % len(COMMS)]
    moving = pid % BUSY == 0
    utime, stime = pid % 997 + (k * 40 if moving else 0), pid % 331 + (k * 9 if moving else 0)
    threads = 1 + pid % 7
    rss = 200 + pid % 5000
    state = "R" if moving and k % 3 == 0 else "S"
    return (f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 {pid * 3 + k} 0 {pid % 13} 0"
            f" {utime} {stime} 0 0 20 0 {threads} 0 {1000 + pid} {rss * 4096 * 4}"
            f" {rss} 18446744073709551615 94000000000000 94000000100000 140000000000000 0"
            " 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 94000000200000 94000000300000"
            f" 94000001000000 140000000001000 140000000001100 140000000001100"
            " 140000000002000 0\n")


def io_text(pid: int, k: int) -> str:
    """Return /proc/<pid>/io at step ``k``."""
    moving = pid % BUSY == 0
    r, w = pid * 4096 + (k << 16 if moving else 0), pid * 512 + (k << 15 if moving else 0)
    return (f"rchar: {r * 3}\nwchar: {w * 2}\nsyscr: {pid + k}\nsyscw: {pid // 2 + k}\n"
            f"read_bytes: {r}\nwrite_bytes: {w}\ncancelled_write_bytes: 0\n")


def status_text(pid: int, k: int) -> str:
    """Return /proc/<pid>/status at step ``k`` (every line the kernel writes)."""
    comm, uid = COMMS[pid % len(COMMS)], USERS[pid % len(USERS)]
    rss = 200 + pid % 5000
    return (f"Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\n"
            f"Pid:\t{pid}\nPPid:\t1\nTracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
            f"Gid:\t{uid}\t{uid}\t{uid}\t{uid}\nFDSize:\t64\nGroups:\t\nNStgid:\t{pid}\n"
            f"NSpid:\t{pid}\nNSpgid:\t{pid}\nNSsid:\t{pid}\nKthread:\t0\n"
            f"VmPeak:\t   {rss * 16} kB\nVmSize:\t   {rss * 16} kB\nVmLck:\t       0 kB\n"
            f"VmPin:\t       0 kB\nVmHWM:\t   {rss * 4} kB\nVmRSS:\t   {rss * 4} kB\n"
            f"RssAnon:\t   {rss * 2} kB\nRssFile:\t   {rss * 2} kB\nRssShmem:\t       0 kB\n"
            "VmData:\t     360 kB\nVmStk:\t     132 kB\nVmExe:\t      20 kB\n"
            "VmLib:\t    1528 kB\nVmPTE:\t      44 kB\nVmSwap:\t       0 kB\n"
            "HugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\n"
            "untag_mask:\t0xffffffffffffffff\n"
            f"Threads:\t{1 + pid % 7}\nSigQ:\t0/96365\nSigPnd:\t0000000000000000\n"
            "ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
            "SigIgn:\t0000000000001000\nSigCgt:\t0000000180004002\n"
            "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
            "CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n"
            "CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n"
            "Speculation_Store_Bypass:\tthread vulnerable\n"
            "SpeculationIndirectBranch:\tconditional enabled\nCpus_allowed:\t3\n"
            "Cpus_allowed_list:\t0-1\nMems_allowed:\t00000001\nMems_allowed_list:\t0\n"
            f"voluntary_ctxt_switches:\t{pid * 7 + k * 3}\n"
            f"nonvoluntary_ctxt_switches:\t{pid % 50 + k}\n")


def schedstat_text(pid: int, k: int) -> str:
    """Return /proc/<pid>/schedstat at step ``k``: time on CPU and waiting (ns), slices."""
    run = (pid % 997 + (k * 49 if pid % BUSY == 0 else 0)) * 10_000_000
    return f"{run} {run // 7} {pid % 991 + k}\n"


def cgroup_text(pid: int) -> str:
    """Return /proc/<pid>/cgroup on a cgroup v2 host (systemd services, pods)."""
    if pid % 3:
        return f"0::/system.slice/service{pid % 40}.service\n"
    return (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pid % 97:04d}"
            f".slice/cri-containerd-{pid % 89:064x}.scope\n")


#: The files of one process: name -> text at step k.
PER_PROCESS: dict[str, Callable[[int, int], str]] = {
    "stat": stat_text, "io": io_text, "status": status_text, "schedstat": schedstat_text,
    "cgroup": lambda pid, _k: cgroup_text(pid),
    "comm": lambda pid, _k: COMMS[pid % len(COMMS)] + "\n",
}
#: The files that move with a busy process's counters.
MOVING = ("stat", "io", "status", "schedstat")


class Tree:
    """A fixture /proc of ``n`` processes; ``step`` moves the busy ones' counters."""

    def __init__(self, base: Path, n: int) -> None:
        self.procfs = base / "proc"
        self.pids = [300 + 7 * i for i in range(n)]
        self._k = 0
        self.procfs.mkdir()
        for pid in self.pids:
            d = self.procfs / str(pid)
            d.mkdir()
            (d / "task").mkdir()
            (d / "task" / str(pid)).mkdir()
            for name, text in PER_PROCESS.items():
                (d / name).write_text(text(pid, 0))
        for name in ("stat", "loadavg", "uptime", "meminfo"):
            with contextlib.suppress(OSError):
                (self.procfs / name).write_bytes(Path("/proc", name).read_bytes())
        (self.procfs / "sys" / "kernel").mkdir(parents=True)
        (self.procfs / "sys" / "kernel" / "pid_max").write_text("4194304\n")
        (self.procfs / "self").symlink_to(str(self.pids[0]))

    def step(self) -> None:
        """Rewrite the busy processes' moving files in place (as procfs regenerates them)."""
        self._k += 1
        for pid in self.pids[::BUSY]:
            for name in MOVING:
                with open(self.procfs / str(pid) / name, "r+") as f:
                    f.truncate(0)
                    f.write(PER_PROCESS[name](pid, self._k))


@contextlib.contextmanager
def tree(n: int) -> Iterator[Tree]:
    """Yield a fixture tree of ``n`` processes in a temporary directory (tmpfs if any)."""
    shm = Path("/dev/shm")
    base = tempfile.mkdtemp(prefix="rezolus-processes-", dir=shm if shm.is_dir() else None)
    try:
        yield Tree(Path(base), n)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --- real processes --------------------------------------------------------------------

def processes() -> int:
    """Return how many processes the host runs now."""
    return sum(1 for d in os.scandir("/proc") if d.name.isdigit())


def mem_available() -> int:
    """Return MemAvailable in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class Sleepers:
    """Sleeping processes spawned by this one (``sleep``: a small program, its pages
    shared), killed and reaped by pid on the way out."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.exe = shutil.which("sleep") or "/bin/sleep"

    def spawn(self, n: int) -> None:
        for _ in range(n):
            self.pids.append(os.posix_spawn(self.exe, ["sleep", "86400"], os.environ))

    def grow_to(self, total: int) -> tuple[int, str]:
        """Spawn until the host runs ``total`` processes, or until pid_max or the memory
        would not leave room; return the count reached and what stopped it (or "")."""
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        want = total - processes()
        if want <= 0:
            return processes(), ""
        probe = min(want, 200)
        before = mem_available()
        self.spawn(probe)
        each = max((before - mem_available()) / probe, 64 << 10)
        room = int((mem_available() - KEEP_FREE) / each)
        pids_left = pid_max - processes() - 1000
        more = want - probe
        why = ""
        if more > min(room, pids_left):
            more = max(0, min(room, pids_left))
            why = (f"memory: {each / 1024:.0f} KiB each, {KEEP_FREE >> 30} GiB kept free"
                   if room < pids_left else f"pid_max {pid_max}")
        self.spawn(more)
        return processes(), why

    def close(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids.clear()


def tool_cpu(argv: list[str], runs: int = 3) -> tuple[float, float]:
    """Return the median (CPU ms, wall ms) of ``argv`` run with its output to /dev/null."""
    cpu, wall = [], []
    for _ in range(runs):
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "COLUMNS": "200", "LINES": "60"})
        _pid, _status, ru = os.wait4(p.pid, 0)
        p.returncode = 0
        wall.append((time.monotonic() - t0) * 1e3)
        cpu.append((ru.ru_utime + ru.ru_stime) * 1e3)
    return statistics.median(cpu), statistics.median(wall)


# --- the sampler -----------------------------------------------------------------------

def start(procfs: Path, agent: Agent | None = None, enabled: bool = True) -> Sampler:
    """Return the sampler started on ``procfs`` at the default options, bound to null
    handles, every event enabled or none."""
    cls = REGISTRY[NAME]
    opts = dict(config.defaults(options()).samplers[NAME])
    ctx = SamplerContext(Roots(procfs=procfs), opts)
    if agent is not None:
        ctx = SamplerContext(Roots(procfs=procfs), opts, agent, agent.shared)
    s = cls(ctx)
    s.start()
    handles = {e.name: NullHandle() for e in cls.events()}
    for h in handles.values():
        h.word.value = 1 if enabled else 0
    s.bind(handles)  # type: ignore[arg-type]
    return s


@dataclass
class Cost:
    """One interval's CPU ns: capture, parse, publish (or the total alone)."""

    capture: int
    parse: int
    publish: int

    @property
    def total(self) -> int:
        return self.capture + self.parse + self.publish


def refresh(s: Sampler, t_ns: int) -> Cost:
    """Refresh ``s`` once as the agent does at a publish tick (sample, then publish),
    timing each step: apart where the sampler publishes one capture (``Sampler.publish``;
    its sample is counted in the capture), else as one."""
    cpu = time.thread_time_ns
    if type(s).publish is Sampler.publish:
        t0 = cpu()
        s.sample(t_ns, True)
        raw = s.capture()
        t1 = cpu()
        rows = s.parse(raw)
        t2 = cpu()
        s.publish_rows(rows)
        return Cost(t1 - t0, t2 - t1, cpu() - t2)
    t0 = cpu()
    s.sample(t_ns, True)
    s.publish()
    return Cost(0, 0, cpu() - t0)


def interval_costs(s: Sampler, intervals: int, pause_s: float,
                   step: Callable[[], None] | None = None) -> list[Cost]:
    """Return the cost of each of ``intervals`` refreshes, ``pause_s`` apart (less the
    time ``step`` took), after two untimed ones (files opened, the first counters)."""
    out = []
    for k in range(intervals + 2):
        t0 = time.monotonic()
        if step is not None:
            step()
        c = refresh(s, time.monotonic_ns())
        if k >= 2:
            out.append(c)
        time.sleep(max(0.0, pause_s - (time.monotonic() - t0)))
    return out


def median_cost(costs: list[Cost]) -> Cost:
    return Cost(*(int(statistics.median(getattr(c, f) for c in costs))
                  for f in ("capture", "parse", "publish")))


def row(label: str, n: int, c: Cost) -> str:
    ms = c.total / 1e6
    split = (f"{c.capture / 1e6:8.2f} {c.parse / 1e6:8.2f} {c.publish / 1e6:8.2f}"
             if c.capture or c.parse else f"{'':8s} {'':8s} {'':8s}")
    return (f"{label:8s} {n:>7d} {split} {ms:9.2f} ms  {ms / (PUBLISH_S * 10):7.3f} %")


def no_consumer(ticks: int) -> tuple[int, float]:
    """Return (sampler calls, the agent tick's µs) over ``ticks`` publish ticks of an agent
    holding the sampler on this host's /proc with no event enabled."""
    conf = config.defaults(options())
    agent = Agent(conf, Path("/nonexistent"))
    s = start(Path("/proc"), agent, enabled=False)
    calls = [0]

    def counted(f: Callable[..., object]) -> Callable[..., object]:
        def call(*a: object, **kw: object) -> object:
            calls[0] += 1
            return f(*a, **kw)
        return call

    for hook in ("capture", "parse", "sample", "publish", "activate"):
        setattr(s, hook, counted(getattr(s, hook)))
    agent.states[NAME] = SamplerState(NAME, s, "idle")
    try:
        agent.tick(time.monotonic_ns(), True)
        t0 = time.thread_time_ns()
        for _ in range(ticks):
            agent.tick(time.monotonic_ns(), True)
        us = (time.thread_time_ns() - t0) / 1e3 / ticks
    finally:
        agent.close()
    return calls[0], us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few intervals, no pause (rough)")
    ap.add_argument("--intervals", type=int, default=5, help="timed intervals per case")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="process counts, comma-separated")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    intervals = 2 if args.quick else args.intervals
    pause = 0.0 if args.quick else PUBLISH_S
    print(f"# processes sampler cost  ({platform.node()}, Linux {platform.release()},"
          f" {os.cpu_count()} CPUs, Python {platform.python_version()};"
          f" load average {os.getloadavg()[0]:.2f})")
    print(f"per interval at {PUBLISH_S:g} s publishing, every event enabled, default options;"
          f" median of {intervals}; % = of one core")
    head = (f"{'where':8s} {'procs':>7s} {'capture':>8s} {'parse':>8s} {'publish':>8s}"
            f" {'total':>12s}  {'share':>7s}")
    print(f"\n## fixture trees ({BUSY}% of the processes busy; tmpfs files, no kernel cost)")
    print(head)
    fixture: dict[int, Cost] = {}
    for n in sizes:
        with tree(n) as t:
            s = start(t.procfs)
            try:
                fixture[n] = median_cost(interval_costs(s, intervals, pause, t.step))
                detail = s.detail
            finally:
                s.close()
        print(row("fixture", n, fixture[n]))
        if detail:
            print(f"  ({detail})")
        print(f"processes sampler, fixture, {n} processes:"
              f" {fixture[n].total / 1e6 / (PUBLISH_S * 10):.3f} % of a core")

    print("\n## real processes (sleeping `sleep`s beside the host's own), with top and ps"
          " on the same processes")
    print(head + f"  {'top -b -n 1':>18s}  {'ps aux':>18s}  {'ours/top':>8s} {'ours/ps':>8s}")
    real: dict[int, Cost] = {}
    sleepers = Sleepers()
    try:
        for n in sizes:
            reached, why = sleepers.grow_to(n)
            s = start(Path("/proc"))
            try:
                real[reached] = c = median_cost(interval_costs(s, intervals, pause))
                detail = s.detail
            finally:
                s.close()
            top_cpu, top_wall = tool_cpu(["top", "-b", "-n", "1"])
            ps_cpu, ps_wall = tool_cpu(["ps", "aux"])
            ms = c.total / 1e6
            print(row("real", reached, c) + f"  {top_cpu:7.1f} ms ({top_wall:5.0f})"
                  f"  {ps_cpu:7.1f} ms ({ps_wall:5.0f})  {ms / max(top_cpu, 1e-3):7.2f}x"
                  f" {ms / max(ps_cpu, 1e-3):7.2f}x")
            print(f"processes sampler, real, {n} asked, {reached} running:"
                  f" {ms / (PUBLISH_S * 10):.3f} % of a core; ratio ours / top -b -n 1:"
                  f" {ms / max(top_cpu, 1e-3):.2f} x; ratio ours / ps aux:"
                  f" {ms / max(ps_cpu, 1e-3):.2f} x")
            if detail:
                print(f"  ({detail})")
            if why:
                print(f"  asked for {n}, {reached} fit ({why})")
                break
    finally:
        sleepers.close()
    print("  (top and ps: CPU time of one run, median of 3, wall ms in parentheses)")

    calls, tick_us = no_consumer(10 if args.quick else 60)
    print(f"\nno consumer: {calls} sampler calls in {10 if args.quick else 60} publish ticks;"
          f" the agent's tick {tick_us:.1f} µs (its enable-word check): 0 % of a core for"
          " the sampler")
    goal = min(real, key=lambda k: abs(k - GOAL_PROCESSES), default=None)
    if goal is not None:
        share = real[goal].total / 1e6 / (PUBLISH_S * 10)
        met = share <= GOAL_PERCENT and calls == 0
        print(f"goal: <= {GOAL_PERCENT:g}% of a core at {GOAL_PROCESSES} processes watched at"
              f" 1 s, 0 while not: {share:.3f} % at {goal} real processes, {calls} calls"
              f" unwatched ({'met' if met else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
