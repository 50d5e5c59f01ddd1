"""Least privilege: which capabilities the agent holds, and dropping the rest after start-up.

Each sampler declares the capabilities it needs once started, with the kernel's reason,
in its package (``CAPABILITIES`` beside ``FAMILIES``; none if it declares none): the BPF
samplers, for instance, ``CAP_BPF`` and ``CAP_PERFMON``, since their programs load on
demand, whenever a consumer arrives. The agent keeps the union over the samplers its
config enables (``kept``), and ``CAP_PERFMON`` for ``persist`` registrations on a reload.

Everything else is needed only to start, if at all: mounting tracefs (``CAP_SYS_ADMIN``),
raising the open-files limit (``CAP_SYS_RESOURCE``), opening ``user_events_data`` when it
is root's (``CAP_DAC_OVERRIDE``; a ``tracing`` group with access avoids it), becoming the
``--user`` (``STARTUP``). So once the samplers have started and the events are
registered, ``drop_to`` clears every other capability from the effective, permitted,
inheritable, ambient and bounding sets: a compromised agent cannot regain them, not even
through exec. The enable words, the ``user_events_data`` fd and the kept-open procfs fds
stay valid. A sampler a reload enables later gets only what was kept.

The capability ABI (numbers, ``/proc/self/status``, ``capset(2)``, ``prctl(2)``) is
``rezolus_ue.linux.capabilities``; this module is the policy.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable, Mapping
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from .linux.capabilities import (
    CAPS,
    Need,
    ambient_clear,
    bounding_drop,
    cap_name,
    capset,
    current,
    last_cap,
    members,
    set_keepcaps,
)

if TYPE_CHECKING:
    from .config import Config

log = logging.getLogger("rezolus_ue")

#: What ``run --user`` needs to switch users, and nothing after: the systemd unit's
#: bounding set holds them beside the samplers' (``bounding_set``).
STARTUP: tuple[Need, ...] = (
    Need("CAP_SETUID", "setuid to the --user (PR_SET_KEEPCAPS keeps the rest across it)"),
    Need("CAP_SETGID", "setgroups and setgid to the --user's groups"),
    Need("CAP_CHOWN", "hand the runtime directory (lock, status.json) to the --user"),
)
#: What ``agent.persist`` needs on a reload that registers events after the drop.
PERSIST = Need("CAP_PERFMON", "register events with USER_EVENT_REG_PERSIST (agent.persist)")

#: {capability: {who needs it (a sampler, or an agent option): why}}.
Needs = dict[str, dict[str, str]]


def declared(names: Iterable[str] | None = None) -> dict[str, tuple[Need, ...]]:
    """Return each sampler's ``CAPABILITIES``, read from its package (the sampler class is
    not imported), keyed by name: every sampler's, or those ``names``."""
    from .samplers import NAMES

    return {n: tuple(getattr(import_module(f"rezolus_ue.samplers.{n}"), "CAPABILITIES", ()))
            for n in (NAMES if names is None else names)}


def union(needs: Mapping[str, Iterable[Need]]) -> Needs:
    """Return ``{capability: {who: why}}`` of ``{who: needs}``, capabilities by name."""
    out: Needs = {}
    for who, wanted in needs.items():
        for n in wanted:
            out.setdefault(n.cap, {})[who] = n.why
    return dict(sorted(out.items()))


def kept(config: Config) -> Needs:
    """Return what the agent keeps after start-up with ``config``: the union of its
    enabled samplers' needs (and ``persist``'s)."""
    needs: dict[str, tuple[Need, ...]] = {
        n: caps for n, caps in declared().items()
        if n in config.samplers and config.sampler_enabled(n)}
    if config.agent.get("persist"):
        needs["agent.persist"] = (PERSIST,)
    return union(needs)


def bounding_set() -> tuple[str, ...]:
    """Return every capability the agent may hold under its systemd unit: what any sampler
    or agent option needs after start-up, and what start-up needs (by number)."""
    every = union({**declared(), "agent.persist": (PERSIST,), "start-up": STARTUP})
    return tuple(sorted(every, key=CAPS.__getitem__))


def describe(needs: Needs) -> str:
    """Return ``needs`` for a log line: "CAP_BPF (tcp, syscall), CAP_SYS_PTRACE (processes)"."""
    return ", ".join(f"{cap} ({', '.join(who)})" for cap, who in needs.items()) or "none"


def missing(wanted: Iterable[str], procfs: Path = Path("/proc")) -> list[str]:
    """Return the capabilities of ``wanted`` this process does not have in effect."""
    eff = current(procfs).get("CapEff", 0)
    return [c for c in wanted if not eff >> CAPS[c] & 1]


def drop_to(keep: Iterable[str], procfs: Path = Path("/proc"),
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


def drop_after_start(keep: Needs, procfs: Path = Path("/proc"),
                     user: str | None = None) -> None:
    """Drop to the capabilities of ``keep`` (``kept``; and become ``user``), logging what
    it kept and for whom.

    Failing to drop is a warning (the agent runs on with what it had); failing to become
    the requested user is an error: the operator asked not to run as root.
    """
    from .errors import RezolusError

    if user is not None:
        require_user(user)
    try:
        dropped = drop_to(keep, procfs, user)
    except OSError as e:
        if user is not None:
            raise RezolusError(f"cannot become user {user}: {e.strerror}") from None
        log.warning("could not drop capabilities (%s); running with those it had",
                    e.strerror or errno.errorcode.get(e.errno or 0, "?"))
        return
    lacking = set(missing(keep, procfs))
    held = {c: who for c, who in keep.items() if c not in lacking}
    who = f"; running as {user} (uid {os.getuid()})" if user else ""
    if dropped or user:
        log.info("dropped %d capabilities after start-up; kept %s%s", len(dropped),
                 describe(held), who)
    if lacking:
        log.info("not held, so not kept: %s (run as root, or grant them)",
                 describe({c: w for c, w in keep.items() if c in lacking}))
