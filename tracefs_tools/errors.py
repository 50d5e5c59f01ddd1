"""Typed errors of tracefs_tools; each message says what to do about it."""

from __future__ import annotations


class TracefsError(Exception):
    """Base class for tracefs problems."""


class TracefsNotFound(TracefsError):
    """tracefs is not mounted and could not be mounted."""


class TracefsPermissionError(TracefsError):
    """A tracefs file exists but this process may not read or write it."""


class EventNotFound(TracefsError):
    """The named event (or group, or instance) does not exist in tracefs."""
