"""The perf sample ring: tracepoint events on every CPU read through mmap rings.

What consumers (``tail``, ``top``, ``record``, the exporter) read our tracepoints with, as
``perf record -a`` does; built on ``perf_event`` (the attr and the syscall). The layouts
here are ABI: ``struct perf_event_header``, the PERF_RECORD_SAMPLE body and the control
words of ``struct perf_event_mmap_page``. Unit tests pin every offset.

Kernel interfaces used:
- ``mmap`` of 1 + 2^n pages of a perf event fd as the sample ring, ``poll`` for wakeups
- ``PERF_EVENT_IOC_SET_OUTPUT`` to share one ring per CPU among events
- ``/sys/devices/system/cpu/online`` for the per-CPU fan-out

Every ``OSError`` is translated here into ``rezolus_ue.errors``; callers never see errno.

Over 500 lines because decoding a record, the ring it sits in, the event that owns the
ring and the per-CPU fan-out are one protocol (data_head/data_tail ordering, shared
rings via SET_OUTPUT) that is easier to check whole.
"""

from __future__ import annotations

import errno
import mmap
import select
import struct
import time
from dataclasses import dataclass
from typing import Self

from ..errors import PermissionDenied, RezolusError
from .perf_event import (
    PERF_COUNT_SW_DUMMY,
    PERF_EVENT_IOC_SET_OUTPUT,
    PERF_FORMAT_GROUP,
    PERF_FORMAT_ID,
    PERF_FORMAT_LOST,
    PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING,
    PERF_SAMPLE_ADDR,
    PERF_SAMPLE_CALLCHAIN,
    PERF_SAMPLE_CPU,
    PERF_SAMPLE_ID,
    PERF_SAMPLE_IDENTIFIER,
    PERF_SAMPLE_IP,
    PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_RAW,
    PERF_SAMPLE_READ,
    PERF_SAMPLE_STREAM_ID,
    PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME,
    PERF_TYPE_SOFTWARE,
    PERF_TYPE_TRACEPOINT,
    PerfEvent,
    PerfEventAttr,
)
from .procfs import online_cpus

# --- enum perf_event_type (perf_event_header.type) ---------------------------------------
PERF_RECORD_LOST = 2
PERF_RECORD_THROTTLE = 5
PERF_RECORD_SAMPLE = 9
PERF_RECORD_LOST_SAMPLES = 13

# --- struct perf_event_mmap_page control words (fixed offsets in the first page) ---------
MMAP_PAGE_DATA_HEAD = 1024
MMAP_PAGE_DATA_TAIL = 1032
MMAP_PAGE_DATA_OFFSET = 1040  # Linux 4.1; zero before, data then starts at page 1
MMAP_PAGE_DATA_SIZE = 1048

_U64 = struct.Struct("=Q")
# data_head and data_tail are read and written with one 8-byte access: "=Q" moves a byte
# at a time, so a data_head read while the kernel advances it could tear.
_WORD = struct.Struct("@Q")
_HEADER = struct.Struct("=IHH")  # struct perf_event_header {u32 type; u16 misc; u16 size}
_LOST = struct.Struct("=QQ")  # PERF_RECORD_LOST body: u64 id, u64 lost
_U32 = struct.Struct("=I")

# --- decoding PERF_RECORD_SAMPLE ---------------------------------------------------------
@dataclass(slots=True)
class Sample:
    """One decoded PERF_RECORD_SAMPLE; a field is None unless its PERF_SAMPLE_* bit was set."""

    time: int | None
    cpu: int | None
    pid: int | None
    tid: int | None
    raw: bytes | None
    id: int | None = None
    stream_id: int | None = None
    period: int | None = None
    ip: int | None = None
    addr: int | None = None
    callchain: tuple[int, ...] | None = None


# Record is what RingBuffer.read() returns; only samples are surfaced, the rest is counted.
Record = Sample

# The fixed-size sample fields in ABI order, before the variable READ/CALLCHAIN/RAW parts.
# (bit, struct codes, Sample attribute per code; None = padding)
_FIXED_SAMPLE_FIELDS: tuple[tuple[int, str, tuple[str | None, ...]], ...] = (
    (PERF_SAMPLE_IDENTIFIER, "Q", ("id",)),
    (PERF_SAMPLE_IP, "Q", ("ip",)),
    (PERF_SAMPLE_TID, "II", ("pid", "tid")),
    (PERF_SAMPLE_TIME, "Q", ("time",)),
    (PERF_SAMPLE_ADDR, "Q", ("addr",)),
    (PERF_SAMPLE_ID, "Q", ("id",)),
    (PERF_SAMPLE_STREAM_ID, "Q", ("stream_id",)),
    (PERF_SAMPLE_CPU, "II", ("cpu", None)),  # u32 cpu, u32 res
    (PERF_SAMPLE_PERIOD, "Q", ("period",)),
)


