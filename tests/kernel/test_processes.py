"""The processes sampler against known truth: workloads whose CPU, memory and IO are known,
each found at the top of its list with figures within 10% of what the kernel says apart
from the sampler.

One agent serves the module: the installed CLI, the shipped configs/default.toml
(``transport = "auto"``: uprobe events on this host), run as root with its default
privilege drop. Its records are read through perf_event_open, as ``rezolus_ue.subscribe``
and ``tail`` read them (``Subscription``). The truth is either the workload's own count (the
bytes the memory hog touched, the IO writer's /proc/self/io after its fsync, a reaped
child's rusage), or /proc read by this test as the first record of each publish arrives.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from waiting import running, scaled

from rezolus_ue.consume.records import Record
from rezolus_ue.consume.subscription import Subscription
from rezolus_ue.samplers.agent import AGENT_SAMPLER, STATUS_CODES
from rezolus_ue.samplers.processes import PROCESS, PROCESSES
from rezolus_ue.schema import AGENT, CPU_USAGE

from .conftest import Bus, threads_of, wait_for
from .test_agent_e2e import ROOT, AgentProcess

pytestmark = pytest.mark.live
#: What scripts/setup.sh installs: the CLI users run.
CLI = Path(sys.executable).parent / "rezolus-ue"
#: The shipped default configuration (generated from the samplers' declarations).
CONFIG = ROOT / "configs" / "default.toml"
SAMPLER = PROCESS.sampler
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
#: The tolerance every figure is held to, against its truth.
WITHIN = 0.10
#: Tries of a figure summed over the whole host, which other processes can add to.
TRIES = 5
#: Filesystems that keep files in memory: /proc/<pid>/io's write_bytes never counts them.
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}

#: The workloads, one script: ``python -c WORKLOAD KIND COMM ARGS...``. Each names itself
#: COMM; "burn" uses ARG seconds of CPU and exits, the others say "ready" (or their own
#: count) on stdout and hold until their stdin closes.
WORKLOAD = r"""
import os, sys, time
kind, comm, args = sys.argv[1], sys.argv[2], sys.argv[3:]
with open("/proc/self/comm", "w") as f:
    f.write(comm)
if kind == "cpu":
    import hashlib, threading
    block = bytes(64 << 20)  # hashed without the GIL: every thread burns a CPU

    def burn():
        while True:
            hashlib.sha256(block).digest()

    for _ in range(int(args[0]) - 1):
        threading.Thread(target=burn, daemon=True).start()
    print("ready", flush=True)
    burn()
elif kind == "burn":
    until = float(args[0])
    while time.process_time() < until:
        pass
elif kind == "tree":
    import subprocess
    print("ready", flush=True)
    sys.stdin.readline()
    burn = f"import time\nwhile time.process_time() < {float(args[0])}: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    print("reaped", flush=True)
    sys.stdin.read()
elif kind == "memory":
    touched = b"\1" * (int(args[0]) << 20)
    print(len(touched), flush=True)
    sys.stdin.read()
