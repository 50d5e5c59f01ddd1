"""The agent's memory: resident set idle, while every BPF sampler activates, and steady
with every event enabled.

    sudo .venv/bin/python bench/memory.py                 # the shipped config
    sudo .venv/bin/python bench/memory.py --seconds 20    # longer steady phase
    sudo .venv/bin/python bench/memory.py --vm BZIMAGE    # in the test VM (user_events)
    .venv/bin/python bench/memory.py --profiles           # at bench/scale.py's host profiles

The installed CLI runs with the shipped config (privileges dropped as users run it). Phases:
idle (no consumer) for ``--seconds``; then a consumer (``rezolus_ue.subscribe`` on every
event, in this process) until every sampler is active with its BPF programs loaded,
sampling VmRSS every 50 ms; then ``--seconds`` with every event enabled. Prints idle RSS,
the peak (the kernel's VmHWM, which no sampling can miss), steady RSS, and each phase's
growth; asserts nothing. The issue's goal: steady and peak at most 60 MB.

``--profiles``: the agent of bench/scale.py (every non-BPF, non-perf sampler on a fixture
tree, every event enabled, default intervals, paced) at each of its host profiles, each in
a fresh process (VmHWM is per process) while this one moves the tree's counters between
ticks, so the fixture text's generation is not in the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vm import run_in_vm  # noqa: E402  (bench/ is sys.path[0] when run)

import rezolus_ue  # noqa: E402
from rezolus_ue.agent import RUNTIME_DIR  # noqa: E402

CLI = Path(sys.executable).parent / "rezolus-ue"
CONFIG = ROOT / "configs" / "default.toml"


def status_kb(pid: int) -> dict[str, int]:
    """Return /proc/PID/status's Vm* lines in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Vm"):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    return out


def agent_status(pid: int) -> dict | None:
    """Return the agent's status.json once it is this agent's."""
    try:
        st = json.loads((RUNTIME_DIR / "status.json").read_text())
    except (OSError, ValueError):
        return None
    return st if st.get("pid") == pid else None


def settled(pid: int) -> bool:
    """True once every sampler that can run is active with its programs loaded."""
    st = agent_status(pid)
    if st is None:
        return False
    return all(s["status"] in ("unavailable", "disabled")
               or (s["status"] == "active" and not (s.get("reason") or "").startswith("loading:"))
               for s in st["samplers"].values())


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"memory bench: timed out waiting for {what}")
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="idle and steady phases")
    ap.add_argument("--quick", action="store_true", help="2 s phases (a smoke test)")
    ap.add_argument("--vm", metavar="BZIMAGE", help="run inside a VM booted from this kernel")
    ap.add_argument("--profiles", action="store_true",
                    help="bench/scale.py's agent at its host profiles (no root needed)")
    ap.add_argument("--profile-child", nargs=2, metavar=("HOST", "TREE"),
                    help=argparse.SUPPRESS)  # one profile's process (run_profile starts it)
    args = ap.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    if args.profile_child:
        return profile_child(*args.profile_child, seconds)
    if args.profiles:
        return profiles(seconds if args.quick or args.seconds != 10.0 else PROFILE_SECONDS)
    if args.vm:
        return run_in_vm(args.vm, "memory.py", ["--seconds", str(seconds)])
    with tempfile.NamedTemporaryFile(prefix="rezolus-ue-memory-", suffix=".log") as log:
        return measure(seconds, log)


