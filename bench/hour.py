"""One hour of every event at the shipped config: the recording the replay, Parquet-size and
view benchmarks measure, made the same way for each.

An hour of a real agent would take an hour to record, so it is synthesized from a short
real one: the installed agent at the shipped config (configs/default.toml) and
``rezolus-ue record --costly`` for ``--seconds``, or ``--from`` an existing recording. Its
whole publish intervals (the first, which the recorder joined mid-tick, and any not closed
by a tick record are left out) are repeated with shifted timestamps until ``--hour``
seconds of data time are filled, each with its tick record, one block per interval as the
recorder writes them at its default 1 s flush. Each repeat's counters start over, as after
an agent restart, and values repeat, so compressed sizes are somewhat smaller than a real
hour's would be.

Starting the agent touches tracefs, which is global: hold /tmp/rezolus-live.lock.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rezolus_ue.consume.intervals import EVENT, Interval, split  # noqa: E402
from rezolus_ue.consume.recording import read_meta, read_records  # noqa: E402
from rezolus_ue.consume.recording.native import NativeWriter  # noqa: E402

#: The config the agent ships with.
SHIPPED = ROOT / "configs" / "default.toml"


def cli() -> str:
    """Return the installed CLI beside this interpreter (scripts/setup.sh)."""
    return str(Path(sys.executable).parent / "rezolus-ue")


@contextlib.contextmanager
def agent(log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run the installed agent at the shipped config (output to ``log``) while inside;
    stop it on the way out, whatever happened."""
    with open(log, "wb") as f:
        p = subprocess.Popen([cli(), "run", "--config", str(SHIPPED)], stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield p
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def real_recording(out: Path, seconds: int) -> None:
    """Record every event for ``seconds`` with the installed agent at the shipped config."""
    with agent(out.with_suffix(".agent.log")):
        subprocess.run([cli(), "record", str(out), "--costly", "--duration", f"{seconds}s",
                        "--force"], check=True, capture_output=True, timeout=600 + seconds)


def whole_intervals(short: Path) -> list[Interval]:
    """Return ``short``'s whole publish intervals: closed by a tick record, after the first.
    A recording without tick records (made before the agent wrote them) gives its inferred
    intervals, the first and last left out."""
    ivs = [iv for iv in split(read_records(short)) if iv.records]
    exact = [iv for iv in ivs[1:] if iv.exact]
    whole = exact if len(exact) >= 2 else ivs[1:-1]
    if len(whole) < 2:
        raise SystemExit(f"{short}: fewer than two whole publish intervals; record longer")
    return whole


def hour_recording(short: Path, out: Path, seconds: int = 3600) -> tuple[int, int]:
    """Write ``out``: ``short``'s whole publish intervals repeated, timestamps shifted, until
    ``seconds`` of data time are filled; return (records, intervals) written."""
    ivs = whole_intervals(short)
    first, last = ivs[0].start_ns, ivs[-1].end_ns
    period = ivs[0].interval_ns or (last - first) // (len(ivs) - 1)
    span = (ivs[-1].end_ns - ivs[0].end_ns) + period  # the repeat starts a period on
    end = seconds * 10**9
    w = NativeWriter.create(out, read_meta(short), overwrite=True)
    records = intervals = 0
    try:
        for shift in range(0, end, span):
            for iv in ivs:
                if iv.start_ns - first + shift >= end:
                    break
                recs = [dataclasses.replace(r, time_ns=r.time_ns + shift) for r in iv.records]
                # Its tick record, as the agent writes it, numbered on through the hour.
                recs.append(dataclasses.replace(recs[-1], event=EVENT, time_ns=iv.end_ns + shift,
                                                fields={"seq": intervals, "interval_ns": period,
                                                        "records": len(iv.records)}))
                w.write_records(recs)
                records += len(recs)
                intervals += 1
    finally:
        w.close()
    return records, intervals


@dataclasses.dataclass(frozen=True)
class Hour:
    """The synthesized recording and what it holds."""

    path: Path
    records: int
    intervals: int
    seconds: int


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """Add the options that say how the hour is made (the same in every benchmark)."""
    ap.add_argument("--seconds", type=int, default=20,
                    help="the real recording's length (default 20)")
    ap.add_argument("--hour", type=int, default=3600,
                    help="seconds of data to synthesize (default 3600)")
    ap.add_argument("--from", dest="source", type=Path, metavar="SHORT",
                    help="synthesize from this recording instead of recording one")


def make(args: argparse.Namespace, tmp: Path) -> Hour:
    """Return the hour ``args`` asks for, written in ``tmp``; print what it holds."""
    short = args.source or tmp / "short.rzr"
    if args.source is None:
        real_recording(short, args.seconds)
    path = tmp / "hour.rzr"
    n, ivs = hour_recording(short, path, args.hour)
    what = (f"{short.name}" if args.source else
            f"{args.seconds} s recorded by the installed agent")
    print(f"recording: {args.hour} s of every event at the shipped config, synthesized from"
          f" {what}: {n} records, {ivs} intervals, {path.stat().st_size / 2**20:.1f} MiB",
          flush=True)
    return Hour(path, n, ivs, args.hour)
