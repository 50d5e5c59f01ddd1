"""Cost of ``rezolus-ue view``: loading a recording, and following the live agent.

    python bench/view.py [--minutes 60] [--cpus 8] [--processes 100]   # replay only
    sudo python bench/view.py --live [--seconds 30]                 # also the live cost

* replay: a synthetic recording of ``--minutes`` of 1 s publishes (bench/top.py's host:
  ``--cpus`` CPUs, 20 cgroups, ``--processes`` processes' records per tick, disks,
  interfaces, the agent's own events, and the agent's tick record), written as a native
  recording, then loaded as ``view --from`` loads it (read, grouped by interval, every
  chart's series): records per second, and the time to serve the CPU page's whole range.
* live (root; run it with no other consumer or agent: ``flock /tmp/rezolus-live.lock``):
  the installed agent at its default config and 1 s publishes, ``rezolus-ue view``, and
  one client doing what an open tab does (the event stream, then each interval's new
  points of the CPU page): the view process's CPU over ``--seconds``, as a share of one
  core; and the same with no page open (nothing subscribed). Goal: <= 1 % of a core.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from rezolus_ue.consume.intervals import EVENT  # noqa: E402
from rezolus_ue.consume.recording import write_recording  # noqa: E402
from rezolus_ue.consume.records import Record  # noqa: E402
from rezolus_ue.consume.view import load  # noqa: E402
from rezolus_ue.consume.view.pages import page  # noqa: E402

S = 10**9
CLI = Path(sys.executable).parent / "rezolus-ue"


def synthesize(path: Path, minutes: int, cpus: int, processes: int) -> int:
    """Write a recording of ``minutes`` of 1 s ticks; return its records."""
    import top as top_bench  # bench/top.py: a realistic host's tick

    def records():
        for i in range(1, minutes * 60 + 1):
            tick = top_bench.tick(cpus, i, 20, processes)
            yield from tick
            yield Record(EVENT, i * S + 1000, 0, 1,
                         {"seq": i, "interval_ns": S, "records": len(tick)})

    return write_recording(records(), path, "native", {"wall_offset_ns": 0}, overwrite=True)


def replay(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hour.rzr"
        t0 = time.perf_counter()
        n = synthesize(path, args.minutes, args.cpus, args.processes)
        made = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"synthetic recording: {args.minutes} min of 1 s ticks, {args.cpus} CPUs,"
              f" {args.processes} processes: {n} records, {size / 2**20:.1f} MiB"
              f" (written in {made:.1f} s)")
        t0 = time.perf_counter()
        ds = load(path)
        took = time.perf_counter() - t0
        print(f"view replay: loaded {len(ds.times)} intervals in {took:.2f} s:"
              f" {n / took:.0f} records/s")
        t0 = time.perf_counter()
        body = json.dumps(ds.page_data(page("cpu")))  # type: ignore[arg-type]
        took = time.perf_counter() - t0
        print(f"view replay: the CPU page's whole range: {took * 1000:.0f} ms,"
              f" {len(body) / 2**10:.0f} KiB of JSON")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Tab(threading.Thread):
    """What an open page does: hold the event stream, fetch each interval's new points."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.intervals = 0
        self.stopped = False

    def run(self) -> None:
        since = None
        with urllib.request.urlopen(self.url + "api/events", timeout=60) as stream:
            for line in stream:
                if self.stopped:
                    return
                if not line.startswith(b"data:"):
                    continue
                q = f"?since={since}" if since is not None else ""
                with urllib.request.urlopen(f"{self.url}api/page/cpu{q}", timeout=60) as r:
                    data = json.load(r)
                if data["t_ns"]:
                    since = data["t_ns"][-1]
                    self.intervals += len(data["t_ns"])


def live(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "agent.log", "w+")  # noqa: SIM115
        agent = subprocess.Popen([str(CLI), "run", "--interval", "1s"], stdout=log,
                                 stderr=subprocess.STDOUT)
        vlog = open(Path(tmp) / "view.log", "w+")  # noqa: SIM115
        view = subprocess.Popen([str(CLI), "view", "--port", "0"], stdout=vlog,
                                stderr=subprocess.STDOUT)
        try:
            url = None
            for _ in range(600):
                vlog.seek(0)
                if m := re.search(r"http://\S+/", vlog.read()):
                    url = m.group(0)
                    break
                time.sleep(0.1)
            if url is None:
                print("view did not start")
                return
            time.sleep(5)  # the agent's start-up
            c0 = _cpu_s(view.pid)
            time.sleep(args.seconds)
            idle = (_cpu_s(view.pid) - c0) / args.seconds * 100
            print(f"view, no page open, {args.seconds} s: {idle:.3f} % of a core")
            tab = Tab(url)
            tab.start()
            deadline = time.monotonic() + 60
            while tab.intervals < 3 and time.monotonic() < deadline:
                time.sleep(0.2)  # subscribed and following
            c0, n0 = _cpu_s(view.pid), tab.intervals
            time.sleep(args.seconds)
            used = (_cpu_s(view.pid) - c0) / args.seconds * 100
            tab.stopped = True
            print(f"view following the live agent, one page open, 1 s publishes,"
                  f" {args.seconds} s ({tab.intervals - n0} intervals): {used:.3f} % of a core")
        finally:
            for p in (view, agent):
                p.terminate()
                p.wait(timeout=60)
            log.close()
            vlog.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--cpus", type=int, default=8)
    ap.add_argument("--processes", type=int, default=100)
    ap.add_argument("--live", action="store_true", help="also the live cost (root)")
    ap.add_argument("--seconds", type=int, default=30)
    args = ap.parse_args()
    replay(args)
    if args.live:
        live(args)


if __name__ == "__main__":
    main()
