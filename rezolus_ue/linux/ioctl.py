"""ioctl request numbers: the generic ``include/uapi/asm-generic/ioctl.h`` encoding, which
x86, arm64 and riscv use (powerpc, mips and sparc differ; we do not run there)."""

from __future__ import annotations

NRSHIFT, TYPESHIFT, SIZESHIFT, DIRSHIFT = 0, 8, 16, 30
NONE, WRITE, READ = 0, 1, 2


def ioc(direction: int, kind: str, nr: int, size: int) -> int:
    """Return ``_IOC(direction, kind, nr, size)``."""
    return (direction << DIRSHIFT) | (ord(kind) << TYPESHIFT) | (nr << NRSHIFT) \
        | (size << SIZESHIFT)


def io(kind: str, nr: int) -> int:
    """Return ``_IO(kind, nr)``."""
    return ioc(NONE, kind, nr, 0)


def iow(kind: str, nr: int, size: int) -> int:
    """Return ``_IOW(kind, nr, type)`` for a type of ``size`` bytes."""
    return ioc(WRITE, kind, nr, size)


def ior(kind: str, nr: int, size: int) -> int:
    """Return ``_IOR(kind, nr, type)`` for a type of ``size`` bytes."""
    return ioc(READ, kind, nr, size)


def iowr(kind: str, nr: int, size: int) -> int:
    """Return ``_IOWR(kind, nr, type)`` for a type of ``size`` bytes."""
    return ioc(READ | WRITE, kind, nr, size)
