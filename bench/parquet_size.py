"""Recording size per hour at the shipped config: native ``.rzr`` beside Parquet.

    sudo .venv/bin/python bench/parquet_size.py [--from RECORDING] [--seconds 6]

Without ``--from``, runs the installed agent at its shipped config and records every
event for ``--seconds`` (hold /tmp/rezolus-live.lock: tracefs is global). An hour is then
synthesized from that recording's publish intervals, repeated with shifted timestamps
(values repeat too, so counters' deltas compress somewhat better than real ones would),
and written in both formats. Rezolus's own recorder: its documentation gives no size per
hour (only that its 1800-row groups cost ~1.75x over larger ones), so none is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rezolus_ue.consume.intervals import Intervals
from rezolus_ue.consume.recording import read_records, write_recording
from rezolus_ue.consume.records import Record

HOUR_NS = 3600 * 10**9


def record_live(tmp: Path, seconds: int) -> Path:
    """Return a recording of ``seconds`` of every event of the installed agent."""
    cli = shutil.which("rezolus-ue") or str(Path(sys.executable).parent / "rezolus-ue")
    agent = subprocess.Popen([cli, "run"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        out = tmp / "live.rzr"
        subprocess.run([cli, "record", str(out), "--costly", "--duration", f"{seconds}s"],
                       check=True, timeout=300 + seconds)
        return out
    finally:
        agent.terminate()
        agent.wait(timeout=60)


def hour_of(records: list[Record]) -> list[Record]:
    """Return an hour of records: the recording's whole intervals, repeated."""
    iv = Intervals()
    closed = [i for r in records for i in iv.feed((r,))] + iv.flush()
    whole = [r for i in closed[1:-1] for r in i.records] or records
    span = (whole[-1].time_ns - whole[0].time_ns) or 10**9
    period = span + span // max(1, len(closed) - 3)
    out: list[Record] = []
    k = 0
    while k * period < HOUR_NS:
        out += [dataclasses.replace(r, time_ns=r.time_ns + k * period) for r in whole]
        k += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path, help="a recording to synthesize from")
    ap.add_argument("--seconds", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = args.source or record_live(tmp, args.seconds)
        hour = hour_of(list(read_records(src)))
        sizes = {}
        for fmt, name in (("native", "hour.rzr"), ("parquet", "hour.parquet")):
            t0 = time.perf_counter()
            write_recording(hour, tmp / name, fmt)
            sizes[fmt] = (tmp / name).stat().st_size, time.perf_counter() - t0
    print(f"records per hour (synthesized from {src.name}): {len(hour)}")
    for fmt, (size, secs) in sizes.items():
        print(f"{fmt} size per hour: {size / 2**20:.2f} MiB (written in {secs:.1f} s)")
    print(f"parquet / native: {sizes['parquet'][0] / sizes['native'][0]:.2f}x")
    print("Rezolus recorder size per hour: not given by its documentation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
