"""uprobe events: parse, define and delete them through ``uprobe_events``.

A definition is one line, ``p:GROUP/EVENT PATH:OFFSET[(REF_CTR_OFFSET)] [NAME=FETCHARG ...]``
(Documentation/trace/uprobetracer.rst). Lines are only ever appended: opening the file
with ``O_TRUNC`` (a shell's ``>``) deletes every uprobe event on the system, everybody's.
`UprobeEvents` keeps its file open, so a process may define and delete events after it
gave up the right to open the file (a privilege drop); listing reads the file anew.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import EventNotFound, TracefsError, TracefsPermissionError
from .rawio import write_once

__all__ = ["ProbeBusy", "ProbeExists", "UprobeDefinition", "UprobeEvents", "parse_uprobe_events"]

_LINE_RE = re.compile(
    r"^p:(?P<group>[^/\s]+)/(?P<event>\S+)\s+(?P<path>\S+?):(?P<offset>0x[0-9a-fA-F]+|\d+)"
    r"(?:\((?P<ref>0x[0-9a-fA-F]+|\d+)\))?(?P<args>(?:\s+\S+)*)\s*$")


class ProbeExists(TracefsError):
    """An event of that group and name is already defined."""


class ProbeBusy(TracefsError):
    """The event is enabled (by perf or ftrace), so the kernel will not delete it."""


@dataclass(frozen=True)
class UprobeDefinition:
    """One uprobe event; ``args`` are its fetch arguments, space-separated."""

    group: str
    event: str
    path: str
    offset: int
    ref_ctr_offset: int | None = None
    args: str = ""

    @property
    def line(self) -> str:
        """Return the definition as written to ``uprobe_events``."""
        ref = f"({self.ref_ctr_offset:#x})" if self.ref_ctr_offset is not None else ""
        tail = f" {self.args}" if self.args else ""
        return f"p:{self.group}/{self.event} {self.path}:{self.offset:#x}{ref}{tail}"


def parse_uprobe_events(text: str) -> list[UprobeDefinition]:
    """Return the uprobe (entry) events listed in ``text`` (uprobe_events' contents);
    return probes (``r:``) and lines this parser does not know are left out."""
    out = []
    for line in text.splitlines():
        m = _LINE_RE.match(line.strip())
        if m is None:
            continue
        ref = m["ref"]
        out.append(UprobeDefinition(m["group"], m["event"], m["path"], int(m["offset"], 0),
                                    int(ref, 0) if ref is not None else None,
                                    " ".join(m["args"].split())))
    return out


class UprobeEvents:
    """``uprobe_events`` of one tracefs, opened for appending and kept open."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.path = self.root / "uprobe_events"
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise TracefsError(f"{self.path} does not exist: this kernel lacks uprobe events"
                               " (CONFIG_UPROBE_EVENTS)") from None
        except PermissionError as e:
            raise TracefsPermissionError(f"{self.path}: {e.strerror}; defining uprobe events"
                                         " needs root (or write access to that file)") from None

    def list(self) -> list[UprobeDefinition]:
        """Return every uprobe event defined now (anyone's)."""
        try:
            return parse_uprobe_events(self.path.read_text())
        except OSError as e:
            raise TracefsError(f"cannot read {self.path}: {e.strerror}") from None

    def define(self, d: UprobeDefinition) -> None:
        """Define ``d``; raise ProbeExists if its name is taken, TracefsError (with the
        kernel's error_log line when readable) if the kernel refuses the definition."""
        try:
            write_once(self._fd, d.line.encode() + b"\n")
        except OSError as e:
            if e.errno == errno.EEXIST:
                raise ProbeExists(f"{d.group}:{d.event} is already defined") from None
            raise TracefsError(f"cannot define {d.group}:{d.event}: {e.strerror}"
                               f"{self._error_log()}") from None

    def delete(self, group: str, event: str) -> None:
        """Delete one event; raise ProbeBusy while a consumer has it enabled,
        EventNotFound if there is none of that name."""
        try:
            write_once(self._fd, f"-:{group}/{event}\n".encode())
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise ProbeBusy(f"{group}:{event} is enabled by a consumer (perf or ftrace);"
                                " the kernel deletes it only once nobody uses it") from None
            if e.errno == errno.ENOENT:
                raise EventNotFound(f"no uprobe event {group}:{event}") from None
            raise TracefsError(f"cannot delete {group}:{event}: {e.strerror}") from None

    def _error_log(self) -> str:
        try:
            lines = (self.root / "error_log").read_text().strip().splitlines()
        except OSError:
            return ""
        return f" (error_log: {' '.join(lines[-2:]).strip()})" if lines else ""

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> UprobeEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