class SampleDecoder:
    """Decode PERF_RECORD_SAMPLE bodies for one (sample_type, read_format) pair.

    Fields after PERF_SAMPLE_RAW in the ABI order (branch stack, registers, ...) are
    ignored: they follow everything decoded here, so they never shift our offsets.
    """

    def __init__(self, sample_type: int, read_format: int = 0) -> None:
        self.sample_type = sample_type
        self.read_format = read_format
        codes = "".join(c for bit, c, _ in _FIXED_SAMPLE_FIELDS if sample_type & bit)
        self._fixed = struct.Struct("=" + codes)
        self._names = [n for bit, _, ns in _FIXED_SAMPLE_FIELDS if sample_type & bit for n in ns]
        times = bin(read_format & (PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING))
        n_times = times.count("1")
        per_value = 1 + bool(read_format & PERF_FORMAT_ID) + bool(read_format & PERF_FORMAT_LOST)
        self._read_group = bool(read_format & PERF_FORMAT_GROUP)
        # Non-group: value [enabled] [running] [id] [lost]; group: nr [times] nr*values.
        self._read_fixed_words = n_times + (1 if self._read_group else per_value)
        self._read_per_value_words = per_value

    def decode(self, body: bytes) -> Sample:
        """Return the Sample encoded in ``body`` (the record without its 8-byte header)."""
        sample = Sample(None, None, None, None, None)
        for name, value in zip(self._names, self._fixed.unpack_from(body, 0), strict=True):
            if name is not None:
                setattr(sample, name, value)
        off = self._fixed.size
        st = self.sample_type
        if st & PERF_SAMPLE_READ:
            if self._read_group:
                (nr,) = _U64.unpack_from(body, off)
                off += 8 * (self._read_fixed_words + nr * self._read_per_value_words)
            else:
                off += 8 * self._read_fixed_words
        if st & PERF_SAMPLE_CALLCHAIN:
            (nr,) = _U64.unpack_from(body, off)
            sample.callchain = struct.unpack_from(f"={nr}Q", body, off + 8)
            off += 8 + 8 * nr
        if st & PERF_SAMPLE_RAW:
            (size,) = _U32.unpack_from(body, off)
            if off + 4 + size > len(body):
                raise struct.error("PERF_SAMPLE_RAW runs past the end of the record")
            sample.raw = bytes(body[off + 4 : off + 4 + size])
        return sample


