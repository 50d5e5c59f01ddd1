"""tracefs_tools: find tracefs, read and toggle trace events, parse their formats.

Pure parsers (`parse_format`, `parse_user_events_status`, `parse_mounts`) are separate from
the I/O in `Tracefs`, which translates every OSError into the small hierarchy in `errors`.
"""

from .errors import EventNotFound, TracefsError, TracefsNotFound, TracefsPermissionError
from .format import EventFormat, FormatField, parse_format
from .mounts import MountEntry, find_tracefs, parse_mounts, tracefs_candidates
from .probes import (
    ProbeBusy,
    ProbeExists,
    UprobeDefinition,
    UprobeEvents,
    parse_uprobe_events,
)
from .status import UserEventsStatus, UserEventStatus, parse_user_events_status
from .tracefs import Tracefs

__all__ = [
    "EventFormat",
    "EventNotFound",
    "FormatField",
    "MountEntry",
    "ProbeBusy",
    "ProbeExists",
    "Tracefs",
    "TracefsError",
    "TracefsNotFound",
    "TracefsPermissionError",
    "UprobeDefinition",
    "UprobeEvents",
    "UserEventStatus",
    "UserEventsStatus",
    "find_tracefs",
    "parse_format",
    "parse_mounts",
    "parse_uprobe_events",
    "parse_user_events_status",
    "tracefs_candidates",
]
