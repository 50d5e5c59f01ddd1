"""What each BPF hook costs: nanoseconds per run of every program the agent attaches.

    sudo .venv/bin/python bench/bpf_hooks.py [--seconds 20]

Starts the installed CLI with the shipped config, and ``perf record`` of every event (so
every BPF sampler that can run here attaches), turns on the kernel's BPF run-time
statistics (``kernel.bpf_stats_enabled``, restored after), runs a mixed workload (context
switches, system calls, file IO, loopback TCP) for ``--seconds``, then reads each program's
``run_cnt`` and ``run_time_ns`` with bpftool: the cost per run of the hook, and how often it
ran. The per-run cost is what each traced kernel event pays while a consumer listens;
with no consumer nothing is attached and nothing is paid. The statistics themselves add
two clock reads to every run (tens of ns), so the figures are upper bounds.

Prints a table per sampler and hook; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "rezolus-ue"
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
#: ``SEC("kind/hook")`` followed by the program's function.
_PROG_RE = re.compile(r'SEC\("([^"]+)"\)\s*\n\s*int\s+(?:BPF_PROG\((\w+)|(\w+)\()')


def hooks() -> dict[str, tuple[str, str]]:
    """Return program name (as the kernel keeps it, 15 characters) -> (sampler, section)."""
    out = {}
    for src in sorted((ROOT / "bpf").glob("*.bpf.c")):
        sampler = src.name.removesuffix(".bpf.c")
        for m in _PROG_RE.finditer(src.read_text()):
            name = (m.group(2) or m.group(3))[:15]
            out[name] = (sampler, m.group(1))
    return out


def programs(bpftool: str) -> list[dict]:
    p = subprocess.run([bpftool, "-j", "prog", "show"], capture_output=True, text=True,
                       timeout=120)
    return json.loads(p.stdout or "[]")


def workload(seconds: float) -> None:
    """Keep the traced paths busy: switches, syscalls, file IO, loopback TCP."""
    stop = time.monotonic() + seconds
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]

    def serve() -> None:
        while time.monotonic() < stop:
            srv.settimeout(0.5)
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                while data := c.recv(65536):
                    c.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    perf = shutil.which("perf")
    msg = subprocess.Popen([perf, "bench", "sched", "messaging", "-g", "2", "-l", "100000"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if perf else None
    with tempfile.NamedTemporaryFile() as f:
        while time.monotonic() < stop:
            with socket.create_connection(("127.0.0.1", port)) as c:
                for _ in range(50):
                    c.sendall(b"x" * 4096)
                    c.recv(65536)
            f.write(os.urandom(65536))
            f.flush()
            os.fsync(f.fileno())
            os.getppid()
    if msg is not None:
        msg.kill()
        msg.wait()
    t.join(timeout=5)
    srv.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the workload")
    args = ap.parse_args()
    bpftool = shutil.which("bpftool") or "/usr/sbin/bpftool"
    if not Path(bpftool).exists():
        print("bpftool is not installed (scripts/setup.sh installs it)")
        return 0
    names = hooks()
    print(f"# BPF hook cost  ({platform.node()}, Linux {platform.release()},"
          f" {os.cpu_count()} CPUs, {args.seconds:g} s workload)")
    old = STATS.read_text().strip()
    agent = subprocess.Popen([str(CLI), "run"], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    perf = None
    try:
        time.sleep(3)
        groups = [g for g in ("user_events", "rezolus_ue")
                  if Path(f"/sys/kernel/tracing/events/{g}/rezolus_agent").exists()]
        if not groups:
            print("the agent did not start")
            return 0
        perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{groups[0]}:rezolus_*", "-a",
                                 "-o", "/dev/null", "--", "sleep", "100000"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # every BPF sampler that can run attaches
            ours = [p for p in programs(bpftool) if p.get("name") in names]
            time.sleep(2)
            if ours and len(ours) == len([p for p in programs(bpftool)
                                          if p.get("name") in names]):
                break
        STATS.write_text("1")
        before = {p["id"]: (p.get("run_cnt", 0), p.get("run_time_ns", 0))
                  for p in programs(bpftool) if p.get("name") in names}
        t0 = time.monotonic()
        workload(args.seconds)
        elapsed = time.monotonic() - t0
        after = [p for p in programs(bpftool) if p["id"] in before]
    finally:
        STATS.write_text(old)
        if perf is not None:
            os.killpg(perf.pid, signal.SIGINT)
            perf.wait(timeout=120)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=120)
    rows = []
    for p in after:
        cnt0, ns0 = before[p["id"]]
        cnt, ns = p.get("run_cnt", 0) - cnt0, p.get("run_time_ns", 0) - ns0
        sampler, section = names[p["name"]]
        rows.append((sampler, section, cnt, ns / cnt if cnt else 0.0, ns / elapsed / 1e7))
    print(f"{'sampler':20s} {'hook':36s} {'runs/s':>10s} {'ns/run':>8s} {'% of a CPU':>10s}")
    for sampler, section, cnt, per, share in sorted(rows):
        print(f"{sampler:20s} {section:36s} {cnt / elapsed:10.0f} {per:8.0f} {share:10.3f}")
    ran = [r for r in rows if r[2]]
    if ran:
        worst = max(ran, key=lambda r: r[3])
        total = sum(r[4] for r in rows)
        print(f"slowest hook: {worst[0]} {worst[1]} {worst[3]:.0f} ns/run")
        print(f"all hooks together: {total:.3f} % of a CPU during the workload")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
