"""perf_event_open(2) binding: counters, tracepoint samples and the mmap ring buffer.

Hand-written against ``include/uapi/linux/perf_event.h``; no library is involved. The
layouts here are ABI: ``struct perf_event_attr`` up to ``PERF_ATTR_SIZE_VER8`` (136
bytes), ``struct perf_event_header`` and the control words of ``struct
perf_event_mmap_page``. Unit tests pin every size and offset.

Kernel interfaces used:
- ``perf_event_open`` (syscall 298 on x86_64, 241 on aarch64/riscv64)
- ``PERF_EVENT_IOC_ENABLE`` / ``DISABLE`` / ``RESET`` ioctls, ``read`` of a counter
- ``mmap`` of 1 + 2^n pages as the sample ring buffer, ``poll`` for wakeups
- ``/sys/devices/system/cpu/online`` for the per-CPU fan-out

Every ``OSError`` is translated here into ``rezolus_ue.errors``; callers never see errno.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import select
import struct
import time
from dataclasses import dataclass
from typing import Self

from ..errors import KernelFeatureMissing, PermissionDenied, RezolusError
from . import ioctl

# --- enum perf_type_id -------------------------------------------------------------------
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_TRACEPOINT = 2
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4
PERF_TYPE_BREAKPOINT = 5

# --- enum perf_hw_id ---------------------------------------------------------------------
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_HW_CACHE_REFERENCES = 2
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_COUNT_HW_BRANCH_INSTRUCTIONS = 4
PERF_COUNT_HW_BRANCH_MISSES = 5
PERF_COUNT_HW_BUS_CYCLES = 6
PERF_COUNT_HW_STALLED_CYCLES_FRONTEND = 7
PERF_COUNT_HW_STALLED_CYCLES_BACKEND = 8
PERF_COUNT_HW_REF_CPU_CYCLES = 9

# --- enum perf_sw_ids --------------------------------------------------------------------
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_COUNT_SW_PAGE_FAULTS = 2
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
PERF_COUNT_SW_CPU_MIGRATIONS = 4
PERF_COUNT_SW_PAGE_FAULTS_MIN = 5
PERF_COUNT_SW_PAGE_FAULTS_MAJ = 6
PERF_COUNT_SW_ALIGNMENT_FAULTS = 7
PERF_COUNT_SW_EMULATION_FAULTS = 8
PERF_COUNT_SW_DUMMY = 9
PERF_COUNT_SW_BPF_OUTPUT = 10
PERF_COUNT_SW_CGROUP_SWITCHES = 11  # Linux 5.13

# --- enum perf_event_sample_format -------------------------------------------------------
PERF_SAMPLE_IP = 1 << 0
PERF_SAMPLE_TID = 1 << 1
PERF_SAMPLE_TIME = 1 << 2
PERF_SAMPLE_ADDR = 1 << 3
PERF_SAMPLE_READ = 1 << 4
PERF_SAMPLE_CALLCHAIN = 1 << 5
PERF_SAMPLE_ID = 1 << 6
PERF_SAMPLE_CPU = 1 << 7
PERF_SAMPLE_PERIOD = 1 << 8
PERF_SAMPLE_STREAM_ID = 1 << 9
PERF_SAMPLE_RAW = 1 << 10
PERF_SAMPLE_BRANCH_STACK = 1 << 11
PERF_SAMPLE_REGS_USER = 1 << 12
PERF_SAMPLE_STACK_USER = 1 << 13
PERF_SAMPLE_WEIGHT = 1 << 14
PERF_SAMPLE_DATA_SRC = 1 << 15
PERF_SAMPLE_IDENTIFIER = 1 << 16
PERF_SAMPLE_TRANSACTION = 1 << 17
PERF_SAMPLE_REGS_INTR = 1 << 18
PERF_SAMPLE_PHYS_ADDR = 1 << 19
PERF_SAMPLE_AUX = 1 << 20
PERF_SAMPLE_CGROUP = 1 << 21

# --- enum perf_event_read_format ---------------------------------------------------------
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_ID = 1 << 2
PERF_FORMAT_GROUP = 1 << 3
PERF_FORMAT_LOST = 1 << 4  # Linux 6.0

# --- enum perf_event_type (perf_event_header.type) ---------------------------------------
PERF_RECORD_MMAP = 1
PERF_RECORD_LOST = 2
PERF_RECORD_COMM = 3
PERF_RECORD_EXIT = 4
PERF_RECORD_THROTTLE = 5
PERF_RECORD_UNTHROTTLE = 6
PERF_RECORD_FORK = 7
PERF_RECORD_READ = 8
PERF_RECORD_SAMPLE = 9
PERF_RECORD_MMAP2 = 10
PERF_RECORD_AUX = 11
PERF_RECORD_ITRACE_START = 12
PERF_RECORD_LOST_SAMPLES = 13
PERF_RECORD_SWITCH = 14
PERF_RECORD_SWITCH_CPU_WIDE = 15
PERF_RECORD_NAMESPACES = 16
PERF_RECORD_KSYMBOL = 17
PERF_RECORD_BPF_EVENT = 18
PERF_RECORD_CGROUP = 19
PERF_RECORD_TEXT_POKE = 20
PERF_RECORD_AUX_OUTPUT_HW_ID = 21

# --- perf_event_open flags ---------------------------------------------------------------
PERF_FLAG_FD_NO_GROUP = 1 << 0
PERF_FLAG_FD_OUTPUT = 1 << 1
PERF_FLAG_PID_CGROUP = 1 << 2
PERF_FLAG_FD_CLOEXEC = 1 << 3

PERF_IOC_FLAG_GROUP = 1 << 0

# --- attr sizes --------------------------------------------------------------------------
PERF_ATTR_SIZE_VER0 = 64
PERF_ATTR_SIZE_VER1 = 72
PERF_ATTR_SIZE_VER2 = 80
PERF_ATTR_SIZE_VER3 = 96
PERF_ATTR_SIZE_VER4 = 104
PERF_ATTR_SIZE_VER5 = 112
PERF_ATTR_SIZE_VER6 = 120
PERF_ATTR_SIZE_VER7 = 128
PERF_ATTR_SIZE_VER8 = 136

# --- the perf_event_attr bitfield word (bit positions in declaration order) --------------
ATTR_DISABLED = 1 << 0
ATTR_INHERIT = 1 << 1
ATTR_PINNED = 1 << 2
ATTR_EXCLUSIVE = 1 << 3
ATTR_EXCLUDE_USER = 1 << 4
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6
ATTR_EXCLUDE_IDLE = 1 << 7
ATTR_MMAP = 1 << 8
ATTR_COMM = 1 << 9
ATTR_FREQ = 1 << 10
ATTR_INHERIT_STAT = 1 << 11
ATTR_ENABLE_ON_EXEC = 1 << 12
ATTR_TASK = 1 << 13
ATTR_WATERMARK = 1 << 14
ATTR_PRECISE_IP_SHIFT = 15  # two bits: 15-16
ATTR_PRECISE_IP_MASK = 0b11 << ATTR_PRECISE_IP_SHIFT
ATTR_MMAP_DATA = 1 << 17
ATTR_SAMPLE_ID_ALL = 1 << 18
ATTR_EXCLUDE_HOST = 1 << 19
ATTR_EXCLUDE_GUEST = 1 << 20
ATTR_EXCLUDE_CALLCHAIN_KERNEL = 1 << 21
ATTR_EXCLUDE_CALLCHAIN_USER = 1 << 22
ATTR_MMAP2 = 1 << 23
ATTR_COMM_EXEC = 1 << 24
ATTR_USE_CLOCKID = 1 << 25
ATTR_CONTEXT_SWITCH = 1 << 26
ATTR_WRITE_BACKWARD = 1 << 27
ATTR_NAMESPACES = 1 << 28
ATTR_KSYMBOL = 1 << 29
ATTR_BPF_EVENT = 1 << 30
ATTR_AUX_OUTPUT = 1 << 31
ATTR_CGROUP = 1 << 32
ATTR_TEXT_POKE = 1 << 33
ATTR_BUILD_ID = 1 << 34
ATTR_INHERIT_THREAD = 1 << 35
ATTR_REMOVE_ON_EXEC = 1 << 36
ATTR_SIGTRAP = 1 << 37
ATTR_AUX_START_PAUSED = 1 << 38  # Linux 6.13

# Single-bit flags by their C field name, for PerfEventAttr.set_flags()/flag().
ATTR_FLAGS: dict[str, int] = {
    "disabled": ATTR_DISABLED,
    "inherit": ATTR_INHERIT,
    "pinned": ATTR_PINNED,
    "exclusive": ATTR_EXCLUSIVE,
    "exclude_user": ATTR_EXCLUDE_USER,
    "exclude_kernel": ATTR_EXCLUDE_KERNEL,
    "exclude_hv": ATTR_EXCLUDE_HV,
    "exclude_idle": ATTR_EXCLUDE_IDLE,
    "mmap": ATTR_MMAP,
    "comm": ATTR_COMM,
    "freq": ATTR_FREQ,
    "inherit_stat": ATTR_INHERIT_STAT,
    "enable_on_exec": ATTR_ENABLE_ON_EXEC,
    "task": ATTR_TASK,
    "watermark": ATTR_WATERMARK,
    "mmap_data": ATTR_MMAP_DATA,
    "sample_id_all": ATTR_SAMPLE_ID_ALL,
    "exclude_host": ATTR_EXCLUDE_HOST,
    "exclude_guest": ATTR_EXCLUDE_GUEST,
    "exclude_callchain_kernel": ATTR_EXCLUDE_CALLCHAIN_KERNEL,
    "exclude_callchain_user": ATTR_EXCLUDE_CALLCHAIN_USER,
    "mmap2": ATTR_MMAP2,
    "comm_exec": ATTR_COMM_EXEC,
    "use_clockid": ATTR_USE_CLOCKID,
    "context_switch": ATTR_CONTEXT_SWITCH,
    "write_backward": ATTR_WRITE_BACKWARD,
    "namespaces": ATTR_NAMESPACES,
    "ksymbol": ATTR_KSYMBOL,
    "bpf_event": ATTR_BPF_EVENT,
    "aux_output": ATTR_AUX_OUTPUT,
    "cgroup": ATTR_CGROUP,
    "text_poke": ATTR_TEXT_POKE,
    "build_id": ATTR_BUILD_ID,
    "inherit_thread": ATTR_INHERIT_THREAD,
    "remove_on_exec": ATTR_REMOVE_ON_EXEC,
    "sigtrap": ATTR_SIGTRAP,
    "aux_start_paused": ATTR_AUX_START_PAUSED,
}


# --- ioctls -----------------------------------------------------------------------------
PERF_EVENT_IOC_ENABLE = ioctl.io("$", 0)
PERF_EVENT_IOC_DISABLE = ioctl.io("$", 1)
PERF_EVENT_IOC_REFRESH = ioctl.io("$", 2)
PERF_EVENT_IOC_RESET = ioctl.io("$", 3)
PERF_EVENT_IOC_PERIOD = ioctl.iow("$", 4, 8)  # _IOW('$', 4, __u64)
PERF_EVENT_IOC_SET_OUTPUT = ioctl.io("$", 5)
PERF_EVENT_IOC_ID = ioctl.ior("$", 7, 8)  # _IOR('$', 7, __u64 *)


# --- struct perf_event_attr --------------------------------------------------------------
class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` as of PERF_ATTR_SIZE_VER8 (136 bytes, up to config3).

    C unions appear under their first-or-most-used member; the aliases are properties.
    The bitfield word is the single u64 ``flags``; use the ``ATTR_*`` masks or
    ``set_flags()``. ``size`` defaults to ``sizeof`` so the kernel knows our version;
    older kernels accept it as long as the fields they don't know are zero.
    """

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),  # union: sample_freq (with ATTR_FREQ)
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),  # the bitfield word: disabled, inherit, ...
        ("wakeup_events", ctypes.c_uint32),  # union: wakeup_watermark (with ATTR_WATERMARK)
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),  # union: bp_addr, kprobe_func, uprobe_path
        ("config2", ctypes.c_uint64),  # union: bp_len, kprobe_addr, probe_offset
        ("branch_sample_type", ctypes.c_uint64),  # VER2
        ("sample_regs_user", ctypes.c_uint64),  # VER3
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),  # VER4
        ("aux_watermark", ctypes.c_uint32),  # VER5
        ("sample_max_stack", ctypes.c_uint16),
        ("_reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),  # VER6
        ("aux_action", ctypes.c_uint32),  # was __reserved_3; aux_pause/resume bits (6.13)
        ("sig_data", ctypes.c_uint64),  # VER7
        ("config3", ctypes.c_uint64),  # VER8
    ]

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        if not self.size:
            self.size = ctypes.sizeof(self)

    @property
    def sample_freq(self) -> int:
        """Return the ``sample_freq`` alias of ``sample_period``."""
        return self.sample_period

    @sample_freq.setter
    def sample_freq(self, value: int) -> None:
        self.sample_period = value

    @property
    def wakeup_watermark(self) -> int:
        """Return the ``wakeup_watermark`` alias of ``wakeup_events``."""
        return self.wakeup_events

    @wakeup_watermark.setter
    def wakeup_watermark(self, value: int) -> None:
        self.wakeup_events = value

    def set_flags(self, **named: bool) -> Self:
        """Set or clear bitfield flags by C name (``disabled=True``); return self."""
        for name, on in named.items():
            try:
                mask = ATTR_FLAGS[name]
            except KeyError:
                raise ValueError(f"unknown perf_event_attr flag {name!r}") from None
            self.flags = (self.flags | mask) if on else (self.flags & ~mask)
        return self

    def flag(self, name: str) -> bool:
        """Return whether the bitfield flag called ``name`` is set."""
        return bool(self.flags & ATTR_FLAGS[name])

    @property
    def precise_ip(self) -> int:
        """Return the two-bit ``precise_ip`` skid constraint (0-3)."""
        return (self.flags & ATTR_PRECISE_IP_MASK) >> ATTR_PRECISE_IP_SHIFT

    @precise_ip.setter
    def precise_ip(self, level: int) -> None:
        if not 0 <= level <= 3:
            raise ValueError(f"precise_ip must be 0-3, not {level}")
        self.flags = (self.flags & ~ATTR_PRECISE_IP_MASK) | (level << ATTR_PRECISE_IP_SHIFT)

    def summary(self) -> str:
        """Return a one-line description for error messages."""
        names = [n for n, m in ATTR_FLAGS.items() if self.flags & m]
        return (
            f"type={self.type} config={self.config:#x} sample_period={self.sample_period} "
            f"sample_type={self.sample_type:#x} read_format={self.read_format:#x} "
            f"flags=[{','.join(names)}] size={self.size}"
        )


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


