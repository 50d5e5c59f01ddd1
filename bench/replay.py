"""Replay speed: ``top --from`` and ``tail --from`` on a one-hour recording of every event.

    sudo python bench/replay.py [--seconds 20] [--hour 3600] [--from SHORT.rzr]

The hour is bench/hour.py's: every event at the shipped config, synthesized from a short
real recording (hold /tmp/rezolus-live.lock unless ``--from``). Then, in one run:

* ``top --from``: top's replay loop (``replay_loop``) at full speed from the first interval
  to the last, drawing a 200x60 screen as it goes (into memory): the recording's records
  per second (top reads only the events it shows), the index's compressed size and the
  process's peak RSS, and one seek back 30 minutes;
* ``tail --from``: the installed CLI printing every record to /dev/null.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hour


class _Live:
    def __init__(self) -> None:
        self.frames = 0

    def update(self, screen: object, refresh: bool = False) -> None:
        screen.ansi(_CONSOLE, 200, 60)  # type: ignore[attr-defined]
        self.frames += 1


_CONSOLE = None


def bench_top(path: Path, records: int) -> None:
    """Replay ``path`` (``records`` records) as ``top --from`` does at full speed; print its
    figures, rates per record of the recording, as tail's and view's are."""
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
    print(f"top --from, as fast as it can: {records / took:.0f} records/s of the recording"
          f" ({len(rep)} intervals in {took:.1f} s, {live.frames} screens drawn; top reads"
          f" {rep.records} of its {records} records: the events it shows)")
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
        subprocess.run([hour.cli(), "tail", "--from", str(path)], stdout=null, check=True,
                       timeout=3600)
    took = time.perf_counter() - s
    print(f"tail --from: {records / took:.0f} records/s ({took:.1f} s for the hour)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    hour.add_arguments(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        h = hour.make(args, Path(tmp))
        bench_top(h.path, h.records)
        bench_tail(h.path, h.records)


if __name__ == "__main__":
    main()
