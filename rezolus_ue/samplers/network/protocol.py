"""TCP and UDP protocol counters of the agent's network namespace.

Sources, both kept open:

* ``/proc/net/snmp``: pairs of lines, a header naming the columns and a line of values,
  for ``Tcp:`` (ActiveOpens PassiveOpens InSegs OutSegs RetransSegs InErrs OutRsts) and
  ``Udp:`` (InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors);
* ``/proc/net/netstat``: the same layout, ``TcpExt:`` (ListenOverflows ListenDrops
  TCPTimeouts).

Columns are found by their header names, never by position: kernels add columns (Tcp and
Udp InCsumErrors in Linux 3.10, Udp IgnoredMulti and MemErrors later, TcpExt often). The
Tcp and Udp columns read here are RFC 1213 MIB-II, in every kernel, except Udp
RcvbufErrors and SndbufErrors, added in Linux 2.6.19; TcpExt ListenOverflows, ListenDrops
and TCPTimeouts are already in 2.6 kernels. A name a kernel lacks (or a missing
/proc/net/netstat, as in some sandboxes) reads 0, and ``detail`` lists what is missing.

The Tcp and TcpExt counters cover TCP over IPv4 and IPv6 (one MIB); the Udp counters are
IPv4 only (IPv6 UDP is counted in /proc/net/snmp6 as Udp6*).
Events: ``rezolus_tcp`` and ``rezolus_udp`` (+ ``_dist``: per-second rates between samples).
Cost of ``read()`` (median of 1000, Linux 6.18 VM with 2 vCPUs, both families): 60-118 us,
about half of it the kernel printing the two files (netstat alone ~35 us: it folds ~300
per-CPU counters, TcpExt, IpExt and MPTcpExt, for every read).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence

from ...errors import RezolusError, SamplerUnavailable
from ...metrics.catalog import TCP, UDP
from ...metrics.family import Family
from ...procfs import KeptOpen
from ..base import FamilySampler

#: Where each metric comes from: (file under /proc/net, table prefix, column name).
SOURCES: dict[str, tuple[str, str, str]] = {
    "active_opens": ("snmp", "Tcp", "ActiveOpens"),
    "passive_opens": ("snmp", "Tcp", "PassiveOpens"),
    "in_segs": ("snmp", "Tcp", "InSegs"),
    "out_segs": ("snmp", "Tcp", "OutSegs"),
    "retrans_segs": ("snmp", "Tcp", "RetransSegs"),
    "in_errs": ("snmp", "Tcp", "InErrs"),
    "out_rsts": ("snmp", "Tcp", "OutRsts"),
    "listen_overflows": ("netstat", "TcpExt", "ListenOverflows"),
    "listen_drops": ("netstat", "TcpExt", "ListenDrops"),
    "timeouts": ("netstat", "TcpExt", "TCPTimeouts"),
    "in_datagrams": ("snmp", "Udp", "InDatagrams"),
    "out_datagrams": ("snmp", "Udp", "OutDatagrams"),
    "in_errors": ("snmp", "Udp", "InErrors"),
    "no_ports": ("snmp", "Udp", "NoPorts"),
    "rcvbuf_errors": ("snmp", "Udp", "RcvbufErrors"),
    "sndbuf_errors": ("snmp", "Udp", "SndbufErrors"),
}

Wanted = Mapping[str, tuple[str, ...]]


def wanted_columns(family: Family, file: str) -> dict[str, tuple[str, ...]]:
    """Return {table prefix: column names} of ``family``'s metrics found in ``file``."""
    out: dict[str, tuple[str, ...]] = {}
    for m in family.scalars:
        f, prefix, column = SOURCES[m.name]
        if f == file:
            out[prefix] = (*out.get(prefix, ()), column)
    return out


@functools.lru_cache(maxsize=32)
def _positions(header: str, columns: tuple[str, ...]) -> tuple[int, ...]:
    """Return the index of each column in a header line's values (-1: absent)."""
    names = header.split()
    return tuple(names.index(c) if c in names else -1 for c in columns)


