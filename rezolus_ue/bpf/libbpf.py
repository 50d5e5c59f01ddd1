"""A ctypes binding of the system libbpf (``libbpf.so.1``, libbpf >= 1.0 semantics).

Only what rezolus-ue's BPF samplers use: open a CO-RE object, choose which programs load,
size maps and set initial values, load, attach and detach programs, map the
``BPF_F_MMAPABLE`` arrays, read BTF (struct layouts, section variables, tracepoint
types), probe program types, and run a program with BPF_PROG_TEST_RUN.

This module is the error boundary: libbpf's negative errnos and NULL-with-errno returns
become ``RezolusError`` subclasses that say what to do:

* ``PermissionDenied`` (EPERM): names CAP_BPF or CAP_PERFMON where this process lacks
  one, and otherwise says which step the kernel refused (``not_permitted``);
* ``KernelFeatureMissing``: no kernel BTF, no such tracepoint, program type unsupported;
* ``VerifierError``: the verifier rejected a program; names it and carries the last lines
  of the verifier log;
* ``BpfError``: anything else, with libbpf's own last log lines.

libbpf's log goes through one process-wide print callback into the ``logging`` module
(debug level) and, during an operation of this module, into that operation's capture, so
error messages can quote it.

Over 500 lines because it is one binding of one library: the ctypes signatures, the log
capture and the error boundary are shared by every wrapper (object, program, map, link,
BTF); split, each part would reach into the others' privates.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import KernelFeatureMissing, PermissionDenied, RezolusError

log = logging.getLogger("rezolus_ue.bpf")

LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG = 0, 1, 2
#: enum bpf_prog_type values used in probes.
BPF_PROG_TYPE_KPROBE = 2
BPF_PROG_TYPE_TRACEPOINT = 5
BPF_PROG_TYPE_RAW_TRACEPOINT = 17
BPF_PROG_TYPE_TRACING = 26
#: BTF kinds (linux/btf.h).
BTF_KIND_INT, BTF_KIND_ARRAY, BTF_KIND_STRUCT, BTF_KIND_TYPEDEF = 1, 3, 4, 8
#: Kinds that only qualify the type they refer to (volatile, const, restrict).
_BTF_QUALIFIERS = (9, 10, 11)
BTF_KIND_FUNC, BTF_KIND_VAR, BTF_KIND_DATASEC = 12, 14, 15
#: map_flags bit of arrays user space may mmap.
BPF_F_MMAPABLE = 1 << 10
#: Size of the verifier log buffer each object keeps (kernels >= 6.4 keep its tail).
VERIFIER_LOG_SIZE = 256 * 1024
#: Verifier log lines quoted in a VerifierError.
VERIFIER_TAIL_LINES = 12

#: The running kernel's BTF: what CO-RE relocates against, and whether it can at all.
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
BTF_HINT = ("the kernel needs CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux) to load"
            " CO-RE BPF programs")


class BpfError(RezolusError):
    """A libbpf operation failed for a reason without a more specific class."""

    def __init__(self, message: str, errno_: int = 0, log_lines: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.errno = errno_
        self.log_lines = log_lines


class VerifierError(BpfError):
    """The kernel's verifier rejected ``program``; ``verifier_log`` holds the log's tail."""

    def __init__(self, program: str, err: int, verifier_log: tuple[str, ...]) -> None:
        tail = "\n  ".join(verifier_log) or "(no verifier log)"
        super().__init__(f"BPF program {program!r} rejected by the verifier"
                         f" ({os.strerror(err)}); last lines of its log:\n  {tail}",
                         err, verifier_log)
        self.program = program
        self.verifier_log = verifier_log


# --- the library ---------------------------------------------------------------------

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_P = ctypes.c_void_p


def _sig(lib: ctypes.CDLL, name: str, res: object, *args: object) -> None:
    fn = getattr(lib, name)
    fn.restype = res
    fn.argtypes = list(args)


_SIGNATURES: tuple[tuple, ...] = (
    ("libbpf_set_print", _P, _PRINT_FN),
    ("libbpf_num_possible_cpus", ctypes.c_int),
    ("libbpf_probe_bpf_prog_type", ctypes.c_int, ctypes.c_int, _P),
    ("bpf_object__open_file", _P, ctypes.c_char_p, _P),
    ("bpf_object__load", ctypes.c_int, _P),
    ("bpf_object__close", None, _P),
    ("bpf_object__name", ctypes.c_char_p, _P),
    ("bpf_object__btf", _P, _P),
    ("bpf_object__next_program", _P, _P, _P),
    ("bpf_object__find_map_by_name", _P, _P, ctypes.c_char_p),
    ("bpf_object__next_map", _P, _P, _P),
    ("bpf_program__name", ctypes.c_char_p, _P),
    ("bpf_program__section_name", ctypes.c_char_p, _P),
    ("bpf_program__autoload", ctypes.c_bool, _P),
    ("bpf_program__set_autoload", ctypes.c_int, _P, ctypes.c_bool),
    ("bpf_program__set_log_buf", ctypes.c_int, _P, _P, ctypes.c_size_t),
    ("bpf_program__fd", ctypes.c_int, _P),
    ("bpf_program__attach", _P, _P),
    ("bpf_program__attach_perf_event", _P, _P, ctypes.c_int),
    ("bpf_link__destroy", ctypes.c_int, _P),
    ("bpf_link__fd", ctypes.c_int, _P),
    ("bpf_map__name", ctypes.c_char_p, _P),
    ("bpf_map__fd", ctypes.c_int, _P),
    ("bpf_map__reuse_fd", ctypes.c_int, _P, ctypes.c_int),
    ("bpf_map__value_size", ctypes.c_uint32, _P),
    ("bpf_map__btf_value_type_id", ctypes.c_uint32, _P),
    ("bpf_map__max_entries", ctypes.c_uint32, _P),
    ("bpf_map__set_max_entries", ctypes.c_int, _P, ctypes.c_uint32),
    ("bpf_map__map_flags", ctypes.c_uint32, _P),
    ("bpf_map__set_initial_value", ctypes.c_int, _P, _P, ctypes.c_size_t),
    ("bpf_map__initial_value", _P, _P, ctypes.POINTER(ctypes.c_size_t)),
    ("bpf_obj_get_info_by_fd", ctypes.c_int, ctypes.c_int, _P, ctypes.POINTER(ctypes.c_uint32)),
    ("bpf_prog_get_next_id", ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)),
    ("bpf_prog_get_fd_by_id", ctypes.c_int, ctypes.c_uint32),
    ("bpf_link_get_next_id", ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)),
    ("bpf_link_get_fd_by_id", ctypes.c_int, ctypes.c_uint32),
    ("bpf_prog_test_run_opts", ctypes.c_int, ctypes.c_int, _P),
    ("btf__load_vmlinux_btf", _P),
    ("btf__parse", _P, ctypes.c_char_p, _P),
    ("btf__free", None, _P),
    ("btf__find_by_name_kind", ctypes.c_int32, _P, ctypes.c_char_p, ctypes.c_uint32),
    ("btf__type_by_id", _P, _P, ctypes.c_uint32),
    ("btf__name_by_offset", ctypes.c_char_p, _P, ctypes.c_uint32),
    ("btf__resolve_size", ctypes.c_long, _P, ctypes.c_uint32),
    ("btf__type_cnt", ctypes.c_uint32, _P),
)

_lib_cache: ctypes.CDLL | None = None
_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.restype = ctypes.c_int
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
_print_buf = ctypes.create_string_buffer(8192)
#: The current operation's capture of libbpf's log lines (None outside one).
_capture_lines: list[str] | None = None


def _on_print(level: int, fmt: bytes, args: int) -> int:
    # va_list arrives as a pointer (x86-64: an array decays; arm64: a copy passed by
    # reference) and vsnprintf takes it the same way.
    if level == LIBBPF_DEBUG and not log.isEnabledFor(logging.DEBUG):
        return 0
    n = _libc.vsnprintf(_print_buf, len(_print_buf), fmt, args)
    text = _print_buf.value.decode("utf-8", "replace")
    for line in text.splitlines():
        if _capture_lines is not None and level != LIBBPF_DEBUG:
            _capture_lines.append(line)
        log.debug("libbpf: %s", line)
    return max(n, 0)


_print_cb = _PRINT_FN(_on_print)  # kept alive for as long as libbpf may call it


def lib() -> ctypes.CDLL:
    """Return the loaded ``libbpf.so.1``; raise BpfError saying how to install it."""
    global _lib_cache
    if _lib_cache is None:
        try:
            cdll = ctypes.CDLL("libbpf.so.1", use_errno=True)
        except OSError as e:
            raise BpfError(f"cannot load libbpf.so.1 ({e}): install libbpf >= 1.0"
                           " (apt-get install libbpf1)") from None
        try:
            for name, res, *args in _SIGNATURES:
                _sig(cdll, name, res, *args)
        except AttributeError as e:
            raise BpfError(f"libbpf.so.1 is too old ({e}): rezolus-ue needs libbpf >= 1.0")\
                from None
        cdll.libbpf_set_print(_print_cb)
        _lib_cache = cdll
    return _lib_cache


@contextlib.contextmanager
def capture() -> Iterator[list[str]]:
    """Collect libbpf's warning and info lines logged inside the block."""
    global _capture_lines
    outer, lines = _capture_lines, []
    _capture_lines = lines
    try:
        yield lines
    finally:
        _capture_lines = outer
        if outer is not None:
            outer.extend(lines)


