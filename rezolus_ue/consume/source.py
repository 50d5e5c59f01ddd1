"""One record source for every consumer: live tracepoints, a recording, or JSON lines.

``open_source(None, events)`` is the live ``Subscription``; ``open_source(PATH, events)``
replays a recording (a native ``.rzr`` file, a flight recorder's ring directory, a Parquet
recording or one of its files: whatever ``recording.read_records`` reads). Both are
``Source``s: ``poll`` returns the next records in time order, as the same ``Record``
objects, so ``tail``, ``top``, ``record`` and ``exporter`` (and ``rezolus_ue.subscribe``)
read any of them alike. A source that will yield nothing more is ``exhausted``; a live
one never is.
"""

from __future__ import annotations

import json
import os
import select
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from ..errors import ConfigError, os_error_text
from .recording import read_meta, read_records
from .records import Record, record_from_json

#: What ``--from FILE`` takes, for the commands' help.
RECORDING_HELP = "a recording (rezolus-ue record / dump output, a ring directory or Parquet)"
#: The consumers' ``--costly`` option: by default they subscribe to cheap events only.
COSTLY_HELP = ("also subscribe to the costly events: those counted by BPF programs on hot"
               " paths (syscalls, scheduler, softirq, block IO, network, TCP), which every"
               " such kernel event pays for while they are enabled (docs/PERFORMANCE.md);"
               " `rezolus-ue events` shows each event's cost")


class Source(Protocol):
    """What a consumer reads records from."""

    #: Live tracepoints (a clock that runs) rather than a replay.
    live: bool
    #: Nothing more will come (the end of a recording).
    exhausted: bool

    @property
    def lost(self) -> int:
        """Records the kernel dropped (0 for a recording)."""
        ...

    @property
    def events(self) -> list[str]:
        """The events being read."""
        ...

    @property
    def wall_offset_ns(self) -> int:
        """Wall clock minus the records' CLOCK_MONOTONIC, to show times as local time."""
        ...

    def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
        """Return the next records, waiting up to ``timeout_ms`` for the first."""
        ...

    def drain(self) -> list[Record]:
        """Return what is already there, without waiting."""
        ...

    def close(self) -> None:
        """Release what the source holds (idempotent)."""
        ...

    def __enter__(self) -> Source: ...

    def __exit__(self, *exc: object) -> None: ...


class _Replay:
    """What replayed sources share: no losses, waits that only sleep once exhausted."""

    live = False
    lost = 0
    exhausted = False

    def _idle(self, timeout_ms: int) -> list[Record]:
        time.sleep(timeout_ms / 1000)  # nothing will come: an idle poll, as a live one
        return []

    def drain(self) -> list[Record]:
        """Nothing is buffered: ``poll`` reads on demand."""
        return []

    def __enter__(self) -> _Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release."""


class RecordingSource(_Replay):
    """Records replayed from a recording, ``batch`` per poll; exhausted at its end."""

    def __init__(self, path: str | os.PathLike[str], events: Sequence[str] | None = None,
                 batch: int = 10_000) -> None:
        self.path = path
        # Reading the metadata first refuses what is not a recording before any record.
        self.meta = read_meta(path)
        self._it: Iterator[Record] = read_records(path, events)
        self._events = list(events) if events is not None else []
        self.batch = batch

    @property
    def events(self) -> list[str]:
        """Return the events asked for (every event if none was)."""
        return self._events

    @property
    def wall_offset_ns(self) -> int:
        """Return the recording host's wall clock minus its CLOCK_MONOTONIC."""
        return int(self.meta.get("wall_offset_ns", 0))

    def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
        """Return the next ``batch`` records (after the end: none, once ``timeout_ms``)."""
        if self.exhausted:
            return self._idle(timeout_ms)
        out = []
        for r in self._it:
            out.append(r)
            if len(out) >= self.batch:
                break
        else:
            self.exhausted = True
        return out


class JsonLinesSource(_Replay):
    """Records from JSON lines (``Record.to_json``'s form) on a file or a pipe (``-``:
    stdin); exhausted at EOF. Tests and replays feed the recorder with it."""

    def __init__(self, path: str) -> None:
        self.name = "stdin" if path == "-" else path
        try:
            self.fd = 0 if path == "-" else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (OSError, ValueError) as e:
            raise ConfigError(os_error_text(e, path, "read")) from None
        self._partial = b""
        self._line = 0
        self.events: list[str] = []
        self.wall_offset_ns = 0

    def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
        """Return the records of the complete lines available within ``timeout_ms``."""
        if self.exhausted:
            return self._idle(timeout_ms)
        ready, _w, _x = select.select([self.fd], [], [], timeout_ms / 1000)
        if not ready:
            return []
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            self.exhausted = True
            chunk = b"\n"
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            self._line += 1
            if not line.strip():
                continue
            try:
                out.append(record_from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError) as e:
                raise ConfigError(f"{self.name}: line {self._line}: not a record: {e}") from None
        return out

    def close(self) -> None:
        """Close the file (not stdin)."""
        if self.fd > 0:
            os.close(self.fd)
        self.fd = -1


def open_source(source: str | os.PathLike[str] | None = None,
                events: Sequence[str] | None = None, *, wait: bool = True,
                asked: bool = True) -> Source:
    """Return the records of ``events`` (None: all) from ``source``.

    ``source`` None: the live tracepoints (a ``Subscription``: waits for the agent unless
    ``wait`` is false; ``asked``: the user named the events, so say which of them this
    host will not publish even while others come). A path: that recording, a ring
    directory or a Parquet recording (every event it holds if ``events`` is None).
    """
    if source is None:
        from .subscription import Subscription

        return Subscription(events, wait=wait, asked=asked)
    return RecordingSource(source, events)


def open_test_source(path: str, events: Sequence[str] | None) -> Source:
    """Return the source of the recorder's hidden ``--source-file``: a recording, or JSON
    lines (on stdin, a pipe, or a file that starts with ``{``)."""
    p = Path(path)
    if path == "-" or _json_lines(p):
        return JsonLinesSource(path)
    return RecordingSource(path, events)


def _json_lines(p: Path) -> bool:
    try:
        if not p.is_file():
            return stat.S_ISFIFO(os.stat(p).st_mode)
        with open(p, "rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except (OSError, ValueError) as e:
        raise ConfigError(os_error_text(e, p, "read")) from None


__all__ = ["JsonLinesSource", "RecordingSource", "Source", "open_source", "open_test_source"]
