"""Enabling and closing the agent's events: what a consumer waits for at start and exit.

    sudo .venv/bin/python bench/uprobe_enable.py              # each transport this kernel has
    sudo .venv/bin/python bench/uprobe_enable.py --rounds 5
    sudo .venv/bin/python bench/uprobe_enable.py --vm BZIMAGE   # in a VM (6.12: both)

With the agent running (the installed CLI, shipped config, on each transport in turn), for
the first 1, the first 10 and every one of its events:

- ``perf record -e GROUP:EV1,... -a -- date``: wall time until its workload runs (perf
  starts it once every event samples) and after it (perf closes the events, writes its
  file), beside as many kernel tracepoints of a group this host does not use;
- perf_event_open as tail, top and the exporter call it (``TracepointRings.add``: one
  event per CPU into the CPU's ring, then enable), then close, timed per event and per
  step: the first CPU's open (the kernel registers the probe), each further CPU's, the
  enable, and the closes, the last CPU's of which unregisters the probe and waits for
  RCU grace periods; the same for the kernel tracepoints.

Prints figures and ratios measured in one run; asserts nothing. The VM emulates its CPU,
so there only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transports import available  # noqa: E402  (bench/ is sys.path[0] when run)
from vm import run_in_vm  # noqa: E402

from rezolus_ue.agent import read_status  # noqa: E402
from rezolus_ue.linux.perf_ring import RingEvent, TracepointRings  # noqa: E402
from rezolus_ue.linux.procfs import online_cpus  # noqa: E402
from rezolus_ue.publisher import GROUPS  # noqa: E402
from tracefs_tools import Tracefs, find_tracefs  # noqa: E402

CLI = Path(sys.executable).parent / "rezolus-ue"


#: Kernel tracepoint groups for the baseline: many events, none firing on a host without
#: that file system or hypervisor load (the first with enough events is taken).
BASELINE_GROUPS = ("xfs", "btrfs", "kvm")
#: Why a transport this kernel lacks has no row.
MISSING = {"user_events": "this kernel has no user_events (no user_events_data in tracefs)",
           "uprobe": "this kernel has no uprobe_events in tracefs"}


def idle(pid: int) -> bool:
    """Return True if agent ``pid`` publishes its status and no sampler is active (none
    loading or unloading BPF programs: no consumer, or none it has noticed)."""
    st = read_status()
    return bool(st) and st["pid"] == pid and all(
        s["status"] != "active" for s in st["samplers"].values())


@dataclass
class Phases:
    """Seconds spent per event in each step of opening and closing it on every CPU."""

    first_open: list[float] = field(default_factory=list)
    other_open: list[float] = field(default_factory=list)  # per further CPU
    enable: list[float] = field(default_factory=list)
    close_other: list[float] = field(default_factory=list)  # per CPU but the last
    close_last: list[float] = field(default_factory=list)
    close: list[float] = field(default_factory=list)  # every CPU
    add_total: list[float] = field(default_factory=list)  # first + others + enable


def open_all(rings: TracepointRings, ids: list[int], ph: Phases) -> tuple[float, float]:
    """Open and enable ``ids`` on every CPU as ``TracepointRings.add`` does, then close them
    as ``remove`` does, recording each step in ``ph``; return the (open, close) seconds."""
    held: list[list[RingEvent]] = []
    try:
        t_open = time.perf_counter()
        for tp in ids:
            events: list[RingEvent] = []
            held.append(events)
            t0 = time.perf_counter()
            for i, (cpu, owner) in enumerate(zip(rings.cpus, rings.owners, strict=True)):
                t = time.perf_counter()
                events.append(RingEvent.tracepoint(tp, cpu, -1, rings.sample_type,
                                                   clockid=rings.clockid, start=False,
                                                   output=owner))
                (ph.first_open if i == 0 else ph.other_open).append(time.perf_counter() - t)
            t = time.perf_counter()
            for ev in events:
                ev.enable()
            ph.enable.append(time.perf_counter() - t)
            ph.add_total.append(time.perf_counter() - t0)
        t_open = time.perf_counter() - t_open
        t_close = time.perf_counter()
        for events in held:
            t = time.perf_counter()
            while events:
                t1 = time.perf_counter()
                events.pop().close()
                (ph.close_other if events else ph.close_last).append(time.perf_counter() - t1)
            ph.close.append(time.perf_counter() - t)
        return t_open, time.perf_counter() - t_close
    finally:
        for events in held:
            while events:
                events.pop().close()


def perf_record(names: list[str]) -> tuple[float, float, float]:
    """Return the wall seconds of ``perf record -a`` on ``names`` around ``date``: until
    its workload runs (perf starts it once every event is enabled), after it (perf closes
    the events and writes its file), and in all."""
    with tempfile.TemporaryDirectory() as d:
        cmd = ["perf", "record", "-q", "-a", "-o", f"{d}/perf.data", "-e", ",".join(names),
               "--", "date", "+%s%N"]
        t0 = time.time_ns()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        t2 = time.time_ns()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ...: {p.stderr.strip()[-300:]}")
    t1 = int(p.stdout.split()[-1])
    return (t1 - t0) / 1e9, (t2 - t1) / 1e9, (t2 - t0) / 1e9


def baseline(tfs: Tracefs, n: int) -> tuple[str, list[str]] | None:
    """Return a kernel tracepoint group with ``n`` events and the names of ``n`` of them."""
    for group in BASELINE_GROUPS:
        if group in tfs.groups():
            names = sorted(tfs.events(group))
            if len(names) >= n:
                return group, [f"{group}:{e}" for e in names[:n]]
    return None


def ms(xs: list[float]) -> str:
    """Return the median of ``xs`` (seconds) in ms."""
    return f"{statistics.median(xs) * 1e3:8.2f}" if xs else "       -"


class Agent:
    """The installed agent on one transport, started and stopped by this process."""

    def __init__(self, tfs: Tracefs, transport: str) -> None:
        self.tfs, self.group = tfs, GROUPS[transport]
        text = (ROOT / "configs" / "default.toml").read_text()
        self.conf = Path(tempfile.mkdtemp()) / "bench.toml"
        self.conf.write_text(text.replace('transport = "auto"',
                                          f'transport = "{transport}"', 1))
        self.log = self.conf.with_name("agent.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str | None:
        """Start the agent; return None once its events are defined, else why not."""
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([str(CLI), "run", "--config", str(self.conf)],
                                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 300
        while "rezolus_agent" not in self.events() or not idle(self.proc.pid):
            if self.proc.poll() is not None:
                last = self.log.read_text(errors="replace").strip().splitlines()[-1:]
                return f"the agent exited: {last[0] if last else '?'}"
            if time.monotonic() > deadline:
                return "the agent did not define its events within 300 s"
            time.sleep(0.2)
        return None

    def events(self) -> list[str]:
        """Return the agent's events in tracefs, sorted."""
        if self.group not in self.tfs.groups():
            return []
        return sorted(e for e in self.tfs.events(self.group) if e.startswith("rezolus_"))

    def wait_settled(self, calm_s: float = 1.5) -> None:
        """Wait until the agent has reacted to the last consumer: every sampler idle again
        (BPF programs unloaded) for ``calm_s``, past a publish tick that notices a change."""
        deadline = time.monotonic() + 120
        since = None
        while self.proc is not None and time.monotonic() < deadline:
            if not idle(self.proc.pid):
                since = None
            elif since is None:
                since = time.monotonic()
            elif time.monotonic() - since >= calm_s:
                return
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the agent (SIGTERM: it deletes its events) and remove its config."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        shutil.rmtree(self.conf.parent, ignore_errors=True)