def _err(ret: int) -> int:
    """Return the errno of a failed call (negative return, or errno for NULL)."""
    return -ret if ret < 0 else (ctypes.get_errno() or errno.EINVAL)


def translate(op: str, err: int, lines: list[str] | tuple[str, ...] = ()) -> RezolusError:
    """Return the RezolusError for libbpf operation ``op`` failing with ``err``."""
    tail = tuple(lines[-8:])
    text = "\n".join(lines)
    if "failed to find valid kernel BTF" in text or "vmlinux BTF is not found" in text \
            or (err == errno.ESRCH and not VMLINUX_BTF.exists()):
        return KernelFeatureMissing("kernel BTF", BTF_HINT)
    if err == errno.EPERM:
        return not_permitted(op, lines)
    more = ("\n  " + "\n  ".join(tail)) if tail else ""
    return BpfError(f"{op}: {os.strerror(err)}{more}", err, tail)


#: libbpf warnings that name a step needing more than CAP_BPF and CAP_PERFMON -> that need.
_PRIVILEGED_STEPS = {
    "failed to iterate BTF objects": "listing the kernel's BTF objects (BPF_BTF_GET_NEXT_ID,"
    " which libbpf does to search kernel modules' BTF) needs CAP_SYS_ADMIN",
}


def not_permitted(op: str, lines: list[str] | tuple[str, ...] = ()) -> PermissionDenied:
    """Return the error for ``op`` failing with EPERM.

    Lacking CAP_BPF or CAP_PERFMON, it says to grant them. Holding both, it must not blame
    them: it names the step the kernel refused (libbpf's last warning), since the cause
    is then elsewhere: a step needing more (e.g. CAP_SYS_ADMIN), a security module, kernel
    lockdown, or a seccomp filter (systemd's ``SystemCallFilter=``).
    """
    from ..linux.capabilities import BPF_PROGRAMS
    from ..privilege import missing

    wanted = [n.cap for n in BPF_PROGRAMS]
    try:
        lacking = missing(wanted)
    except (OSError, ValueError):
        lacking = wanted
    if lacking:
        return PermissionDenied(f"{op}: operation not permitted: this process lacks"
                                f" {' and '.join(lacking)} (run as root, or grant them;"
                                " CAP_SYS_ADMIN before Linux 5.8)")
    text = "\n".join(lines)
    step = next((need for key, need in _PRIVILEGED_STEPS.items() if key in text), None)
    if step is None:
        last = lines[-1].removeprefix("libbpf: ").strip() if lines else "no detail from libbpf"
        step = (f"refused: {last} (with CAP_BPF and CAP_PERFMON held, a security module,"
                " kernel lockdown or a seccomp filter is the likely cause)")
    return PermissionDenied(f"{op}: operation not permitted although"
                            f" {' and '.join(wanted)} are in effect: {step}")


