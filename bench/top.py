"""Cost of ``rezolus-ue top``: ingesting one interval's records, building the frame, drawing it.

    python bench/top.py [--frames 50] [--hosts 2:50,64:50,128:500,128:500:2000]
                        [--size 80x24,200x60] [--against [REV] [--rounds 5]] [--profile]

Builds realistic records (packed and decoded through the real schemas, as the subscription
delivers them) for a machine of N CPUs, M cgroups and P processes' records per tick
(``--hosts CPUS:CGROUPS[:PROCESSES]``; the goal is the 128-CPU, 500-cgroup Kubernetes
node, and with the process table fed 2,000 processes' records) with 4 disks, 4 interfaces,
12 sampler histograms and statuses (one unavailable) and PSI, and times per frame (median
over ``--frames``):

* ingest: the model's ``ingest`` + ``flush`` of one tick's records (rates, the frame);
* render: the screen's lines from the frame;
* draw: turning them into terminal output (truecolour, to an in-memory file) as top does
  (``AltScreen.update``).

At one frame per second the sum is top's CPU share of one core (plus the subscription's
decoding, measured with the consumer benchmarks). Prints figures; asserts nothing. Goal:
<= 20 ms a frame at 128 CPUs, 500 cgroups and 2,000 processes.

``--against REV`` measures before/after in one run: REV's ``rezolus_ue`` (checked out in a
temporary worktree; without REV, ``BEFORE``) and this tree's, each in a process of its own
running this script, alternated for ``--rounds`` rounds; prints each tree's fastest round
(the least disturbed by the machine's other work) and their ratio per row (a host with
processes only where REV has a process table).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The tree whose package is measured: this one, or a revision's (set by ``--against``).
TREE = Path(os.environ.get("REZOLUS_UE_BENCH_TREE", ROOT))
sys.path.insert(0, str(TREE))

#: The revision ``--against`` compares with by default: top as seven modules cut by
#: layer, before its split into a module per panel.
BEFORE = "34def48"

from rich.console import Console  # noqa: E402

from rezolus_ue import schema  # noqa: E402
from rezolus_ue.consume import top  # noqa: E402
from rezolus_ue.consume.records import Record  # noqa: E402
from rezolus_ue.metrics import h2  # noqa: E402
from rezolus_ue.metrics.family import histogram_records  # noqa: E402


def _layout() -> tuple[Callable[[], Any], Callable[..., Any], type, Any]:
    """Return this tree's top as (new model, render the screen's lines, UiState, the
    processes sampler's declarations or None): a module per panel, or the layers before."""
    try:
        from rezolus_ue.consume.top import registry, screen  # type: ignore[attr-defined]
        from rezolus_ue.consume.top.keys import UiState  # type: ignore[import-not-found]

        def model() -> Any:
            return registry.new_model(1.0, host="bench", kernel="6.8.0")

        import rezolus_ue.samplers.processes as procs

        return model, screen.render_screen, UiState, procs
    except ImportError:
        from rezolus_ue.consume.top_keys import UiState  # type: ignore[no-redef]
        from rezolus_ue.consume.top_model import Model  # type: ignore[import-not-found]

        from rezolus_ue.consume import top_render  # type: ignore[attr-defined]

        def model() -> Any:
            return Model(1.0, host="bench", kernel="6.8.0")

        return model, top_render.render_screen, UiState, None


new_model, render_screen, UiState, PROCESSES = _layout()

S = 1_000_000_000
EVENTS = schema.by_name()
SAMPLERS = ("cpu_usage", "cpu_softirq", "cpu_frequency", "scheduler", "memory", "blockio",
            "network", "network_protocol", "perf_software", "perf_hardware", "cgroup", "agent")
_STATES = "RSSSSSSDSI"


def _rec(event: str, t: int, *values: object) -> Record:
    sch = EVENTS[event]
    return Record(event, t, 0, 1, sch.unpack(sch.pack(*values)))


def _family_rec(family: Any, t: int, values: dict[str, object]) -> Record:
    sch = family.schema
    labels = {lb.name for lb in family.labels}
    row = [values.get(f.name, "" if f.name in labels else 0) for f in sch.fields]
    return Record(sch.name, t, 0, 1, sch.unpack(sch.pack(*row)))


def processes(i: int, n: int, t: int) -> list[Record]:
    """Return the processes sampler's records of tick ``i``: ``n`` processes and the
    summary (pid k busy k % 97 per cent of a CPU, its counters growing with ``i``)."""
    if PROCESSES is None or not n:
        return []
    out = []
    for k in range(1, n + 1):
        busy = k % 97 * S // 100
        out.append(_family_rec(PROCESSES.PROCESS, t, {
            "pid": 1000 + k, "comm": f"worker-{k % 40}", "user": f"user{k % 9}",
            "cgroup": f"kubepods.slice/pod-{k % 500}/cri-containerd-{k % 500}.scope",
            "state": _STATES[k % len(_STATES)], "start_ns": k * S,
            "cpu_user_ns": i * busy * 3 // 4, "cpu_system_ns": i * busy // 4,
            "cpu_interval_ns": busy, "rss_bytes": (k % 300 + 1) << 20,
            "io_read_bytes": i * k << 10, "io_write_bytes": i * k << 9,
            "io_interval_bytes": 3 * k << 9, "threads": k % 64 + 1,
            "ctx_voluntary": i * k, "ctx_involuntary": i * (k % 13)}))
    out.append(_family_rec(PROCESSES.PROCESSES, t, {
        "processes": n + 300, "running": 12, "sleeping": n + 250, "blocked": 2,
        "idle": 36, "threads": 8 * n, "forks": i * 40, "load_1m_milli": 3200,
        "load_5m_milli": 2900, "load_15m_milli": 2500, "exited_cpu_ns": i * S // 20,
        "published": n}))
    return out


