"""Least privilege: parsing capability sets (pure) and dropping them (host, root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rezolus_ue import privilege
from rezolus_ue.linux import capabilities

STATUS = """Name:\tpython3
CapInh:\t0000000000000000
CapPrm:\t000001ffffffffff
CapEff:\t000001ffffffffff
CapBnd:\t000001ffffffffff
CapAmb:\t0000000000000000
NoNewPrivs:\t0
"""


def test_parse_status_and_members() -> None:
    caps = capabilities.parse_status(STATUS)
    assert caps["CapEff"] == (1 << 41) - 1 and caps["CapInh"] == 0
    assert capabilities.members(1 << 39 | 1 << 38) == {38, 39}
    assert capabilities.cap_name(39) == "CAP_BPF" and capabilities.cap_name(63) == "cap_63"


def test_missing_names_what_is_not_in_effect(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self/status").write_text(STATUS.replace("000001ffffffffff", "0000008000000000",
                                                         2))
    # CapPrm and CapEff now hold CAP_BPF (39) only.
    assert privilege.missing(privilege.RUNTIME_CAPS, tmp_path) == ["CAP_PERFMON"]


DROP_THEN_USE_BPF = """
import json, os
from rezolus_ue import privilege
from rezolus_ue.linux import capabilities
from rezolus_ue.samplers import Roots, SamplerContext
from rezolus_ue.samplers.scheduler_runqueue.sampler import SchedulerRunqueue
s = SchedulerRunqueue(SamplerContext(Roots(), {"attach": "auto", "collect": "on-demand"}))
s.start()  # as the agent: start as root, then drop, then load on demand
dropped = privilege.drop_to()
s.activate()
attached = s.bpf.attached
s.deactivate()
s.close()
print(json.dumps({"caps": capabilities.current(), "dropped": dropped, "attached": attached}))
"""


@pytest.mark.host
def test_after_dropping_the_agent_still_loads_and_attaches_bpf() -> None:
    """CAP_BPF + CAP_PERFMON are enough for on-demand BPF (the claim behind the drop)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (capabilities to drop)")
    from rezolus_ue.bpf import build

    if not build.object_path("scheduler_runqueue").exists():
        pytest.skip("BPF objects not built")
    p = subprocess.run([sys.executable, "-c", DROP_THEN_USE_BPF], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    want = 1 << capabilities.CAPS["CAP_BPF"] | 1 << capabilities.CAPS["CAP_PERFMON"]
    caps = out["caps"]
    assert caps["CapEff"] == caps["CapPrm"] == caps["CapBnd"] == want
    assert caps["CapInh"] == caps.get("CapAmb", 0) == 0
    assert "CAP_SYS_ADMIN" in out["dropped"] and "CAP_BPF" not in out["dropped"]
    assert out["attached"] is True


BECOME_NOBODY_THEN_USE_BPF = DROP_THEN_USE_BPF.replace("privilege.drop_to()",
                                                       'privilege.drop_to(user="nobody")')


@pytest.mark.host
def test_as_another_user_the_agent_still_loads_and_attaches_bpf() -> None:
    """`run --user`: a non-root uid with CAP_BPF + CAP_PERFMON loads and attaches on demand."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to become another user)")
    import pwd

    from rezolus_ue.bpf import build

    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user nobody")
    if not build.object_path("scheduler_runqueue").exists():
        pytest.skip("BPF objects not built")
    script = BECOME_NOBODY_THEN_USE_BPF.replace(
        'print(json.dumps({', 'print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), ')
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["uid"] == out["euid"] == nobody
    want = 1 << capabilities.CAPS["CAP_BPF"] | 1 << capabilities.CAPS["CAP_PERFMON"]
    assert out["caps"]["CapEff"] == out["caps"]["CapPrm"] == want
    assert "CAP_SETUID" in out["dropped"]
    assert out["attached"] is True