def num_possible_cpus() -> int:
    """Return the number of possible CPUs (the size per-CPU maps need)."""
    n = lib().libbpf_num_possible_cpus()
    if n <= 0:
        raise translate("reading /sys/devices/system/cpu/possible", _err(n))
    return n


def probe_prog_type(prog_type: int) -> bool:
    """Return True if the kernel loads programs of ``prog_type`` (a tiny test load)."""
    with capture():
        return lib().libbpf_probe_bpf_prog_type(prog_type, None) == 1


def _obj_info_ids(fd: int) -> tuple[int, int, int]:
    """Return the first three u32 of the fd's bpf_*_info (type, id, and for links prog_id)."""
    buf = (ctypes.c_uint32 * 4)()
    n = ctypes.c_uint32(ctypes.sizeof(buf))
    ret = lib().bpf_obj_get_info_by_fd(fd, buf, ctypes.byref(n))
    if ret < 0:
        raise translate("bpf_obj_get_info_by_fd", _err(ret))
    return buf[0], buf[1], buf[2]


def _each_id(next_id: str, fd_by_id: str) -> Iterator[int]:
    """Yield an fd for every BPF object of one kind in the kernel (closed after use)."""
    L = lib()
    cur, nxt = 0, ctypes.c_uint32()
    while getattr(L, next_id)(cur, ctypes.byref(nxt)) == 0:
        cur = nxt.value
        fd = getattr(L, fd_by_id)(cur)
        if fd < 0:
            continue  # gone meanwhile
        try:
            yield fd
        finally:
            os.close(fd)