def tick(ncpu: int, i: int, ncgroups: int = 50, nprocs: int = 0) -> list[Record]:
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
    return out + processes(i, nprocs, t)


def bench(ncpu: int, width: int, height: int, frames: int, ncgroups: int = 50,
          nprocs: int = 0, prof: object = None) -> dict[str, float]:
    """Return the median ms per frame of ingest, render and draw, and the records per tick
    (``prof``: a ``cProfile.Profile`` enabled over the frames only)."""
    ticks = [tick(ncpu, i, ncgroups, nprocs) for i in range(1, frames + 3)]
    model = new_model()
    model.ingest(ticks[0])
    model.flush()
    out = io.StringIO()
    console = Console(file=out, width=width, height=height, force_terminal=True,
                      color_system="truecolor", legacy_windows=False)
    live = top.AltScreen(console)
    live.__enter__()
    ui = UiState()
    t_ingest, t_render, t_draw = [], [], []
    if prof is not None:
        prof.enable()  # type: ignore[attr-defined]
    for recs in ticks[1:]:
        t0 = time.perf_counter()
        model.ingest(recs)
        model.flush()
        t1 = time.perf_counter()
        screen = render_screen(model, width, height, ui)
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


HEAD = (f"{'cpus':>5} {'cgroups':>7} {'procs':>5} {'size':>7} {'records':>8} {'ingest':>8}"
        f" {'render':>8} {'draw':>8} {'total':>8} {'CPU @1Hz':>9}")


def rows(hosts: list[tuple[int, ...]], sizes: list[tuple[int, int]],
         frames: int) -> list[str]:
    """Return the table's lines: one per host and screen size (hosts with processes only
    where this tree has a process table)."""
    out = []
    for ncpu, ncg, nproc in hosts:
        if nproc and PROCESSES is None:
            continue
        for w, h in sizes:
            r = bench(ncpu, w, h, frames, ncg, nproc)
            total = r["ingest"] + r["render"] + r["draw"]
            out.append(f"{ncpu:>5} {ncg:>7} {nproc:>5} {f'{w}x{h}':>7} {r['records']:>8}"
                       f" {r['ingest']:>6.2f}ms {r['render']:>6.2f}ms {r['draw']:>6.2f}ms"
                       f" {total:>6.2f}ms {total / 10:>8.2f}%")  # ms per 1000 ms, in %
            print(out[-1], flush=True)
    return out


def profile(ncpu: int, ncg: int, nproc: int, w: int, h: int, frames: int) -> None:
    """Print cProfile's costliest functions over ``frames`` frames."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    bench(ncpu, w, h, frames, ncg, nproc, prof)
    print(f"# cProfile, {ncpu} CPUs, {ncg} cgroups, {nproc} processes, {w}x{h}, {frames}"
          " frames")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def _key(line: str) -> str:
    """Return a row's host and size: what a row of the other tree is matched by."""
    return " ".join(line.split()[:4])


def _total(line: str) -> float:
    return float(re.findall(r"([\d.]+)ms", line)[-1])


def against(rev: str, argv: list[str], rounds: int) -> None:
    """Measure REV's package and this tree's alternately; print medians and ratios."""
    cmd = [sys.executable, __file__, *argv]
    with tempfile.TemporaryDirectory(prefix="rezolus-top-") as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                        str(tree), rev], check=True)
        got: dict[str, list[dict[str, str]]] = {rev: [], "this tree": []}
        try:
            for i in range(rounds):
                for label, t in ((rev, tree), ("this tree", ROOT)):
                    p = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                       env={**os.environ, "REZOLUS_UE_BENCH_TREE": str(t)})
                    got[label].append({_key(ln): ln for ln in p.stdout.splitlines()[1:]})
                    print(f"round {i + 1} {label} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tree)], check=False)
    # Each round's figure is a median over its frames; of the rounds, the least disturbed
    # by the machine's other work (the fastest) stands for each tree.
    print(f"# before ({rev}) / after (this tree), the fastest of {rounds} alternated rounds")
    print(f"{HEAD}  {'before':>8} {'ratio':>6}")
    for key, line in got["this tree"][0].items():
        a = min(_total(r[key]) for r in got["this tree"])
        was = [_total(r[key]) for r in got[rev] if key in r]
        b = min(was) if was else None
        tail = f"  {b:>6.2f}ms {a / b:>5.2f}x" if b else f"  {'-':>8} {'-':>6}"
        print(f"{line.rsplit(None, 2)[0]} {a:>6.2f}ms {a / 10:>8.2f}%{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--hosts", default="2:50,64:50,128:500,128:500:2000",
                    metavar="CPUS:CGROUPS[:PROCESSES],...")
    ap.add_argument("--size", default="80x24,200x60")
    ap.add_argument("--against", metavar="REV", nargs="?", const=BEFORE,
                    help=f"also measure git revision REV (default {BEFORE}), alternating,"
                    " and print ratios")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --against")
    ap.add_argument("--profile", action="store_true",
                    help="profile the last host and size instead of timing")
    args = ap.parse_args()
    hosts = [(*(int(x) for x in hc.split(":")), 0)[:3] for hc in args.hosts.split(",")]
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
