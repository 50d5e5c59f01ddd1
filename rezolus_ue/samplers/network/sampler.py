"""The network sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatchcase
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...linux.rtnetlink import (
    NLMSG_DONE,
    RECV_SIZE,
    RTMGRP_LINK,
    RTNL_STATS_FIELDS,
    Rows,
    link_dump_request,
    messages,
    open_rtnetlink,
    parse_link_names,
    stats_dump_request,
)
from ...linux.rtnetlink import parse_link_dump as _parse_link_dump
from ...linux.rtnetlink import parse_stats_dump as _parse_stats_dump
from ...metrics.family import Family
from ..base import FamilySampler
from . import FAMILIES, NETWORK, OPTIONS

#: The metrics in catalog order; also the sysfs statistics file names.
COUNTERS = tuple(m.name for m in NETWORK.scalars)
_ORDER = tuple(RTNL_STATS_FIELDS.index(n) for n in COUNTERS)
#: The counters of an unpacked stats struct, in catalog order: one C call per link.
_IN_ORDER = itemgetter(*_ORDER)
#: The rtnetlink decoders, giving the counters in catalog order.
parse_link_dump = partial(_parse_link_dump, pick=_IN_ORDER)
parse_stats_dump = partial(_parse_stats_dump, pick=_IN_ORDER)
_REAL_SYSFS = Path("/sys")
_REFRESH_NS = 1_000_000_000
#: What a kernel without RTM_GETSTATS (< 4.7) answers.
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)



def interface_filter(include: Sequence[str], exclude: Sequence[str]) -> Callable[[str], bool]:
    """Return a predicate: is an interface reported? It must match one of ``include`` (or
    ``include`` is empty) and none of ``exclude``; shell globs, case-sensitive."""
    inc, exc = tuple(include), tuple(exclude)
    if not inc and not exc:
        return lambda _name: True
    cache: dict[str, bool] = {}

    def keep(name: str) -> bool:
        hit = cache.get(name)
        if hit is None:
            hit = ((not inc or any(fnmatchcase(name, p) for p in inc))
                   and not any(fnmatchcase(name, p) for p in exc))
            if len(cache) >= 4096:  # names churn (containers come and go): stay bounded
                cache.clear()
            cache[name] = hit
        return hit

    return keep


class RtnlLinks:
    """Per-link counters over rtnetlink (see the module docstring for the protocol)."""

    def __init__(self, keep: Callable[[str], bool],
                 opener: Callable[[int], socket.socket] = open_rtnetlink) -> None:
        self._keep = keep
        self._seq = 0
        self._mon: socket.socket | None = None
        #: Polls the monitor: a poll(0) per sample costs a third of a recv that raises
        #: BlockingIOError (an exception per sample, almost always).
        self._poll = select.poll()
        self._sock = opener(0)
        try:
            #: ifindex -> name, None for links the filter rejects; None: dump the names.
            self._names: dict[int, str | None] | None = None
            self.getstats = True
            try:
                self._mon = opener(RTMGRP_LINK)  # subscribe before the first names dump
                self._poll.register(self._mon, select.POLLIN)
                self.read()
            except OSError as e:
                if e.errno not in _UNSUPPORTED:
                    raise
                self.getstats = False  # Linux < 4.7: RTM_GETLINK carries the stats too
                self._close_monitor()
                self.read()
        except BaseException:
            self.close()
            raise

    def _datagrams(self, request: Callable[[int], bytes]) -> tuple[int, list[bytes]]:
        """Send a dump request; return its sequence number and its datagrams, up to the
        one holding NLMSG_DONE (raise OSError for an error the kernel reports)."""
        self._seq = seq = self._seq % 0xFFFFFFFF + 1
        self._sock.send(request(seq))
        out = []
        while True:
            data = self._sock.recv(RECV_SIZE)
            if not data:
                raise OSError(errno.EIO, "rtnetlink: empty datagram in a dump")
            out.append(data)
            for mtype, _off, _length in messages(data, seq):
                if mtype == NLMSG_DONE:
                    return seq, out

    def _dump(self, request: Callable[[int], bytes],
              parse: Callable[[bytes, int, dict], tuple[dict, bool]], into: dict) -> dict:
        """Send a dump request and collect its datagrams with ``parse`` into ``into``."""
        seq, datagrams = self._datagrams(request)
        for data in datagrams:
            parse(data, seq, into)
        return into

    def _links_changed(self) -> bool:
        """Drain the link notifications; return True if there were any."""
        if not self._poll.poll(0):
            return False
        changed = False
        mon = self._mon
        assert mon is not None
        while True:
            try:
                if not mon.recv(RECV_SIZE):
                    return changed
            except BlockingIOError:
                return changed
            except OSError as e:
                if e.errno != errno.ENOBUFS:  # ENOBUFS: notifications were lost
                    raise
            changed = True

    def _dump_names(self) -> dict[int, str | None]:
        names = self._dump(link_dump_request, parse_link_names, {})
        keep = self._keep
        return {i: (n if keep(n) else None) for i, n in names.items()}

    def read(self) -> Rows:
        """Return {interface: counters in catalog order}; a link that appeared and went
        between the two dumps is left out."""
        return self.parse(self.capture())

    def capture(self) -> tuple[int, list[bytes]] | Rows:
        """Return the datagrams of one RTM_GETSTATS dump, with its sequence number, for
        ``parse`` (before Linux 4.7: the rows of a full RTM_GETLINK dump)."""
        if not self.getstats:
            return self._dump(link_dump_request,
                              lambda d, s, r: parse_link_dump(d, s, self._keep, r), {})
        return self._datagrams(stats_dump_request)

    def parse(self, raw: tuple[int, list[bytes]] | Rows) -> Rows:
        """Return the rows of a ``capture``, named as the links are named now: a link
        renamed since the capture takes its new name, one deleted since is left out."""
        if isinstance(raw, dict):
            return raw
        if self._links_changed() or self._names is None:
            self._names = self._dump_names()
        seq, datagrams = raw
        stats: dict[int, tuple[int, ...]] = {}
        for data in datagrams:
            parse_stats_dump(data, seq, stats)
        if not stats.keys() <= self._names.keys():
            # A link newer than the names; its notification is still on its way.
            self._names = self._dump_names()
        names = self._names
        return {n: v for i, v in stats.items() if (n := names.get(i)) is not None}

    def _close_monitor(self) -> None:
        if self._mon is not None:
            with contextlib.suppress(KeyError, ValueError):  # never registered
                self._poll.unregister(self._mon)
            self._mon.close()
            self._mon = None

    def close(self) -> None:
        """Close both sockets."""
        self._close_monitor()
        self._sock.close()


class SysfsLinks:
    """``<sysfs>/class/net/<if>/statistics/*`` files held open; the interface list is
    re-read at most once per ``refresh_ns``."""

    def __init__(self, net_dir: Path, keep: Callable[[str], bool],
                 clock: Callable[[], int] = time.monotonic_ns,
                 refresh_ns: int = _REFRESH_NS) -> None:
        self.dir = net_dir
        self._keep = keep
        self._clock = clock
        self._refresh_ns = refresh_ns
        self._files: dict[str, list[KeptOpen]] = {}
        self._next_refresh: int | None = None

    def refresh(self) -> None:
        """Re-list the interfaces: open the new ones, close those gone."""
        names = sorted(n for n in os.listdir(self.dir) if self._keep(n))
        files: dict[str, list[KeptOpen]] = {}
        for name in names:
            kept = self._files.pop(name, None)
            if kept is None:
                kept = self._open(name)
            if kept is not None:
                files[name] = kept
        for gone in self._files.values():
            _close_all(gone)
        self._files = files

    def _open(self, name: str) -> list[KeptOpen] | None:
        stats = self.dir / name / "statistics"
        opened: list[KeptOpen] = []
        try:
            for counter in COUNTERS:
                opened.append(KeptOpen(stats / counter))
        except (OSError, RezolusError):  # not an interface (bonding_masters), or no stats
            _close_all(opened)
            return None
        return opened

    def read(self) -> Rows:
        """Return {interface: counters in catalog order}."""
        now = self._clock()
        if self._next_refresh is None or now >= self._next_refresh:
            self.refresh()
            self._next_refresh = now + self._refresh_ns
        rows: Rows = {}
        gone = []
        for name, files in self._files.items():
            try:
                rows[name] = tuple(int(f.read()) for f in files)
            except (OSError, ValueError):  # removed (ENODEV): forget it until it is back
                gone.append(name)
        for name in gone:
            _close_all(self._files.pop(name))
        return rows

    def close(self) -> None:
        """Close every file."""
        for files in self._files.values():
            _close_all(files)
        self._files = {}


def _close_all(files: list[KeptOpen]) -> None:
    for f in files:
        f.close()


class NetworkInterfaces(FamilySampler):
    """Per network interface bytes, packets, errors and drops, received and transmitted."""

    origin = "rtnetlink, sysfs"

    name = "network"
    families = FAMILIES
    options = OPTIONS

    def start(self) -> None:
        self._keep = interface_filter(
            self.strings_option("interfaces"),
            self.strings_option("exclude"))
        self._rtnl: RtnlLinks | None = None
        self._sysfs: SysfsLinks | None = None
        source = self.str_option("source")
        if source == "auto" and self.ctx.roots.sysfs != _REAL_SYSFS:
            source = "sysfs"  # a fixture tree: netlink would describe the running kernel
        refused = ""
        if source in ("auto", "netlink"):
            try:
                self._rtnl = RtnlLinks(self._keep, open_rtnetlink)
            except OSError as e:
                refused = f"rtnetlink unavailable: {e.strerror or e}"
                if source == "netlink":
                    raise SamplerUnavailable(self.name, refused) from None
            else:
                if not self._rtnl.getstats:
                    self.detail = ("RTM_GETSTATS unsupported (Linux < 4.7): a full RTM_GETLINK"
                                   " dump per sample")
        if self._rtnl is None:
            net = self.ctx.roots.sysfs / "class" / "net"
            if not net.is_dir():
                why = f"{net} does not exist"
                raise SamplerUnavailable(self.name, f"{refused}; {why}" if refused else why)
            self._sysfs = SysfsLinks(net, self._keep)
            if refused:
                self.detail = f"{refused}; reading {net}/*/statistics"

    @property
    def source(self) -> str:
        """Return where the counters come from: "netlink" or "sysfs"."""
        return "netlink" if self._rtnl is not None else "sysfs"

    def capture(self) -> object:
        if not self.family_wanted(NETWORK):
            return None
        if self._rtnl is not None:
            return self._rtnl.capture()  # parsed at the publish tick, with the link names
        assert self._sysfs is not None
        return self._sysfs.read()  # already rows: each file holds one number

    def parse(self, raw: Any) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        rows = self._rtnl.parse(raw) if self._rtnl is not None else raw
        return {NETWORK: {(name,): v for name, v in rows.items()}}

    def close(self) -> None:
        for src in (self._rtnl, self._sysfs):
            if src is not None:
                src.close()
        self._rtnl = self._sysfs = None