def loaded_programs() -> dict[int, str]:
    """Return id -> name of every BPF program in the kernel (what ``bpftool prog show``
    lists; names are the kernel's 15 characters). Needs CAP_SYS_ADMIN."""
    out = {}
    for fd in _each_id("bpf_prog_get_next_id", "bpf_prog_get_fd_by_id"):
        info = (ctypes.c_uint8 * 80)()  # struct bpf_prog_info up to name[16] at offset 64
        n = ctypes.c_uint32(ctypes.sizeof(info))
        if lib().bpf_obj_get_info_by_fd(fd, info, ctypes.byref(n)) == 0:
            pid = int.from_bytes(bytes(info[4:8]), sys.byteorder)
            out[pid] = bytes(info[64:80]).split(b"\0", 1)[0].decode(errors="replace")
    return out


def link_programs() -> dict[int, int]:
    """Return link id -> program id of every BPF link in the kernel."""
    out = {}
    for fd in _each_id("bpf_link_get_next_id", "bpf_link_get_fd_by_id"):
        with contextlib.suppress(RezolusError):
            _type, link_id, prog_id = _obj_info_ids(fd)
            out[link_id] = prog_id
    return out


# --- BTF -----------------------------------------------------------------------------


class _BtfType(ctypes.Structure):
    _fields_ = (("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32),
                ("size_or_type", ctypes.c_uint32))


class _BtfMember(ctypes.Structure):  # also struct btf_var_secinfo {type; offset; size}
    _fields_ = (("a", ctypes.c_uint32), ("b", ctypes.c_uint32), ("c", ctypes.c_uint32))


@dataclass(frozen=True)
class StructLayout:
    """A struct's size and its members' (byte offset, byte size), in declaration order."""

    name: str
    size: int
    members: dict[str, tuple[int, int]]


class Btf:
    """BTF type information: the kernel's (``vmlinux``), a file's, or an object's."""

    def __init__(self, ptr: int, owned: bool, what: str) -> None:
        self._ptr = ptr
        self._owned = owned
        self.what = what

    @classmethod
    def vmlinux(cls) -> Btf:
        """Return the running kernel's BTF; raise KernelFeatureMissing without it."""
        with capture() as lines:
            ptr = lib().btf__load_vmlinux_btf()
        if not ptr:
            err = _err(0)
            if err in (errno.ENOENT, errno.ESRCH):
                raise KernelFeatureMissing("kernel BTF", BTF_HINT)
            raise translate("loading kernel BTF", err, lines)
        return cls(ptr, True, "vmlinux")

    @classmethod
    def parse(cls, path: str | Path) -> Btf:
        """Return the BTF of an ELF object (its .BTF section) or a raw BTF file."""
        with capture() as lines:
            ptr = lib().btf__parse(str(path).encode(), None)
        if not ptr:
            raise translate(f"reading BTF of {path}", _err(0), lines)
        return cls(ptr, True, str(path))

    def close(self) -> None:
        """Free the BTF (only if this object owns it)."""
        if self._ptr and self._owned:
            lib().btf__free(self._ptr)
        self._ptr = 0

    def __enter__(self) -> Btf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def find(self, name: str, kind: int) -> int | None:
        """Return the type id of ``name`` of BTF ``kind`` (None if absent)."""
        tid = lib().btf__find_by_name_kind(self._ptr, name.encode(), kind)
        return tid if tid > 0 else None

    def has_tracepoint(self, tracepoint: str) -> bool:
        """Return True if the kernel declares ``btf_trace_<tracepoint>`` (tp_btf target)."""
        return self.find(f"btf_trace_{tracepoint}", BTF_KIND_TYPEDEF) is not None

    def _type(self, tid: int) -> tuple[_BtfType, int]:
        addr = lib().btf__type_by_id(self._ptr, tid)
        if not addr:
            raise BpfError(f"{self.what}: no BTF type {tid}")
        return _BtfType.from_address(addr), addr

    def _name(self, off: int) -> str:
        s = lib().btf__name_by_offset(self._ptr, off)
        return s.decode() if s else ""

    def _entries(self, tid: int) -> list[_BtfMember]:
        t, addr = self._type(tid)
        vlen = t.info & 0xFFFF
        base = addr + ctypes.sizeof(_BtfType)
        return [_BtfMember.from_address(base + i * ctypes.sizeof(_BtfMember))
                for i in range(vlen)]

    def struct(self, name: str) -> StructLayout:
        """Return the layout of ``struct name``; raise BpfError if it is not declared."""
        tid = self.find(name, BTF_KIND_STRUCT)
        if tid is None:
            raise BpfError(f"{self.what}: no struct {name} in its BTF")
        t, _addr = self._type(tid)
        kflag = t.info >> 31
        members = {}
        for m in self._entries(tid):
            bit_off = m.c & 0xFFFFFF if kflag else m.c
            size = lib().btf__resolve_size(self._ptr, m.b)
            members[self._name(m.a)] = (bit_off // 8, int(size))
        return StructLayout(name, t.size_or_type, members)

    def dtype(self, tid: int) -> np.dtype:
        """Return the NumPy dtype of BTF type ``tid``: integers (through typedefs and
        qualifiers), arrays of them, and structs of those. Struct members whose name starts
        with ``__`` (padding) are left out; the itemsize stays the struct's size."""
        t, addr = self._type(tid)
        kind = (t.info >> 24) & 0x1F
        if kind == BTF_KIND_TYPEDEF or kind in _BTF_QUALIFIERS:
            return self.dtype(t.size_or_type)
        if kind == BTF_KIND_INT:
            encoding = ctypes.c_uint32.from_address(addr + ctypes.sizeof(_BtfType)).value
            signed = (encoding >> 24) & 1
            return np.dtype(f"={'i' if signed else 'u'}{t.size_or_type}")
        if kind == BTF_KIND_ARRAY:
            # struct btf_array {type; index_type; nelems} follows the header.
            arr = _BtfMember.from_address(addr + ctypes.sizeof(_BtfType))
            inner, n = self.dtype(arr.a), arr.c
            return np.dtype((inner.base, (n, *inner.shape)))
        if kind == BTF_KIND_STRUCT:
            kflag = t.info >> 31
            names, formats, offsets = [], [], []
            for m in self._entries(tid):
                name = self._name(m.a)
                if name.startswith("__"):
                    continue
                names.append(name)
                formats.append(self.dtype(m.b))
                offsets.append((m.c & 0xFFFFFF if kflag else m.c) // 8)
            return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                             "itemsize": t.size_or_type})
        raise BpfError(f"{self.what}: BTF type {tid} (kind {kind}) has no NumPy dtype here")

    def datasec(self, name: str) -> dict[str, tuple[int, int]]:
        """Return the variables of data section ``name`` (e.g. ``.bss``): (offset, size)."""
        tid = self.find(name, BTF_KIND_DATASEC)
        if tid is None:
            raise BpfError(f"{self.what}: no section {name} in its BTF")
        out = {}
        for v in self._entries(tid):
            var, _addr = self._type(v.a)
            out[self._name(var.name_off)] = (v.b, v.c)
        return out


# --- objects, programs, maps, links --------------------------------------------------


class _OpenOpts(ctypes.Structure):
    _fields_ = (
        ("sz", ctypes.c_size_t),
        ("object_name", ctypes.c_char_p),
        ("relaxed_maps", ctypes.c_bool),
        ("pin_root_path", ctypes.c_char_p),
        ("_attach_prog_fd", ctypes.c_uint32),
        ("kconfig", ctypes.c_char_p),
        ("btf_custom_path", ctypes.c_char_p),
        ("kernel_log_buf", ctypes.c_char_p),
        ("kernel_log_size", ctypes.c_size_t),
        ("kernel_log_level", ctypes.c_uint32),
    )


class _TestRunOpts(ctypes.Structure):
    _fields_ = (
        ("sz", ctypes.c_size_t),
        ("data_in", _P), ("data_out", _P),
        ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
        ("ctx_in", _P), ("ctx_out", _P),
        ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32), ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32),
    )