# --- the ring buffer ---------------------------------------------------------------------
class RingBuffer:
    """Reader of a perf mmap ring: one control page followed by 2^n data pages.

    ``buf`` is the mmap (or, in tests, a bytearray laid out the same way). Records are
    copied out before ``data_tail`` is advanced, so the kernel never overwrites what is
    being parsed; with a writable mapping it drops new records instead and reports them
    as PERF_RECORD_LOST, which are summed into ``lost``. The kernel writes that record
    only once space frees up, ahead of the next record, so drops show up one event late.
    """

    def __init__(
        self,
        buf: mmap.mmap | bytearray,
        sample_type: int,
        read_format: int = 0,
        *,
        page_size: int = mmap.PAGESIZE,
        fd: int = -1,
    ) -> None:
        self._buf = buf
        self._fd = fd
        self.decoder = SampleDecoder(sample_type, read_format)
        (offset,) = _U64.unpack_from(buf, MMAP_PAGE_DATA_OFFSET)
        (size,) = _U64.unpack_from(buf, MMAP_PAGE_DATA_SIZE)
        if size == 0:  # kernels before 4.1 leave these zero
            offset, size = page_size, len(buf) - page_size
        if size <= 0 or size & (size - 1) or offset + size > len(buf):
            raise ValueError(f"bad ring layout: data_offset={offset} data_size={size}")
        self.data_offset = offset
        self.data_size = size
        self.lost = 0  # records the kernel dropped (PERF_RECORD_LOST / LOST_SAMPLES)
        self.skipped = 0  # other record types, counted and not decoded
        self.malformed = 0  # samples that did not fit sample_type; a bug if ever > 0

    def fileno(self) -> int:
        """Return the event fd behind this ring (for select.poll), or -1 if none."""
        return self._fd

    def _copy(self, pos: int, length: int) -> bytes:
        """Return ``length`` data-area bytes starting at ring position ``pos``, unwrapped."""
        start = self.data_offset + (pos & (self.data_size - 1))
        end_of_data = self.data_offset + self.data_size
        if start + length <= end_of_data:
            return self._buf[start : start + length]
        first = end_of_data - start
        return (
            self._buf[start:end_of_data]
            + self._buf[self.data_offset : self.data_offset + length - first]
        )

    def read(self) -> list[Record]:
        """Return the samples written since the last call and release their space."""
        buf = self._buf
        # data_head is read before any record (the acquire side). CPython's interpreter
        # runs atomic ops between this load and the data loads, which orders them.
        (head,) = _WORD.unpack_from(buf, MMAP_PAGE_DATA_HEAD)
        (tail,) = _WORD.unpack_from(buf, MMAP_PAGE_DATA_TAIL)
        out: list[Record] = []
        while tail < head:
            rtype, _misc, size = _HEADER.unpack(self._copy(tail, _HEADER.size))
            if size < _HEADER.size or tail + size > head:
                # Never happens with a sane kernel; drop what's left rather than spin.
                self.malformed += 1
                tail = head
                break
            body = self._copy(tail + _HEADER.size, size - _HEADER.size)
            tail += size
            if rtype == PERF_RECORD_SAMPLE:
                try:
                    out.append(self.decoder.decode(body))
                except struct.error:
                    self.malformed += 1
            elif rtype == PERF_RECORD_LOST:
                self.lost += _LOST.unpack_from(body, 0)[1]
            elif rtype == PERF_RECORD_LOST_SAMPLES:
                self.lost += _U64.unpack_from(body, 0)[0]
            else:
                self.skipped += 1
        # Written only after every record was copied out: the release side.
        _WORD.pack_into(buf, MMAP_PAGE_DATA_TAIL, tail)
        return out


