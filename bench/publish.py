"""Cost of publishing: a disabled check, and an enabled write of rezolus_cpu_usage.

    python bench/publish.py                 # on this kernel (writes need user_events)
    python bench/publish.py --vm BZIMAGE    # the same inside a VM booted with virtme-ng

Prints figures; asserts nothing. Targets: a disabled check <= 100 ns on the host;
an enabled write <= 3x a same-sized ``os.writev`` to /dev/null measured in the same run
(the VM runs under software emulation, so only the ratio means anything there).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vm import run_in_vm  # noqa: E402  (bench/ is sys.path[0] when run)

from rezolus_ue.linux.user_events import WORDS, Registration, UserEventsData  # noqa: E402
from rezolus_ue.schema import CPU_USAGE  # noqa: E402


def per_op_ns(fns: dict, n: int, repeat: int = 9) -> dict[str, float]:  # type: ignore[type-arg]
    """Return the median ns per operation of each ``fn(n)`` (which runs n operations).

    The functions take turns within each repeat, so drift on a noisy (or emulated)
    machine hits them alike and their ratios stay meaningful.
    """
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter_ns()
            fn(n)
            runs[k].append((time.perf_counter_ns() - t0) / n)
    return {k: statistics.median(v) for k, v in runs.items()}


def bench_disabled(n: int) -> dict[str, float]:
    """Return ns per disabled check, net of an empty loop, for each way of checking."""
    slot, word = WORDS.allocate()  # a real enable word; nothing registered: stays 0
    reg = Registration(None, "x", "x", 0, slot, word, 0)  # type: ignore[arg-type]

    def empty(k: int) -> None:
        for _ in range(k):
            pass

    def word_read(k: int) -> None:
        w = reg.word
        for _ in range(k):
            if w.value:
                raise AssertionError

    def prop(k: int) -> None:
        r = reg
        for _ in range(k):
            if r.enabled:
                raise AssertionError

    t = per_op_ns({"empty": empty, "word": word_read, "prop": prop}, n)
    return {
        "empty loop iteration": t["empty"],
        "enable-word read (word.value) + branch": t["word"] - t["empty"],
        "Registration.enabled + branch": t["prop"] - t["empty"],
    }


#: Plausible values for every rezolus_cpu_usage field after `cpu`.
_REST = tuple(1_000_000 * (i + 1) for i in range(len(CPU_USAGE.fields) - 1))


def sample_payload(cpu: int) -> bytes:
    """Return a realistic rezolus_cpu_usage payload (whatever its field count)."""
    return CPU_USAGE.pack(cpu, *_REST)


def bench_enabled(n: int) -> dict[str, float] | str:
    """Return ns per enabled write vs writev to /dev/null, or why it cannot run here."""
    from tracefs_tools import Tracefs, find_tracefs

    tfs = Tracefs(find_tracefs(mount=True))
    if not tfs.has_user_events:
        return "no user_events on this kernel (use --vm BZIMAGE)"
    payload = sample_payload(1)
    inst = f"rezolus_bench_{os.getpid()}"
    with UserEventsData(tfs.root) as data:
        reg = data.register(CPU_USAGE.name_args)
        tfs.create_instance(inst)
        try:
            tfs.enable("user_events", CPU_USAGE.name, instance=inst)
            assert reg.enabled

            def write(k: int) -> None:
                w = reg.write
                for _ in range(k):
                    w(payload)

            def pack_write(k: int) -> None:
                w, pack = reg.write, CPU_USAGE.pack
                rest = _REST
                for c in range(k):
                    w(pack(c, *rest))

            null = os.open(os.devnull, os.O_WRONLY)
            head = b"\0\0\0\0"

            def devnull(k: int) -> None:
                for _ in range(k):
                    os.writev(null, (head, payload))

            res = per_op_ns({
                "writev to /dev/null (same bytes)": devnull,
                "enabled write (Registration.write)": write,
                "enabled pack + write": pack_write,
            }, n)
            os.close(null)
            assert data.stats.ebadf == 0
        finally:
            tfs.remove_instance(inst)
    return res


def bench_idle_agent(seconds: float = 10.0) -> dict[str, float] | str:
    """Return the agent's CPU share while registered but unconsumed, at 100 ms interval."""
    from tracefs_tools import Tracefs, find_tracefs

    tfs = Tracefs(find_tracefs(mount=True))
    if not tfs.has_user_events:
        return "no user_events on this kernel (use --vm BZIMAGE)"
    proc = subprocess.Popen([sys.executable, "-m", "rezolus_ue", "run", "--interval", "100ms"],
                            cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "rezolus_agent" not in tfs.user_events_status().events:
            if time.monotonic() > deadline or proc.poll() is not None:
                return "the agent did not start"
            time.sleep(0.1)
        time.sleep(1.0)  # let start-up settle
        tick = os.sysconf("SC_CLK_TCK")

        def cpu_s() -> float:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick

        c0, t0 = cpu_s(), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_s(), time.monotonic()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"agent CPU, idle (% of one core)": 100 * (c1 - c0) / (t1 - t0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vm", metavar="BZIMAGE", help="run inside a VM booted from this kernel")
    ap.add_argument("-n", type=int, default=200_000, help="operations per timed run")
    args = ap.parse_args()
    if args.vm:
        return run_in_vm(args.vm, "publish.py", ["-n", str(args.n)])
    print(f"# publish cost  ({platform.node()}, Linux {platform.release()},"
          f" Python {platform.python_version()}, n={args.n})")
    for k, v in bench_disabled(args.n).items():
        print(f"{k:40s} {v:8.1f} ns")
    enabled = bench_enabled(max(args.n // 10, 1000))
    if isinstance(enabled, str):
        print(f"enabled write: skipped: {enabled}")
        return 0
    for k, v in enabled.items():
        print(f"{k:40s} {v:8.1f} ns")
    base = enabled["writev to /dev/null (same bytes)"]
    ratio = enabled["enabled write (Registration.write)"] / base
    print(f"{'ratio write / devnull':40s} {ratio:8.2f} x   (target <= 3x)")
    ratio = enabled["enabled pack + write"] / base
    print(f"{'ratio pack+write / devnull':40s} {ratio:8.2f} x")
    idle = bench_idle_agent()
    if isinstance(idle, str):
        print(f"idle agent: skipped: {idle}")
        return 0
    for k, v in idle.items():
        print(f"{k:40s} {v:8.3f} %   (100 ms interval, no consumer, 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