class Link:
    """An attachment of a program; ``destroy`` detaches it."""

    def __init__(self, ptr: int, program: str) -> None:
        self._ptr = ptr
        self.program = program

    @property
    def id(self) -> int:
        """Return the kernel's link id (as ``bpftool link show`` lists it)."""
        return _obj_info_ids(lib().bpf_link__fd(self._ptr))[1]

    def destroy(self) -> None:
        """Detach (idempotent)."""
        if self._ptr:
            lib().bpf_link__destroy(self._ptr)
            self._ptr = 0


class Program:
    """One program of an object."""

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr
        self.name = lib().bpf_program__name(ptr).decode()
        self.section = lib().bpf_program__section_name(ptr).decode()

    @property
    def autoload(self) -> bool:
        """Return whether the program is loaded with its object."""
        return bool(lib().bpf_program__autoload(self._ptr))

    @autoload.setter
    def autoload(self, on: bool) -> None:
        ret = lib().bpf_program__set_autoload(self._ptr, on)
        if ret < 0:
            raise translate(f"setting autoload of {self.name} (the object is loaded)", _err(ret))

    @property
    def fd(self) -> int:
        """Return the loaded program's fd (negative if not loaded)."""
        return lib().bpf_program__fd(self._ptr)

    @property
    def id(self) -> int:
        """Return the kernel's program id (as ``bpftool prog show`` lists it)."""
        return _obj_info_ids(self.fd)[1]

    def attach(self) -> Link:
        """Attach by section name (tp_btf/, raw_tp/, tp/...); return the link."""
        with capture() as lines:
            ptr = lib().bpf_program__attach(self._ptr)
        if not ptr:
            err = _err(0)
            if err == errno.ENOENT:
                raise KernelFeatureMissing(
                    f"attach point of {self.name} ({self.section})",
                    "this kernel has no such tracepoint or function") from None
            raise translate(f"attaching BPF program {self.name!r} ({self.section})", err,
                            lines)
        return Link(ptr, self.name)

    def attach_perf_event(self, pfd: int) -> Link:
        """Attach to perf event ``pfd`` (e.g. a classic tracepoint's); the link owns the fd
        once this returns (destroying it closes the fd), the caller until then."""
        with capture() as lines:
            ptr = lib().bpf_program__attach_perf_event(self._ptr, pfd)
        if not ptr:
            raise translate(f"attaching BPF program {self.name!r} ({self.section})", _err(0),
                            lines)
        return Link(ptr, self.name)

    def test_run(self, ctx: bytes | None = None) -> tuple[int, bytes]:
        """Run the program once with BPF_PROG_TEST_RUN; return (its return value, the
        context after the run: syscall programs may write to it)."""
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts))
        buf = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
        if buf is not None:
            opts.ctx_in = ctypes.cast(buf, _P)
            opts.ctx_size_in = len(buf)
        ret = lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts))
        if ret < 0:
            raise translate(f"test run of BPF program {self.name!r}", _err(ret))
        return opts.retval, (buf.raw if buf is not None else b"")