def _table(text: str, prefix: str) -> tuple[str, str] | None:
    """Return the (header, values) lines of table ``prefix``, without the prefix."""
    key = prefix + ":"
    if text.startswith(key):
        h = len(key)
    else:
        h = text.find("\n" + key)
        if h < 0:
            return None
        h += 1 + len(key)
    e = text.find("\n", h)
    if e < 0 or not text.startswith(key, e + 1):
        return None
    v = e + 1 + len(key)
    end = text.find("\n", v)
    return text[h:e], text[v:] if end < 0 else text[v:end]


def parse_tables(text: str, wanted: Wanted) -> dict[str, dict[str, int]]:
    """Return {prefix: {column: value}} of the wanted columns of /proc/net/snmp or
    /proc/net/netstat text.

    Each table is a header line (``Tcp: ActiveOpens ...``) followed by a value line with
    the same prefix. A column the header lacks reads 0, and so does a negative or garbled
    value; a table absent from the text is absent from the result.
    """
    out: dict[str, dict[str, int]] = {}
    for prefix, columns in wanted.items():
        table = _table(text, prefix)
        if table is None:
            continue
        header, line = table
        positions = _positions(header, columns)
        last = max(positions)
        values = line.split(None, last + 1) if last >= 0 else []  # no more than needed
        n = len(values)
        row = out[prefix] = {}
        for column, i in zip(columns, positions, strict=True):
            v = values[i] if 0 <= i < n else ""
            row[column] = int(v) if v.isdecimal() else 0  # "-1" (MaxConn) or garbled: 0
    return out


def family_row(family: Family, tables: Mapping[str, Mapping[str, Mapping[str, int]]]
               ) -> tuple[int, ...]:
    """Return ``family``'s values in catalog order from {file: parse_tables(...)}."""
    row = []
    for m in family.scalars:
        f, prefix, column = SOURCES[m.name]
        row.append(tables.get(f, {}).get(prefix, {}).get(column, 0))
    return tuple(row)


def missing_columns(text: str, wanted: Wanted) -> list[str]:
    """Return "Prefix Column" for each wanted column the text's headers lack."""
    headers: dict[str, list[str]] = {}
    for line in text.splitlines():
        prefix, sep, rest = line.partition(":")
        if sep and prefix in wanted and prefix not in headers:
            headers[prefix] = rest.split()
    return [f"{p} {c}" for p, cols in wanted.items() for c in cols
            if c not in headers.get(p, ())]


class NetworkProtocol(FamilySampler):
    """TCP and UDP protocol counters: opens, segments, retransmits, resets, drops, errors."""

    name = "network_protocol"
    families = (TCP, UDP)

    def start(self) -> None:
        net = self.ctx.roots.procfs / "net"
        try:
            self._snmp = KeptOpen(net / "snmp")
        except (OSError, RezolusError) as e:
            raise SamplerUnavailable(self.name, str(e)) from None
        self._netstat: KeptOpen | None = None
        with contextlib.suppress(OSError, RezolusError):
            self._netstat = KeptOpen(net / "netstat")
        tcp, udp = wanted_columns(TCP, "snmp"), wanted_columns(UDP, "snmp")
        #: /proc/net/snmp tables to parse, by (TCP wanted, UDP wanted).
        self._snmp_tables = {(True, True): {**tcp, **udp}, (True, False): tcp,
                             (False, True): udp}
        self._netstat_tables = wanted_columns(TCP, "netstat")
        missing = missing_columns(self._snmp.read_text(), {**tcp, **udp})
        if self._netstat is None:
            missing.append(f"{net / 'netstat'} (TcpExt)")
        else:
            missing += missing_columns(self._netstat.read_text(), self._netstat_tables)
        if missing:
            self.detail = "missing here, read as 0: " + ", ".join(missing)

    def read(self) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        want_tcp, want_udp = self.family_wanted(TCP), self.family_wanted(UDP)
        if not (want_tcp or want_udp):
            return {}
        tables = {"snmp": parse_tables(self._snmp.read_text(),
                                       self._snmp_tables[(want_tcp, want_udp)])}
        if want_tcp and self._netstat is not None:
            tables["netstat"] = parse_tables(self._netstat.read_text(), self._netstat_tables)
        out: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        if want_tcp:
            out[TCP] = {(): family_row(TCP, tables)}
        if want_udp:
            out[UDP] = {(): family_row(UDP, tables)}
        return out

    def close(self) -> None:
        self._snmp.close()
        if self._netstat is not None:
            self._netstat.close()
