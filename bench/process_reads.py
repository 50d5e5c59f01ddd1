"""Cost of reading every process's /proc files, four ways, at 200 and 2,000 processes.

    .venv/bin/python bench/process_reads.py [--counts 200,2000] [--rounds 10] [--pause 0.3]

Sleepers (``sleep 3600``) are started until the host runs N processes. Each way reads, for
every process, what the processes sampler needs of it: stat's state, utime, stime,
cutime, cstime, num_threads, starttime and rss, and io's read_bytes and write_bytes:

- psutil: ``process_iter()`` and, in ``oneshot()``, cpu_times, status, num_threads,
  create_time, memory_info and io_counters (psutil caches its Process objects between
  walks, as a long-running agent would);
- open/read/close: both files of every process opened, read and closed at each walk;
- kept-open: both files opened once and read with ``os.pread`` at offset 0 at each walk
  (procfs regenerates the text); a kept fd of a reaped process reads ESRCH, also once its
  pid is reused (tests/test_sampler_processes.py checks it on the host);
- the sampler: ``Processes.publish()`` with every event enabled, records written to
  /dev/null: the kept-open walk with its shortcuts, ranking, the published processes'
  status and cgroup, and the records. "idle": the sleepers' stat and io do not change
  between walks, so they are compared, not parsed; "changed": every stat and io parsed
  (the sampler's last bytes are forgotten before the walk), a busy host's worst case.

Each round runs every way once, in turn, after a pause (the agent walks once per publish
interval, with cold caches); figures are the median CPU time of a walk (this thread's
clock: user + system, so the kernel's generation of the procfs text is in), each way's
ratio to kept-open, and the sampler's walk as a share of one core at 1 s publishing.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from collect import NullHandle  # noqa: E402

from rezolus_ue.samplers import Roots, SamplerContext  # noqa: E402
from rezolus_ue.samplers.processes import sampler as processes  # noqa: E402
from rezolus_ue.samplers.processes.sampler import Processes, parse_io, parse_stat  # noqa: E402

Row = tuple[int, bytes, int, int, int, int, int, int, int, int, int]


def pids() -> list[str]:
    """Return the pids of /proc, as its directory names."""
    return [n for n in os.listdir("/proc") if n.isdigit()]


def _row(stat: bytes, io: bytes | None) -> Row:
    s = parse_stat(stat)
    r, w = parse_io(io) if io is not None else (0, 0)
    return (s.pid, s.state, s.utime, s.stime, s.cutime, s.cstime, s.threads, s.start, s.rss,
            r, w)


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def open_read_close() -> list[Row]:
    """Open, read and close each process's stat and io."""
    out = []
    for name in pids():
        stat = _read(f"/proc/{name}/stat")
        if stat is not None:
            out.append(_row(stat, _read(f"/proc/{name}/io")))
    return out


class KeptOpen:
    """Each process's stat and io fds, opened once, read with pread."""

    def __init__(self) -> None:
        self.fds: dict[str, tuple[int, int]] = {}

    def _open(self, name: str) -> tuple[int, int] | None:
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            io = os.open(f"/proc/{name}/io", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            io = -1
        return fd, io

    def walk(self) -> list[Row]:
        out = []
        fds, fresh = self.fds, {}
        pread = os.pread
        for name in pids():
            pair = fds.pop(name, None) or self._open(name)
            if pair is None:
                continue
            try:
                stat = pread(pair[0], 1024, 0)
            except OSError:  # ESRCH: reaped
                for fd in pair:
                    if fd >= 0:
                        os.close(fd)
                continue
            io = None
            if pair[1] >= 0:
                try:
                    io = pread(pair[1], 1024, 0)
                except OSError:
                    io = None
            fresh[name] = pair
            out.append(_row(stat, io))
        for pair in fds.values():
            for fd in pair:
                if fd >= 0:
                    os.close(fd)
        self.fds = fresh
        return out

    def close(self) -> None:
        for pair in self.fds.values():
            for fd in pair:
                if fd >= 0:
                    os.close(fd)
        self.fds = {}


def psutil_walk() -> list[tuple]:
    """The same figures through psutil."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            with p.oneshot():
                t = p.cpu_times()
                try:
                    io = p.io_counters()
                    r, w = io.read_bytes, io.write_bytes
                except psutil.AccessDenied:
                    r = w = 0
                out.append((p.pid, p.status(), t.user, t.system, t.children_user,
                            t.children_system, p.num_threads(), p.create_time(),
                            p.memory_info().rss, r, w))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def new_sampler() -> Processes:
    """Return a started processes sampler on /proc, every event enabled."""
    s = Processes(SamplerContext(Roots(), {}))
    s.start()
    s.bind({e.name: NullHandle() for e in Processes.events()})
    return s


def forget_bytes(s: Processes) -> None:
    """Make the sampler's next walk read and parse every process's stat and io."""
    for e in s._procs.values():
        e[processes._RAW] = e[processes._SSRAW] = e[processes._IORAW] = b""


def spawn_to(n: int, sleepers: list[subprocess.Popen]) -> int:
    """Start sleepers until /proc lists ``n`` processes; return how many it lists."""
    while len(pids()) < n:
        sleepers.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL))
    return len(pids())


def measure(ways: dict[str, Callable[[], object]], rounds: int,
            pause: float) -> dict[str, float]:
    """Return each way's median CPU time per call, in µs, running them in turn."""
    times: dict[str, list[int]] = {k: [] for k in ways}
    for f in ways.values():
        f()  # warm: fds opened, psutil's objects made
    for _ in range(rounds):
        for name, f in ways.items():
            time.sleep(pause)
            t0 = time.thread_time_ns()
            f()
            times[name].append(time.thread_time_ns() - t0)
    return {k: statistics.median(v) / 1000 for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="200,2000", help="process counts (comma-separated)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--pause", type=float, default=0.3, help="seconds before each walk")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:  # as the agent does
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import psutil
        have_psutil = f"psutil {psutil.__version__}"
    except ImportError:
        have_psutil = ""
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs, Python"
          f" {sys.version.split()[0]}, {have_psutil or 'no psutil (pip install psutil)'}")
    sleepers: list[subprocess.Popen] = []
    try:
        for n in (int(c) for c in args.counts.split(",")):
            have = spawn_to(n, sleepers)
            kept = KeptOpen()
            sampler = new_sampler()
            ways: dict[str, Callable[[], object]] = {}
            if have_psutil:
                ways["psutil"] = psutil_walk
            ways["open/read/close"] = open_read_close
            ways["kept-open"] = kept.walk
            ways["sampler, idle"] = sampler.publish

            def changed(s: Processes = sampler) -> None:
                forget_bytes(s)
                s.publish()

            ways["sampler, changed"] = changed
            try:
                us = measure(ways, args.rounds, args.pause)
            finally:
                kept.close()
                sampler.close()
            base = us["kept-open"]
            print(f"\n{have} processes ({have - len(sleepers)} besides the sleepers):"
                  " CPU time per walk of every process")
            for name, t in us.items():
                share = f"  {t / 1e4:.2f}% of a core at 1 s" if name.startswith(
                    "sampler") else ""
                print(f"  {name:18} {t:9.0f} µs  {t / base:5.2f}x kept-open"
                      f"  {t / have:5.2f} µs/process{share}")
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()


if __name__ == "__main__":
    main()
