"""Linux capabilities: the numbers, reading a process's sets, ``capset(2)`` and the
capability ``prctl(2)`` calls.

Capability numbers are from ``include/uapi/linux/capability.h``; sets are read from
``/proc/<pid>/status`` (the root is injectable). ``Need`` names a capability with the
kernel's reason for requiring it; the operations several samplers share have theirs here.
What the agent keeps and when it drops the rest is policy, in ``rezolus_ue.privilege``.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

#: The capabilities rezolus-ue knows by name (the full list is in capability.h).
CAPS = {
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
    "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
    "CAP_NET_ADMIN": 12, "CAP_IPC_LOCK": 14, "CAP_SYS_MODULE": 16, "CAP_SYS_PTRACE": 19,
    "CAP_SYS_ADMIN": 21, "CAP_SYS_RESOURCE": 24, "CAP_SYSLOG": 34, "CAP_PERFMON": 38,
    "CAP_BPF": 39,
}
NAMES = {v: k for k, v in CAPS.items()}


@dataclass(frozen=True)
class Need:
    """A capability an operation needs, and why the kernel asks for it."""

    cap: str
    why: str

    def __post_init__(self) -> None:
        if self.cap not in CAPS:
            raise ValueError(f"unknown capability {self.cap!r}: add its number to CAPS")


#: Loading and attaching tracing BPF programs, which the BPF samplers do on demand.
BPF_PROGRAMS = (
    Need("CAP_BPF", "create maps and load programs with bpf(2) (bpf_capable), each time a"
         " consumer arrives"),
    Need("CAP_PERFMON", "load and attach tracing programs (is_perfmon_prog_type) and open"
         " the system-wide perf events classic tracepoints attach through"),
)
#: Counting on every CPU with ``perf_event_open(pid = -1)``.
PERF_COUNTERS = (
    Need("CAP_PERFMON", "open per-CPU perf counters (pid = -1) at start and when a reload"
         " restarts the sampler, refused without it where kernel.perf_event_paranoid >= 1"),
)

_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def cap_name(n: int) -> str:
    """Return ``CAP_BPF`` for 39 (``cap_<n>`` for a number we have no name for)."""
    return NAMES.get(n, f"cap_{n}")


def parse_status(text: str) -> dict[str, int]:
    """Return the Cap* masks of a ``/proc/<pid>/status`` text: {"CapEff": mask, ...}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Cap"):
            out[key] = int(value.strip(), 16)
    return out


def current(procfs: Path = Path("/proc")) -> dict[str, int]:
    """Return this process's capability masks (CapInh, CapPrm, CapEff, CapBnd, CapAmb)."""
    return parse_status((procfs / "self/status").read_text())


def members(mask: int) -> set[int]:
    """Return the capability numbers set in ``mask``."""
    return {n for n in range(64) if mask >> n & 1}


def last_cap(procfs: Path = Path("/proc")) -> int:
    """Return the highest capability number the running kernel knows."""
    try:
        return int((procfs / "sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def bounding_drop(n: int) -> bool:
    """Drop capability ``n`` from the bounding set; return False if refused (EINVAL:
    unknown to this kernel; EPERM: no CAP_SETPCAP)."""
    return _libc().prctl(PR_CAPBSET_DROP, n, 0, 0, 0) == 0


def ambient_clear() -> None:
    """Clear the ambient set (never fails on a kernel that has one)."""
    _libc().prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def set_keepcaps(on: bool) -> None:
    """Set ``PR_SET_KEEPCAPS``: keep the permitted set across a setuid away from root
    (OSError if setting it is refused; clearing it is best effort)."""
    ret = _libc().prctl(PR_SET_KEEPCAPS, int(on), 0, 0, 0)
    if on:
        _check(ret, "prctl(PR_SET_KEEPCAPS)")


def capset(mask: int) -> None:
    """Make this process's effective and permitted sets ``mask``, the inheritable empty
    (OSError if refused)."""
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    for i in range(2):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = word
        data[i].inheritable = 0
    _check(_libc().capset(ctypes.byref(header), data), "capset")