def measure(seconds: float, log: IO[bytes]) -> int:
    """Run the agent through the three phases; print the figures."""
    agent = subprocess.Popen([str(CLI), "run", "--config", str(CONFIG)],
                             stdout=log, stderr=subprocess.STDOUT)
    stop = threading.Event()
    peak_sampled = 0
    try:
        wait(lambda: agent.poll() is not None or agent_status(agent.pid) is not None, 300,
             "the agent's status")
        if agent.poll() is not None:
            raise SystemExit(f"memory bench: the agent exited: {Path(log.name).read_text()}")
        time.sleep(seconds)
        idle = status_kb(agent.pid)
        n = {"records": 0}

        def consume() -> None:
            it = rezolus_ue.subscribe(None, costly=True)  # every BPF sampler
            try:
                for _ in it:
                    n["records"] += 1
                    if stop.is_set():
                        break
            finally:
                it.close()

        t = threading.Thread(target=consume, daemon=True)
        t0 = time.monotonic()
        t.start()
        while not settled(agent.pid):
            peak_sampled = max(peak_sampled, status_kb(agent.pid)["VmRSS"])
            if time.monotonic() - t0 > 600:
                st = agent_status(agent.pid) or {"samplers": {}}
                left = {n: s["status"] for n, s in st["samplers"].items()
                        if s["status"] not in ("active", "unavailable", "disabled")}
                raise SystemExit(f"memory bench: samplers not active after 600 s: {left}")
            time.sleep(0.05)
        activation_s = time.monotonic() - t0
        after_load = status_kb(agent.pid)
        time.sleep(seconds)
        steady = status_kb(agent.pid)
    finally:
        stop.set()
        agent.terminate()
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()
    mb = 1024.0
    print(f"# agent memory  ({platform.node()}, Linux {platform.release()},"
          f" Python {platform.python_version()}, shipped config)")
    print(f"idle RSS (no consumer, {seconds:.0f} s): {idle['VmRSS'] / mb:.1f} MB")
    print(f"activation: every sampler active in {activation_s:.1f} s; RSS sampled every 50 ms"
          f" peaked at {peak_sampled / mb:.1f} MB")
    print(f"peak RSS (VmHWM): {steady['VmHWM'] / mb:.1f} MB"
          f" (+{(steady['VmHWM'] - idle['VmRSS']) / mb:.1f} MB over idle)")
    print(f"steady RSS (every event enabled, {seconds:.0f} s, {n['records']} records"
          f" consumed): {steady['VmRSS'] / mb:.1f} MB (after activation:"
          f" {after_load['VmRSS'] / mb:.1f} MB)")
    print("goal: steady and peak <= 60 MB")
    print(one_load())
    return 0


def one_load() -> str:
    """Return what one BPF object's load adds to this process's peak: the agent's activation
    peak is this, once (LOADER loads one object at a time)."""
    from rezolus_ue.bpf.loader import BpfObject
    from rezolus_ue.samplers import REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    btf = Path("/sys/kernel/btf/vmlinux")
    name = next(n for n, c in REGISTRY.items() if issubclass(c, BpfSampler))
    try:
        obj = BpfObject(name)
        obj.load(programs=False)
        obj.unload()
        before = status_kb(os.getpid())["VmRSS"]
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        obj.load()
        peak = status_kb(os.getpid())["VmHWM"]
        obj.close()
    except Exception as e:  # a figure missing, not a failed benchmark
        return f"one BPF object's load: not measured ({e})"
    size = f"{btf.stat().st_size / 2**20:.1f} MB" if btf.exists() else "?"
    return (f"one BPF object's load ({name}), in this process: peak +{(peak - before) / 1024:.1f}"
            f" MB over {before / 1024:.1f} MB (libbpf parses the kernel's BTF, {size} raw, for"
            f" CO-RE and attach targets; freed after the load)")


#: The profiles' paced run: long enough for the cgroup sampler's walks (every 10 s).
PROFILE_SECONDS = 60.0
MB = 1024.0


