"""Demand-driven BPF, end to end: the real agent, real perf, bpftool watching the kernel.

With no consumer none of our programs is loaded; ``perf record`` on
rezolus_scheduler_runqueue_latency makes the agent load and attach them (and
``rezolus-ue events`` say so); when perf exits they are gone within one interval, and
perf's recording holds histogram records the programs filled (BPF -> tracepoint -> perf).
It runs on this host's kernel through whichever transport ``transport = "auto"`` takes
(uprobe events without user_events; the ``bus`` fixture). One agent start, publishing
every 200 ms, with only scheduler_runqueue and agent enabled. The waits bound liveness,
with slack for software emulation; they measure nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import pytest
from waiting import scaled

from rezolus_ue import agent as agent_mod
from rezolus_ue import events_cmd
from rezolus_ue.bpf import build
from rezolus_ue.samplers import REGISTRY
from rezolus_ue.samplers.scheduler_runqueue import SCHEDULER_RUNQUEUE_LATENCY

from .conftest import Bus, wait_for

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]
EVENT = SCHEDULER_RUNQUEUE_LATENCY.schema.name
INTERVAL_S = 0.2
#: Allowance for a loaded or emulated CPU (under TCG code runs 5-25x slower) on top of
#: intervals.
SLACK_S = 10.0


def our_programs() -> set[str]:
    """Return the names of every program in scheduler_runqueue's BPF object."""
    from rezolus_ue.bpf.libbpf import Object

    obj = Object(build.object_path("scheduler_runqueue"))
    try:
        return set(obj.programs)
    finally:
        obj.close()


def loaded(ours: set[str]) -> set[str]:
    """Return which of ``ours`` are loaded in the kernel now."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=True, timeout=scaled(60)).stdout
    return {p.get("name", "") for p in json.loads(out or "[]")} & ours


def sampler_row(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Return scheduler_runqueue's status and BPF programs cells in ``rezolus-ue events``
    (run in this process: a new interpreter takes many seconds under emulation)."""
    capsys.readouterr()
    assert events_cmd.show_events() == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines()  # not the event table's rezolus_* rows
            if "scheduler_runqueue" in ln and "rezolus_" not in ln]
    assert len(rows) == 1, out
    cells = [c.strip() for c in rows[0].split("\u2502")]  # rich's vertical rule
    # | sampler | status | errors | BPF programs | why |
    return [cells[2], cells[4]]


def read(f: TextIO) -> str:
    f.seek(0)
    return f.read()


def test_programs_follow_the_consumer(bus: Bus, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for tool in ("perf", "bpftool"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if not build.object_path("scheduler_runqueue").exists():
        pytest.skip(f"BPF objects not built: run `{build.BUILD_COMMAND}`")
    ours = our_programs()
    assert ours and all(n.startswith("rq_") for n in ours), ours
    conf = tmp_path / "config.toml"
    conf.write_text(f'[agent]\npublish_interval = "{int(INTERVAL_S * 1000)}ms"\n' + "".join(
        f"[samplers.{n}]\nenabled = false\n" for n in REGISTRY
        if n not in ("scheduler_runqueue", "agent")))
    run_dir = tmp_path / "run"
    env = {**os.environ, "REZOLUS_UE_RUNTIME_DIR": str(run_dir)}
    monkeypatch.setattr(events_cmd, "read_status", lambda: agent_mod.read_status(run_dir))
    log = (tmp_path / "agent.log").open("w+")
    agent = subprocess.Popen([sys.executable, "-m", "rezolus_ue", "run", "-c", str(conf)],
                             cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    perf = None
    try:
        def started() -> dict | None:
            assert agent.poll() is None, f"agent exited: {read(log)}"
            return agent_mod.read_status(run_dir)

        status = wait_for(started, timeout=120, step=0.1)
        st = status["samplers"]["scheduler_runqueue"]  # type: ignore[index]
        assert st["status"] == "idle", f"{st}; agent log: {read(log)}"
        assert EVENT in bus.registered()
        # Loaded once at start to verify, then unloaded: none stay without a consumer.
        wait_for(lambda: not loaded(ours), timeout=SLACK_S)
        time.sleep(3 * INTERVAL_S)
        assert not loaded(ours), "programs loaded with no consumer"
        assert sampler_row(capsys) == ["idle", "detached"]

        data = tmp_path / "perf.data"
        perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{bus.group}:{EVENT}", "-a",
                                 "-o", str(data)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        wait_for(lambda: bus.consumers(EVENT), timeout=60, step=0.05)
        t0 = time.monotonic()
        # All three attached (the loader attaches them one by one): one variant (e.g.
        # rq_btf_*) of each hook: wakeup, wakeup_new, switch.
        attached = wait_for(lambda: (p if len(p := loaded(ours)) >= 3 else None),
                            timeout=2 * INTERVAL_S + SLACK_S, step=0.05,
                            what="the sampler's three programs", seen=lambda: loaded(ours))
        appeared_s = time.monotonic() - t0
        assert len(attached) == 3 and len({n.split("_")[1] for n in attached}) == 1, attached
        # status.json is written at the end of the agent's tick that attached them.
        wait_for(lambda: sampler_row(capsys) == ["active", "attached"], timeout=60)
        time.sleep(5 * INTERVAL_S)  # a few records

        perf.send_signal(signal.SIGINT)
        _, err = perf.communicate(timeout=scaled(120))
        assert perf.returncode in (0, -signal.SIGINT), err  # perf re-raises the SIGINT
        wait_for(lambda: not bus.consumers(EVENT), timeout=30, step=0.05)
        t0 = time.monotonic()
        wait_for(lambda: not loaded(ours), timeout=INTERVAL_S + SLACK_S, step=0.05)
        gone_s = time.monotonic() - t0
        wait_for(lambda: sampler_row(capsys) == ["idle", "detached"], timeout=60)
        print(f"programs appeared {appeared_s:.2f} s after perf enabled the event,"
              f" gone {gone_s:.2f} s after it left (interval {INTERVAL_S} s)")

        script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                                text=True, timeout=scaled(120))
        assert script.returncode == 0, script.stderr
        records = [ln for ln in script.stdout.splitlines() if f"{EVENT}:" in ln]
        assert records, script.stdout[-2000:]
        counts = [int(m.group(1)) for ln in records
                  if (m := re.search(r"\bcount=(\d+)", ln))]
        assert len(counts) == len(records) and max(counts) > 0, records[:5]
        attached_ns = [int(m.group(1)) for ln in records
                       if (m := re.search(r"\battached_ns=(\d+)", ln))]
        assert attached_ns and all(a > 0 for a in attached_ns), records[:5]
    finally:
        if perf is not None and perf.poll() is None:
            perf.kill()
            perf.wait()
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=scaled(60))
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        out = read(log)
        log.close()
    assert "Traceback" not in out, out
