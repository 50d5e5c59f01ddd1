"""Locate tracefs: the standard path, /proc/mounts, debugfs, or a fresh mount."""

from __future__ import annotations

import ctypes
import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import TracefsNotFound

__all__ = ["DEFAULT_ROOT", "MountEntry", "find_tracefs", "parse_mounts", "tracefs_candidates"]

DEFAULT_ROOT = Path("/sys/kernel/tracing")
_MOUNT_HINT = "mount it with: mount -t tracefs nodev /sys/kernel/tracing (as root)"
_OCTAL_RE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/mounts."""

    source: str
    target: str
    fstype: str
    options: str


def _unescape(field: str) -> str:
    """Return a /proc/mounts field with the kernel's octal escapes (`\\040`) decoded."""
    return _OCTAL_RE.sub(lambda m: chr(int(m[1], 8)), field)


def parse_mounts(text: str) -> list[MountEntry]:
    """Return the entries of a /proc/mounts (or /proc/self/mounts) text, in order."""
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            source, target, fstype, options = (_unescape(p) for p in parts[:4])
            entries.append(MountEntry(source, target, fstype, options))
    return entries


def tracefs_candidates(mounts_text: str) -> list[Path]:
    """Return where tracefs may be, best first: tracefs mounts, then debugfs/tracing."""
    entries = parse_mounts(mounts_text)
    tracefs = [Path(e.target) for e in entries if e.fstype == "tracefs"]
    # Before 4.1 tracing lived in debugfs; later kernels still automount tracefs there.
    debugfs = [Path(e.target) / "tracing" for e in entries if e.fstype == "debugfs"]
    return tracefs + debugfs


def _looks_like_tracefs(path: Path) -> bool:
    """Return True if `path` holds the tracefs files."""
    for name in ("events", "available_events"):
        try:
            os.stat(path / name)
            return True
        except PermissionError:
            # An unmounted /sys/kernel/tracing is an empty, world-readable sysfs directory;
            # being refused means tracefs (mode 0700) is there and the caller is not root.
            return True
        except OSError:
            continue
    return False


def _mount_tracefs(target: Path) -> None:
    """Mount tracefs on `target` with mount(2); raise TracefsNotFound on failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mount(b"nodev", os.fsencode(target), b"tracefs", ctypes.c_ulong(0), None)
    if rc != 0:
        err = ctypes.get_errno()
        raise TracefsNotFound(
            f"tracefs is not mounted and mounting it on {target} failed: "
            f"{os.strerror(err)} ({errno.errorcode.get(err, err)}); {_MOUNT_HINT}"
        )


def find_tracefs(mount: bool = True, proc_mounts: str | Path = "/proc/mounts") -> Path:
    """Return the tracefs mount point, mounting tracefs first if needed and allowed.

    Look at /sys/kernel/tracing, then tracefs mounts in `proc_mounts`, then debugfs's
    `tracing/`. If none holds tracefs and `mount` is true and we are root, mount tracefs at
    /sys/kernel/tracing. Raise TracefsNotFound saying how to mount it otherwise.
    """
    if _looks_like_tracefs(DEFAULT_ROOT):
        return DEFAULT_ROOT
    try:
        mounts_text = Path(proc_mounts).read_text()
    except OSError:
        mounts_text = ""  # no /proc (chroot, early boot): the fallbacks below still apply
    for candidate in tracefs_candidates(mounts_text):
        if _looks_like_tracefs(candidate):
            return candidate
    if mount and os.geteuid() == 0:
        _mount_tracefs(DEFAULT_ROOT)
        if _looks_like_tracefs(DEFAULT_ROOT):
            return DEFAULT_ROOT
    raise TracefsNotFound(
        f"tracefs is not mounted (not at {DEFAULT_ROOT}, none in {proc_mounts}, no debugfs); "
        + _MOUNT_HINT
    )