class Map:
    """One map of an object."""

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr
        self.name = lib().bpf_map__name(ptr).decode()

    @property
    def fd(self) -> int:
        """Return the map's fd (negative before the object is loaded)."""
        return lib().bpf_map__fd(self._ptr)

    @property
    def value_size(self) -> int:
        """Return the size of one value in bytes."""
        return lib().bpf_map__value_size(self._ptr)

    @property
    def btf_value_type_id(self) -> int:
        """Return the BTF type id of the map's value (0: declared without BTF)."""
        return lib().bpf_map__btf_value_type_id(self._ptr)

    @property
    def max_entries(self) -> int:
        """Return the number of entries."""
        return lib().bpf_map__max_entries(self._ptr)

    @max_entries.setter
    def max_entries(self, n: int) -> None:
        ret = lib().bpf_map__set_max_entries(self._ptr, n)
        if ret < 0:
            raise translate(f"sizing map {self.name} (before load only)", _err(ret))

    @property
    def flags(self) -> int:
        """Return the map_flags."""
        return lib().bpf_map__map_flags(self._ptr)

    def reuse_fd(self, fd: int) -> None:
        """Use the existing map ``fd`` instead of creating the map at load (libbpf dups it).

        Keeps a map's contents across unload/load cycles of the programs.
        """
        ret = lib().bpf_map__reuse_fd(self._ptr, fd)
        if ret < 0:
            raise translate(f"reusing map {self.name} (before load only)", _err(ret))

    def set_initial_value(self, data: bytes) -> None:
        """Set a global data map's (.data/.rodata/.bss) contents, before load."""
        ret = lib().bpf_map__set_initial_value(self._ptr, data, len(data))
        if ret < 0:
            raise translate(f"setting the initial value of {self.name} (size must be"
                            f" {self.value_size}, before load)", _err(ret))

    def mmap(self, writable: bool = False) -> mmap.mmap:
        """Return a shared mapping of a BPF_F_MMAPABLE array's values (after load).

        Values are at ``round_up(value_size, 8)`` strides from offset 0; reads are plain
        memory loads, no syscall.
        """
        if not self.flags & BPF_F_MMAPABLE:
            raise BpfError(f"map {self.name} is not BPF_F_MMAPABLE")
        fd = self.fd
        if fd < 0:
            raise BpfError(f"map {self.name} has no fd: load the object first")
        stride = (self.value_size + 7) // 8 * 8
        page = mmap.PAGESIZE
        size = (stride * self.max_entries + page - 1) // page * page
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        try:
            return mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        except OSError as e:
            raise translate(f"mmap of map {self.name}", e.errno or errno.EINVAL) from None


