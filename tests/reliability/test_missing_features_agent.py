"""The agent itself under missing features: kernel BTF hidden and tracefs unmounted in its
mount namespace; it mounts tracefs, runs every sampler that does not need BPF, and reports
the BPF ones unavailable, with the reason, in its status (`rezolus-ue events`).

On this host, through whichever transport the kernel gives the agent (``bus``). Both
conditions are made in a private mount namespace (``unshare -m --propagation private``,
as test_missing_features.py does for `check`), so the host's BTF and tracefs mounts are
never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kernel.conftest import Bus
from waiting import scaled

from rezolus_ue.samplers.cpu_usage import CPU_USAGE
from rezolus_ue.samplers.scheduler_runqueue import SCHEDULER_RUNQUEUE_LATENCY

from .conftest import wait_for

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]


def test_agent_without_btf_and_tracefs_runs_the_rest(bus: Bus, tmp_path: Path) -> None:
    host_mounts = _btf_and_tracefs()
    runtime = tmp_path / "run"
    log = tmp_path / "agent.log"
    setup = ("mount -t tmpfs none /sys/kernel/btf;"
             " for m in /sys/kernel/tracing /sys/kernel/debug/tracing; do"
             " umount -l $m 2>/dev/null || true; done")
    cmd = f"{sys.executable} -m rezolus_ue run --interval 200ms"
    with open(log, "w") as out:
        p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              f"{setup}; exec {cmd}"], cwd=ROOT, stdout=out,
                             stderr=subprocess.STDOUT,
                             env={**os.environ, "REZOLUS_UE_RUNTIME_DIR": str(runtime)})
    try:
        status = runtime / "status.json"
        # The status file is this agent's alone (a private runtime directory): once it is
        # there, the agent has defined its events, and removed any an earlier one left.
        wait_for(lambda: p.poll() is not None or (status.exists()
                 and CPU_USAGE.event in bus.registered()), timeout=120, log=log.read_text)
        assert p.poll() is None, log.read_text()
        samplers = json.loads(status.read_text())["samplers"]
        rq = samplers["scheduler_runqueue"]
        assert rq["status"] == "unavailable" and "BTF" in rq["reason"], rq
        assert samplers["cpu_usage"]["status"] in ("idle", "active")
        assert SCHEDULER_RUNQUEUE_LATENCY.event not in bus.registered()
    finally:
        p.send_signal(signal.SIGTERM)
        code = p.wait(timeout=scaled(60))
    out = log.read_text()
    assert code == 0, out
    assert "Traceback" not in out
    assert _btf_and_tracefs() == host_mounts, "the namespace's mounts reached the host"


def _btf_and_tracefs() -> tuple[bool, list[str]]:
    """Return whether this namespace has kernel BTF, and where tracefs is mounted."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return (Path("/sys/kernel/btf/vmlinux").exists(),
            sorted(m.split()[1] for m in mounts if m.split()[2] == "tracefs"))
