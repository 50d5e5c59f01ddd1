"""A ``[[trigger]]`` rule on this host's kernel: the installed agent with the shipped config
plus a rule, ``record --ring`` reading it, and a CPU burst that fires the rule: one file in
the ring's dumps directory holds the burst and its window, one log line says so, and a
second burst inside the window does not fire again.

The rule watches the runnable tasks (``rezolus_scheduler`` ``procs_running``) above the
most seen before the burst plus half the burst's spinners: busy CPU time
cannot rise on a host already busy (the stress run keeps every CPU so), runnable tasks
can, so the rule holds during the burst and not before, whatever else the host runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import running, wait_for

ROOT = Path(__file__).resolve().parent.parent
INTERVAL_NS = 500_000_000
BEFORE_S, AFTER_S = 3, 3
#: Spinners per CPU in a burst: the rule fires on half as many above the most runnable
#: tasks seen before it, so the other half is the margin for what else runs (the stress
#: run's hogs, a tool starting up) that the baseline's few samples did not catch.
SPIN = 8


def threshold(most: int, cpus: int) -> int:
    """Return the runnable tasks above which the rule fires, given the ``most`` seen."""
    return most + SPIN // 2 * cpus


def rule(above: int) -> str:
    """Return the trigger rule, firing on more than ``above`` runnable tasks."""
    return f"""
[[trigger]]
name = "cpu-burst"
event = "rezolus_scheduler"
metric = "procs_running"
above = {above}
for = 3
before = "{BEFORE_S}s"
after = "{AFTER_S}s"
"""


def _cli() -> str:
    cli = Path(sys.executable).parent / "rezolus-ue"
    if not cli.exists():
        pytest.skip(f"{cli} is not installed (run scripts/setup.sh)")
    return str(cli)


def burst(seconds: float) -> tuple[int, int]:
    """Keep every CPU busy for ``seconds`` (SPIN spinners per CPU); return its start and
    end on CLOCK_MONOTONIC, the records' clock."""
    n = SPIN * (os.cpu_count() or 1)
    start = time.monotonic_ns()
    spin = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        time.sleep(seconds)  # the workload itself: the burst lasts this long
    finally:
        for p in spin:
            p.kill()
        for p in spin:
            p.wait()
    return start, time.monotonic_ns()


@pytest.mark.live
def test_a_burst_fires_one_dump_of_its_window(tmp_path: Path) -> None:
    from kernel.conftest import Bus

    from rezolus_ue.consume.recording import read_records
    from rezolus_ue.samplers.scheduler import SCHEDULER
    from rezolus_ue.schema import CPU_USAGE
    from tracefs_tools import Tracefs, find_tracefs

    sched = SCHEDULER.event
    shipped = (ROOT / "configs" / "default.toml").read_text()
    cfg = tmp_path / "config.toml"
    cfg.write_text(shipped)
    cfg.chmod(0o600)
    ring = tmp_path / "ring"
    agent_log, rec_log = tmp_path / "agent.log", tmp_path / "record.log"
    bus = Bus(Tracefs(find_tracefs(mount=True)))
    with open(agent_log, "wb") as out:
        agent = subprocess.Popen([_cli(), "run", "--config", str(cfg), "--interval",
                                  f"{INTERVAL_NS // 10**6}ms"], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    recorder = None
    try:
        wait_for(lambda: running(agent, lambda: agent_log.read_text(errors="replace"),
                                 "agent") and CPU_USAGE.name in bus.registered(),
                 timeout=240, step=0.2)
        # The most runnable tasks over a few intervals before any burst: the burst's
        # SPIN per CPU go above it by more than the threshold's margin.
        base = subprocess.run([_cli(), "tail", sched, "--format", "json", "--count", "8"],
                              capture_output=True, text=True, timeout=120)
        assert base.returncode == 0, base.stderr
        most = max(json.loads(ln)["procs_running"] for ln in base.stdout.splitlines())
        cpus = os.cpu_count() or 1
        rules = tmp_path / "rules.toml"
        rules.write_text(shipped + rule(threshold(most, cpus)))
        with open(rec_log, "wb") as out:
            recorder = subprocess.Popen([_cli(), "record", "--ring", str(ring), "--config",
                                         str(rules), "--flush", "200ms"], stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def held_ns() -> int:
            if not list(ring.glob("seg-*")):
                return 0
            ts = [r.time_ns for r in read_records(ring, [CPU_USAGE.name])]
            return ts[-1] - ts[0] if ts else 0

        # The ring holds more than the before-window when the burst starts.
        wait_for(lambda: running(recorder, lambda: rec_log.read_text(errors="replace"),
                                 "recorder") and held_ns() > (BEFORE_S + 1) * 10**9,
                 timeout=120, step=0.2, log=lambda: rec_log.read_text(errors="replace"))
        first = burst(3)
        time.sleep(1)  # the gap between the bursts, inside the after-window
        second = burst(2)
        dumps = ring / "dumps"
        wait_for(lambda: "trigger cpu-burst fired" in rec_log.read_text(errors="replace"),
                 timeout=60, log=lambda: rec_log.read_text(errors="replace"),
                 seen=lambda: (f"threshold {threshold(most, cpus)}; procs_running in the"
                               " ring: " + str([r.fields["procs_running"]
                                                for r in read_records(ring, [sched])][-40:])))
        files = sorted(dumps.glob("trigger-cpu-burst-*.rzr"))
        assert len(files) == 1, files
    finally:
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait(timeout=60)
        agent.terminate()
        assert agent.wait(timeout=60) == 0, agent_log.read_text(errors="replace")
    log = rec_log.read_text(errors="replace")
    lines = [ln for ln in log.splitlines() if "trigger cpu-burst" in ln]
    assert len(lines) == 1 and str(files[0]) in lines[0], log
    assert f"rezolus_scheduler procs_running > {threshold(most, cpus)} for 3" \
        " intervals" in lines[0], lines[0]
    assert len(list(dumps.glob("trigger-*"))) == 1  # nothing more once stopped
    recs = list(read_records(files[0]))
    ts = [r.time_ns for r in recs]
    slack = 2 * INTERVAL_NS
    # From the before-window ahead of the burst to the after-window past the second.
    assert first[0] - BEFORE_S * 10**9 - slack <= ts[0] <= (
        first[0] - BEFORE_S * 10**9 + 2 * slack), (ts[0], first)
    assert second[1] + AFTER_S * 10**9 - slack <= ts[-1] <= (
        second[1] + AFTER_S * 10**9 + 2 * slack), (ts[-1], second)
    busy = [r for r in recs if r.event == sched and first[0] < r.time_ns < first[1]]
    assert busy and max(r.fields["procs_running"] for r in busy) > threshold(most, cpus)
