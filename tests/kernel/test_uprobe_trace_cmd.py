"""trace-cmd reads the uprobe transport (``transport = "uprobe"``, shipped config).

A kernel-tier test, so it runs in the VM: trace-cmd writes /proc/sys/kernel/ftrace_enabled
before it records anything, and this development machine refuses that write (EPERM) for
every event, the kernel's own included; the VM's kernel allows it. The rest of the uprobe
transport's tests are in tests/uprobe/, on this host.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from uprobe.conftest import GROUP, Agent, shipped_config
from waiting import scaled

from rezolus_ue.schema import CPU_USAGE
from tracefs_tools import Tracefs, find_tracefs

pytestmark = pytest.mark.kernel


def test_trace_cmd_records_and_reports_named_fields(tmp_path):
    tfs = Tracefs(find_tracefs(mount=True))
    tc = shutil.which("trace-cmd")
    assert tc, "trace-cmd is not installed: scripts/setup.sh --dev installs it"
    a = Agent("run", "--config", str(shipped_config(tmp_path)), "--interval", "200ms")
    try:
        a.wait_defined(tfs)
        out = tmp_path / "trace.dat"
        rec = subprocess.run([tc, "record", "-q", "-o", str(out), "-e",
                              f"{GROUP}:{CPU_USAGE.name}", "sleep", "3"],
                             capture_output=True, text=True, timeout=scaled(300))
        assert rec.returncode == 0, rec.stderr
        rep = subprocess.run([tc, "report", "-i", str(out)], capture_output=True, text=True,
                             timeout=scaled(300))
        lines = [ln for ln in rep.stdout.splitlines() if f"{CPU_USAGE.name}:" in ln]
        assert lines, rep.stdout[-2000:] + rep.stderr[-2000:]
        assert all(f"{f.name}=" in lines[-1] for f in CPU_USAGE.fields), lines[-1]
    finally:
        a.close()
