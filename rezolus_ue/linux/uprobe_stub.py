"""The uprobe transport's stub shared object: build it, install it, load it, find its slots.

The stub (``uprobe_stub.c``) has one probed function and one u16 reference counter per
slot: ``SLOTS`` of them, into which ``hashed_slot`` spreads names, so a name's slot depends
on the name alone. The kernel finds both by *file offset* in the stub, so the offsets are
taken from where this process mapped them (``/proc/self/maps``): the same arithmetic the
kernel does, with no ELF parsing. The kernel runs a uprobe's definition against whatever
the file holds when a consumer enables it, and the agent executes the file, so it must be
writable by root alone: ``load`` refuses a stub that it, or a directory above it, lets
anyone else change.

    python -m rezolus_ue.linux.uprobe_stub --install   # build and install (as root)
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import KernelFeatureMissing, PermissionDenied, RezolusError

SOURCE = Path(__file__).with_name("uprobe_stub.c")
#: Where setup installs it; ``REZOLUS_UE_UPROBE_STUB`` names another file.
INSTALL_PATH = Path("/usr/local/lib/rezolus-ue/librezolus_ue_stub.so")
INSTALL_COMMAND = f"sudo {sys.executable} -m rezolus_ue.linux.uprobe_stub --install"

#: The register holding a function's first argument (the record's address), by machine.
_FIRST_ARG = {"x86_64": "%di", "aarch64": "%x0", "arm64": "%x0"}

#: The slot functions' C type: (const void *record, size_t len).
EMIT = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t)

#: The stub's slot count, passed to the C build. Names hash into it, so changing it moves
#: every event to another slot: it is fixed. At 60 events two share a hashed slot with a
#: chance of 10%, each event added after with under 1%; the 1.2 MB file costs nothing
#: until used (a mapping, paged in per slot called). A larger stub is usable, a smaller
#: one is refused.
SLOTS = 1 << 14


def hashed_slot(name: str) -> int:
    """Return the slot ``name`` hashes to: the same in every version and process (BLAKE2b,
    not Python's salted ``hash``), whatever other names exist."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SLOTS


def first_arg_register(machine: str | None = None) -> str:
    """Return the fetch-arg register of the first argument on this machine."""
    m = machine or platform.machine()
    try:
        return _FIRST_ARG[m]
    except KeyError:
        raise KernelFeatureMissing(f"the uprobe transport on {m}",
                                   "it knows the argument registers of x86_64 and aarch64"
                                   " only; use a kernel with user_events") from None


def stub_path() -> Path:
    """Return the stub's path (``REZOLUS_UE_UPROBE_STUB`` or the installed one)."""
    return Path(os.environ.get("REZOLUS_UE_UPROBE_STUB") or INSTALL_PATH)


def check_root_only(path: Path) -> None:
    """Raise PermissionDenied unless ``path`` and every directory above it belong to root
    and are writable by nobody else (a sticky directory such as /tmp is not enough)."""
    p = path.resolve()
    for q in (p, *p.parents):
        try:
            st = os.stat(q)
        except OSError as e:
            raise RezolusError(f"cannot use the uprobe stub {path}: {q}: {e.strerror};"
                               f" install it with `{INSTALL_COMMAND}`") from None
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise PermissionDenied(
                f"the uprobe stub {path} is not safe to use: {q} is writable by someone"
                f" other than root (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)});"
                f" install it with `{INSTALL_COMMAND}`")


def _mapping_offset(addr: int) -> tuple[int, str]:
    """Return (file offset, path) of the file mapping holding ``addr`` in this process."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return addr - lo + int(parts[2], 16), parts[5].strip() if len(parts) > 5 else ""
    raise RezolusError(f"address {addr:#x} is in no mapping of this process")


class Stub:
    """The loaded stub: its slots' functions, counters and file offsets."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = (path or stub_path()).resolve()
        if not self.path.exists():
            raise KernelFeatureMissing("the uprobe stub", f"{self.path} is missing: install"
                                       f" it with `{INSTALL_COMMAND}`")
        check_root_only(self.path)
        try:
            self._lib = ctypes.CDLL(str(self.path))
            self.slots = ctypes.c_uint.in_dll(self._lib, "rezolus_ue_slots").value
            self.slot_size = ctypes.c_uint.in_dll(self._lib, "rezolus_ue_slot_size").value
            self.counters = (ctypes.c_uint16 * self.slots).in_dll(self._lib,
                                                                 "rezolus_ue_counters")
            self._base = ctypes.cast(self._lib.rezolus_ue_emit, ctypes.c_void_p).value or 0
        except (OSError, ValueError, AttributeError) as e:
            raise RezolusError(f"{self.path} is not a rezolus-ue uprobe stub ({e});"
                               f" reinstall it with `{INSTALL_COMMAND}`") from None
        if self.slots < SLOTS:
            raise RezolusError(f"the uprobe stub {self.path} has {self.slots} slots, an older"
                               f" layout than this rezolus-ue's {SLOTS}: reinstall it with"
                               f" `{INSTALL_COMMAND}`")
        code_off, code_file = _mapping_offset(self._base)
        ctr_off, ctr_file = _mapping_offset(ctypes.addressof(self.counters))
        for f in (code_file, ctr_file):
            if Path(f).resolve() != self.path:
                raise RezolusError(f"the uprobe stub's code or counters are mapped from {f},"
                                   f" not {self.path}")
        self._code_offset, self._counter_offset = code_off, ctr_off

    def function_offset(self, slot: int) -> int:
        """Return the file offset of slot ``slot``'s function (the probe's OFFSET)."""
        return self._code_offset + self._check(slot) * self.slot_size

    def counter_offset(self, slot: int) -> int:
        """Return the file offset of slot ``slot``'s counter (the probe's REF_CTR_OFFSET)."""
        return self._counter_offset + self._check(slot) * ctypes.sizeof(ctypes.c_uint16)

    def counter(self, slot: int) -> ctypes.c_uint16:
        """Return slot ``slot``'s counter: non-zero while a consumer has its event enabled."""
        return ctypes.c_uint16.from_address(ctypes.addressof(self.counters)
                                            + 2 * self._check(slot))

    def counter_in(self, pid: int, slot: int) -> int | None:
        """Return slot ``slot``'s counter in process ``pid``'s mapping of the stub, or None
        if it maps none or may not be read: the kernel keeps one per process, and a reader
        of one process (``perf -p PID``) raises only that process's."""
        offset = self.counter_offset(slot)
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    parts = line.split(maxsplit=5)
                    if len(parts) < 6 or Path(parts[5].strip()) != self.path:
                        continue
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    start = int(parts[2], 16)
                    if start <= offset < start + hi - lo:
                        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                            mem.seek(lo + offset - start)
                            return int.from_bytes(mem.read(2), sys.byteorder)
        except (OSError, ValueError):
            pass
        return None

    def function(self, slot: int) -> ctypes._CFuncPtr:
        """Return slot ``slot``'s function, called as ``f(record_bytes, len)``."""
        return EMIT(self._base + self._check(slot) * self.slot_size)

    def _check(self, slot: int) -> int:
        if not 0 <= slot < self.slots:
            raise RezolusError(f"uprobe stub slot {slot} is outside 0..{self.slots - 1}")
        return slot


def build(out: Path, cc: str | None = None) -> Path:
    """Compile the stub into ``out``; return it."""
    # clang first: setup installs it for bpf/ anyway. No libc: the stub needs none.
    compiler = cc or shutil.which("clang") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RezolusError("no C compiler found to build the uprobe stub: install clang")
    # -s: the slots' symbols stay in the dynamic table (bpftrace, ctypes), not twice.
    p = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-nostdlib", "-Wall", "-s",
                        f"-DREZOLUS_UE_SLOTS={SLOTS}", "-Wl,-z,noexecstack", "-o", str(out),
                        str(SOURCE)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RezolusError(f"building the uprobe stub failed:\n{p.stderr.strip()}")
    return out


def install(dest: Path = INSTALL_PATH) -> Path:
    """Build the stub and install it at ``dest`` (root-owned, mode 0644, atomically)."""
    if os.geteuid() != 0:
        raise PermissionDenied(f"installing the uprobe stub needs root: `{INSTALL_COMMAND}`")
    dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        built = build(Path(tmp) / dest.name)
        if dest.exists() and dest.read_bytes() == built.read_bytes():
            return dest
        staged = dest.with_name(f".{dest.name}.new")
        shutil.copyfile(built, staged)
        os.chown(staged, 0, 0)
        os.chmod(staged, 0o644)
        os.replace(staged, dest)  # a running agent keeps its mapping of the old file
    check_root_only(dest)
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build (``--out``) or install (``--install``) the stub."""
    ap = argparse.ArgumentParser(prog="python -m rezolus_ue.linux.uprobe_stub",
                                 description="Build or install the uprobe transport's stub.")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--install", nargs="?", const=str(INSTALL_PATH), metavar="PATH",
                   help=f"build and install it (default {INSTALL_PATH})")
    g.add_argument("--out", metavar="PATH", help="build it at PATH (for tests)")
    args = ap.parse_args(argv)
    try:
        print(install(Path(args.install)) if args.install else build(Path(args.out)))
    except RezolusError as e:
        print(f"rezolus-ue: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
