"""The small exception hierarchy every kernel-facing boundary translates into.

OS errors (errno) are caught where a kernel interface is touched and re-raised as one of
these, each carrying a message that says what to do. The CLI prints ``str(err)`` as one
line and exits non-zero; nothing above the boundary sees a raw ``OSError``.
"""

from __future__ import annotations


class RezolusError(Exception):
    """Base class: a condition the user can act on; ``str()`` is the one-line message."""

    exit_code = 1


class ConfigError(RezolusError):
    """A configuration file or command-line value is invalid."""

    exit_code = 2


class PermissionDenied(RezolusError):
    """The kernel refused access (EACCES/EPERM); the message names the remedy."""


class KernelFeatureMissing(RezolusError):
    """The running kernel lacks a feature; ``feature`` names it, ``hint`` says how to get it."""

    def __init__(self, feature: str, hint: str) -> None:
        super().__init__(f"{feature} is not available: {hint}")
        self.feature = feature
        self.hint = hint


class SamplerUnavailable(RezolusError):
    """A sampler cannot run here; the agent disables it and keeps the others running."""

    def __init__(self, sampler: str, reason: str) -> None:
        super().__init__(f"sampler {sampler!r} unavailable: {reason}")
        self.sampler = sampler
        self.reason = reason


class EventConflict(RezolusError):
    """An event of the same name is already registered with another format (EADDRINUSE)."""
