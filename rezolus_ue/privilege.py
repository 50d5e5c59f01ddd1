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

The capability ABI (numbers, ``/proc/self/status``, ``capset(2)``, ``prctl(2)``) is
``rezolus_ue.linux.capabilities``; this module is the policy.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from .linux.capabilities import (
    CAPS,
    ambient_clear,
    bounding_drop,
    cap_name,
    capset,
    current,
    last_cap,
    members,
    set_keepcaps,
)

log = logging.getLogger("rezolus_ue")

#: What the running agent keeps (see the module docstring for why each).
RUNTIME_CAPS = ("CAP_BPF", "CAP_PERFMON")


def missing(wanted: Iterable[str], procfs: Path = Path("/proc")) -> list[str]:
    """Return the capabilities of ``wanted`` this process does not have in effect."""
    eff = current(procfs).get("CapEff", 0)
    return [c for c in wanted if not eff >> CAPS[c] & 1]


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
    for n in range(last_cap(procfs) + 1):
        if n not in keep_nums and before.get("CapBnd", 0) >> n & 1:
            bounding_drop(n)  # refused without CAP_SETPCAP: the bounding set stays
    ambient_clear()
    if user is not None:
        become(user)
    capset(sum(1 << n for n in keep_nums))
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


def become(user: str) -> None:
    """Switch uid, gid and groups to ``user``'s, keeping the permitted capabilities."""
    import grp
    import pwd

    pw = pwd.getpwnam(user)
    groups = [g.gr_gid for g in grp.getgrall() if user in g.gr_mem]
    set_keepcaps(True)
    try:
        os.setgroups(sorted({pw.pw_gid, *groups}))
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    finally:
        set_keepcaps(False)


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