elif kind == "io":
    print("ready", flush=True)
    sys.stdin.readline()
    chunk = os.urandom(1 << 20)
    with open(args[0], "wb") as f:
        for _ in range(int(args[1])):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    io = dict(ln.split(": ") for ln in open("/proc/self/io").read().splitlines())
    print(int(io["read_bytes"]), int(io["write_bytes"]), flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def workload(kind: str, comm: str, *args: object) -> Iterator[subprocess.Popen]:
    """Run one workload (see WORKLOAD); kill and reap it after."""
    proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, kind, comm, *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait(timeout=scaled(30))
        for f in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                f.close()  # type: ignore[union-attr]


def stat_fields(pid: int) -> list[str]:
    """Return /proc/<pid>/stat's fields after the command name (field 3 first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


@dataclass(frozen=True)
class Truth:
    """One process as this test read it from /proc, as a publish's first record arrived."""

    cpu_ns: int  # utime + stime, the clock ticks /proc/<pid>/stat counts, in ns
    run_ns: int  # time on CPU to the ns (every thread's /proc/<pid>/task/*/schedstat)
    start_ns: int
    threads: int
    rss_bytes: int  # VmRSS
    voluntary: int
    involuntary: int

    @classmethod
    def read(cls, pid: int) -> Truth | None:
        try:
            f = stat_fields(pid)
            status = dict(ln.split(":", 1) for ln in
                          Path(f"/proc/{pid}/status").read_text().splitlines())
            run_ns = sum(int(Path(f"{t.path}/schedstat").read_text().split()[0])
                         for t in os.scandir(f"/proc/{pid}/task"))
        except (OSError, ValueError):
            return None
        return cls(cpu_ns=(int(f[11]) + int(f[12])) * TICK_NS, run_ns=run_ns,
                   start_ns=int(f[19]) * TICK_NS, threads=int(f[17]),
                   rss_bytes=int(status["VmRSS"].split()[0]) * 1024,
                   voluntary=int(status["voluntary_ctxt_switches"]),
                   involuntary=int(status["nonvoluntary_ctxt_switches"]))


def largest_rss() -> int:
    """Return the largest resident set of any process now, in bytes."""
    most = 0
    for d in os.scandir("/proc"):
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                most = max(most, int(Path(f"{d.path}/statm").read_text().split()[1]))
    return most * os.sysconf("SC_PAGE_SIZE")


def meminfo(key: str) -> int:
    """Return /proc/meminfo's ``key`` in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0]) * 1024
    raise LookupError(key)


def reaped_so_far() -> dict[tuple[int, int], int]:
    """Return every process's cutime + cstime (the CPU of the children it reaped), in ns,
    by (pid, start time)."""
    out = {}
    for d in os.scandir("/proc"):
        if d.name.isdigit():
            try:
                f = stat_fields(int(d.name))
            except OSError:
                continue
            out[(int(d.name), int(f[19]))] = (int(f[13]) + int(f[14])) * TICK_NS
    return out


@dataclass
class Interval:
    """One publish: its rezolus_process records, its summary, and the truth read as it
    arrived: of each watched pid, and of every process's reaped children if asked."""

    first_ns: int  # the time of its first record
    truth: dict[int, Truth | None]
    reaped: dict[tuple[int, int], int] | None
    procs: list[dict] = field(default_factory=list)
    summary: dict | None = None

    @property
    def complete(self) -> bool:
        return self.summary is not None and len(self.procs) >= self.summary["published"]

    def of(self, pid: int) -> dict | None:
        """Return the record of ``pid`` in this publish (None: not published)."""
        return next((r for r in self.procs if r["pid"] == pid), None)

    def top(self, key: str) -> dict:
        """Return the record first by ``key`` (its list's ranking key)."""
        return max(self.procs, key=lambda r: r[key])


#: Records further apart than this belong to different publishes (they are 1 s apart).
BURST_NS = 300_000_000


class Publishes:
    """The processes sampler's publishes as a consumer sees them, grouped per interval, with
    this test's /proc reads of the watched pids taken as each publish's first record
    arrives: a few ms after the sampler read /proc."""

    def __init__(self, bus: Bus, watch: tuple[int, ...] = (), reaps: bool = False) -> None:
        self.watch = list(watch)
        self.reaps = reaps
        self.sub = Subscription([PROCESS.event, PROCESSES.event], wait=False, tracefs=bus.tfs)
        self.got: list[Interval] = []

    def close(self) -> None:
        self.sub.close()

    def __enter__(self) -> Publishes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, records: list[Record]) -> None:
        for r in records:
            if r.event not in (PROCESS.event, PROCESSES.event):
                continue  # the tick records the subscription adds
            cur = self.got[-1] if self.got else None
            if cur is None or r.time_ns - cur.first_ns > BURST_NS:
                cur = Interval(r.time_ns, {p: Truth.read(p) for p in self.watch},
                               reaped_so_far() if self.reaps else None)
                self.got.append(cur)
            if r.event == PROCESSES.event:
                cur.summary = r.fields
            else:
                cur.procs.append(r.fields)

    def complete(self) -> list[Interval]:
        """Return the publishes received whole so far."""
        self._take(self.sub.poll(200))
        return [i for i in self.got if i.complete]

    def until(self, cond: Callable[[list[Interval]], object], what: str,
              timeout: float = 60) -> list[Interval]:
        """Return the whole publishes once ``cond`` holds for them."""
        wait_for(lambda: cond(self.complete()), timeout=timeout, step=0, what=what,
                 seen=lambda: [(i.first_ns, sorted((r["comm"], r["pid"]) for r in i.procs))
                               for i in self.got[-3:]])
        return self.complete()

    def after(self, t_ns: int, n: int, timeout: float = 60) -> list[Interval]:
        """Return the first ``n`` whole publishes whose first record is after ``t_ns``."""
        later = self.until(lambda ivs: len([i for i in ivs if i.first_ns > t_ns]) >= n,
                           f"{n} publishes after {t_ns}", timeout)
        return [i for i in later if i.first_ns > t_ns][:n]


def near(got: float, want: float, within: float = WITHIN) -> bool:
    return abs(got - want) <= within * want


