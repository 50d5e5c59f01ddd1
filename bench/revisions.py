"""The agent's collect cost at two git revisions, measured in one run, interleaved.

    python bench/revisions.py BEFORE AFTER [--rounds 3] [--seconds 10] [--publish NAMES]

Checks each revision out into a temporary worktree and runs *that revision's*
``bench/collect.py`` there, alternating BEFORE, AFTER, BEFORE, ... so that both see the
same machine load; prints each round's "agent CPU" figures and the medians with their
ratio (AFTER / BEFORE). A refactor that must not change the cost is within noise
when the ratio's spread across rounds covers 1.0. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The collect.py lines compared, by a short label.
LINES = {
    "procfs/sysfs/netlink/perf, 100 ms / 1 s": r"agent CPU, procfs/sysfs/netlink/perf samplers,"
                                               r" 100 ms sampling / 1 s publishing:\s*([\d.]+) %",
    "the same, 1 s publishing only": r"agent CPU, the same, 1 s publishing, no oversampling:"
                                     r"\s*([\d.]+) %",
    "every sampler (BPF too), 100 ms / 1 s": r"agent CPU, every sampler \(BPF ones too\),"
                                             r" 100 ms / 1 s:\s*([\d.]+) %",
}


def publish_lines(names: list[str]) -> dict[str, str]:
    """Return the patterns of the named samplers' median publish µs (collect.py's table)."""
    return {f"{n} publish µs": rf"(?m)^{re.escape(n)}\s+[\d.]+\s+([\d.]+)\s*$"
            for n in names}


def run_collect(tree: Path, seconds: float, skip: str,
                lines: dict[str, str]) -> dict[str, float]:
    """Run ``tree``'s bench/collect.py and return the compared figures (% of a core, or
    µs for a sampler's publish)."""
    p = subprocess.run([sys.executable, "bench/collect.py", "--seconds", str(seconds),
                        "--no-node-exporter"], cwd=tree, capture_output=True, text=True,
                       timeout=3600, env={**os.environ, "REZOLUS_UE_BENCH_SKIP": skip})
    if p.returncode != 0:
        raise SystemExit(f"bench/collect.py at {tree} failed:\n{p.stderr[-3000:]}")
    out = {}
    for label, pattern in lines.items():
        m = re.search(pattern, p.stdout)
        if m:
            out[label] = float(m.group(1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="git revision measured first in each round")
    ap.add_argument("after", help="git revision compared with it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", default="", metavar="NAMES",
                    help="samplers to leave out (comma-separated), e.g. one only AFTER has:"
                    " a revision that ignores it has no such sampler anyway")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="length of each timed loop in collect.py")
    ap.add_argument("--publish", default="", metavar="NAMES",
                    help="samplers whose median publish µs to compare too (comma-separated),"
                    " e.g. the BPF ones (their objects: REZOLUS_UE_BPF_OBJECTS)")
    args = ap.parse_args()
    lines = {**LINES, **publish_lines(list(filter(None, args.publish.split(","))))}
    with tempfile.TemporaryDirectory(prefix="rezolus-revs-") as tmp:
        trees = {}
        for rev in (args.before, args.after):
            tree = Path(tmp) / rev.replace("/", "_")
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                            str(tree), rev], check=True)
            trees[rev] = tree
        try:
            got: dict[str, list[dict[str, float]]] = {r: [] for r in trees}
            for i in range(args.rounds):
                for rev, tree in trees.items():
                    figures = run_collect(tree, args.seconds, args.skip, lines)
                    got[rev].append(figures)
                    shown = ", ".join(f"{k}: {v:.3f}" for k, v in figures.items())
                    print(f"round {i + 1} {rev:>12s}  {shown}", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tree)], check=False)
    print(f"\n# medians: agent CPU in % of one core, publish in µs ({args.rounds} interleaved"
          " rounds)")
    for label in lines:
        med = {r: statistics.median(f[label] for f in got[r] if label in f)
               for r in got if any(label in f for f in got[r])}
        if len(med) == 2 and med[args.before]:
            print(f"{label}: {args.before} {med[args.before]:.3f}  {args.after}"
                  f" {med[args.after]:.3f}  ratio {med[args.after] / med[args.before]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
