"""The soak (soak.py) for a few seconds, on this host through whichever transport the
kernel gives the agent: the script works end to end, nothing is lost, the agent exits
cleanly. The last 10-minute run's figures are in soak.py."""

from __future__ import annotations

import pytest
from kernel.conftest import Bus

from .conftest import wait_for
from .soak import soak

pytestmark = pytest.mark.live


def test_short_soak(bus: Bus) -> None:
    # Every sampler, BPF ones included, as the 10-minute soak runs (the soak's consumer
    # subscribes to the cheap events, as `rezolus-ue top` does).
    f = soak(8, report_every=2)
    assert f["records"] > 0 and f["events"] >= 10
    assert f["lost"] == 0
    assert f["agent_exit"] == 0 and f["tracebacks"] == 0
    wait_for(lambda: not bus.ours(), timeout=30, seen=bus.ours,
             what="the agent's events to go with its clean stop")
