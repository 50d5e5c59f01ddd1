"""The network sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from operator import itemgetter
from pathlib import Path
from typing import Any

from ...errors import RezolusError, SamplerUnavailable
from ...metrics.family import Family
from ...procfs import KeptOpen
from ..base import FamilySampler
from . import FAMILIES, NETWORK, OPTIONS

# --- rtnetlink wire format (linux/netlink.h, linux/rtnetlink.h, linux/if_link.h) -------

_NLMSGHDR = struct.Struct("=IHHII")  # nlmsg_len, nlmsg_type, nlmsg_flags, nlmsg_seq, nlmsg_pid
_IFINFOMSG = struct.Struct("=BxHiII")  # ifi_family, pad, ifi_type, ifi_index, flags, change
_IF_STATS_MSG = struct.Struct("=BxxxiI")  # family, pad1, pad2, ifindex, filter_mask
_NLATTR = struct.Struct("=HH")  # nla_len, nla_type
_S32 = struct.Struct("=i")  # NLMSG_ERROR / NLMSG_DONE payload (0 or -errno); ifindex
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK, RTM_NEWSTATS, RTM_GETSTATS = 16, 18, 92, 94
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFLA_IFNAME, IFLA_STATS, IFLA_STATS64 = 3, 7, 23
IFLA_STATS_LINK_64 = 1
RTMGRP_LINK = 0x1  # multicast group RTNLGRP_LINK, as a bind() mask
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
_HDR = _NLMSGHDR.size
#: Offset of the first attribute of a link message and of a stats message.
_LINK_ATTRS = _HDR + _IFINFOMSG.size
_STATS_ATTRS = _HDR + _IF_STATS_MSG.size

#: The first eight fields of struct rtnl_link_stats (u32) and rtnl_link_stats64 (u64).
RTNL_STATS_FIELDS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes",
                     "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
_STATS64 = struct.Struct("=8Q")
_STATS32 = struct.Struct("=8I")
#: The metrics in catalog order; also the sysfs statistics file names.
COUNTERS = tuple(m.name for m in NETWORK.scalars)
_ORDER = tuple(RTNL_STATS_FIELDS.index(n) for n in COUNTERS)
#: The counters of an unpacked stats struct, in catalog order: one C call per link.
_IN_ORDER = itemgetter(*_ORDER)
#: Larger than any dump datagram (the kernel caps them at 32 KiB).
_RECV_SIZE = 65536
_REAL_SYSFS = Path("/sys")
_REFRESH_NS = 1_000_000_000
#: What a kernel without RTM_GETSTATS (< 4.7) answers.
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)

Rows = dict[str, tuple[int, ...]]


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


def link_dump_request(seq: int) -> bytes:
    """Return an RTM_GETLINK request dumping every link, with sequence number ``seq``."""
    body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    return _NLMSGHDR.pack(_HDR + len(body), RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP,
                          seq, 0) + body


def stats_dump_request(seq: int) -> bytes:
    """Return an RTM_GETSTATS request dumping IFLA_STATS_LINK_64 of every link."""
    body = _IF_STATS_MSG.pack(socket.AF_UNSPEC, 0, 1 << (IFLA_STATS_LINK_64 - 1))
    return _NLMSGHDR.pack(_HDR + len(body), RTM_GETSTATS, NLM_F_REQUEST | NLM_F_DUMP,
                          seq, 0) + body


def _messages(data: bytes, seq: int | None) -> Iterator[tuple[int, int, int]]:
    """Yield (type, offset, length) of the messages of dump ``seq`` in one datagram, up
    to and including NLMSG_DONE; raise OSError for an error the kernel reports.

    Messages of another sequence number (left over from an interrupted dump) are skipped;
    a truncated or malformed message ends the datagram.
    """
    off, end = 0, len(data)
    unpack = _NLMSGHDR.unpack_from
    while off + _HDR <= end:
        length, mtype, _flags, mseq, _pid = unpack(data, off)
        if length < _HDR or off + length > end:
            return
        if seq is None or mseq == seq:
            if mtype in (NLMSG_ERROR, NLMSG_DONE) and length >= _HDR + _S32.size:
                err = -_S32.unpack_from(data, off + _HDR)[0]
                if err > 0:
                    raise OSError(err, os.strerror(err))
            yield mtype, off, length
            if mtype == NLMSG_DONE:
                return
        off += (length + 3) & ~3


def parse_link_dump(data: bytes, seq: int | None = None,
                    keep: Callable[[str], bool] | None = None,
                    rows: Rows | None = None) -> tuple[Rows, bool]:
    """Return ({interface: counters in catalog order}, done) from one datagram of an
    RTM_GETLINK dump, adding to ``rows`` if given; ``done``: NLMSG_DONE arrived.

    IFLA_STATS64 is preferred to the 32-bit IFLA_STATS; a link with neither is left out,
    and links ``keep`` rejects are not decoded past their name.
    """
    out: Rows = {} if rows is None else rows
    unpack_nla = _NLATTR.unpack_from
    for mtype, off, length in _messages(data, seq):
        if mtype == NLMSG_DONE:
            return out, True
        if mtype != RTM_NEWLINK:
            continue
        name: str | None = None
        s64 = s32 = None
        a, end = off + _LINK_ATTRS, off + length
        while a + 4 <= end:
            alen, atype = unpack_nla(data, a)
            if alen < 4 or a + alen > end:
                break
            atype &= NLA_TYPE_MASK
            if atype == IFLA_IFNAME:
                name = _ifname(data, a, alen)
                if keep is not None and not keep(name):
                    name = None
                    break
                if s64 is not None:
                    break
            elif atype == IFLA_STATS64 and alen >= 4 + _STATS64.size:
                s64 = _STATS64.unpack_from(data, a + 4)
                if name is not None:
                    break  # the kernel sends IFLA_IFNAME first: done with this link
            elif atype == IFLA_STATS and alen >= 4 + _STATS32.size:
                s32 = _STATS32.unpack_from(data, a + 4)
            a += (alen + 3) & ~3
        stats = s64 if s64 is not None else s32
        if name is not None and stats is not None:
            out[name] = _IN_ORDER(stats)
    return out, False


def _ifname(data: bytes, a: int, alen: int) -> str:
    return data[a + 4:a + alen].split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_link_names(data: bytes, seq: int | None = None,
                     names: dict[int, str] | None = None) -> tuple[dict[int, str], bool]:
    """Return ({ifindex: name}, done) from one datagram of an RTM_GETLINK dump."""
    out: dict[int, str] = {} if names is None else names
    unpack_nla = _NLATTR.unpack_from
    for mtype, off, length in _messages(data, seq):
        if mtype == NLMSG_DONE:
            return out, True
        if mtype != RTM_NEWLINK or length < _LINK_ATTRS:
            continue
        index = _S32.unpack_from(data, off + _HDR + 4)[0]
        a, end = off + _LINK_ATTRS, off + length
        while a + 4 <= end:  # IFLA_IFNAME comes first: usually one step
            alen, atype = unpack_nla(data, a)
            if alen < 4 or a + alen > end:
                break
            if atype & NLA_TYPE_MASK == IFLA_IFNAME:
                out[index] = _ifname(data, a, alen)
                break
            a += (alen + 3) & ~3
    return out, False


def parse_stats_dump(data: bytes, seq: int | None = None,
                     rows: dict[int, tuple[int, ...]] | None = None,
                     ) -> tuple[dict[int, tuple[int, ...]], bool]:
    """Return ({ifindex: counters in catalog order}, done) from one datagram of an
    RTM_GETSTATS dump of IFLA_STATS_LINK_64."""
    out: dict[int, tuple[int, ...]] = {} if rows is None else rows
    unpack_nla = _NLATTR.unpack_from
    for mtype, off, length in _messages(data, seq):
        if mtype == NLMSG_DONE:
            return out, True
        if mtype != RTM_NEWSTATS or length < _STATS_ATTRS:
            continue
        index = _S32.unpack_from(data, off + _HDR + 4)[0]
        a, end = off + _STATS_ATTRS, off + length
        while a + 4 <= end:
            alen, atype = unpack_nla(data, a)
            if alen < 4 or a + alen > end:
                break
            if atype & NLA_TYPE_MASK == IFLA_STATS_LINK_64 and alen >= 4 + _STATS64.size:
                out[index] = _IN_ORDER(_STATS64.unpack_from(data, a + 4))
                break
            a += (alen + 3) & ~3
    return out, False


def open_rtnetlink(groups: int = 0) -> socket.socket:
    """Return a bound NETLINK_ROUTE socket (subscribed to multicast ``groups``, then
    non-blocking); raise OSError where netlink is refused."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         socket.NETLINK_ROUTE)
    try:
        sock.bind((0, groups))
        if groups:
            sock.setblocking(False)
        else:
            sock.settimeout(1.0)  # a dump answers at once; never hang the agent's loop
    except OSError:
        sock.close()
        raise
    return sock


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
            data = self._sock.recv(_RECV_SIZE)
            if not data:
                raise OSError(errno.EIO, "rtnetlink: empty datagram in a dump")
            out.append(data)
            for mtype, _off, _length in _messages(data, seq):
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
                if not mon.recv(_RECV_SIZE):
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
