"""``top --from``: a recording replayed by publish interval, steerable.

``Replay`` indexes the recording by the agent's publish intervals
(``consume.intervals.split``) as it plays, keeping each interval once, compressed (the
native format's columnar tables: an hour of every event at the shipped config in tens of
MB, bench/replay.py), so a seek back decodes the one or two intervals it needs and a seek
forward reads on to the target. ``Playback`` is the clock: pause, step, seek, speed
(``SPEEDS``), and which interval is due when; ``Position`` is what the header says of it.
All pure but for the clock the loop passes in.
"""

from __future__ import annotations

import bisect
import math
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..intervals import Interval
from ..records import Record

#: Replay speeds, slowest first: as recorded, ten times, as fast as it can.
SPEEDS = (1.0, 10.0, math.inf)
#: Seek steps: the arrow keys, and ``[``/``]`` (PgUp/PgDn).
SEEK_SHORT_NS = 10 * 10**9
SEEK_LONG_NS = 60 * 10**9
_ZLIB_LEVEL = 1  # speed over size: the index is rebuilt every run


def fmt_offset(ns: int) -> str:
    """Return a span as H:MM:SS (M:SS under an hour)."""
    s = max(ns, 0) // 10**9
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02}:{sec:02}" if h else f"{m}:{sec:02}"


def fmt_speed(speed: float) -> str:
    """Return a speed as the header writes it."""
    return "max" if math.isinf(speed) else f"{speed:g}x"


@dataclass(frozen=True, slots=True)
class Position:
    """Where a replay is: the interval shown (its index and end), what is known of the
    recording (indexed so far; ``complete`` once read to its end), speed, pause, end."""

    index: int
    count: int
    complete: bool
    offset_ns: int  # the shown interval's end, from the recording's first record
    span_ns: int  # the recording's (or, while not complete, what is indexed)
    wall_ns: int  # the shown interval's end on the recording host's wall clock (0: unknown)
    speed: float
    paused: bool
    ended: bool

    def text(self) -> str:
        """Return the header's replay item: ``replay 1:02 / 1:00:00 14:03:22 #63/3600 10x``."""
        total = fmt_offset(self.span_ns) + ("" if self.complete else "+")
        count = str(self.count) + ("" if self.complete else "+")
        clock = ""
        if self.wall_ns:
            clock = " " + time.strftime("%H:%M:%S", time.localtime(self.wall_ns / 1e9))
        state = " PAUSED" if self.paused else " END" if self.ended else ""
        return (f"replay {fmt_offset(self.offset_ns)} / {total}{clock}"
                f" #{self.index + 1}/{count} {fmt_speed(self.speed)}{state}")


class Replay:
    """A recording's publish intervals, indexed as they are first read: each kept once as
    a compressed block, with its times, so any one is decoded again on demand."""

    def __init__(self, intervals: Iterable[Interval], wall_offset_ns: int = 0) -> None:
        self._it: Iterator[Interval] | None = iter(intervals)
        self.wall_offset_ns = wall_offset_ns
        self.ends: list[int] = []  # each interval's end (data time)
        self._blobs: list[bytes] = []
        self._last: tuple[int, list[Record]] | None = None  # the latest one decoded
        self.first_ns: int | None = None
        self.records = 0  # records indexed

    @property
    def complete(self) -> bool:
        """Return whether the whole recording has been read."""
        return self._it is None

    def __len__(self) -> int:
        return len(self.ends)

    def read(self, upto: int) -> bool:
        """Index intervals until ``upto`` is (or the recording ends); return whether it is."""
        from ..recording.tables import encode_tables, to_tables

        while len(self.ends) <= upto and self._it is not None:
            iv = next(self._it, None)
            if iv is None:
                self._it = None
                break
            if not iv.records:
                continue
            if self.first_ns is None:
                self.first_ns = iv.records[0].time_ns
            self.ends.append(iv.end_ns)
            self._blobs.append(zlib.compress(encode_tables(to_tables(iv.records)),
                                             _ZLIB_LEVEL))
            self.records += len(iv.records)
        return len(self.ends) > upto

    def interval(self, i: int) -> list[Record]:
        """Return interval ``i``'s records (indexed already), in time order."""
        from ..recording.tables import decode_tables, merge_by_time

        if self._last is not None and self._last[0] == i:
            return self._last[1]
        recs = list(merge_by_time(decode_tables(zlib.decompress(self._blobs[i]))))
        self._last = (i, recs)
        return recs

    def find(self, t_ns: int) -> int:
        """Return the interval that holds data time ``t_ns`` (reading on to it): the first
        ending at or after it, clamped to the recording."""
        while self._it is not None and (not self.ends or self.ends[-1] < t_ns):
            self.read(len(self.ends) + 63)
        if not self.ends:
            return -1
        return min(bisect.bisect_left(self.ends, t_ns), len(self.ends) - 1)

    def span_ns(self) -> int:
        """Return the data time from the first record to the last interval indexed."""
        return self.ends[-1] - self.first_ns if self.ends and self.first_ns is not None else 0

    def bytes(self) -> int:
        """Return the size of the compressed intervals kept."""
        return sum(map(len, self._blobs))