@pytest.fixture(scope="module")
def agent(bus: Bus) -> Iterator[AgentProcess]:
    """The installed CLI, the shipped config, as root (the default drop after start-up)."""
    if not CLI.exists():
        pytest.skip(f"{CLI} is not installed (run scripts/setup.sh)")
    a = AgentProcess("run", "--config", str(CONFIG), command=(str(CLI),))
    try:
        def started() -> bool:
            return (running(a.proc, a.output, "agent") and "publishing " in a.output()
                    and {CPU_USAGE.name, AGENT.name, PROCESS.event} <= bus.registered())

        wait_for(started, timeout=600, step=0.2, what="the agent to publish its events",
                 seen=lambda: (a.output(), threads_of(a.proc.pid)))
        yield a
    finally:
        a.stop()
        a.log.close()


def test_a_cpu_hog_tops_the_cpu_list_with_the_cpu_time_the_kernel_counts(
        agent: AgentProcess, bus: Bus) -> None:
    # More threads than CPUs: on top of anything else busy (CI's emulated VM runs beside
    # these tests and keeps a CPU busy), so it is first by a margin.
    with workload("cpu", "rzt_cpu", (os.cpu_count() or 1) + 1) as hog:
        assert hog.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        with Publishes(bus, (hog.pid,)) as pub:
            def listed(ivs: list[Interval]) -> list[Interval]:
                """The publishes since the hog was first listed, once there are 4 and it
                is first in the latest."""
                at = next((k for k, i in enumerate(ivs) if i.of(hog.pid) is not None), None)
                seen = [] if at is None else ivs[at:]
                return seen if len(seen) >= 4 and seen[-1].of(hog.pid) is seen[-1].top(
                    "cpu_interval_ns") else []

            ivs = wait_for(lambda: listed(pub.complete()), timeout=60, step=0,
                           what="the hog first by cpu_interval_ns, in 4 publishes")
    assert isinstance(ivs, list)
    first, last = ivs[0], ivs[-1]
    rec, truth = last.of(hog.pid), last.truth[hog.pid]
    assert rec is not None and truth is not None
    assert (rec["comm"], rec["user"], rec["threads"]) == ("rzt_cpu", "root", truth.threads)
    assert rec["state"] in ("R", "S"), rec  # between two hashes it may wait for the GIL
    assert abs(rec["start_ns"] - truth.start_ns) <= TICK_NS, (rec, truth)
    # Cumulative: the kernel's count read a few ms after the sampler's.
    assert near(rec["cpu_user_ns"] + rec["cpu_system_ns"], truth.cpu_ns), (rec, truth)
    # Every publish since listed it (a CPU-bound process stays on the list).
    assert all(i.of(hog.pid) is not None for i in ivs), [i.procs for i in ivs]
    # Per interval: the hog's time on CPU between the first publish and the last, to the
    # ns, against the sum of the intervals' figures over the same span.
    ran = truth.run_ns - first.truth[hog.pid].run_ns  # type: ignore[union-attr]
    summed = sum(i.of(hog.pid)["cpu_interval_ns"] for i in ivs[1:])  # type: ignore[index]
    assert ran > 0 and near(summed, ran), (summed, ran, [i.of(hog.pid) for i in ivs])


