"""Least privilege: which capabilities the agent holds, and dropping the rest after start-up.

The agent needs, after start-up:

- ``CAP_BPF``: load BPF programs and create maps (on demand, whenever a consumer arrives);
- ``CAP_PERFMON``: attach tracing programs and open per-CPU perf counters.

Everything else is needed only to start, if at all: mounting tracefs (``CAP_SYS_ADMIN``),
raising the open-files limit (``CAP_SYS_RESOURCE``), opening ``user_events_data`` when it
is root's (``CAP_DAC_OVERRIDE``; a ``tracing`` group with access avoids it). So once the
samplers have started and the events are registered, ``drop_to`` clears every other
capability from the effective, permitted, inheritable, ambient and bounding sets: a
compromised agent cannot regain them, not even through exec. The enable words, the
``user_events_data`` fd and the kept-open procfs fds stay valid.

Capability numbers are from ``include/uapi/linux/capability.h``; sets are read from
``/proc/self/status`` (injectable) and changed with ``capset(2)`` and ``prctl(2)``.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("rezolus_ue")

#: The capabilities rezolus-ue knows by name (the full list is in capability.h).
CAPS = {
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
    "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
    "CAP_NET_ADMIN": 12, "CAP_IPC_LOCK": 14, "CAP_SYS_MODULE": 16, "CAP_SYS_PTRACE": 19,
    "CAP_SYS_ADMIN": 21, "CAP_SYS_RESOURCE": 24, "CAP_SYSLOG": 34, "CAP_PERFMON": 38,
    "CAP_BPF": 39,
}
NAMES = {v: k for k, v in CAPS.items()}
#: What the running agent keeps (see the module docstring for why each).
RUNTIME_CAPS = ("CAP_BPF", "CAP_PERFMON")

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


def missing(wanted: Iterable[str], procfs: Path = Path("/proc")) -> list[str]:
    """Return the capabilities of ``wanted`` this process does not have in effect."""
    eff = current(procfs).get("CapEff", 0)
    return [c for c in wanted if not eff >> CAPS[c] & 1]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def drop_to(keep: Iterable[str] = RUNTIME_CAPS, procfs: Path = Path("/proc"),
            user: str | None = None) -> list[str]:
    """Drop every capability but ``keep`` (those held); return the names dropped.

    The bounding set is cleared first (that needs CAP_SETPCAP, dropped last), then the
    ambient set; with ``user``, the process then becomes that user (its uid, gid and
    supplementary groups; PR_SET_KEEPCAPS keeps the permitted set across setuid); last,
    capset() leaves effective = permitted = ``keep`` and nothing inheritable. Raises
    OSError if setuid/capset refuse, KeyError if ``user`` does not exist.
    """
    before = current(procfs)
    held = members(before.get("CapPrm", 0))
    keep_nums = {CAPS[c] for c in keep} & held
    libc = _libc()
    last = _last_cap(procfs)
    for n in range(last + 1):
        if n not in keep_nums and before.get("CapBnd", 0) >> n & 1:
            # EINVAL: unknown to this kernel; EPERM: no CAP_SETPCAP (bounding set stays).
            libc.prctl(PR_CAPBSET_DROP, n, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if user is not None:
        become(user, libc)
    mask = sum(1 << n for n in keep_nums)
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    for i in range(2):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = word
        data[i].inheritable = 0
    if libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    return sorted(cap_name(n) for n in held - keep_nums)


def require_user(user: str) -> None:
    """Raise RezolusError, saying how to create it, if ``user`` does not exist."""
    import pwd

    from .errors import RezolusError

    try:
        pwd.getpwnam(user)
    except KeyError:
        raise RezolusError(f"--user {user}: no such user (create it, e.g. with"
                           " `rezolus-ue install-service`, which runs systemd-sysusers)") from None


def become(user: str, libc: ctypes.CDLL | None = None) -> None:
    """Switch uid, gid and groups to ``user``'s, keeping the permitted capabilities."""
    import grp
    import pwd

    pw = pwd.getpwnam(user)
    groups = [g.gr_gid for g in grp.getgrall() if user in g.gr_mem]
    libc = libc or _libc()
    if libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_KEEPCAPS): {os.strerror(err)}")
    try:
        os.setgroups(sorted({pw.pw_gid, *groups}))
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    finally:
        libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)


def _last_cap(procfs: Path) -> int:
    try:
        return int((procfs / "sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def drop_after_start(procfs: Path = Path("/proc"), user: str | None = None) -> None:
    """Drop to RUNTIME_CAPS (and become ``user``), logging what went.

    Failing to drop is a warning (the agent runs on with what it had); failing to become
    the requested user is an error: the operator asked not to run as root.
    """
    from .errors import RezolusError

    if user is not None:
        require_user(user)
    try:
        dropped = drop_to(RUNTIME_CAPS, procfs, user)
    except OSError as e:
        if user is not None:
            raise RezolusError(f"cannot become user {user}: {e.strerror}") from None
        log.warning("could not drop capabilities (%s); running with those it had",
                    e.strerror or errno.errorcode.get(e.errno or 0, "?"))
        return
    kept = [c for c in RUNTIME_CAPS if c not in missing(RUNTIME_CAPS, procfs)]
    who = f"; running as {user} (uid {os.getuid()})" if user else ""
    if dropped or user:
        log.info("dropped %d capabilities after start-up; kept %s%s", len(dropped),
                 ", ".join(kept) or "none", who)
