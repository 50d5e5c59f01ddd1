"""Replay speed: ``top --from`` and ``tail --from`` on a one-hour recording of every event.

    sudo python bench/replay.py [--seconds 20] [--hour 3600] [--from SHORT.rzr]

The hour is synthesized from a short real recording: the installed agent at the shipped
config (configs/default.toml) and ``rezolus-ue record --costly`` for ``--seconds`` (or
``--from`` an existing one), its publish intervals repeated with shifted timestamps until
``--hour`` seconds are filled (``hour_recording``; each repeat's counters start over, as
after an agent restart). Then, in one run:

* ``top --from``: top's replay loop (``replay_loop``) at full speed from the first interval
  to the last, drawing a 200x60 screen as it goes (into memory): records per second, the
  index's compressed size and the process's peak RSS, and one seek back 30 minutes;
* ``tail --from``: the installed CLI printing every record to /dev/null.

``hour_recording`` is what ``bench/view.py`` may call for its own line. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rezolus_ue.consume.intervals import EVENT, split  # noqa: E402
from rezolus_ue.consume.recording import read_meta, read_records  # noqa: E402
from rezolus_ue.consume.recording.native import NativeWriter  # noqa: E402


def cli() -> str:
    """Return the installed CLI beside this interpreter (scripts/setup.sh)."""
    return str(Path(sys.executable).parent / "rezolus-ue")


def real_recording(out: Path, seconds: int) -> None:
    """Record every event for ``seconds`` with the installed agent at the shipped config."""
    log = out.with_suffix(".agent.log")
    with open(log, "wb") as f:
        agent = subprocess.Popen([cli(), "run", "--config", str(ROOT / "configs" /
                                                                "default.toml")],
                                 stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        subprocess.run([cli(), "record", str(out), "--costly", "--duration", f"{seconds}s",
                        "--force"], check=True, capture_output=True, timeout=600)
    finally:
        agent.terminate()
        agent.wait(timeout=60)


def hour_recording(short: Path, out: Path, seconds: int = 3600) -> tuple[int, int]:
    """Write ``out``: ``short``'s publish intervals repeated, timestamps shifted, until
    ``seconds`` of data time are filled; return (records, intervals) written."""
    ivs = [iv for iv in split(read_records(short)) if iv.records]
    if len(ivs) < 2:
        raise SystemExit(f"{short}: fewer than two publish intervals")
    first, last = ivs[0].records[0].time_ns, ivs[-1].end_ns
    period = (last - first) // (len(ivs) - 1)
    span = last - first + period
    meta = read_meta(short)
    w = NativeWriter.create(out, meta, overwrite=True)
    records = intervals = 0
    shift = 0
    try:
        while shift < seconds * 10**9:
            for iv in ivs:
                if iv.records[0].time_ns - first + shift >= seconds * 10**9:
                    break
                recs = [dataclasses.replace(r, time_ns=r.time_ns + shift) for r in iv.records]
                if iv.exact:  # its tick record too, as the agent wrote it
                    recs.append(dataclasses.replace(recs[-1], event=EVENT, time_ns=iv.end_ns
                                                    + shift, fields={
                                                        "seq": intervals, "interval_ns": period,
                                                        "records": len(iv.records)}))
                w.write_records(recs)
                records += len(recs)
                intervals += 1
            shift += span
    finally:
        w.close()
    return records, intervals


class _Live:
    def __init__(self) -> None:
        self.frames = 0

    def update(self, screen: object, refresh: bool = False) -> None:
        screen.ansi(_CONSOLE, 200, 60)  # type: ignore[attr-defined]
        self.frames += 1


_CONSOLE = None


def bench_top(path: Path) -> None:
    """Replay ``path`` as ``top --from`` does at full speed; print its figures."""
    global _CONSOLE
    import io

    from rich.console import Console

    from rezolus_ue.consume import top
    from rezolus_ue.consume.top.keys import UiState
    from rezolus_ue.consume.top.registry import new_model
    from rezolus_ue.consume.top.replay import Playback

    _CONSOLE = Console(file=io.StringIO(), width=200, height=60, color_system="truecolor")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    pb = Playback(top.open_replay(path))
    r, w = os.pipe()
    live = _Live()
    console = SimpleNamespace(size=SimpleNamespace(width=200, height=60))

    def quit_at_end() -> None:
        while not pb.ended:
            time.sleep(0.05)
        os.write(w, b"q")

    os.write(w, b">>")
    t = threading.Thread(target=quit_at_end, daemon=True)
    start = time.perf_counter()
    t.start()
    model = new_model(1.0)
    top.replay_loop(pb, model, UiState(), live, console, r)
    took = time.perf_counter() - start
    os.close(r)
    os.close(w)
    rep = pb.replay
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"top --from, as fast as it can: {rep.records / took:.0f} records/s"
          f" ({rep.records} records, {len(rep)} intervals in {took:.1f} s, {live.frames}"
          " screens drawn)")
    print(f"top --from index: {rep.bytes() / 2**20:.1f} MiB compressed for the hour"
          f" ({rep.bytes() / rep.records:.1f} bytes/record); peak RSS {rss / 1024:.0f} MiB"
          f" (+{(rss - rss0) / 1024:.0f} MiB while replaying)")
    s = time.perf_counter()
    top.steer(pb, new_model(1.0), UiState(replay=True, jump=("by", -1800 * 10**9)))
    print(f"top --from seek 30 min back: {(time.perf_counter() - s) * 1000:.1f} ms")


def bench_tail(path: Path, records: int) -> None:
    """Print every record of ``path`` with the installed ``tail --from``; print its rate."""
    s = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run([cli(), "tail", "--from", str(path)], stdout=null, check=True,
                       timeout=3600)
    took = time.perf_counter() - s
    print(f"tail --from: {records / took:.0f} records/s ({took:.1f} s for the hour)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=20, help="the real recording's length")
    ap.add_argument("--hour", type=int, default=3600, help="seconds to synthesize")
    ap.add_argument("--from", dest="source", type=Path, help="a short real recording")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        short = args.source or Path(tmp) / "short.rzr"
        if args.source is None:
            real_recording(short, args.seconds)
        hour = Path(tmp) / "hour.rzr"
        n, ivs = hour_recording(short, hour, args.hour)
        print(f"recording: {args.hour} s synthesized from {short.name} (a real recording,"
              f" every event, shipped config): {n} records, {ivs} intervals,"
              f" {hour.stat().st_size / 2**20:.1f} MiB")
        bench_top(hour)
        bench_tail(hour, n)


if __name__ == "__main__":
    main()
