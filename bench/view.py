"""Cost of ``rezolus-ue view``: loading a recording, and following the live agent.

    sudo python bench/view.py [--seconds 20] [--hour 3600] [--from SHORT]   # replay
    sudo python bench/view.py --live [--follow 30]                # also the live cost

* replay: bench/hour.py's hour of every event at the shipped config (hold
  /tmp/rezolus-live.lock unless ``--from``), loaded as ``view --from`` loads it (read,
  grouped by interval, every chart's series): records per second, and the time to serve
  the CPU page's whole range.
* live (root; hold the lock too): the installed agent at the shipped config (1 s
  publishes), ``rezolus-ue view``, and one client doing what an open tab does (the event
  stream, then each interval's new points of the CPU page): the view process's CPU over
  ``--follow`` seconds, as a share of one core; and the same with no page open (nothing
  subscribed). Goal: <= 1 % of a core.

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
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hour

from rezolus_ue.consume.view import load
from rezolus_ue.consume.view.pages import page


def replay(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        h = hour.make(args, Path(tmp))
        t0 = time.perf_counter()
        ds = load(h.path)
        took = time.perf_counter() - t0
        print(f"view replay: loaded {len(ds.times)} intervals in {took:.2f} s:"
              f" {h.records / took:.0f} records/s")
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
    with tempfile.TemporaryDirectory() as tmp, \
            open(Path(tmp) / "view.log", "w+") as vlog, hour.agent(Path(tmp) / "agent.log"):
        view = subprocess.Popen([hour.cli(), "view", "--port", "0"], stdout=vlog,
                                stderr=subprocess.STDOUT)
        try:
            follow(view.pid, vlog, args.follow)
        finally:
            view.terminate()
            view.wait(timeout=60)


def follow(pid: int, vlog: TextIO, seconds: int) -> None:
    """Print the view process's CPU with no page open, then with one following the agent."""
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
    c0 = _cpu_s(pid)
    time.sleep(seconds)
    idle = (_cpu_s(pid) - c0) / seconds * 100
    print(f"view, no page open, {seconds} s: {idle:.3f} % of a core")
    tab = Tab(url)
    tab.start()
    deadline = time.monotonic() + 60
    while tab.intervals < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # subscribed and following
    c0, n0 = _cpu_s(pid), tab.intervals
    time.sleep(seconds)
    used = (_cpu_s(pid) - c0) / seconds * 100
    tab.stopped = True
    print(f"view following the live agent, one page open, 1 s publishes,"
          f" {seconds} s ({tab.intervals - n0} intervals): {used:.3f} % of a core")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    hour.add_arguments(ap)
    ap.add_argument("--live", action="store_true", help="also the live cost (root)")
    ap.add_argument("--follow", type=int, default=30,
                    help="live: seconds to measure each state (default 30)")
    args = ap.parse_args()
    replay(args)
    if args.live:
        live(args)


if __name__ == "__main__":
    main()
