"""rezolus-ue: systems telemetry published as Linux user_events tracepoints.

``rezolus_ue.subscribe(patterns, source=None)`` is the API for local agents (see
``rezolus_ue.api`` and docs/api.md); it is imported on first use, so the agent and the
CLI do not load the consumers' modules.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("subscribe", "open_source", "Record", "Histogram", "Meta"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'rezolus_ue' has no attribute {name!r}")
