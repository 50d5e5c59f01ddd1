"""The soak (soak.py) for a few seconds in the VM: the script works end to end, nothing
is lost, the agent exits cleanly. The last 10-minute run's figures are in soak.py."""

from __future__ import annotations

import pytest

from .soak import soak

pytestmark = pytest.mark.kernel


def test_short_soak(tmp_path) -> None:
    from kernel.test_agent_e2e import without_bpf

    # Without the BPF samplers: loading them all takes minutes under the VM's emulated CPU
    # (the 10-minute soak runs with them).
    f = soak(8, report_every=2, config=without_bpf(tmp_path))
    assert f["records"] > 0 and f["events"] >= 10
    assert f["lost"] == 0
    assert f["agent_exit"] == 0 and f["tracebacks"] == 0
