"""The cost of the agent's tick record (``rezolus_interval``), per publish tick and per
record published, at the shipped config.

    .venv/bin/python bench/intervals.py            # sudo for every sampler
    .venv/bin/python bench/intervals.py -n 50

Every available sampler with the default options, bound to handles writing to /dev/null
(``collect.build_agent``: the agent's own cost, without the transport's), every event
enabled. Times publish ticks (``Agent.tick``, the tick record included) and the tick
record alone (``Agent._end_tick``: enable check, pack, write) enabled and disabled, all
in one run, and prints them per tick, per record published and as a ratio. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collect import NullHandle, build_agent, warm_up  # noqa: E402

from rezolus_ue.agent import TICK  # noqa: E402


class _Publisher:
    """The agent's publisher as far as its tick record needs one."""

    stats = None

    def __init__(self) -> None:
        self.handles = {TICK.name: NullHandle()}


def written(agent) -> int:  # type: ignore[no-untyped-def]
    """Return the records every sampler's handles wrote so far."""
    return sum(h.written for st in agent.states.values() if st.sampler is not None
               for h in st.sampler.handles.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200, help="publish ticks to time")
    ap.add_argument("--calls", type=int, default=100_000, help="tick records to time alone")
    args = ap.parse_args()
    agent, skipped = build_agent(None)
    pub = agent.publisher = _Publisher()  # type: ignore[assignment]
    tick_handle = pub.handles[TICK.name]
    warm_up(agent)
    ticks: list[int] = []
    before = written(agent)
    for _ in range(args.n):
        t0 = time.perf_counter_ns()
        agent.tick(time.monotonic_ns(), True)
        ticks.append(time.perf_counter_ns() - t0)
    per_tick = (written(agent) - before) / args.n

    def alone(enabled: bool) -> float:
        tick_handle.word.value = int(enabled)
        end = agent._end_tick
        best = []
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(args.calls):
                end()
            best.append((time.perf_counter_ns() - t0) / args.calls)
        return min(best)

    on, off = alone(True), alone(False)
    tick_ns = statistics.median(ticks)
    print(f"samplers: {sum(st.sampler is not None for st in agent.states.values())}"
          f" ({', '.join(sorted(skipped)) or 'none'} unavailable here)")
    print(f"records per publish tick: {per_tick:.0f}")
    print(f"publish tick, every event enabled: {tick_ns / 1e3:.1f} us median"
          f" ({tick_ns / max(per_tick, 1):.0f} ns per record)")
    print(f"tick record, enabled: {on:.0f} ns per tick, {on / max(per_tick, 1):.2f} ns per"
          f" record published ({100 * on / tick_ns:.3f}% of the tick)")
    print(f"tick record, disabled (enable-word check): {off:.0f} ns per tick")
    print(f"ratio publish tick with / without the tick record: {tick_ns / (tick_ns - on):.4f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
