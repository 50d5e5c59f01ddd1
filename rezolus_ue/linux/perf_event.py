"""perf_event_open(2) binding: the attr, the syscall and counting event fds.

Hand-written against ``include/uapi/linux/perf_event.h``; no library is involved. The
layouts here are ABI: ``struct perf_event_attr`` up to ``PERF_ATTR_SIZE_VER8`` (136
bytes). Unit tests pin every size and offset. Producers use this module directly (the
perf samplers count with ``PerfEvent``, the BPF loader attaches with ``perf_event_open``);
the sample ring that consumers read is ``perf_ring``, built on it. Only the constants
some code uses are declared: the header has the rest.

Kernel interfaces used:
- ``perf_event_open`` (syscall 298 on x86_64, 241 on aarch64/riscv64)
- ``PERF_EVENT_IOC_ENABLE`` / ``DISABLE`` / ``RESET`` ioctls, ``read`` of a counter

Every ``OSError`` is translated here into ``rezolus_ue.errors``; callers never see errno.

Over 500 lines because the attr layout, its flag word, the syscall and the errno
translation are one ABI that only make sense together; the sample ring is apart.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import struct
from dataclasses import dataclass
from typing import Self

from ..errors import KernelFeatureMissing, PermissionDenied, RezolusError, TracepointBusy
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
PERF_COUNT_HW_BRANCH_MISSES = 5

# --- enum perf_sw_ids --------------------------------------------------------------------
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_COUNT_SW_PAGE_FAULTS = 2
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
PERF_COUNT_SW_CPU_MIGRATIONS = 4
PERF_COUNT_SW_DUMMY = 9

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
PERF_SAMPLE_IDENTIFIER = 1 << 16

# --- enum perf_event_read_format ---------------------------------------------------------
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_ID = 1 << 2
PERF_FORMAT_GROUP = 1 << 3
PERF_FORMAT_LOST = 1 << 4  # Linux 6.0

# --- perf_event_open flags ---------------------------------------------------------------
PERF_FLAG_FD_CLOEXEC = 1 << 3


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

# --- the perf_event_attr bitfield word ----------------------------------------------------
#: The bitfield's members in declaration order, one per bit (precise_ip has two).
_BITFIELD = (
    "disabled", "inherit", "pinned", "exclusive", "exclude_user", "exclude_kernel",
    "exclude_hv", "exclude_idle", "mmap", "comm", "freq", "inherit_stat", "enable_on_exec",
    "task", "watermark", "precise_ip", "precise_ip", "mmap_data", "sample_id_all",
    "exclude_host", "exclude_guest", "exclude_callchain_kernel", "exclude_callchain_user",
    "mmap2", "comm_exec", "use_clockid", "context_switch", "write_backward", "namespaces",
    "ksymbol", "bpf_event", "aux_output", "cgroup", "text_poke", "build_id", "inherit_thread",
    "remove_on_exec", "sigtrap", "aux_start_paused",
)
ATTR_PRECISE_IP_SHIFT = _BITFIELD.index("precise_ip")
ATTR_PRECISE_IP_MASK = 0b11 << ATTR_PRECISE_IP_SHIFT
#: Single-bit flags by their C field name, for PerfEventAttr.set_flags()/flag().
ATTR_FLAGS: dict[str, int] = {n: 1 << bit for bit, n in enumerate(_BITFIELD) if n != "precise_ip"}


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
    The bitfield word is the single u64 ``flags``; use the ``ATTR_FLAGS`` masks or
    ``set_flags()``. ``size`` defaults to ``sizeof`` so the kernel knows our version;
    older kernels accept it as long as the fields they don't know are zero.
    """

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),  # union: sample_freq (with the freq flag)
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),  # the bitfield word: disabled, inherit, ...
        ("wakeup_events", ctypes.c_uint32),  # union: wakeup_watermark (with the watermark flag)
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


_U64 = struct.Struct("=Q")


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
    if attr.type == PERF_TYPE_TRACEPOINT and err == errno.EINTR:
        # trace_uprobe refuses a perf reader while ftrace has the event enabled.
        return TracepointBusy(f"{what}: the tracepoint is enabled in ftrace, and a uprobe"
                              " event takes ftrace or perf readers, not both")
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
    """One perf event fd (``perf_ring.RingEvent`` adds the sample ring)."""

    def __init__(self, fd: int, attr: PerfEventAttr) -> None:
        self.fd = fd
        self.attr = attr
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
        """Close the fd; idempotent.

        The fd is forgotten before it is released: closing the last perf event of a
        tracepoint waits for an RCU grace period, and a signal handler (Ctrl-C) that
        raises right after ``os.close`` returns must not leave a closed fd behind for
        ``__del__`` to close again (EBADF, or another file that reused the number).
        """
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