@dataclass
class Result:
    """One transport's timings, ours beside the kernel tracepoints' (``base``)."""

    group: str
    events: int
    cpus: int
    rounds: int
    base_group: str | None
    #: events -> per round (until the workload ran, after it, in all), perf record
    perf: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)
    perf_base: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)
    #: events -> per round (open + enable, close) of every event on every CPU
    rings: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    rings_base: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    phases: Phases = field(default_factory=Phases)
    phases_base: Phases = field(default_factory=Phases)
    #: per round, seconds to close every event from a thread each (all at once)
    threaded_close: list[float] = field(default_factory=list)


def measure(tfs: Tracefs, agent: Agent, rounds: int) -> Result:
    """Return the timings of one transport, its agent running; ours and the baseline's
    take turns, so drift hits both alike."""
    names = agent.events()
    base = baseline(tfs, len(names))
    res = Result(agent.group, len(names), len(online_cpus()), rounds,
                 base[0] if base else None)
    ids = [tfs.event_id(agent.group, e) for e in names]
    base_ids = [tfs.event_id(*n.split(":", 1)) for n in base[1]] if base else []
    counts = sorted({1, min(10, len(names)), len(names)})
    for _ in range(rounds):
        for n in counts:
            every = n == len(names)
            res.perf.setdefault(n, []).append(
                perf_record([f"{agent.group}:{e}" for e in names[:n]]))
            agent.wait_settled()
            with TracepointRings(ring_pages=8) as rings:
                res.rings.setdefault(n, []).append(
                    open_all(rings, ids[:n], res.phases if every else Phases()))
            agent.wait_settled()
            if every:
                res.threaded_close.append(close_threaded(ids))
                agent.wait_settled()
            if base:
                res.perf_base.setdefault(n, []).append(perf_record(base[1][:n]))
                with TracepointRings(ring_pages=8) as rings:
                    res.rings_base.setdefault(n, []).append(
                        open_all(rings, base_ids[:n], res.phases_base if every else Phases()))
    return res


