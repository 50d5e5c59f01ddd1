"""Reliability suite: the agent under churn, kill -9 and missing features runs on this host
(``live`` marker) through whichever transport the kernel gives (``bus``); what is about
user_events itself stays in the ``kernel`` tier. Both use the fixtures of tests/kernel;
fuzzing runs in-process."""

from __future__ import annotations

from kernel.conftest import (  # noqa: F401 - fixtures re-exported
    bus,
    bus_instance,
    instance,
    tracefs,
    wait_for,
)
