"""Cost of collecting: each sampler's refresh, the agent's CPU share, and node_exporter.

    python bench/collect.py [--seconds 20] [--no-node-exporter]

Runs on this host's real /proc and /sys. user_events is not needed: every sampler runs
as in the agent, with every event "enabled" and each record written with ``writev`` to
/dev/null (what a user_events write costs is measured by bench/publish.py). Prints figures;
asserts nothing. Targets: agent CPU <= 1% of one core with every procfs, sysfs,
netlink and perf sampler active at the default config, every event enabled (``_dist`` ones
too) at 100 ms sampling / 1 s publishing (the perf counters' ``oversample`` option is off by
default; a line with it on follows); <= 0.5x the CPU of prometheus-node-exporter serving
the same collectors (cpu, meminfo, diskstats, netdev) scraped at the same rate. The BPF
samplers' cost is printed too, apart (their targets are bench/overhead.py's).

The machine may be shared: the load average is printed before and after, and figures are
only comparable between runs at a similar load. On a 2-vCPU VM every read and parse costs
5-10x more right after the 100 ms sleep than back to back (cold caches), so the loop
sleeps as the agent does rather than running the work back to back.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rezolus_ue import config  # noqa: E402
from rezolus_ue.agent import Agent, SamplerState  # noqa: E402
from rezolus_ue.errors import RezolusError, SamplerUnavailable  # noqa: E402
from rezolus_ue.samplers import REGISTRY, Roots, SamplerContext, options  # noqa: E402
from rezolus_ue.samplers.bpf_sampler import BpfSampler  # noqa: E402

#: Our samplers that do what node_exporter's cpu, meminfo, diskstats and netdev do.
NODE_EQUIVALENT = ("cpu_usage", "memory", "blockio", "network")
NODE_COLLECTORS = ("cpu", "meminfo", "diskstats", "netdev")
#: The CPU target covers the samplers that read procfs, sysfs, netlink and perf counters
#: (not the BPF ones, measured by bench/overhead.py).
#: Samplers left out (comma-separated names): bench/revisions.py compares two revisions on
#: the samplers both have.
SKIP = set(filter(None, os.environ.get("REZOLUS_UE_BENCH_SKIP", "").split(",")))
PROCFS_SAMPLERS = tuple(n for n, cls in REGISTRY.items()
                        if not issubclass(cls, BpfSampler) and n not in SKIP)


class NullHandle:
    """An always-enabled event whose records go to /dev/null."""

    _null = os.open(os.devnull, os.O_WRONLY)
    _head = b"\0\0\0\0"

    def __init__(self) -> None:
        self.word = ctypes.c_uint32(1)
        self.written = 0

    @property
    def enabled(self) -> bool:
        return True

    def write(self, payload: bytes) -> bool:
        os.writev(self._null, (self._head, payload))
        self.written += 1
        return True


def cpu_seconds(pid: int | None = None) -> float:
    """Return the CPU seconds of a process (this one by default), to the nanosecond.

    /proc/<pid>/schedstat's first field is time on CPU in ns (all threads); the tick-based
    utime/stime of /proc/<pid>/stat are too coarse for a 1% share over a few seconds.
    """
    if pid is None:
        return time.process_time()
    try:  # every thread: node_exporter is a Go program with many
        return sum(int((t / "schedstat").read_text().split()[0])
                   for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build_agent(names: tuple[str, ...] | None, dist: bool = True,
                overrides: dict[str, dict[str, object]] | None = None,
                ) -> tuple[Agent, dict[str, str]]:
    """Return an agent with every available sampler bound to null handles.

    ``dist=False`` leaves the *_dist events disabled (what node_exporter offers has no
    distributions, so the comparison with it enables only the plain events).
    ``overrides`` sets sampler options over the defaults: {sampler: {option: value}}, the
    values as a config file writes them (e.g. ``"1s"``).
    """
    conf = config.defaults(options())
    for name, opts in (overrides or {}).items():
        declared = {o.key: o for o in REGISTRY[name].options}
        conf.samplers[name].update({k: declared[k].convert(v) for k, v in opts.items()})
    agent = Agent(conf, Path("/nonexistent"))
    skipped = {}
    for name, cls in REGISTRY.items():
        if names is not None and name not in names:
            continue
        ctx = SamplerContext(Roots(), conf.samplers[name], agent, agent.shared)
        s = cls(ctx)
        try:
            s.start()
        except (SamplerUnavailable, RezolusError, OSError) as e:
            skipped[name] = e.reason if isinstance(e, SamplerUnavailable) else str(e)
            continue
        handles = {e.name: NullHandle() for e in cls.events()}
        if not dist:
            for name_, h in handles.items():
                if name_.endswith("_dist"):
                    h.word.value = 0
        s.bind(handles)  # type: ignore[arg-type]
        agent.states[name] = SamplerState(name, s, "idle")
    return agent, skipped


def refresh_costs(agent: Agent, n: int = 100) -> dict[str, tuple[float, float]]:
    """Return per sampler the median µs of one sample() and of one publish()."""
    out = {}
    for name, st in agent.states.items():
        s = st.sampler
        assert s is not None
        samples, pubs = [], []
        for i in range(n):
            t0 = time.perf_counter_ns()
            s.sample(time.monotonic_ns())
            samples.append((time.perf_counter_ns() - t0) / 1000)
            if i % 10 == 9:
                t0 = time.perf_counter_ns()
                s.publish()
                pubs.append((time.perf_counter_ns() - t0) / 1000)
            time.sleep(0.001)
        out[name] = (statistics.median(samples), statistics.median(pubs))
    return out


def warm_up(agent: Agent, timeout: float = 120.0) -> None:
    """Tick until every sampler is active (BPF samplers load their programs in a thread)
    and caches are filled, so that a timed run shows the steady state only."""
    agent.tick(time.monotonic_ns(), True)
    end = time.monotonic() + timeout
    while threading.active_count() > 1 and time.monotonic() < end:
        time.sleep(0.05)  # the bench runs no thread of its own: these are loading BPF
        agent.tick(time.monotonic_ns(), False)
    agent.tick(time.monotonic_ns(), True)


def run_loop(agent: Agent, seconds: float, sample_s: float, publish_s: float) -> float:
    """Run the agent's tick schedule for ``seconds``; return its CPU share (% of a core)."""
    c0, t0 = cpu_seconds(), time.monotonic()
    next_pub = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        now = time.monotonic()
        publishing = now >= next_pub
        agent.tick(time.monotonic_ns(), publishing)
        if publishing:
            next_pub += publish_s
        wake = min(next_pub, now + sample_s)
        time.sleep(max(0.0, wake - time.monotonic()))
    return 100 * (cpu_seconds() - c0) / (time.monotonic() - t0)