def close_threaded(ids: list[int]) -> float:
    """Open ``ids`` on every CPU, then close them from a thread each at once; return the
    seconds the closes took (whether the kernel's unregistering overlaps)."""
    from concurrent.futures import ThreadPoolExecutor

    with TracepointRings(ring_pages=8) as rings:
        for i in ids:
            rings.add(i)
        t = time.perf_counter()
        with ThreadPoolExecutor(len(ids)) as pool:
            list(pool.map(rings.remove, ids))
        return time.perf_counter() - t


def _med(runs: list[tuple[float, ...]] | None, i: int) -> float | None:
    return statistics.median(r[i] for r in runs) if runs else None


def _s(x: float | None) -> str:
    return f"{x:9.3f}" if x is not None else f"{'-':>9s}"


def report(r: Result) -> None:
    """Print one transport's figures."""
    g = r.group
    print(f"\n{g}: {r.events} events, {r.cpus} CPUs, medians of {r.rounds} rounds; kernel:"
          + (f" as many {r.base_group}:* tracepoints" if r.base_group
             else " no tracepoint group (" + ", ".join(BASELINE_GROUPS) + ") big enough"))
    print(f"perf record -a, s{'events':>21s} {'sampling':>9s} {'teardown':>9s} {'total':>9s}"
          f" {'kernel':>9s} {'ratio':>6s}")
    for n, runs in r.perf.items():
        total, kernel = _med(runs, 2), _med(r.perf_base.get(n), 2)
        ratio = f"{total / kernel:5.1f}x" if total and kernel else f"{'-':>6s}"
        print(f"  {g}{n:>{36 - len(g)}d} {_s(_med(runs, 0))} {_s(_med(runs, 1))}"
              f" {_s(total)} {_s(kernel)} {ratio}")
    print(f"perf_event_open on every CPU, s{'events':>7s} {'open+en':>9s} {'close':>9s}"
          f" {'k open+en':>9s} {'k close':>9s}")
    for n, runs in r.rings.items():
        base = r.rings_base.get(n)
        print(f"  {g}{n:>{36 - len(g)}d} {_s(_med(runs, 0))} {_s(_med(runs, 1))}"
              f" {_s(_med(base, 0))} {_s(_med(base, 1))}")
    print(f"per event, ms (median of {r.events} events x {r.rounds} rounds)"
          f"{'ours':>9s} {'kernel':>9s}")
    ph, pb = r.phases, r.phases_base
    for label, a, b in (
            ("open, first CPU (registers the probe)", ph.first_open, pb.first_open),
            ("open, each further CPU", ph.other_open, pb.other_open),
            ("enable, every CPU", ph.enable, pb.enable),
            ("close, each CPU but the last", ph.close_other, pb.close_other),
            ("close, last CPU (unregisters: RCU grace periods)", ph.close_last,
             pb.close_last)):
        print(f"  {label:51s}{ms(a)} {ms(b)}")
    if ph.add_total and ph.close:
        print(f"{g} per event: open + enable {ms(ph.add_total).strip()} ms,"
              f" close {ms(ph.close).strip()} ms"
              + (f" (kernel tracepoint: {ms(pb.add_total).strip()} ms,"
                 f" {ms(pb.close).strip()} ms)" if pb.close else ""))
    if r.threaded_close and r.rings.get(r.events):
        print(f"{g} closing every event at once from {r.events} threads:"
              f" {statistics.median(r.threaded_close):.2f} s (one by one:"
              f" {_med(r.rings[r.events], 1):.2f} s)")
    every = r.perf.get(r.events)
    if every:
        print(f"{g} perf record -a, every event: sampling after {_med(every, 0):.2f} s,"
              f" teardown {_med(every, 1):.2f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per figure (median)")
    ap.add_argument("--vm", metavar="BZIMAGE", help="run inside a VM booted from this kernel")
    args = ap.parse_args()
    if args.vm:
        return run_in_vm(args.vm, "uprobe_enable.py", ["--rounds", str(args.rounds)])
    tfs = Tracefs(find_tracefs(mount=True))
    have = available(tfs)
    print(f"# uprobe_enable  ({platform.node()}, Linux {platform.release()},"
          f" {os.cpu_count()} CPUs, Python {platform.python_version()})")
    for transport in GROUPS:
        if transport not in have:
            print(f"{transport}: skipped: {MISSING[transport]}")
            continue
        agent = Agent(tfs, transport)
        try:
            why = agent.start()
            if why is not None:
                print(f"{transport}: skipped: {why}")
                continue
            report(measure(tfs, agent, args.rounds))
        finally:
            agent.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
