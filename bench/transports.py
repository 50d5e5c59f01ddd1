"""The two transports side by side: per-event cost, and the agent's CPU on each.

    sudo .venv/bin/python bench/transports.py                 # the transports this kernel has
    sudo .venv/bin/python bench/transports.py --vm BZIMAGE    # inside a VM (6.12: both)

Per event, for ``user_events`` and ``uprobe`` in the same process, taking turns: the
disabled check (one read of the enable word / reference counter), and an enabled emit of a
scalar event (rezolus_cpu_usage's fields) and of a histogram event (20 non-zero buckets:
the uprobe transport turns them into text), with a private ftrace instance as the consumer.
Then the agent itself: the installed CLI with the shipped config on each transport, 1 s
publishing, `perf record -e 'GROUP:rezolus_*'` consuming every event, CPU share over
``--seconds``, transports interleaved over ``--rounds``.

Prints figures and ratios (uprobe / user_events) measured in one run; asserts nothing.
The VM emulates its CPU, so there only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from collect import cpu_seconds  # noqa: E402  (bench/ is sys.path[0] when run)
from publish import per_op_ns  # noqa: E402
from vm import run_in_vm  # noqa: E402

from rezolus_ue.metrics import h2  # noqa: E402
from rezolus_ue.metrics.family import histogram_records  # noqa: E402
from rezolus_ue.publisher import GROUPS, open_publisher  # noqa: E402
from rezolus_ue.schema import CPU_USAGE, by_name  # noqa: E402
from tracefs_tools import Tracefs, find_tracefs  # noqa: E402

CLI = Path(sys.executable).parent / "rezolus-ue"
#: Bench copies of two events, so a running agent's definitions are not disturbed.
SCALAR = replace(CPU_USAGE, name="rezolus_bench_scalar")
HIST = replace(by_name()["rezolus_scheduler_runqueue_latency"], name="rezolus_bench_hist")


def available(tfs: Tracefs) -> list[str]:
    """Return the transports this kernel has (and whose set-up is in place)."""
    out = []
    if tfs.has_user_events:
        out.append("user_events")
    if tfs.has_uprobe_events:
        out.append("uprobe")
    return out


def payloads() -> tuple[bytes, bytes]:
    """Return a scalar and a histogram payload, as the samplers pack them."""
    scalar = SCALAR.pack(1, *(1_000_000 * (i + 1) for i in range(len(SCALAR.fields) - 1)))
    counts = np.zeros(h2.BUCKETS, dtype=np.uint64)
    counts[60:80] = np.arange(1, 21, dtype=np.uint64) * 1000
    (rec,) = histogram_records(HIST, (), (1_000_000_000,), counts)
    return scalar, HIST.pack(*rec)


def per_event(tfs: Tracefs, transports: list[str], n: int) -> dict[str, dict[str, float]]:
    """Return, per transport, ns per disabled check and per enabled emit."""
    pubs = {t: open_publisher(tfs.root, t) for t in transports}
    inst = f"rezolus_bench_{os.getpid()}"
    scalar, hist = payloads()
    try:
        handles = {t: p.register([SCALAR, HIST]) for t, p in pubs.items()}
        fns = {}
        for t, hs in handles.items():
            word = hs[SCALAR.name].word

            def check(k: int, word=word) -> None:
                for _ in range(k):
                    if word.value:
                        raise AssertionError("enabled")

            fns[f"{t} disabled check"] = check
        disabled = per_op_ns(fns, n)
        tfs.create_instance(inst)
        try:
            for t in transports:
                for s in (SCALAR, HIST):
                    tfs.enable(GROUPS[t], s.name, instance=inst)
            fns = {}
            for t, hs in handles.items():
                assert hs[SCALAR.name].enabled and hs[HIST.name].enabled, t
                ws, wh = hs[SCALAR.name].write, hs[HIST.name].write

                def emit_scalar(k: int, w=ws) -> None:
                    for _ in range(k):
                        w(scalar)

                def emit_hist(k: int, w=wh) -> None:
                    for _ in range(k):
                        w(hist)

                fns[f"{t} enabled emit, scalar event"] = emit_scalar
                fns[f"{t} enabled emit, histogram event"] = emit_hist
            enabled = per_op_ns(fns, max(n // 20, 500))
        finally:
            for t in transports:
                for s in (SCALAR, HIST):
                    tfs.disable(GROUPS[t], s.name, instance=inst)
            tfs.remove_instance(inst)
    finally:
        for p in pubs.values():
            p.close()
    return {"disabled": disabled, "enabled": enabled}


def settled() -> bool:
    """Return True once the running agent's samplers are active (or cannot run) and none
    is still loading its BPF programs."""
    from rezolus_ue.agent import read_status

    st = read_status()
    if not st:
        return False
    return all(s["status"] in ("unavailable", "disabled") or (
        s["status"] == "active" and not (s.get("reason") or "").startswith("loading:"))
        for s in st["samplers"].values())


def agent_cpu(tfs: Tracefs, transport: str, seconds: float) -> float | str:
    """Return the agent's CPU share (% of a core) with perf consuming every event."""
    text = (ROOT / "configs" / "default.toml").read_text()
    conf = Path(tempfile.mkdtemp()) / "bench.toml"
    conf.write_text(text.replace('transport = "auto"', f'transport = "{transport}"', 1))
    group = GROUPS[transport]
    agent = subprocess.Popen([str(CLI), "run", "--config", str(conf)], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    perf = None
    try:
        deadline = time.monotonic() + 300
        while not tfs.event_exists(group, "rezolus_agent"):
            if agent.poll() is not None or time.monotonic() > deadline:
                return f"the agent did not start on {transport}"
            time.sleep(0.2)
        perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{group}:rezolus_*", "-a",
                                 "-o", "/dev/null", "--", "sleep", str(seconds + 600)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        # Every sampler active and its BPF loaded (minutes under the VM's emulated CPU),
        # then two more intervals: start-up is not what is measured.
        while not settled():
            if agent.poll() is not None or time.monotonic() > deadline + 600:
                return f"the agent did not settle on {transport}"
            time.sleep(0.5)
        time.sleep(2.0)
        c0, t0 = cpu_seconds(agent.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(agent.pid), time.monotonic()
        return 100 * (c1 - c0) / (t1 - t0)
    finally:
        if perf is not None:
            os.killpg(perf.pid, signal.SIGINT)
            perf.wait(timeout=120)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vm", metavar="BZIMAGE", help="run inside a VM booted from this kernel")
    ap.add_argument("-n", type=int, default=100_000, help="disabled checks per timed run")
    ap.add_argument("--seconds", type=float, default=20.0, help="agent CPU window")
    ap.add_argument("--rounds", type=int, default=2, help="agent CPU rounds per transport")
    args = ap.parse_args()
    if args.vm:
        return run_in_vm(args.vm, "transports.py", ["-n", str(args.n), "--seconds",
                                                    str(args.seconds), "--rounds",
                                                    str(args.rounds)])
    tfs = Tracefs(find_tracefs(mount=True))
    transports = available(tfs)
    print(f"# transports  ({platform.node()}, Linux {platform.release()},"
          f" Python {platform.python_version()}, n={args.n}): {', '.join(transports)}")
    if not transports:
        print("no transport on this kernel")
        return 0
    res = per_event(tfs, transports, args.n)
    for k, v in {**res["disabled"], **res["enabled"]}.items():
        print(f"{k:45s} {v:10.1f} ns")
    if len(transports) == 2:
        for what in ("disabled check", "enabled emit, scalar event",
                     "enabled emit, histogram event"):
            key = "disabled" if what == "disabled check" else "enabled"
            r = res[key][f"uprobe {what}"] / res[key][f"user_events {what}"]
            print(f"ratio uprobe / user_events, {what:30s} {r:6.2f} x")
    cpu: dict[str, list[float]] = {t: [] for t in transports}
    for _ in range(args.rounds):
        for t in transports:
            v = agent_cpu(tfs, t, args.seconds)
            if isinstance(v, str):
                print(f"agent CPU on {t}: {v}")
                return 0
            cpu[t].append(v)
    for t, vs in cpu.items():
        print(f"agent CPU, shipped config, perf consuming every event, {t}:"
              f" {statistics.median(vs):6.3f} % of a core (rounds: "
              f"{', '.join(f'{v:.3f}' for v in vs)})")
    if len(transports) == 2 and min(cpu["user_events"]) > 0:
        r = statistics.median(cpu["uprobe"]) / statistics.median(cpu["user_events"])
        print(f"ratio agent CPU uprobe / user_events {r:6.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