def parse_goto(text: str, start_ns: int, now_ns: int, wall_offset_ns: int) -> int:
    """Return the data time ``g`` asks for: ``HH:MM[:SS]`` a time of day on the recording
    host's clock (the first such time at or after the recording's start; an offset from
    the start if its wall clock is unknown), ``+10s``/``-1m`` from the interval shown,
    ``90s``/``5m`` from the start. Raise ValueError if it is none of these."""
    from ...config import parse_duration

    text = text.strip()
    if not text:
        raise ValueError("empty")
    if text[0] in "+-":
        d = parse_duration(text[1:])
        return now_ns + (d if text[0] == "+" else -d)
    if ":" in text:
        parts = text.split(":")
        if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{text!r}: expected HH:MM:SS")
        h, m, s = (int(p) for p in (*parts, "0")[:3])
        if m > 59 or s > 59:
            raise ValueError(f"{text!r}: expected HH:MM:SS")
        secs = h * 3600 + m * 60 + s
        if not wall_offset_ns:
            return start_ns + secs * 10**9
        wall0 = (start_ns + wall_offset_ns) / 1e9
        t0 = time.localtime(wall0)
        midnight = wall0 - (t0.tm_hour * 3600 + t0.tm_min * 60 + t0.tm_sec + wall0 % 1)
        target = midnight + secs
        if target < wall0 - 1:
            target += 86400
        return int(target * 1e9) - wall_offset_ns
    return start_ns + parse_duration(text)


class Playback:
    """A replay's clock: which interval is shown, and which are due to be fed next."""

    def __init__(self, replay: Replay, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.replay = replay
        self.clock = clock
        self.shown = -1  # the last interval fed
        self.speed = SPEEDS[0]
        self.paused = False
        self._anchor: tuple[int, int] | None = None  # (wall, data) time playing resumed

    @property
    def ended(self) -> bool:
        """Return whether the last interval is shown."""
        return self.replay.complete and self.shown >= len(self.replay) - 1

    def set_speed(self, speed: float) -> None:
        """Play at ``speed`` from now on."""
        self.speed = speed
        self._anchor = None

    def set_paused(self, paused: bool) -> None:
        """Pause, or resume from the interval shown."""
        self.paused = paused
        self._anchor = None

    def jump(self, i: int) -> None:
        """Show interval ``i`` next (the caller rebuilt its model up to it)."""
        self.shown = i
        self._anchor = None

    def due(self) -> list[int]:
        """Return the intervals to feed now (none while paused), in order."""
        if self.paused:
            return []
        r = self.replay
        now = self.clock()
        nxt = self.shown + 1
        if not r.read(nxt):
            return []
        if math.isinf(self.speed):  # one at a time: the loop feeds them within its budget
            self.shown = nxt
            return [nxt]
        if self._anchor is None:
            base = r.ends[self.shown] if self.shown >= 0 else r.ends[0]
            self._anchor = (now, base)
            if self.shown < 0:
                self.shown = 0
                return [0]
        wall0, data0 = self._anchor
        data_now = data0 + (now - wall0) * self.speed
        out = []
        while r.read(nxt) and r.ends[nxt] <= data_now:
            out.append(nxt)
            nxt += 1
        if out:
            self.shown = out[-1]
        return out

    def wait_ns(self) -> int:
        """Return how long until the next interval is due (0: now or unknown)."""
        r = self.replay
        nxt = self.shown + 1
        if self.paused or self._anchor is None or math.isinf(self.speed) or nxt >= len(r):
            return 0
        wall0, data0 = self._anchor
        return max(0, int((r.ends[nxt] - data0) / self.speed) + wall0 - self.clock())

    def position(self) -> Position:
        """Return where the replay is."""
        r = self.replay
        i = max(self.shown, 0)
        end = r.ends[i] if i < len(r) else 0
        first = r.first_ns or 0
        return Position(self.shown, len(r), r.complete, end - first if end else 0,
                        r.span_ns(), end + r.wall_offset_ns if end and r.wall_offset_ns
                        else 0, self.speed, self.paused, self.ended)