def _core_target() -> bytes | None:
    """Return the BTF to relocate CO-RE against: vmlinux's alone (None without it).

    Without a target, libbpf (before 1.3) looks for a type missing from vmlinux BTF in
    kernel modules' BTF, listing them with BPF_BTF_GET_NEXT_ID, which needs CAP_SYS_ADMIN:
    after the agent's drop to CAP_BPF and CAP_PERFMON the whole load then fails with EPERM
    wherever a program asks whether an old kernel's type exists (``struct
    hd_struct___rez`` on Linux >= 5.11). libbpf >= 1.3 skips that search when
    unprivileged but still makes it as root, so root (``check``, the start-up load) and
    the dropped agent could relocate differently. Naming vmlinux's BTF as the target makes
    every libbpf relocate against it alone, privileged or not. The module search would
    have found nothing of ours: our programs attach to core tracepoints (sched, irq,
    block, net, skb, tcp, sock, raw_syscalls) and read core types (task_struct, request,
    sk_buff, sock); those are in vmlinux, and the ``___rez`` flavours describe types older
    kernels had in vmlinux, which no module defines either.
    """
    return bytes(VMLINUX_BTF) if VMLINUX_BTF.exists() else None


class Object:
    """A BPF object file: open, adjust (autoload, map sizes, initial values), load.

    ``close`` (or the context manager) detaches nothing by itself: destroy links first.
    """

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        self.path = Path(path)
        L = lib()
        opts = _OpenOpts(sz=ctypes.sizeof(_OpenOpts),
                         object_name=name.encode() if name else None,
                         btf_custom_path=_core_target())
        with capture() as lines:
            ptr = L.bpf_object__open_file(str(self.path).encode(), ctypes.byref(opts))
        if not ptr:
            err = _err(0)
            if err == errno.ENOENT and not self.path.exists():
                raise BpfError(f"BPF object {self.path} does not exist", err)
            raise translate(f"opening BPF object {self.path}", err, lines)
        self._ptr = ptr
        self.name = L.bpf_object__name(ptr).decode()
        self.loaded = False
        # One log buffer for every program: loading stops at the first rejected one, so
        # after a failure it holds that program's log. Logs are only requested on failure.
        self._log_buf = ctypes.create_string_buffer(VERIFIER_LOG_SIZE)
        self.programs: dict[str, Program] = {}
        p = L.bpf_object__next_program(ptr, None)
        while p:
            prog = Program(p)
            L.bpf_program__set_log_buf(p, self._log_buf, VERIFIER_LOG_SIZE)
            self.programs[prog.name] = prog
            p = L.bpf_object__next_program(ptr, p)
        self.maps: dict[str, Map] = {}
        m = L.bpf_object__next_map(ptr, None)
        while m:
            mp = Map(m)
            self.maps[mp.name] = mp
            m = L.bpf_object__next_map(ptr, m)

    def map(self, name: str) -> Map:
        """Return map ``name`` (global data maps answer to ``.bss``, ``.data``...)."""
        ptr = lib().bpf_object__find_map_by_name(self._ptr, name.encode())
        if not ptr:
            raise BpfError(f"{self.path.name}: no map {name!r}")
        return Map(ptr)

    def btf(self) -> Btf:
        """Return the object's own BTF (owned by the object: valid until close)."""
        ptr = lib().bpf_object__btf(self._ptr)
        if not ptr:
            raise BpfError(f"{self.path.name} has no BTF: build it with clang -g")
        return Btf(ptr, False, self.path.name)

    def load(self) -> None:
        """Load every autoload program and create the maps; raise a translated error."""
        if not VMLINUX_BTF.exists():
            raise KernelFeatureMissing("kernel BTF", BTF_HINT)
        self._log_buf[0] = b"\0"
        with capture() as lines:
            ret = lib().bpf_object__load(self._ptr)
        if ret < 0:
            raise self._load_error(_err(ret), lines)
        self.loaded = True

    def _load_error(self, err: int, lines: list[str]) -> RezolusError:
        text = "\n".join(lines)
        failed = re.search(r"prog '([^']+)': (?:BPF program load|failed to load)", text)
        vlog = self._log_buf.value.decode("utf-8", "replace")
        if err == errno.EPERM and not vlog:
            return not_permitted(f"loading {self.path.name}", lines)
        if failed and vlog.strip():
            kept = [ln for ln in vlog.splitlines() if ln.strip()]
            return VerifierError(failed.group(1), err, tuple(kept[-VERIFIER_TAIL_LINES:]))
        return translate(f"loading {self.path.name}"
                         + (f" (program {failed.group(1)!r})" if failed else ""), err, lines)

    def close(self) -> None:
        """Unload the programs and free the maps (links keep their program alive)."""
        if self._ptr:
            lib().bpf_object__close(self._ptr)
            self._ptr = 0
            self.loaded = False

    def __enter__(self) -> Object:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
