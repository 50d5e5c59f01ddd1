"""Cost of ``rezolus-ue top``: ingesting one interval's records, building the frame, drawing it.

    python bench/top.py [--frames 50] [--hosts 2:50,64:50,128:500] [--size 80x24,200x60]
                        [--against REV [--rounds 3]] [--profile]

Builds realistic records (packed and decoded through the real schemas, as the subscription
delivers them) for a machine of N CPUs and M cgroups (``--hosts CPUS:CGROUPS``; the
goal is the 128-CPU, 500-cgroup Kubernetes node) with 4 disks, 4 interfaces, 12 sampler
histograms and statuses (one unavailable) and PSI, and times per frame (median over
``--frames``):

* ingest: ``Model.ingest`` + ``flush`` of one tick's records (rates, the frame commit);
* render: ``render()`` building the screen's ``Text``;
* draw: turning it into terminal output (truecolour, to an in-memory file) as top does:
  ``AltScreen.update`` (before it, rich's ``Live(screen=True).update(refresh=True)``).

At one frame per second the sum is top's CPU share of one core (plus the subscription's
decoding, measured with the consumer benchmarks). Prints figures; asserts nothing.

``--against REV`` measures before/after in one run: REV's ``rezolus_ue`` (checked out in a
temporary worktree) and this tree's, each in a process of its own running this script,
alternated for ``--rounds`` rounds; prints the medians and their ratio per row.
``--profile`` prints cProfile's costliest functions for the last host and size instead.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The tree whose package is measured: this one, or a revision's (set by ``--against``).
TREE = Path(os.environ.get("REZOLUS_UE_BENCH_TREE", ROOT))
sys.path.insert(0, str(TREE))

from rich.console import Console  # noqa: E402
from rich.live import Live  # noqa: E402

from rezolus_ue import schema  # noqa: E402
from rezolus_ue.consume import top, top_render  # noqa: E402
from rezolus_ue.consume.records import Record  # noqa: E402
from rezolus_ue.consume.top_keys import UiState  # noqa: E402
from rezolus_ue.consume.top_model import Model  # noqa: E402
from rezolus_ue.metrics import h2  # noqa: E402
from rezolus_ue.metrics.family import histogram_records  # noqa: E402

S = 1_000_000_000
EVENTS = schema.by_name()
SAMPLERS = ("cpu_usage", "cpu_softirq", "cpu_frequency", "scheduler", "memory", "blockio",
            "network", "network_protocol", "perf_software", "perf_hardware", "cgroup", "agent")


def _rec(event: str, t: int, *values: object) -> Record:
    sch = EVENTS[event]
    return Record(event, t, 0, 1, sch.unpack(sch.pack(*values)))


def tick(ncpu: int, i: int, ncgroups: int = 50) -> list[Record]:
    """Return the records of the agent's ``i``-th publish tick (counters grow with ``i``)."""
    t = i * S
    out = []
    for c in range(ncpu):
        busy = (c * 7 + i) % 10 / 10
        out.append(_rec("rezolus_cpu_usage", t, c, int(i * busy * 0.7 * S), 0,
                        int(i * busy * 0.3 * S), int(i * (1 - busy) * S), 0, 0, 0, 0,
                        int(busy * 1e6)))
        out.append(_rec("rezolus_cpu_usage_dist", t, c, "busy_ppm", 0, 0, 0, 0,
                        min(int(busy * 1.3e6), 1_000_000)))
    out.append(_rec("rezolus_scheduler", t, i * 50_000, i * 20, 4, 0))
    out.append(_rec("rezolus_memory", t, 64 << 30, 8 << 30, 40 << 30, 1 << 30, 24 << 30,
                    50 << 20, 0, 2 << 30, 8 << 30, 8 << 30))
    for d in range(4):
        out.append(_rec("rezolus_blockio_device", t, f"nvme{d}n1", i * 300, i * 500, 0,
                        i * 10, i * 300 * 4096, i * 500 * 16384, 0, i * 300 * 10**5,
                        i * 500 * 2 * 10**5, i * S // 3, 3))
    for n in range(4):
        out.append(_rec("rezolus_network_interface", t, f"eth{n}", i * 10**8, i * 5 * 10**7,
                        i * 70_000, i * 40_000, 0, 0, i, 0))
    for g in range(ncgroups):
        out.append(_rec("rezolus_cgroup", t, f"kubepods.slice/pod-{g}/cri-containerd-{g}.scope",
                        i * g * S // ncgroups, i * g * S // (2 * ncgroups),
                        i * g * S // (2 * ncgroups), 0, 0,
                        (g + 1) << 24, i * g << 16, i * g << 15, i * g, i * g))
    for k, res in enumerate(("cpu", "memory", "io")):
        out.append(_rec("rezolus_pressure", t, res, k * 10_000, 0, i * k * 50_000, 0))
    out.append(_rec("rezolus_agent", t, 1, i * S, i * S // 200, i * S // 400, 60 << 20, 20, 2,
                    i * 1000, 0, 0, 0, 12, 0))
    for k, name in enumerate(SAMPLERS):  # one unavailable, as on a VM without a PMU
        state, why = ("unavailable", "no PMU exposed by this CPU/VM") if k == 9 else (
            "active", "")
        out.append(_rec("rezolus_agent_status", t, name, state, why, "", 0))
    sch = EVENTS["rezolus_agent_sampler"]
    for k, name in enumerate(SAMPLERS):
        counts = h2.new_counts()
        h2.record(counts, [50 * (k + 1) + j * 13 for j in range(10)])
        for r in histogram_records(sch, (name,), (1, i * 10, 0), counts):
            out.append(Record(sch.name, t, 0, 1, sch.unpack(sch.pack(*r))))
    return out


def bench(ncpu: int, width: int, height: int, frames: int,
          ncgroups: int = 50, prof: object = None) -> dict[str, float]:
    """Return the median ms per frame of ingest, render and draw, and the records per tick
    (``prof``: a ``cProfile.Profile`` enabled over the frames only)."""
    ticks = [tick(ncpu, i, ncgroups) for i in range(1, frames + 3)]
    model = Model(1.0, host="bench", kernel="6.8.0")
    model.ingest(ticks[0])
    model.flush()
    out = io.StringIO()
    console = Console(file=out, width=width, height=height, force_terminal=True,
                      color_system="truecolor", legacy_windows=False)
    # The same path as the real screen: the revision's own.
    alt = getattr(top, "AltScreen", None)
    live = alt(console) if alt else Live(console=console, screen=True, auto_refresh=False,
                                         redirect_stdout=False, redirect_stderr=False)
    live.__enter__()
    ui = UiState()
    # What the live screen draws: its lines (a revision before them: the joined text).
    render = getattr(top_render, "render_screen", top_render.render)
    t_ingest, t_render, t_draw = [], [], []
    if prof is not None:
        prof.enable()  # type: ignore[attr-defined]
    for recs in ticks[1:]:
        t0 = time.perf_counter()
        model.ingest(recs)
        model.flush()
        t1 = time.perf_counter()
        screen = render(model, width, height, ui)
        t2 = time.perf_counter()
        live.update(screen, refresh=True)
        t3 = time.perf_counter()
        out.seek(0)
        out.truncate()
        t_ingest.append(t1 - t0)
        t_render.append(t2 - t1)
        t_draw.append(t3 - t2)
    if prof is not None:
        prof.disable()  # type: ignore[attr-defined]
    live.__exit__(None, None, None)
    return {"records": len(ticks[0]),
            "ingest": statistics.median(t_ingest) * 1e3,
            "render": statistics.median(t_render) * 1e3,
            "draw": statistics.median(t_draw) * 1e3}


HEAD = (f"{'cpus':>5} {'cgroups':>7} {'size':>7} {'records':>8} {'ingest':>8} {'render':>8}"
        f" {'draw':>8} {'total':>8} {'CPU @1Hz':>9}")


def rows(hosts: list[tuple[int, int]], sizes: list[tuple[int, int]],
         frames: int) -> list[str]:
    """Return the table's lines: one per host and screen size."""
    out = []
    for ncpu, ncg in hosts:
        for w, h in sizes:
            r = bench(ncpu, w, h, frames, ncg)
            total = r["ingest"] + r["render"] + r["draw"]
            out.append(f"{ncpu:>5} {ncg:>7} {f'{w}x{h}':>7} {r['records']:>8}"
                       f" {r['ingest']:>6.2f}ms {r['render']:>6.2f}ms {r['draw']:>6.2f}ms"
                       f" {total:>6.2f}ms {total / 10:>8.2f}%")  # ms per 1000 ms, in %
            print(out[-1], flush=True)
    return out


def profile(ncpu: int, ncg: int, w: int, h: int, frames: int) -> None:
    """Print cProfile's costliest functions over ``frames`` frames."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    bench(ncpu, w, h, frames, ncg, prof)
    print(f"# cProfile, {ncpu} CPUs, {ncg} cgroups, {w}x{h}, {frames} frames")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def against(rev: str, argv: list[str], rounds: int) -> None:
    """Measure REV's package and this tree's alternately; print medians and ratios."""
    cmd = [sys.executable, __file__, *argv]
    with tempfile.TemporaryDirectory(prefix="rezolus-top-") as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                        str(tree), rev], check=True)
        got: dict[str, list[list[str]]] = {rev: [], "this tree": []}
        try:
            for i in range(rounds):
                for label, t in ((rev, tree), ("this tree", ROOT)):
                    p = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                       env={**os.environ, "REZOLUS_UE_BENCH_TREE": str(t)})
                    got[label].append(p.stdout.splitlines()[1:])
                    print(f"round {i + 1} {label} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tree)], check=False)
    print(f"# before ({rev}) / after (this tree), medians of {rounds} alternated rounds")
    print(f"{HEAD}  {'before':>8} {'ratio':>6}")
    for k, line in enumerate(got["this tree"][0]):
        def total(label: str, k: int = k) -> float:
            return statistics.median(float(re.findall(r"([\d.]+)ms", r[k])[-1])
                                     for r in got[label])
        b, a = total(rev), total("this tree")
        print(f"{line.rsplit(None, 2)[0]} {a:>6.2f}ms {a / 10:>8.2f}%  {b:>6.2f}ms"
              f" {a / b:>5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--hosts", default="2:50,64:50,128:500", metavar="CPUS:CGROUPS,...")
    ap.add_argument("--size", default="80x24,200x60")
    ap.add_argument("--against", metavar="REV",
                    help="also measure git revision REV, alternating, and print ratios")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --against")
    ap.add_argument("--profile", action="store_true",
                    help="profile the last host and size instead of timing")
    args = ap.parse_args()
    hosts = [tuple(int(x) for x in hc.split(":")) for hc in args.hosts.split(",")]
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.size.split(",")]
    if args.against:
        against(args.against, ["--frames", str(args.frames), "--hosts", args.hosts,
                               "--size", args.size], args.rounds)
    elif args.profile:
        profile(*hosts[-1], *sizes[-1], args.frames)
    else:
        print(HEAD)
        rows(hosts, sizes, args.frames)


if __name__ == "__main__":
    main()