# --- the syscall -------------------------------------------------------------------------
_SYSCALL_NR = {"x86_64": 298, "aarch64": 241, "arm64": 241, "riscv64": 241}
_libc: ctypes.CDLL | None = None


def _syscall_nr() -> int:
    """Return perf_event_open's syscall number for this machine."""
    machine = platform.machine()
    try:
        return _SYSCALL_NR[machine]
    except KeyError:
        raise KernelFeatureMissing(
            "perf_event_open",
            f"rezolus-ue does not know the syscall number on {machine!r} "
            f"(known: {', '.join(sorted(_SYSCALL_NR))})",
        ) from None


def _get_libc() -> ctypes.CDLL:
    """Return the process's libc handle, loaded once."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        _libc = lib
    return _libc


def _paranoid(procfs_root: str = "/proc") -> str:
    """Return kernel.perf_event_paranoid as text, or "unknown"."""
    try:
        with open(f"{procfs_root}/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _open_error(err: int, attr: PerfEventAttr, pid: int, cpu: int) -> RezolusError:
    """Return the rezolus error for a perf_event_open failure with ``err``."""
    what = f"perf_event_open({attr.summary()}, pid={pid}, cpu={cpu})"
    if err in (errno.EACCES, errno.EPERM):
        return PermissionDenied(
            f"{what} was refused ({errno.errorcode[err]}): kernel.perf_event_paranoid="
            f"{_paranoid()}; run as root or with CAP_PERFMON (CAP_SYS_ADMIN before Linux "
            "5.8), or lower /proc/sys/kernel/perf_event_paranoid (per-CPU events and "
            "tracepoint RAW data need <= -1 or 0, kernel counting needs <= 1)"
        )
    hardware = attr.type in (PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_RAW)
    if hardware and err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return KernelFeatureMissing(
            "hardware perf counters",
            f"this CPU/VM exposes no PMU for {what} ({os.strerror(err)}); enable the "
            "virtual PMU in the hypervisor or run on bare metal",
        )
    if err == errno.EINVAL:
        return RezolusError(
            f"{what} was rejected as invalid (EINVAL): a flag, sample_type or read_format "
            "this kernel does not support, or a CPU that is offline"
        )
    if err == errno.E2BIG:
        return RezolusError(
            f"{what}: the kernel knows a smaller perf_event_attr (size {attr.size}) and a "
            "newer field is set"
        )
    if err == errno.EMFILE:
        return RezolusError(f"{what}: {os.strerror(err)}; raise the open-files limit (ulimit -n)")
    return RezolusError(f"{what}: {os.strerror(err)}")


def perf_event_open(
    attr: PerfEventAttr,
    pid: int,
    cpu: int,
    group_fd: int = -1,
    flags: int = PERF_FLAG_FD_CLOEXEC,
) -> int:
    """Return a new perf event fd for ``attr`` (pid/cpu semantics as in perf_event_open(2))."""
    libc = _get_libc()
    # syscall() is variadic: pass every argument as a full machine word.
    fd = libc.syscall(
        ctypes.c_long(_syscall_nr()),
        ctypes.byref(attr),
        ctypes.c_long(pid),
        ctypes.c_long(cpu),
        ctypes.c_long(group_fd),
        ctypes.c_ulong(flags),
    )
    if fd < 0:
        raise _open_error(ctypes.get_errno(), attr, pid, cpu)
    return fd


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


# --- one event fd ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CounterValue:
    """A counter read with its enabled/running times (None unless in read_format)."""

    value: int
    time_enabled: int | None
    time_running: int | None

    @property
    def scaled(self) -> int:
        """Return the value extrapolated to the enabled time when the PMU was multiplexed."""
        if self.time_enabled is None or not self.time_running:
            return self.value
        if self.time_running >= self.time_enabled:
            return self.value
        return self.value * self.time_enabled // self.time_running


class PerfEvent:
    """One perf event fd, with its ring buffer when it samples."""

    def __init__(self, fd: int, attr: PerfEventAttr, ring: RingBuffer | None = None) -> None:
        self.fd = fd
        self.attr = attr
        self.ring = ring
        self._mmap: mmap.mmap | None = None
        self._read_len, self._read_struct = self._read_layout(attr.read_format)
        self._group_layout: tuple[int, int, struct.Struct] | None = None

    @staticmethod
    def _read_layout(read_format: int) -> tuple[int, struct.Struct]:
        """Return (bytes read(2) returns, struct of its value/enabled/running prefix).

        PERF_FORMAT_GROUP is supported for counting groups without ids or lost counts,
        read with ``read_group`` (whose layout depends on the number of members).
        """
        if read_format & PERF_FORMAT_GROUP:
            if read_format & (PERF_FORMAT_ID | PERF_FORMAT_LOST):
                raise ValueError("PERF_FORMAT_GROUP reads support no PERF_FORMAT_ID/LOST")
            return 0, _U64
        times = read_format & (PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING)
        # read(2) returns value [enabled] [running] [id] [lost]; we decode the first three.
        prefix = 1 + bin(times).count("1")
        extra = bool(read_format & PERF_FORMAT_ID) + bool(read_format & PERF_FORMAT_LOST)
        return 8 * (prefix + extra), struct.Struct(f"={prefix}Q")

    @classmethod
    def open(
        cls,
        attr: PerfEventAttr,
        pid: int,
        cpu: int,
        group_fd: int = -1,
        flags: int = PERF_FLAG_FD_CLOEXEC,
    ) -> PerfEvent:
        """Return a PerfEvent for a freshly opened ``attr``."""
        cls._read_layout(attr.read_format)  # reject before an fd exists to leak
        return cls(perf_event_open(attr, pid, cpu, group_fd, flags), attr)

    @classmethod
    def software(
        cls,
        config: int,
        cpu: int,
        pid: int = -1,
        *,
        read_format: int = 0,
        exclude_kernel: bool = False,
        start: bool = True,
    ) -> PerfEvent:
        """Return a counting PERF_TYPE_SOFTWARE event (``config`` is a PERF_COUNT_SW_*)."""
        return cls._counter(
            PERF_TYPE_SOFTWARE, config, cpu, pid, read_format, exclude_kernel, start
        )

    @classmethod
    def hardware(
        cls,
        config: int,
        cpu: int,
        pid: int = -1,
        *,
        read_format: int = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
        exclude_kernel: bool = False,
        start: bool = True,
    ) -> PerfEvent:
        """Return a counting PERF_TYPE_HARDWARE event (``config`` is a PERF_COUNT_HW_*).

        The default read_format records enabled/running times because hardware counters
        are multiplexed; ``read_counter().scaled`` compensates.
        """
        return cls._counter(
            PERF_TYPE_HARDWARE, config, cpu, pid, read_format, exclude_kernel, start
        )

    @classmethod
    def _counter(
        cls,
        type_: int,
        config: int,
        cpu: int,
        pid: int,
        read_format: int,
        exclude_kernel: bool,
        start: bool,
    ) -> PerfEvent:
        """Return an opened counting event, enabled from zero when ``start``."""
        attr = PerfEventAttr(type=type_, config=config, read_format=read_format)
        # Open disabled so enable() starts it from a reset count; exclude_hv because no
        # caller can see hypervisor time and some PMUs refuse it.
        attr.set_flags(disabled=True, exclude_hv=True, exclude_kernel=exclude_kernel)
        event = cls.open(attr, pid, cpu)
        if start:
            try:
                event.reset()
                event.enable()
            except BaseException:
                event.close()
                raise
        return event

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
        output: PerfEvent | None = None,
    ) -> PerfEvent:
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
    ) -> PerfEvent:
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

    def fileno(self) -> int:
        """Return the event fd."""
        return self.fd

    def _ioctl(self, request: int, name: str, arg: int = 0) -> None:
        """Issue an argument-less perf ioctl, translating errors."""
        try:
            fcntl.ioctl(self.fd, request, arg)
        except OSError as e:
            raise RezolusError(f"perf ioctl {name} on fd {self.fd}: {e.strerror}") from None

    def enable(self) -> None:
        """Start counting/sampling."""
        self._ioctl(PERF_EVENT_IOC_ENABLE, "ENABLE")

    def disable(self) -> None:
        """Stop counting/sampling."""
        self._ioctl(PERF_EVENT_IOC_DISABLE, "DISABLE")

    def reset(self) -> None:
        """Zero the count."""
        self._ioctl(PERF_EVENT_IOC_RESET, "RESET")

    def read_counter(self) -> CounterValue:
        """Return the count with its enabled/running times per ``read_format``."""
        try:
            data = os.read(self.fd, self._read_len)
        except OSError as e:
            raise RezolusError(f"read of perf counter fd {self.fd}: {e.strerror}") from None
        words = self._read_struct.unpack_from(data, 0)
        rf = self.attr.read_format
        enabled = running = None
        i = 1
        if rf & PERF_FORMAT_TOTAL_TIME_ENABLED:
            enabled = words[i]
            i += 1
        if rf & PERF_FORMAT_TOTAL_TIME_RUNNING:
            running = words[i]
        return CounterValue(words[0], enabled, running)

    def read_group(self, members: int) -> tuple[int, ...]:
        """Return the raw counts of this group leader's ``members`` events (itself first),
        from one read(2): with ``PERF_FORMAT_GROUP`` the kernel reads a whole group in one
        go, so reading another CPU's counters costs one IPI per group, not per counter."""
        return self.decode_group(self.read_group_raw(members), members)

    def read_group_raw(self, members: int) -> bytes:
        """Return what read(2) of this group leader returns (``decode_group`` decodes it)."""
        try:
            return os.read(self.fd, self._group(members)[2].size)
        except OSError as e:
            raise RezolusError(f"read of perf group fd {self.fd}: {e.strerror}") from None

    def decode_group(self, data: bytes, members: int) -> tuple[int, ...]:
        """Return the counts in ``data``, as read by ``read_group_raw(members)``."""
        _n, skip, st = self._group(members)
        words = st.unpack_from(data, 0)
        if words[0] != members:
            raise RezolusError(f"perf group fd {self.fd} has {words[0]} events, not {members}")
        return words[skip:]

    def _group(self, members: int) -> tuple[int, int, struct.Struct]:
        """Return (members, words before the counts, struct of the whole read)."""
        layout = self._group_layout
        if layout is None or layout[0] != members:
            rf = self.attr.read_format
            if not rf & PERF_FORMAT_GROUP:
                raise ValueError("read_group needs a leader opened with PERF_FORMAT_GROUP")
            times = bin(rf & (PERF_FORMAT_TOTAL_TIME_ENABLED
                              | PERF_FORMAT_TOTAL_TIME_RUNNING)).count("1")
            # u64 nr; [u64 time_enabled]; [u64 time_running]; u64 value[nr]
            layout = self._group_layout = (members, 1 + times,
                                           struct.Struct(f"={1 + times + members}Q"))
        return layout

    def read_count(self) -> int:
        """Return the raw count (not scaled; see read_counter().scaled)."""
        try:
            # Not os.pread: perf fds are not seekable and pread fails with ESPIPE.
            data = os.read(self.fd, self._read_len)
        except OSError as e:
            raise RezolusError(f"read of perf counter fd {self.fd}: {e.strerror}") from None
        return _U64.unpack_from(data, 0)[0]

    def close(self) -> None:
        """Unmap the ring and close the fd; idempotent.

        Each is forgotten before it is released: closing the last perf event of a
        tracepoint waits for an RCU grace period, and a signal handler (Ctrl-C) that
        raises right after ``os.close`` returns must not leave a closed fd behind for
        ``__del__`` to close again (EBADF, or another file that reused the number).
        """
        mm, self._mmap = self._mmap, None
        if mm is not None:
            mm.close()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Safety net only; owners call close(). getattr: __init__ may not have run.
        if getattr(self, "fd", -1) >= 0:
            self.close()


