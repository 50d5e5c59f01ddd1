"""A real recording as Parquet: the installed agent and ``record run.parquet`` on this
host's kernel, the file checked against Rezolus's viewer's rules with pyarrow alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_parquet import check_rezolus_rules
from waiting import running, wait_for

pytest.importorskip("pyarrow")


def _cli() -> str:
    cli = Path(sys.executable).parent / "rezolus-ue"
    if not cli.exists():
        pytest.skip(f"{cli} is not installed (run scripts/setup.sh)")
    return str(cli)


@pytest.mark.live
def test_a_real_recording_follows_rezolus_rules(tmp_path: Path) -> None:
    from kernel.conftest import Bus
    from kernel.test_agent_e2e import without_bpf

    from rezolus_ue.consume.intervals import EVENT
    from rezolus_ue.consume.recording import read_records
    from rezolus_ue.schema import AGENT, CPU_USAGE
    from tracefs_tools import Tracefs, find_tracefs

    log = tmp_path / "agent.log"
    bus = Bus(Tracefs(find_tracefs(mount=True)))
    with open(log, "wb") as out:
        agent = subprocess.Popen([_cli(), "run", "--config", str(without_bpf(tmp_path)),
                                  "--interval", "200ms"], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: running(agent, lambda: log.read_text(errors="replace"), "agent")
                 and {CPU_USAGE.name, AGENT.name} <= bus.registered(), timeout=240, step=0.2)
        path = tmp_path / "run.parquet"
        rec = subprocess.run([_cli(), "record", str(path), "--duration", "3s"],
                             capture_output=True, text=True, timeout=300)
        assert rec.returncode == 0, rec.stderr
    finally:
        agent.terminate()
        assert agent.wait(timeout=60) == 0, log.read_text(errors="replace")
    series = check_rezolus_rules(path)
    cpus = {x["id"] for x in series["cpu_usage"]}
    assert cpus and {x["state"] for x in series["cpu_usage"]} >= {"user", "system"}
    assert series["cpu_cores"] == [{}]
    assert {"memory_total", "memory_available", "rezolus_cpu_usage"} <= set(series)
    assert not list(tmp_path.glob("*.journal.rzr"))
    recs = list(read_records(path))
    assert {CPU_USAGE.name, AGENT.name, EVENT} <= {r.event for r in recs}
