"""rtnetlink (``NETLINK_ROUTE``): the link and link-statistics dumps, built and decoded
with ``struct`` (``linux/netlink.h``, ``linux/rtnetlink.h``, ``linux/if_link.h``).

Requests: ``RTM_GETLINK`` (every link: ``IFLA_IFNAME`` first, then ``IFLA_STATS64`` since
Linux 2.6.35, else the 32-bit ``IFLA_STATS``) and ``RTM_GETSTATS`` asking only for
``IFLA_STATS_LINK_64`` (``struct rtnl_link_stats64``, Linux >= 4.7). The decoders take one
datagram at a time, skip messages of another dump (by sequence number) and raise OSError
for an error the kernel reports. Counters come out as the first eight fields of the stats
structs (``RTNL_STATS_FIELDS``), or as ``pick`` orders them: the network sampler passes an
``itemgetter`` so each link costs one C call.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

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
#: Larger than any dump datagram (the kernel caps them at 32 KiB).
RECV_SIZE = 65536

Rows = dict[str, tuple[int, ...]]
#: Orders the eight counters of a stats struct (``tuple``: as the struct has them).
Pick = Callable[[Sequence[int]], tuple[int, ...]]
T = TypeVar("T")


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


def messages(data: bytes, seq: int | None) -> Iterator[tuple[int, int, int]]:
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
                    rows: Rows | None = None, pick: Pick = tuple) -> tuple[Rows, bool]:
    """Return ({interface: counters}, done) from one datagram of an
    RTM_GETLINK dump, adding to ``rows`` if given; ``done``: NLMSG_DONE arrived.

    IFLA_STATS64 is preferred to the 32-bit IFLA_STATS; a link with neither is left out,
    and links ``keep`` rejects are not decoded past their name.
    """
    out: Rows = {} if rows is None else rows
    unpack_nla = _NLATTR.unpack_from
    for mtype, off, length in messages(data, seq):
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
            out[name] = pick(stats)
    return out, False


def _ifname(data: bytes, a: int, alen: int) -> str:
    return data[a + 4:a + alen].split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_link_names(data: bytes, seq: int | None = None,
                     names: dict[int, str] | None = None) -> tuple[dict[int, str], bool]:
    """Return ({ifindex: name}, done) from one datagram of an RTM_GETLINK dump."""
    # IFLA_IFNAME comes first: the attribute walk is usually one step.
    return _first_attr_by_index(data, seq, RTM_NEWLINK, _LINK_ATTRS, IFLA_IFNAME, 4, _ifname,
                                {} if names is None else names)


def parse_stats_dump(data: bytes, seq: int | None = None,
                     rows: dict[int, tuple[int, ...]] | None = None,
                     pick: Pick = tuple) -> tuple[dict[int, tuple[int, ...]], bool]:
    """Return ({ifindex: counters}, done) from one datagram of an
    RTM_GETSTATS dump of IFLA_STATS_LINK_64."""
    unpack = _STATS64.unpack_from
    return _first_attr_by_index(data, seq, RTM_NEWSTATS, _STATS_ATTRS, IFLA_STATS_LINK_64,
                                4 + _STATS64.size, lambda d, a, _n: pick(unpack(d, a + 4)),
                                {} if rows is None else rows)


def _first_attr_by_index(data: bytes, seq: int | None, mtype_wanted: int, attrs_at: int,
                         attr: int, min_len: int, decode: Callable[[bytes, int, int], T],
                         out: dict[int, T]) -> tuple[dict[int, T], bool]:
    """Return ({ifindex: decode(data, offset, length) of its first ``attr`` attribute of at
    least ``min_len`` bytes}, done) for the ``mtype_wanted`` messages of one datagram
    (link and stats messages both carry the ifindex at byte 4 of their header)."""
    unpack_nla = _NLATTR.unpack_from
    for mtype, off, length in messages(data, seq):
        if mtype == NLMSG_DONE:
            return out, True
        if mtype != mtype_wanted or length < attrs_at:
            continue
        index = _S32.unpack_from(data, off + _HDR + 4)[0]
        a, end = off + attrs_at, off + length
        while a + 4 <= end:
            alen, atype = unpack_nla(data, a)
            if alen < 4 or a + alen > end:
                break
            if atype & NLA_TYPE_MASK == attr and alen >= min_len:
                out[index] = decode(data, a, alen)
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
