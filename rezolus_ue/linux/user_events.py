"""ctypes binding for the Linux user_events ABI (``include/uapi/linux/user_events.h``).

Linux >= 6.4 with ``CONFIG_USER_EVENTS``. A process opens ``user_events_data``, registers
each event with ``DIAG_IOCSREG`` giving the address of a 32-bit *enable word*, and the kernel
sets or clears a bit in that word the moment a consumer (ftrace, perf, eBPF) enables or
disables the tracepoint. Checking whether anyone listens is therefore one memory read; a
record is written with ``writev(fd, [write_index, payload])``.

Lifetime rules this module follows:

* Enable words live in anonymous pages that are never unmapped: the kernel may write to a
  registered address until ``DIAG_IOCSUNREG`` returns, so the memory must outlive it.
* Closing the data file drops our references; events not registered with ``PERSIST`` are
  deleted by the kernel once no process or consumer references them.
* ``EBADF`` from a write means the event was disabled between our check and the write: a
  benign race, counted, never raised.
* Fork: the child inherits the data fd and the kernel copies our enable registrations into
  the child's address space, so the child's copy of an enable word tracks the consumer
  state too, and the child may write with the inherited fd. A child's ``DIAG_IOCSUNREG``
  affects only the child. After a fork the pages are copy-on-write, so the kernel updates
  an enable word from a workqueue (it must fault the page in) and the change lands a
  moment later instead of at once. The agent never forks after registering (see tests).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import mmap
import os
import struct
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

from tracefs_tools import Tracefs, TracefsError

from ..errors import EventConflict, KernelFeatureMissing, PermissionDenied, RezolusError
from . import ioctl

DIAG_IOC_MAGIC = "*"
# The uapi header encodes a *pointer* size into these numbers, not the struct size.
_PTR = ctypes.sizeof(ctypes.c_void_p)
DIAG_IOCSREG = ioctl.iowr(DIAG_IOC_MAGIC, 0, _PTR)
DIAG_IOCSDEL = ioctl.iow(DIAG_IOC_MAGIC, 1, _PTR)
DIAG_IOCSUNREG = ioctl.iow(DIAG_IOC_MAGIC, 2, _PTR)

#: enum user_reg_flag
REG_PERSIST = 1 << 0  # Linux 6.7: keep the event after the last reference (CAP_PERFMON)
REG_MULTI_FORMAT = 1 << 1  # Linux 6.10: same name, several formats ("name.<id>" tracepoints)


class UserReg(ctypes.Structure):
    """``struct user_reg`` (packed, 28 bytes)."""

    _pack_ = 1
    _fields_ = (
        ("size", ctypes.c_uint32),
        ("enable_bit", ctypes.c_uint8),
        ("enable_size", ctypes.c_uint8),
        ("flags", ctypes.c_uint16),
        ("enable_addr", ctypes.c_uint64),
        ("name_args", ctypes.c_uint64),
        ("write_index", ctypes.c_uint32),
    )


class UserUnreg(ctypes.Structure):
    """``struct user_unreg`` (packed, 16 bytes)."""

    _pack_ = 1
    _fields_ = (
        ("size", ctypes.c_uint32),
        ("disable_bit", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8),
        ("reserved2", ctypes.c_uint16),
        ("disable_addr", ctypes.c_uint64),
    )


assert ctypes.sizeof(UserReg) == 28 and ctypes.sizeof(UserUnreg) == 16

ENABLE_BIT = 0
_WORD = 4


class EnableWords:
    """Slots of 32-bit enable words in pages that are never unmapped."""

    def __init__(self) -> None:
        self._pages: list[tuple[mmap.mmap, int]] = []
        self._free: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def allocate(self) -> tuple[tuple[int, int], ctypes.c_uint32]:
        """Return (slot, word) for a zeroed free enable word; ``word.value`` reads it."""
        with self._lock:
            if not self._free:
                mm = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
                page = len(self._pages)
                self._pages.append((mm, addr))
                self._free.extend((page, i) for i in reversed(range(mmap.PAGESIZE // _WORD)))
            slot = self._free.pop()
        # A ctypes view of the word: `.value` is a C-level read, as cheap as Python gets.
        word = ctypes.c_uint32.from_address(self._pages[slot[0]][1] + slot[1] * _WORD)
        word.value = 0
        return slot, word

    def release(self, slot: tuple[int, int]) -> None:
        """Return a slot once the kernel no longer writes to it (after DIAG_IOCSUNREG)."""
        with self._lock:
            self._free.append(slot)


#: Process-wide pool: enable words must outlive every registration that points at them.
WORDS = EnableWords()


def _status_hint(path: Path) -> str:
    return (
        f"cannot open {path}: permission denied. Run as root, or give a group access: "
        f"`chgrp tracing {path} && chmod g+rw {path}` (and `chmod g+rx` on the tracefs"
        " directory) and add the agent's user to that group; never make it world-writable"
    )


def missing_user_events_hint(tracefs: Path, more: bool = True) -> str:
    """Return the one-line remedy for a kernel without user_events."""
    return (
        f"{tracefs}/user_events_data does not exist: user_events needs Linux >= 6.4 built"
        " with CONFIG_USER_EVENTS=y (Ubuntu 24.04 and newer kernels ship it; Debian's do not;"
        " elsewhere `transport = \"uprobe\"` works, docs/kernels.md)"
        + (". Run `rezolus-ue check` for the other features" if more else "")
    )


@dataclass
class Stats:
    """Write counters shared by every registration of one data file."""

    written: int = 0
    ebadf: int = 0
    errors: int = 0


class Registration:
    """One registered event: its write index and the enable word the kernel maintains."""

    __slots__ = ("__weakref__", "_data", "_slot", "flags", "name", "name_args", "word",
                 "write_index")

    def __init__(self, data: UserEventsData, name: str, name_args: str, write_index: int,
                 slot: tuple[int, int], word: ctypes.c_uint32, flags: int) -> None:
        self._data = data
        self.name = name
        self.name_args = name_args
        self.write_index = write_index
        self._slot = slot
        #: The enable word; hot loops test ``word.value`` (non-zero: a consumer listens).
        self.word = word
        self.flags = flags

    @property
    def address(self) -> int:
        """Return the address of the enable word, as given to the kernel."""
        return ctypes.addressof(self.word)

    @property
    def enabled(self) -> bool:
        """Return True while at least one consumer has the tracepoint enabled."""
        return self.word.value != 0

    def write(self, payload: bytes) -> bool:
        """Write one record; return False when it was dropped by the benign EBADF race."""
        return self._data.write(self.write_index, payload)

    def unregister(self) -> None:
        """Stop the kernel updating our enable word; the slot is then reused."""
        self._data.unregister(self)


class UserEventsData:
    """An open ``user_events_data`` file: registrations and writes go through it."""

    def __init__(self, tracefs: str | Path) -> None:
        self.tracefs = Path(tracefs)
        self.path = self.tracefs / "user_events_data"
        self.stats = Stats()
        self._regs: dict[str, Registration] = {}
        self._index_bytes: dict[int, bytes] = {}
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise KernelFeatureMissing("user_events", missing_user_events_hint(self.tracefs))\
                from None
        except PermissionError:
            raise PermissionDenied(_status_hint(self.path)) from None
        except OSError as e:
            raise RezolusError(f"cannot open {self.path}: {e.strerror}") from None
        _open_files.add(self)

    @property
    def fd(self) -> int:
        """Return the file descriptor (-1 once closed)."""
        return self._fd

    @property
    def registrations(self) -> dict[str, Registration]:
        """Return the live registrations by event name."""
        return dict(self._regs)

    def register(self, name_args: str, flags: int = 0) -> Registration:
        """Register an event from its ``name_args`` string and return its registration.

        Flags the running kernel does not know are dropped one at a time (6.4-6.6 reject
        every flag, 6.7-6.9 know only PERSIST); ``Registration.flags`` says what took.
        """
        name = name_args.split(" ", 1)[0].split(":", 1)[0]
        if name in self._regs:
            raise RezolusError(f"event {name} is already registered on this file")
        slot, word = WORDS.allocate()
        addr = ctypes.addressof(word)
        arg = ctypes.create_string_buffer(name_args.encode())
        try:
            while True:
                reg = UserReg(size=ctypes.sizeof(UserReg), enable_bit=ENABLE_BIT,
                              enable_size=_WORD, flags=flags, enable_addr=addr,
                              name_args=ctypes.addressof(arg))
                buf = bytearray(reg)
                try:
                    fcntl.ioctl(self._fd, DIAG_IOCSREG, buf, True)
                    break
                except OSError as e:
                    if e.errno == errno.EINVAL and flags:
                        # Retry without the newest flag the kernel may not know.
                        flags &= ~(1 << (flags.bit_length() - 1))
                        continue
                    raise self._register_error(name, name_args, flags, e) from None
        except BaseException:
            WORDS.release(slot)
            raise
        write_index = UserReg.from_buffer(buf).write_index
        r = Registration(self, name, name_args, write_index, slot, word, flags)
        self._regs[name] = r
        self._index_bytes[write_index] = struct.pack("=I", write_index)
        return r

    def _register_error(self, name: str, name_args: str, flags: int, e: OSError) -> Exception:
        if e.errno == errno.EADDRINUSE:
            other = registered_format(self.tracefs, name)
            fields = name_args.partition(" ")[2]
            return EventConflict(
                f"event {name} is already registered with another format"
                f" ({other or 'format unknown'}); rezolus-ue needs ({fields}). Stop the other"
                f" registrant or delete it: `rezolus-ue events --delete {name}`"
            )
        if e.errno in (errno.EPERM, errno.EACCES):
            what = "a persistent event (needs CAP_PERFMON)" if flags & REG_PERSIST else name
            return PermissionDenied(f"the kernel refused to register {what}: {e.strerror}")
        if e.errno == errno.EINVAL:
            return RezolusError(f"the kernel rejected the definition of {name}: '{name_args}'")
        if e.errno == errno.ENOMEM:
            return RezolusError(f"cannot register {name}: the kernel is out of user_events")
        return RezolusError(f"cannot register {name}: {e.strerror}")

    def write(self, write_index: int, payload: bytes) -> bool:
        """Write one record; return False when dropped by the benign EBADF race."""
        try:
            os.writev(self._fd, (self._index_bytes[write_index], payload))
        except OSError as e:
            if e.errno == errno.EBADF and self._fd >= 0:
                self.stats.ebadf += 1
                return False
            self.stats.errors += 1
            raise RezolusError(f"write to {self.path} failed: {e.strerror}") from None
        self.stats.written += 1
        return True

    def unregister(self, reg: Registration) -> None:
        """Tell the kernel to stop updating ``reg``'s enable word."""
        if self._regs.get(reg.name) is not reg:
            return
        unreg = UserUnreg(size=ctypes.sizeof(UserUnreg), disable_bit=ENABLE_BIT,
                          disable_addr=reg.address)
        try:
            fcntl.ioctl(self._fd, DIAG_IOCSUNREG, bytearray(unreg), False)
        except OSError as e:
            raise RezolusError(f"cannot unregister {reg.name}: {e.strerror}") from None
        del self._regs[reg.name]
        WORDS.release(reg._slot)

    def delete(self, name: str) -> None:
        """Ask the kernel to delete event ``name`` (see ``delete_event``)."""
        delete_event(self.tracefs, name)

    def close(self) -> None:
        """Unregister every event and close the file (idempotent)."""
        if self._fd < 0:
            return
        for reg in list(self._regs.values()):
            # On failure, closing the fd below still drops the kernel's reference.
            with contextlib.suppress(RezolusError):
                self.unregister(reg)
        os.close(self._fd)
        self._fd = -1
        _open_files.discard(self)

    def __enter__(self) -> UserEventsData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def registered_format(tracefs: Path, name: str) -> str | None:
    """Return the field list an event is registered with, from ``dynamic_events``."""
    try:
        lines = Tracefs(tracefs).dynamic_events()
    except TracefsError:
        return None
    for line in lines:
        head, _, rest = line.partition(" ")
        if head in (f"u:{name}", f"u:user_events/{name}"):
            return rest.strip()
    return None


_open_files: weakref.WeakSet[UserEventsData] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for f in list(_open_files):
        f.close()


def delete_event(tracefs: str | Path, name: str) -> None:
    """Ask the kernel to delete user event ``name``; it does only once nothing references
    it (no registration, no enabled consumer).

    Through an fd of its own: a registrant's fd holds references to what it registered.
    """
    path = Path(tracefs) / "user_events_data"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise RezolusError(f"cannot open {path}: {e.strerror}") from None
    try:
        # The argument is the string's address, which fcntl.ioctl cannot pass.
        if _libc().ioctl(fd, ctypes.c_ulong(DIAG_IOCSDEL), name.encode()) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    except OSError as e:
        if e.errno == errno.EBUSY:
            raise RezolusError(f"cannot delete {name}: it is still in use") from None
        if e.errno == errno.ENOENT:
            raise RezolusError(f"cannot delete {name}: no such event") from None
        raise RezolusError(f"cannot delete {name}: {e.strerror}") from None
    finally:
        os.close(fd)