def test_a_memory_hog_tops_the_rss_list_with_its_resident_set(
        agent: AgentProcess, bus: Bus) -> None:
    # Larger than any other process here (CI's emulated VM runs beside these tests).
    size_mib = max(512, largest_rss() * 5 // 4 // MIB + 64)
    available = meminfo("MemAvailable")
    if size_mib * MIB > available // 2:
        pytest.skip(f"{size_mib} MiB, more than the largest process, is over half of the"
                    f" {available // MIB} MiB available")
    with workload("memory", "rzt_memory", size_mib) as hog:
        touched = int(hog.stdout.readline())  # type: ignore[union-attr]
        assert touched == size_mib * MIB
        with Publishes(bus, (hog.pid,)) as pub:
            ivs = pub.until(lambda ivs: any(i.of(hog.pid) is i.top("rss_bytes") for i in ivs),
                            "the memory hog first by rss_bytes")
    last = next(i for i in reversed(ivs) if i.of(hog.pid) is i.top("rss_bytes"))
    rec, truth = last.of(hog.pid), last.truth[hog.pid]
    assert rec is not None and truth is not None
    assert rec["comm"] == "rzt_memory" and rec["state"] == "S", rec
    assert touched <= rec["rss_bytes"] and near(rec["rss_bytes"], touched), (rec, touched)
    assert near(rec["rss_bytes"], truth.rss_bytes), (rec, truth)
    # Asleep on its stdin: its switches do not move between the two reads.
    assert near(rec["ctx_voluntary"], truth.voluntary), (rec, truth)
    assert near(rec["ctx_involuntary"], truth.involuntary), (rec, truth)


def mount_of(path: Path) -> tuple[str, str]:
    """Return (mount point, filesystem type) of the mount holding ``path``."""
    best = ("", "")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        point = left.split()[4].replace("\\040", " ")
        inside = path == Path(point) or Path(point) in path.parents
        if inside and len(point) >= len(best[0]):
            best = (point, right.split()[0])
    return best


def disk_backed(candidates: list[Path]) -> tuple[Path, str] | None:
    """Return the first writable candidate not on a memory filesystem, and its type."""
    for c in candidates:
        c = c.resolve()
        _point, fstype = mount_of(c)
        if c.is_dir() and os.access(c, os.W_OK) and fstype not in MEMORY_FS:
            return c, fstype
    return None


def test_an_io_writer_tops_the_io_list_with_the_bytes_it_wrote(
        agent: AgentProcess, bus: Bus, tmp_path: Path) -> None:
    size_mib = 64
    found = disk_backed([tmp_path, Path("/var/tmp"), ROOT])
    if found is None:
        pytest.skip("no writable directory on a disk-backed filesystem: write_bytes does"
                    " not count writes to tmpfs")
    where, fstype = found
    target = where / f"rezolus-processes-io-{os.getpid()}"
    try:
        with workload("io", "rzt_io", target, size_mib) as writer, \
                Publishes(bus, (writer.pid,)) as pub:
            assert writer.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
            # Read by the sampler before it writes: its counters start at what it had.
            pub.after(time.monotonic_ns(), 2)
            writer.stdin.write("go\n")  # type: ignore[union-attr]
            writer.stdin.flush()  # type: ignore[union-attr]
            read, wrote = map(int, writer.stdout.readline().split())  # type: ignore[union-attr]
            if not near(wrote, size_mib * MIB):
                pytest.skip(f"{fstype} at {where} counted {wrote} bytes of {size_mib} MiB"
                            " written and fsynced in write_bytes")
            pub.after(time.monotonic_ns(), 2)
            ivs = [i for i in pub.got if i.complete and i.of(writer.pid) is not None]
    finally:
        target.unlink(missing_ok=True)
    recs = [i.of(writer.pid) for i in ivs]
    assert any(i.of(writer.pid) is i.top("io_interval_bytes") for i in ivs), recs
    assert all(r["comm"] == "rzt_io" for r in recs), recs  # type: ignore[index]
    assert near(max(r["io_write_bytes"] for r in recs), wrote), (recs, wrote)  # type: ignore[index]
    assert max(r["io_read_bytes"] for r in recs) <= read + WITHIN * wrote, recs  # type: ignore[index]
    summed = sum(r["io_interval_bytes"] for r in recs)  # type: ignore[index]
    assert near(summed, read + wrote), (summed, read, wrote, recs)


def test_a_process_reaped_between_samples_is_not_reported_alive(
        agent: AgentProcess, bus: Bus) -> None:
    with Publishes(bus) as pub:
        with workload("cpu", "rzt_exit", 1) as hog:
            assert hog.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
            ivs = pub.until(lambda ivs: any(i.of(hog.pid) for i in ivs),
                            "the hog listed")
            rec = next(r for i in ivs if (r := i.of(hog.pid)) is not None)
            key = (hog.pid, rec["start_ns"])
            hog.kill()
            hog.wait(timeout=scaled(30))
            reaped_ns = time.monotonic_ns()
        # The first publish after the reap may have read /proc before it: the next two not.
        later = pub.after(reaped_ns, 3)[1:]
    again = [r for i in later for r in i.procs if (r["pid"], r["start_ns"]) == key]
    assert not again, again


def reaped(child: subprocess.Popen) -> tuple[int, int]:
    """Reap ``child``; return (its CPU time and its reaped children's, in ns: what its
    parent's cutime and cstime grow by; the time of the reap)."""
    _pid, status, usage = os.wait4(child.pid, 0)
    at = time.monotonic_ns()
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0
    return round((usage.ru_utime + usage.ru_stime) * 1e9), at


def reaped_by_others(a: Interval, b: Interval, ours: set[int]) -> int:
    """Return the CPU of the children that processes other than ``ours`` reaped between
    publishes ``a`` and ``b``, as this test read /proc when each arrived."""
    assert a.reaped is not None and b.reaped is not None
    return sum(max(0, v - a.reaped[k]) for k, v in b.reaped.items()
               if k in a.reaped and k[0] not in ours)


#: What ``exited_cpu`` runs: (the CPU it reaped, when, the pids whose reaps those are).
Reaping = Callable[[], tuple[int, int, set[int]]]


def exited_cpu(pub: Publishes, run: Reaping) -> None:
    """Check that rezolus_processes.exited_cpu_ns grows by the CPU ``run`` reaped, beside
    what other processes reaped meanwhile (the summary counts every reap on the host; this
    test reads every process's cutime and cstime as each publish arrives).

    A reap by another process between the sampler's read and this test's lands in a
    different interval for each: the check is tried again on a miss."""
    tries = []
    for _ in range(TRIES):
        before = pub.until(lambda ivs: bool(ivs), "a publish")[-1]
        truth, reaped_ns, pids = run()
        # Of the two publishes after the reap, the first may have read /proc before it;
        # the second did not.
        after = pub.after(reaped_ns, 2)[1]
        got = after.summary["exited_cpu_ns"] - before.summary["exited_cpu_ns"]  # type: ignore[index]
        others = reaped_by_others(before, after, {os.getpid(), *pids})
        tries.append((got, truth, others))
        if near(got - others, truth):
            return
    pytest.fail(f"exited_cpu_ns did not grow by the CPU reaped (+-10%), beside what other"
                f" processes reaped, in any of {TRIES} tries: (got, truth, others): {tries}")


def test_a_child_reaped_between_samples_shows_in_exited_cpu_ns(
        agent: AgentProcess, bus: Bus) -> None:
    def run() -> tuple[int, int, set[int]]:
        with workload("burn", "rzt_burn", 1.0) as child:
            return (*reaped(child), {child.pid})

    with Publishes(bus, reaps=True) as pub:
        exited_cpu(pub, run)


def test_a_reaped_process_tree_counts_each_child_once(agent: AgentProcess, bus: Bus) -> None:
    """A child that reaped its own child, read by the sampler before and after: its
    parent's cutime then holds the grandchild's CPU a second time, which the summary
    must not count again."""
    with Publishes(bus, reaps=True) as pub:
        def run() -> tuple[int, int, set[int]]:
            with workload("tree", "rzt_tree", 0.5) as child:
                assert child.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
                pub.after(time.monotonic_ns(), 1)  # read with no reaped child yet
                child.stdin.write("go\n")  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
                assert child.stdout.readline().strip() == "reaped"  # type: ignore[union-attr]
                pub.after(time.monotonic_ns(), 1)  # read with its child reaped
                child.stdin.close()  # type: ignore[union-attr]
                return (*reaped(child), {child.pid})

        exited_cpu(pub, run)


def sampler_rows(sub: Subscription, out: list[dict]) -> list[dict]:
    """Collect the processes sampler's rezolus_agent_sampler records; return them."""
    out += [r.fields for r in sub.poll(200)
            if r.event == AGENT_SAMPLER.event and r.fields["sampler"] == SAMPLER]
    return out


def test_with_no_consumer_the_sampler_reads_nothing(agent: AgentProcess, bus: Bus) -> None:
    for family in (PROCESS, PROCESSES):
        assert not bus.consumers(family.event), f"another consumer has {family.event} enabled"
    idle, active = STATUS_CODES["idle"], STATUS_CODES["active"]
    with Subscription([AGENT_SAMPLER.event], wait=False, tracefs=bus.tfs) as sub:
        rows: list[dict] = []
        wait_for(lambda: len(sampler_rows(sub, rows)) >= 3, timeout=60, step=0,
                 what="3 rezolus_agent_sampler records of the processes sampler")
        assert {r["status"] for r in rows} == {idle}, rows
        assert len({r["refreshes"] for r in rows}) == 1, rows  # no sample, no publish
        calls = rows[-1]["refreshes"]
        with Publishes(bus) as pub:
            pub.until(lambda ivs: len(ivs) >= 2, "2 publishes")
            rows.clear()
            wait_for(lambda: any(r["status"] == active and r["refreshes"] > calls
                                 for r in sampler_rows(sub, rows)), timeout=60, step=0)
        rows.clear()
        wait_for(lambda: any(r["status"] == idle for r in sampler_rows(sub, rows)),
                 timeout=60, step=0)
        rows.clear()
        wait_for(lambda: len(sampler_rows(sub, rows)) >= 3, timeout=60, step=0)
        assert {r["status"] for r in rows} == {idle}, rows
        assert len({r["refreshes"] for r in rows}) == 1, rows