# --- a sampling event with its ring --------------------------------------------------------
class RingEvent(PerfEvent):
    """A perf event that samples, with its ring buffer mapped as ``.ring`` (None when it
    writes into another event's ring)."""

    def __init__(self, fd: int, attr: PerfEventAttr, ring: RingBuffer | None = None) -> None:
        # Before super().__init__, which may raise: __del__ -> close() reads them.
        self.ring = ring
        self._mmap: mmap.mmap | None = None
        super().__init__(fd, attr)

    @classmethod
    def tracepoint(
        cls,
        tp_id: int,
        cpu: int,
        pid: int = -1,
        sample_type: int = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
        wakeup_events: int = 1,
        ring_pages: int = 8,
        *,
        clockid: int | None = time.CLOCK_MONOTONIC,
        start: bool = True,
        output: RingEvent | None = None,
    ) -> RingEvent:
        """Return a sampling PERF_TYPE_TRACEPOINT event with its ring mapped as ``.ring``,
        or writing into ``output``'s ring (same CPU and clock) when given.

        ``tp_id`` is the number in tracefs ``events/<group>/<name>/id``. Every hit is a
        sample (period 1). ``clockid`` makes PERF_SAMPLE_TIME comparable with
        ``time.clock_gettime_ns(clockid)``; None keeps the kernel's perf clock.
        """
        _check_ring_pages(ring_pages)
        attr = PerfEventAttr(
            type=PERF_TYPE_TRACEPOINT,
            config=tp_id,
            sample_period=1,
            sample_type=sample_type,
            wakeup_events=wakeup_events,
        )
        # Disabled until the ring is mapped: samples taken before that would be dropped.
        attr.set_flags(disabled=True)
        _set_clock(attr, clockid)
        event = cls.open(attr, pid, cpu)
        try:
            if output is None:
                event._map_ring(ring_pages)
            else:
                event._ioctl(PERF_EVENT_IOC_SET_OUTPUT, "SET_OUTPUT", output.fd)
            if start:
                event.enable()
        except BaseException:
            event.close()
            raise
        return event

    @classmethod
    def ring_owner(
        cls,
        cpu: int,
        ring_pages: int,
        sample_type: int = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
        *,
        clockid: int | None = time.CLOCK_MONOTONIC,
    ) -> RingEvent:
        """Return a never-firing software event on ``cpu`` whose mapped ring other events
        of that CPU write into (``tracepoint(output=...)``), as ``perf record`` shares one
        ring per CPU among all its events. ``sample_type`` is theirs: it decodes the ring.
        """
        _check_ring_pages(ring_pages)
        attr = PerfEventAttr(type=PERF_TYPE_SOFTWARE, config=PERF_COUNT_SW_DUMMY,
                             sample_type=sample_type)
        attr.set_flags(disabled=True)
        _set_clock(attr, clockid)  # SET_OUTPUT needs the same clock on both events
        event = cls.open(attr, -1, cpu)
        try:
            event._map_ring(ring_pages)
        except BaseException:
            event.close()
            raise
        return event

    def _map_ring(self, ring_pages: int) -> None:
        """Map 1 + ``ring_pages`` pages of the event fd and attach a RingBuffer."""
        length = (1 + ring_pages) * mmap.PAGESIZE
        try:
            # Writable so we own data_tail and the kernel never overwrites unread data.
            mm = mmap.mmap(
                self.fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError as e:
            if e.errno in (errno.EPERM, errno.EACCES):
                raise PermissionDenied(
                    f"mmap of a {ring_pages}-page perf ring was refused: over "
                    "kernel.perf_event_mlock_kb and RLIMIT_MEMLOCK; use fewer ring_pages, "
                    "raise /proc/sys/kernel/perf_event_mlock_kb, or run with CAP_IPC_LOCK"
                ) from None
            raise RezolusError(f"mmap of a perf ring ({length} bytes): {e.strerror}") from None
        self._mmap = mm
        self.ring = RingBuffer(mm, self.attr.sample_type, self.attr.read_format, fd=self.fd)

    def close(self) -> None:
        """Unmap the ring, then close the fd; idempotent (the mapping, too, is forgotten
        before it is released: see ``PerfEvent.close``)."""
        mm, self._mmap = self._mmap, None
        if mm is not None:
            mm.close()
        super().close()


def _check_ring_pages(ring_pages: int) -> None:
    if ring_pages <= 0 or ring_pages & (ring_pages - 1):
        raise ValueError(f"ring_pages must be a power of two, not {ring_pages}")


def _set_clock(attr: PerfEventAttr, clockid: int | None) -> None:
    """Make the sample times of ``attr`` use ``clockid`` (None: the kernel's perf clock)."""
    if clockid is not None:
        attr.set_flags(use_clockid=True)
        attr.clockid = clockid


# --- a tracepoint on every CPU -----------------------------------------------------------
class TracepointSubscription:
    """A tracepoint sampled on every online CPU, each CPU with its own ring.

    Per-CPU events with pid=-1 need root or CAP_PERFMON. Nothing in tracefs is written:
    the global ``tracing_on`` and ``trace`` buffer are not involved.
    """

    def __init__(
        self,
        tp_id: int,
        *,
        sample_type: int = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
        wakeup_events: int = 1,
        ring_pages: int = 8,
        clockid: int | None = time.CLOCK_MONOTONIC,
        sysfs_root: str = "/sys",
        cpus: list[int] | None = None,
    ) -> None:
        self.tp_id = tp_id
        self.cpus = online_cpus(sysfs_root) if cpus is None else list(cpus)
        self.events: list[RingEvent] = []
        try:
            for cpu in self.cpus:
                self.events.append(
                    RingEvent.tracepoint(
                        tp_id,
                        cpu,
                        -1,
                        sample_type,
                        wakeup_events,
                        ring_pages,
                        clockid=clockid,
                        start=False,
                    )
                )
            # Enabled together so no CPU starts early relative to the others.
            for event in self.events:
                event.enable()
        except BaseException:
            self.close()
            raise
        self._poller = _poller_of(self.events)

    @property
    def lost(self) -> int:
        """Return the total records the kernel dropped across all CPUs."""
        return sum(e.ring.lost for e in self.events if e.ring is not None)

    def drain(self) -> list[Sample]:
        """Return every pending sample from all rings, sorted by time."""
        return _read_rings(self.events)

    def poll(self, timeout_ms: int) -> list[Sample]:
        """Return samples after waiting up to ``timeout_ms`` for any CPU (-1: forever)."""
        if not self.events:
            return []
        self._poller.poll(timeout_ms)
        # Drain every ring, not just the ready ones: wakeup_events > 1 leaves samples
        # behind without a wakeup, and reading an empty ring is two loads.
        return self.drain()

    def close(self) -> None:
        """Close every per-CPU event; idempotent."""
        for event in self.events:
            event.close()
        self.events = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _poller_of(events: list[RingEvent]) -> select.poll:
    """Return a poll set waiting for input on each of ``events``."""
    poller = select.poll()
    for event in events:
        poller.register(event.fd, select.POLLIN)
    return poller


def _read_rings(events: list[RingEvent]) -> list[Sample]:
    """Return the pending samples of the rings of ``events``, sorted by time."""
    samples: list[Sample] = []
    for event in events:
        if event.ring is not None:
            samples.extend(event.ring.read())
    samples.sort(key=lambda s: -1 if s.time is None else s.time)
    return samples


# --- tracepoints on every CPU, one shared ring per CPU -----------------------------------
class TracepointRings:
    """Tracepoints sampled on every online CPU into one ring per CPU, as ``perf record -a``
    does.

    Each CPU's ring belongs to a never-firing dummy event (``RingEvent.ring_owner``) and
    every tracepoint event of that CPU writes into it (``PERF_EVENT_IOC_SET_OUTPUT``): the
    memory is pooled, so a busy tracepoint uses what quiet ones leave, and one poll and one
    read per CPU serve every tracepoint, however many. Records of all tracepoints arrive
    interleaved: the raw data's ``common_type`` says which wrote each. Tracepoints can be
    added while sampling. Nothing in tracefs is written.
    """

    def __init__(
        self,
        *,
        sample_type: int = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
        ring_pages: int = 128,
        clockid: int | None = time.CLOCK_MONOTONIC,
        sysfs_root: str = "/sys",
        cpus: list[int] | None = None,
    ) -> None:
        self.sample_type = sample_type
        self.clockid = clockid
        self.cpus = online_cpus(sysfs_root) if cpus is None else list(cpus)
        self.owners: list[RingEvent] = []
        self._events: dict[int, list[RingEvent]] = {}
        try:
            for cpu in self.cpus:
                self.owners.append(RingEvent.ring_owner(cpu, ring_pages, sample_type,
                                                        clockid=clockid))
        except BaseException:
            self.close()
            raise
        self._poller = _poller_of(self.owners)

    @property
    def tracepoints(self) -> list[int]:
        """Return the ids of the tracepoints being sampled."""
        return list(self._events)

    def add(self, tp_id: int) -> None:
        """Start sampling tracepoint ``tp_id`` on every CPU (all enabled together)."""
        if tp_id in self._events:
            return
        events: list[RingEvent] = []
        try:
            for cpu, owner in zip(self.cpus, self.owners, strict=True):
                events.append(RingEvent.tracepoint(
                    tp_id, cpu, -1, self.sample_type, clockid=self.clockid, start=False,
                    output=owner))
            for event in events:
                event.enable()
        except BaseException:
            for event in events:
                event.close()
            raise
        self._events[tp_id] = events

    def remove(self, tp_id: int) -> None:
        """Stop sampling tracepoint ``tp_id`` (its records already in the rings stay)."""
        events = self._events.get(tp_id, [])
        while events:  # one at a time: an interrupted remove() resumes where it stopped
            events.pop().close()
        self._events.pop(tp_id, None)

    @property
    def lost(self) -> int:
        """Return the records the kernel dropped because a ring was full, over all CPUs."""
        return sum(o.ring.lost for o in self.owners if o.ring is not None)

    @property
    def malformed(self) -> int:
        """Return the records that could not be parsed (a bug if ever > 0)."""
        return sum(o.ring.malformed for o in self.owners if o.ring is not None)

    def drain(self) -> list[Sample]:
        """Return every pending sample of every CPU, sorted by time."""
        return _read_rings(self.owners)

    def wait(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` (-1: forever) for a ring to have news; return whether
        one has (a record, or a lost-records report)."""
        if not self.owners:
            return False
        return bool(self._poller.poll(timeout_ms))

    def poll(self, timeout_ms: int) -> list[Sample]:
        """Return samples after waiting up to ``timeout_ms`` for any CPU (-1: forever)."""
        self.wait(timeout_ms)
        return self.drain()

    def close(self) -> None:
        """Stop every tracepoint, then release the rings; idempotent (and safe to call
        again after an interrupt stopped it part-way)."""
        while self._events:
            self.remove(next(iter(self._events)))
        while self.owners:
            self.owners.pop().close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
