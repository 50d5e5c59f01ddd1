"""The small exception hierarchy every kernel-facing boundary translates into.

OS errors (errno) are caught where a kernel interface is touched and re-raised as one of
these, each carrying a message that says what to do. The CLI prints ``str(err)`` as one
line and exits non-zero; nothing above the boundary sees a raw ``OSError``.
"""

from __future__ import annotations

import errno


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


class TracepointBusy(RezolusError):
    """The kernel refused a reader of a tracepoint that another kind of reader holds: a
    uprobe event is read by ftrace or by perf_event_open, not both at once (EINTR)."""


class EventConflict(RezolusError):
    """An event of the same name is already registered with another format (EADDRINUSE)."""


#: What to do about the OS errors a user causes with a path (one declaration for every
#: command: names, permissions, full or read-only disks).
_PATH_REMEDIES = {
    errno.EACCES: "permission denied: run as a user who may {doing} it, or choose another path",
    errno.EPERM: "operation not permitted: run as a user who may {doing} it, or choose"
                 " another path",
    errno.EROFS: "read-only file system: choose a path on a writable file system",
    errno.ENOSPC: "no space left on the device: free some space or choose another path",
    errno.EDQUOT: "disk quota exceeded: free some space or choose another path",
    errno.ENAMETOOLONG: "file name too long: choose a shorter name",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.EISDIR: "is a directory",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EIO: "input/output error: the device reports a fault (see dmesg)",
}


def os_error_reason(err: OSError | ValueError, doing: str = "read") -> str:
    """Return why a path could not be used and what to do, as words for a message.

    ``err`` is an OSError, or the ValueError the os module raises for a NUL in a path."""
    if not isinstance(err, OSError):
        return "a path cannot contain a NUL character"
    return _PATH_REMEDIES.get(err.errno or 0, err.strerror or str(err)).format(doing=doing)


def os_error_text(err: OSError | ValueError, path: object, doing: str = "read") -> str:
    """Return one line saying that ``doing`` ``path`` failed, why, and what to do."""
    shown = repr(str(path)) if "\0" in str(path) else path
    return f"cannot {doing} {shown}: {os_error_reason(err, doing)}"