def _check_ring_pages(ring_pages: int) -> None:
    if ring_pages <= 0 or ring_pages & (ring_pages - 1):
        raise ValueError(f"ring_pages must be a power of two, not {ring_pages}")


def _set_clock(attr: PerfEventAttr, clockid: int | None) -> None:
    """Make the sample times of ``attr`` use ``clockid`` (None: the kernel's perf clock)."""
    if clockid is not None:
        attr.set_flags(use_clockid=True)
        attr.clockid = clockid


# --- CPU list ----------------------------------------------------------------------------
def parse_cpu_list(text: str) -> list[int]:
    """Return the CPUs in a kernel cpulist such as ``"0-3,5,7-8"`` (sorted, unique)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ValueError(f"bad cpulist element {part!r} in {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"bad cpulist range {part!r} in {text!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def online_cpus(sysfs_root: str = "/sys") -> list[int]:
    """Return the online CPU numbers from ``<sysfs_root>/devices/system/cpu/online``."""
    path = f"{sysfs_root}/devices/system/cpu/online"
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise RezolusError(f"cannot read online CPUs from {path}: {e.strerror}") from None
    try:
        return parse_cpu_list(text)
    except ValueError as e:
        raise RezolusError(f"{path}: {e}") from None


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
        self.events: list[PerfEvent] = []
        try:
            for cpu in self.cpus:
                self.events.append(
                    PerfEvent.tracepoint(
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


def _poller_of(events: list[PerfEvent]) -> select.poll:
    """Return a poll set waiting for input on each of ``events``."""
    poller = select.poll()
    for event in events:
        poller.register(event.fd, select.POLLIN)
    return poller


def _read_rings(events: list[PerfEvent]) -> list[Sample]:
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

    Each CPU's ring belongs to a never-firing dummy event (``PerfEvent.ring_owner``) and
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
        self.owners: list[PerfEvent] = []
        self._events: dict[int, list[PerfEvent]] = {}
        try:
            for cpu in self.cpus:
                self.owners.append(PerfEvent.ring_owner(cpu, ring_pages, sample_type,
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
        events: list[PerfEvent] = []
        try:
            for cpu, owner in zip(self.cpus, self.owners, strict=True):
                events.append(PerfEvent.tracepoint(
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
