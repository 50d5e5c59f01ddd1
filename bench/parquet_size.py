"""Recording size per hour of every event at the shipped config: Parquet beside native.

    sudo .venv/bin/python bench/parquet_size.py [--seconds 20] [--hour 3600] [--from SHORT]

The hour is bench/hour.py's (hold /tmp/rezolus-live.lock unless ``--from``), as the
recorder writes it natively (``.rzr``, a block per 1 s flush); it is then converted to
Parquet as ``rezolus-ue dump --format parquet`` would. Sizes are scaled to an hour when
``--hour`` is shorter. Beside them, the size Rezolus's own recorder gives for an hour at
1 s: its maintainers measured one 300 s recording of both its formats on an idle 32-core
host (docs/journal/2026-08-27-rez-vs-parquet-read-path.md in iopsystems/rezolus: 7.6 MB
Parquet, 13.4 MB ``.rez``), not this host nor these events, so a scale, not a comparison.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hour

from rezolus_ue.consume.recording import read_meta, read_records, write_recording

#: Rezolus's own figures (see the docstring): seconds recorded, MB per format.
REZOLUS_SECONDS = 300
REZOLUS_MB = {"Parquet": 7.6, ".rez": 13.4}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    hour.add_arguments(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        h = hour.make(args, tmp)
        out = tmp / "hour.parquet"
        t0 = time.perf_counter()
        write_recording(read_records(h.path), out, "parquet", read_meta(h.path))
        took = time.perf_counter() - t0
        native, parquet = h.path.stat().st_size, out.stat().st_size
    per_hour = 3600 / h.seconds / 2**20
    print(f"records per hour: {h.records * 3600 // h.seconds}")
    print(f"native .rzr size per hour: {native * per_hour:.2f} MiB"
          f" ({native / h.records:.1f} bytes/record)")
    print(f"parquet size per hour: {parquet * per_hour:.2f} MiB"
          f" ({parquet / h.records:.1f} bytes/record; converted in {took:.1f} s)")
    print(f"parquet / native: {parquet / native:.2f}x")
    scale = 3600 / REZOLUS_SECONDS
    print("Rezolus recorder size per hour at 1 s (its own measurement, 32-core host, x"
          f"{scale:.0f}): " + ", ".join(f"{fmt} {mb * scale:.0f} MB"
                                       for fmt, mb in REZOLUS_MB.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
