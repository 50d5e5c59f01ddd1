"""The network_protocol sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen, picker
from ...metrics.family import Family
from ..base import FamilySampler, Unchanged
from . import FAMILIES, TCP, UDP

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


class TableReader:
    """Reads the wanted columns of the tables of a /proc/net/snmp or /proc/net/netstat text.

    Each table is a header line (``Tcp: ActiveOpens ...``) followed by a value line with
    the same prefix. A column's position is found by name in the header and remembered
    with the header's bytes: the next read only checks the header is unchanged (it is for
    the life of a kernel), splits the value line no further than the last column wanted
    and takes the columns with one ``itemgetter``. Works on the bytes as read: no decoding.
    """

    __slots__ = ("_plans", "_tables", "_zeros")

    def __init__(self, wanted: Wanted) -> None:
        self._tables = tuple((prefix.encode() + b":", tuple(c.encode() for c in columns))
                             for prefix, columns in wanted.items())
        #: Per table: (header bytes, position of each column or -1, last position, getter
        #: of the columns from the split value line with a b"0" appended for absent ones).
        self._plans: list[tuple[bytes, tuple[int, ...], int, Callable] | None] = [
            None] * len(self._tables)
        self._zeros = tuple([0] * len(columns) for _key, columns in self._tables)

    def read(self, data: bytes) -> list[list[int] | None]:
        """Return per wanted table the values of its columns in ``wanted`` order, or None
        for a table absent from ``data``. A column the header lacks reads 0, and so does a
        negative or garbled value."""
        out: list[list[int] | None] = []
        plans = self._plans
        for t, (key, columns) in enumerate(self._tables):
            n = len(key)
            if data.startswith(key):
                h = n
            else:
                h = data.find(b"\n" + key)
                if h < 0:
                    out.append(None)
                    continue
                h += 1 + n
            e = data.find(b"\n", h)
            if e < 0 or not data.startswith(key, e + 1):
                out.append(None)
                continue
            plan = plans[t]
            if plan is None or e - h != len(plan[0]) or not data.startswith(plan[0], h):
                header = data[h:e]
                names = header.split()
                positions = tuple(names.index(c) if c in names else -1 for c in columns)
                plan = plans[t] = (header, positions, max(positions), picker(positions))
            _header, positions, last, getter = plan
            v = e + 1 + n
            end = data.find(b"\n", v)
            line = data[v:] if end < 0 else data[v:end]
            values = line.split(None, last + 1)[: last + 1] if last >= 0 else []
            values.append(b"0")  # what a column the header lacks (position -1) reads
            try:
                picked = getter(values)
            except IndexError:  # a short value line
                picked = None
            if picked is not None and b"".join(picked).isdigit():
                out.append(list(map(int, picked)))
                continue
            row = []
            for i in positions:
                x = values[i] if 0 <= i < len(values) - 1 else b""
                row.append(int(x) if x.isdigit() else 0)  # "-1" (MaxConn) or garbled: 0
            out.append(row)
        return out

    def flat(self, data: bytes) -> list[int]:
        """Return the values of every wanted table one after the other (0 for a table
        absent from ``data``)."""
        rows = self.read(data)
        if None in rows:
            rows = [zeros if row is None else row
                    for row, zeros in zip(rows, self._zeros, strict=True)]
        return list(chain.from_iterable(rows))


def parse_tables(text: str, wanted: Wanted) -> dict[str, dict[str, int]]:
    """Return {prefix: {column: value}} of the wanted columns of /proc/net/snmp or
    /proc/net/netstat text (see TableReader); a table absent from the text is absent from
    the result."""
    rows = TableReader(wanted).read(text.encode("ascii", "replace"))
    return {prefix: dict(zip(columns, row, strict=True))
            for (prefix, columns), row in zip(wanted.items(), rows, strict=True)
            if row is not None}


def family_row(family: Family, tables: Mapping[str, Mapping[str, Mapping[str, int]]]
               ) -> tuple[int, ...]:
    """Return ``family``'s values in catalog order from {file: parse_tables(...)}."""
    row = []
    for m in family.scalars:
        f, prefix, column = SOURCES[m.name]
        row.append(tables.get(f, {}).get(prefix, {}).get(column, 0))
    return tuple(row)


def _flat_getter(family: Family, files: Sequence[tuple[str, Wanted]]
                 ) -> Callable[[list[int]], tuple[int, ...]]:
    """Return a function taking ``family``'s row, in catalog order, out of the values of
    TableReader.flat for each (file, wanted) of ``files``, concatenated."""
    at: dict[tuple[str, str, str], int] = {}
    i = 0
    for file, wanted in files:
        for prefix, columns in wanted.items():
            for column in columns:
                at[(file, prefix, column)] = i
                i += 1
    # A metric no file here reads (a missing /proc/net/netstat) reads the 0 put after them.
    positions = [at.get(SOURCES[m.name], i) for m in family.scalars]
    get = itemgetter(*positions)
    return lambda values: get([*values, 0])


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
    families = FAMILIES

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
        netstat = wanted_columns(TCP, "netstat")
        self._netstat_reader = TableReader(netstat)
        self._unchanged = Unchanged()
        self._netstat_tables = netstat
        with_netstat = [("netstat", netstat)] if self._netstat is not None else []
        #: Per (TCP wanted, UDP wanted): the /proc/net/snmp reader and the getters of the
        #: TCP and UDP rows out of its values (then /proc/net/netstat's, for TCP).
        self._snmp_plans = {}
        for want, tables in (((True, True), {**tcp, **udp}), ((True, False), tcp),
                             ((False, True), udp)):
            files = [("snmp", tables)]
            self._snmp_plans[want] = (TableReader(tables),
                                      _flat_getter(TCP, files + with_netstat),
                                      _flat_getter(UDP, files))
        missing = missing_columns(self._snmp.read_text(), {**tcp, **udp})
        if self._netstat is None:
            missing.append(f"{net / 'netstat'} (TcpExt)")
        else:
            missing += missing_columns(self._netstat.read_text(), self._netstat_tables)
        if missing:
            self.detail = "missing here, read as 0: " + ", ".join(missing)

    def capture(self) -> tuple[bool, bool, bytes, bytes | None] | None:
        want_tcp, want_udp = self.family_wanted(TCP), self.family_wanted(UDP)
        if not (want_tcp or want_udp):
            return None
        netstat = self._netstat.read() if want_tcp and self._netstat is not None else None
        return want_tcp, want_udp, self._snmp.read(), netstat

    def parse(self, raw: tuple[bool, bool, bytes, bytes | None] | None,
              ) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        return self._unchanged.parse(raw, self._parse)

    def _parse(self, raw: tuple[bool, bool, bytes, bytes | None],
               ) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        want_tcp, want_udp, snmp, netstat = raw
        reader, tcp_row, udp_row = self._snmp_plans[(want_tcp, want_udp)]
        values = reader.flat(snmp)
        out: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        if want_udp:
            out[UDP] = {(): udp_row(values)}
        if want_tcp:
            if netstat is not None:
                values += self._netstat_reader.flat(netstat)
            out[TCP] = {(): tcp_row(values)}
        return out

    def close(self) -> None:
        self._snmp.close()
        if self._netstat is not None:
            self._netstat.close()
