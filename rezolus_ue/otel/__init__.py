"""OpenTelemetry metrics over user_events: ``UserEventsMetricExporter`` for applications.

Importing this package imports no OpenTelemetry code: the SDK loads when the exporter is
first named, so ``rezolus_ue.otel.wire`` serves readers without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .exporter import UserEventsMetricExporter

__all__ = ["UserEventsMetricExporter"]


def __getattr__(name: str) -> Any:
    if name == "UserEventsMetricExporter":
        from .exporter import UserEventsMetricExporter

        return UserEventsMetricExporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
