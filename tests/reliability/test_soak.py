"""The soak (soak.py) for a few seconds in the VM: the script works end to end, nothing
is lost, the agent exits cleanly. The 10-minute figures are in docs/PERFORMANCE.md."""

from __future__ import annotations

import pytest

from .soak import soak

pytestmark = pytest.mark.kernel


def test_short_soak() -> None:
    f = soak(8, report_every=2)
    assert f["records"] > 0 and f["events"] >= 10
    assert f["lost"] == 0
    assert f["agent_exit"] == 0 and f["tracebacks"] == 0