def profiles(seconds: float) -> int:
    """Print, per host profile of bench/scale.py, the agent's RSS before it is built, its
    peak and its steady RSS after ``seconds`` paced, each measured in a fresh process."""
    import scale

    print(f"# agent memory at the host profiles  ({platform.node()}, Linux"
          f" {platform.release()}, Python {platform.python_version()}; load average"
          f" {os.getloadavg()[0]:.2f})")
    print("method: per profile a fresh process builds bench/scale.py's agent (every non-BPF,"
          " non-perf sampler on the profile's fixture tree, every event enabled, default"
          " intervals 100 ms / 1 s, records written to /dev/null) and runs it paced for"
          f" {seconds:.0f} s, while this process rewrites the tree's moving files between"
          " ticks (their generation is not in the figures). 'before the agent': RSS of the"
          " interpreter and imports; peak: VmHWM, reset (/proc/self/clear_refs 5) just before"
          " the agent is built, so it covers the build, the first walks and the run; steady:"
          " VmRSS at the end.")
    print("not included: the BPF samplers, whose peak is libbpf parsing the kernel's BTF at"
          " activation (the 'memory' section: the agent on this host), perf counters (no"
          " fixture), the user_events registrations and a real consumer.")
    for label, host in scale.PROFILES.items():
        with scale.tree(host) as t:
            report(label, host, run_profile(t, seconds), seconds)
    print("goal: steady and peak <= 60 MB")
    return 0


def report(label: str, host: object, r: dict, seconds: float) -> None:
    """Print one profile's figures (bench/all.py's patterns take them from these lines)."""
    print(f"\n## {label} ({host})")
    hwm = "" if r["reset"] else " (VmHWM not reset: it includes the imports)"
    print(f"before the agent (interpreter + imports): {r['before'] / MB:.1f} MB")
    print(f"agent peak RSS (VmHWM), {label}: {r['peak'] / MB:.1f} MB"
          f" (+{(r['peak'] - r['before']) / MB:.1f} MB){hwm}")
    print(f"agent steady RSS, {label}, after {seconds:.0f} s: {r['steady'] / MB:.1f} MB"
          f" (+{(r['steady'] - r['before']) / MB:.1f} MB; every 10 s from the first"
          f" second: {' '.join(f'{kb / MB:.1f}' for kb in r['every_10s'])} MB)")


def run_profile(t, seconds: float) -> dict:  # type: ignore[no-untyped-def]
    """Run the agent in a fresh process on bench/scale.py's tree ``t``, stepping ``t``
    whenever it asks (after each tick); return its figures (KiB)."""
    h = t.host
    child = subprocess.Popen(
        [sys.executable, __file__, "--profile-child", f"{h.cpus},{h.disks},{h.nics},{h.cgroups}",
         str(t.procfs.parent), "--seconds", str(seconds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    result = None
    for line in child.stdout:
        if line == "step\n":
            t.step()
            child.stdin.write("\n")
            child.stdin.flush()
        elif line.startswith("result "):
            result = json.loads(line.split(" ", 1)[1])
        else:
            sys.stderr.write(line)
    if child.wait() != 0 or result is None:
        raise SystemExit(f"memory bench: the agent's process failed at {h}")
    return result


def profile_child(host: str, base: str, seconds: float) -> int:
    """One profile's process: build and pace the agent on the tree of ``host`` (CPUS,DISKS,
    NICS,CGROUPS) under ``base``, which the parent steps; print its figures as one JSON
    line."""
    import scale

    pid = os.getpid()
    samples: list[int] = []

    class SteppedByParent(scale.Tree):
        def step(self, files: tuple[str, ...] | None = None) -> None:
            samples.append(status_kb(pid)["VmRSS"])
            print("step", flush=True)
            sys.stdin.readline()

    t = SteppedByParent(Path(base), scale.Host(*map(int, host.split(","))), populate=False)
    before = status_kb(pid)["VmRSS"]
    with contextlib.suppress(OSError):  # checked below
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    reset = status_kb(pid)["VmHWM"] <= before + 1024
    scale.paced(t, seconds)
    last = status_kb(pid)  # the agent closed: VmHWM stays; steady is the last tick's
    print("result " + json.dumps({
        "before": before, "peak": last["VmHWM"], "steady": samples[-1], "reset": reset,
        "every_10s": samples[scale.PUBLISH_EVERY + 2::10 * scale.PUBLISH_EVERY]}),
        flush=True)  # samples: 2 steps before the paced ticks, then one per 100 ms tick
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