def cpu_times() -> list[int]:
    """Return the machine's CPU time counters (the ``cpu`` line of /proc/stat, ticks)."""
    try:
        with open("/proc/stat", "rb") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def steal_since(before: list[int]) -> str:
    """Return the share of the machine's CPU time the hypervisor stole since ``before``
    (field 8 of /proc/stat's cpu line): a VM whose host is busy runs everything slower,
    the agent included, so the figures beside it are inflated."""
    after = cpu_times()
    if len(before) < 8 or len(after) < 8:
        return "steal: unknown"
    total = sum(after[:8]) - sum(before[:8])
    return f"hypervisor steal meanwhile: {100 * (after[7] - before[7]) / max(total, 1):.1f}%"


def load_average() -> str:
    """Return the 1-minute load average (the machine may be shared: it says how much)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def node_exporter(seconds: float, every: float) -> float | str:
    """Return node_exporter's CPU share (% of a core) scraped every ``every`` s."""
    import urllib.request  # here: ssl and http would add ~6 MB to every importer's RSS
    # (bench/memory.py --profiles measures the agent in a process importing this module)

    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        return "not installed (Debian: apt-get install prometheus-node-exporter)"
    addr = "127.0.0.1:9799"
    args = [exe, f"--web.listen-address={addr}", "--collector.disable-defaults",
            *(f"--collector.{c}" for c in NODE_COLLECTORS)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://{addr}/metrics"
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            return "did not start"
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        next_at = t0
        while time.monotonic() < t0 + seconds:
            urllib.request.urlopen(url, timeout=5).read()
            next_at += every
            time.sleep(max(0.0, next_at - time.monotonic()))
        return 100 * (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each timed run")
    ap.add_argument("--no-node-exporter", action="store_true", help="skip the comparison")
    args = ap.parse_args()
    print(f"# collect cost  ({platform.node()}, Linux {platform.release()},"
          f" {os.cpu_count()} CPUs, Python {platform.python_version()})")

    agent, skipped = build_agent(None)
    for name, why in skipped.items():
        print(f"{name:18s} unavailable: {why}")
    print(f"{'sampler':18s} {'sample µs':>10s} {'publish µs':>11s}   (median)")
    for name, (s_us, p_us) in refresh_costs(agent).items():
        print(f"{name:18s} {s_us:10.1f} {p_us:11.1f}")
    print(f"load average at start: {load_average()}")

    idle, _ = build_agent(None)
    for st in idle.states.values():
        for h in st.sampler.handles.values():  # type: ignore[union-attr]
            h.word.value = 0  # no consumer anywhere
    print(f"agent CPU, no consumer, 1 s ticks:   {run_loop(idle, args.seconds, 1.0, 1.0):.3f} %"
          " of a core   (no procfs read, no write)")
    idle.close()
    procfs, _ = build_agent(PROCFS_SAMPLERS)
    warm_up(procfs)
    # In chunks, each with the hypervisor's steal beside it: on a shared VM a burst of
    # steal (caches flushed by the neighbours) can multiply one chunk's figure.
    chunks = []
    for _ in range(4):
        t0 = cpu_times()
        chunks.append((run_loop(procfs, args.seconds / 4, 0.1, 1.0), steal_since(t0)))
    share = statistics.median(c for c, _ in chunks)
    print(f"agent CPU, procfs/sysfs/netlink/perf samplers, 100 ms sampling / 1 s publishing:"
          f" {share:.3f} % of a core   (target <= 1%; median of 4 chunks: "
          + ", ".join(f"{c:.3f}% ({st.removeprefix('hypervisor ')})" for c, st in chunks)
          + ")")
    over, _ = build_agent(PROCFS_SAMPLERS, overrides={
        "perf_software": {"oversample": True}, "perf_hardware": {"oversample": True}})
    warm_up(over)
    t0 = cpu_times()
    share_over = run_loop(over, args.seconds / 4, 0.1, 1.0)
    over.close()
    print(f"agent CPU, the same with perf counters oversampled too (oversample = true, not"
          f" the default): {share_over:.3f} % of a core   ({steal_since(t0)})")
    t0 = cpu_times()
    share1 = run_loop(procfs, args.seconds, 1.0, 1.0)
    print(f"agent CPU, the same, 1 s publishing, no oversampling:   {share1:.3f} % of a core"
          f"   ({steal_since(t0)})")
    procfs.close()
    warm_up(agent)
    every = run_loop(agent, args.seconds, 0.1, 1.0)
    print(f"agent CPU, every sampler (BPF ones too), 100 ms / 1 s:   {every:.3f} % of a core")
    agent.close()
    print(f"load average at end: {load_average()}")
    if args.no_node_exporter:
        return 0
    same, _ = build_agent(NODE_EQUIVALENT, dist=False)
    warm_up(same)
    ours = run_loop(same, args.seconds, 1.0, 1.0)
    theirs = node_exporter(args.seconds, 1.0)
    print(f"ours ({', '.join(NODE_EQUIVALENT)}) at 1 s:        {ours:.3f} % of a core")
    if isinstance(theirs, str):
        print(f"node_exporter: skipped: {theirs}")
        return 0
    print(f"node_exporter ({', '.join(NODE_COLLECTORS)}) scraped at 1 s: {theirs:.3f} % of a"
          " core")
    print(f"ratio ours / node_exporter: {ours / theirs:.2f}x   (target <= 0.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
