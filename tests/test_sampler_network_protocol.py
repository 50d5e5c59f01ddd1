"""The network_protocol sampler: /proc/net/snmp and /proc/net/netstat against fixtures, end
to end, and the host's TCP and UDP counters against traffic the test makes.

Golden files: ``tests/fixtures/procfs/network_protocol/<case>.expected.json`` hold the
TCP and UDP rows parsed from ``<case>/net/snmp`` and ``<case>/net/netstat``; regenerate
after a deliberate change with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest
tests/test_sampler_network_protocol.py`` and review the diff. The cases are described in
``tests/fixtures/procfs/network_protocol/README.md``.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from helpers import (
    FakeHandle,
    check_golden,
    decoded,
    new_sampler,
    replace_in_place,
    sample_twice,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.samplers.network_protocol import TCP, UDP
from rezolus_ue.samplers.network_protocol.sampler import (
    SOURCES,
    NetworkProtocol,
    TableReader,
    family_row,
    missing_columns,
    parse_tables,
    wanted_columns,
)

FIXTURES = Path(__file__).parent / "fixtures" / "procfs" / "network_protocol"
CASES = ["modern", "old", "no_netstat"]
TCP_NAMES = tuple(m.name for m in TCP.scalars)
UDP_NAMES = tuple(m.name for m in UDP.scalars)
SNMP_WANTED = {**wanted_columns(TCP, "snmp"), **wanted_columns(UDP, "snmp")}
NETSTAT_WANTED = wanted_columns(TCP, "netstat")


def parse_case(root: Path) -> dict[str, dict[str, int]]:
    tables = {"snmp": parse_tables((root / "net" / "snmp").read_text(), SNMP_WANTED)}
    netstat = root / "net" / "netstat"
    if netstat.exists():
        tables["netstat"] = parse_tables(netstat.read_text(), NETSTAT_WANTED)
    return {"tcp": dict(zip(TCP_NAMES, family_row(TCP, tables), strict=True)),
            "udp": dict(zip(UDP_NAMES, family_row(UDP, tables), strict=True))}


def table(text: str, prefix: str) -> dict[str, str]:
    """Return a table of the text as {column: value} the slow, obvious way."""
    rows = [ln.split()[1:] for ln in text.splitlines() if ln.startswith(prefix + ":")]
    return dict(zip(rows[0], rows[1], strict=True))


# --- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    check_golden(FIXTURES / f"{case}.expected.json", parse_case(FIXTURES / case))


def test_sources_cover_the_catalog_exactly() -> None:
    assert set(SOURCES) == set(TCP_NAMES) | set(UDP_NAMES)
    assert len(SOURCES) == len(TCP_NAMES) + len(UDP_NAMES)


@pytest.mark.parametrize("case", ["modern", "old"])
def test_every_value_is_the_column_of_its_name(case: str) -> None:
    got = parse_case(FIXTURES / case)
    files = {f: (FIXTURES / case / "net" / f).read_text() for f in ("snmp", "netstat")}
    for family, names in (("tcp", TCP_NAMES), ("udp", UDP_NAMES)):
        for name in names:
            f, prefix, column = SOURCES[name]
            expected = int(table(files[f], prefix).get(column, "0"))
            assert got[family][name] == expected, (case, name)


def test_old_kernel_udp_buffer_errors_read_zero() -> None:
    got = parse_case(FIXTURES / "old")
    # Linux 2.6.18: Udp has InDatagrams NoPorts InErrors OutDatagrams only.
    assert got["udp"] == {"in_datagrams": 135780, "out_datagrams": 92236, "in_errors": 0,
                          "no_ports": 39, "rcvbuf_errors": 0, "sndbuf_errors": 0}
    # ListenOverflows sits at column 19 there (22 on 6.18): found by name all the same.
    assert (got["tcp"]["listen_overflows"], got["tcp"]["listen_drops"],
            got["tcp"]["timeouts"]) == (17, 19, 942)
    assert missing_columns((FIXTURES / "old" / "net" / "snmp").read_text(), SNMP_WANTED) == [
        "Udp RcvbufErrors", "Udp SndbufErrors"]


def test_missing_netstat_reads_zero() -> None:
    got = parse_case(FIXTURES / "no_netstat")
    assert (got["tcp"]["listen_overflows"], got["tcp"]["listen_drops"],
            got["tcp"]["timeouts"]) == (0, 0, 0)
    assert got["tcp"]["active_opens"] == 901
    assert got["udp"]["no_ports"] == 12


W = {"Tcp": ("ActiveOpens", "OutRsts")}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("Tcp: ActiveOpens OutRsts\n", {}),  # a header without values
        ("Tcp: ActiveOpens OutRsts\nTcp: 5 6\n", {"Tcp": {"ActiveOpens": 5, "OutRsts": 6}}),
        ("Tcp: ActiveOpens OutRsts\nTcp: 5 6", {"Tcp": {"ActiveOpens": 5, "OutRsts": 6}}),
        # Order in the file does not matter, only names.
        ("Tcp: OutRsts X ActiveOpens\nTcp: 6 0 5\n", {"Tcp": {"ActiveOpens": 5, "OutRsts": 6}}),
        # A column this kernel lacks, and a short value line, read 0.
        ("Tcp: ActiveOpens\nTcp: 5\n", {"Tcp": {"ActiveOpens": 5, "OutRsts": 0}}),
        ("Tcp: ActiveOpens OutRsts\nTcp: 5\n", {"Tcp": {"ActiveOpens": 5, "OutRsts": 0}}),
        # Negative (MaxConn is signed) and garbled values read 0, never fail.
        ("Tcp: ActiveOpens OutRsts\nTcp: -1 x\n", {"Tcp": {"ActiveOpens": 0, "OutRsts": 0}}),
        # TcpExt is not Tcp; other tables are skipped; the prefix must start a line.
        ("TcpExt: ActiveOpens\nTcpExt: 9\nUdp: A\nUdp: 1\nXTcp: ActiveOpens\nXTcp: 3\n", {}),
        ("Ip: A\nIp: 1\nTcp: ActiveOpens OutRsts\nTcp: 18446744073709551615 0\n",
         {"Tcp": {"ActiveOpens": 18446744073709551615, "OutRsts": 0}}),
    ],
)
def test_parse_tables(text: str, expected: dict) -> None:
    assert parse_tables(text, W) == expected


def test_table_reader_follows_a_changed_header() -> None:
    """Positions are remembered with the header: a header that changed is read anew."""
    r = TableReader(W)
    assert r.read(b"Tcp: ActiveOpens OutRsts\nTcp: 5 6\n") == [[5, 6]]
    assert r.read(b"Tcp: ActiveOpens OutRsts\nTcp: 7 8\n") == [[7, 8]]
    assert r.read(b"Tcp: X OutRsts ActiveOpens\nTcp: 1 2 3\n") == [[3, 2]]
    # A header of the same length, other order: compared byte for byte, not by length.
    assert r.read(b"Tcp: ActiveOpens OutRsts X\nTcp: 1 2 3\n") == [[1, 2]]
    assert r.read(b"Tcp: ActiveOpens\nTcp: 4\n") == [[4, 0]]
    assert r.read(b"Udp: A\nUdp: 1\n") == [None]
    two = TableReader({"Udp": ("B", "A"), "Tcp": ("OutRsts",)})
    assert two.flat(b"Tcp: OutRsts\nTcp: 3\n") == [0, 0, 3]  # no Udp table: zeros
    assert two.flat(b"Udp: A B\nUdp: 1 2\nTcp: OutRsts\nTcp: -1\n") == [2, 1, 0]


def test_family_row_defaults_to_zero() -> None:
    assert family_row(TCP, {}) == (0,) * len(TCP_NAMES)
    assert family_row(UDP, {"snmp": {"Udp": {"NoPorts": 4}}}) == (0, 0, 0, 4, 0, 0)


# --- the sampler against fixture roots ---------------------------------------------------


def make_sampler(procfs: Path, enabled: bool = True
                 ) -> tuple[NetworkProtocol, dict[str, FakeHandle]]:
    return start_sampler(NetworkProtocol, procfs, procfs / "no-sysfs", enabled=enabled)


@pytest.mark.parametrize("case", CASES)
def test_sampler_publishes_one_record_per_family(case: str) -> None:
    s, h = make_sampler(FIXTURES / case)
    try:
        assert s.wanted and s.dist_wanted
        sample_twice(s)
    finally:
        s.close()
    expected = json.loads((FIXTURES / f"{case}.expected.json").read_text())
    for fam, key, names in ((TCP, "tcp", TCP_NAMES), (UDP, "udp", UDP_NAMES)):
        records = decoded(fam.schema, h)
        assert records == [expected[key]]
        assert fam.dist_schema is not None
        dist = decoded(fam.dist_schema, h)
        assert [d["metric"] for d in dist] == list(names)
        for d in dist:
            # The files did not change between the two samples: total as read, rate 0.
            assert (d["value"], d["p50"], d["max"]) == (expected[key][d["metric"]], 0, 0)


def test_sampler_detail_names_what_this_kernel_lacks() -> None:
    s, _h = make_sampler(FIXTURES / "old")
    s.close()
    assert s.detail == "missing here, read as 0: Udp RcvbufErrors, Udp SndbufErrors"
    s, _h = make_sampler(FIXTURES / "no_netstat")
    s.close()
    assert "netstat (TcpExt)" in s.detail
    s, _h = make_sampler(FIXTURES / "modern")
    s.close()
    assert s.detail == ""


def test_sampler_reads_only_wanted_families() -> None:
    s, h = make_sampler(FIXTURES / "modern", enabled=False)
    try:
        assert s.read() == {}
        h[UDP.schema.name].word.value = 1
        assert set(s.read()) == {UDP}
        h[TCP.dist_schema.name].word.value = 1  # type: ignore[union-attr]
        assert set(s.read()) == {TCP, UDP}
    finally:
        s.close()


def test_sampler_rereads_the_kept_open_files(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "old", tmp_path, dirs_exist_ok=True)
    s, h = make_sampler(tmp_path)
    try:
        s.sample(1_000_000_000)
        replace_in_place(tmp_path / "net" / "snmp", b"Udp: 135780 39 0 92236",
                         b"Udp: 135780 49 0 92236")
        s.sample(2_000_000_000)
        s.publish()
    finally:
        s.close()
    assert UDP.dist_schema is not None
    dist = decoded(UDP.dist_schema, h)
    no_ports = next(d for d in dist if d["metric"] == "no_ports")
    assert (no_ports["value"], no_ports["max"]) == (49, 10)


def test_sampler_without_proc_net_snmp_is_unavailable(tmp_path: Path) -> None:
    s = new_sampler(NetworkProtocol, tmp_path, tmp_path)
    with pytest.raises(SamplerUnavailable, match="snmp"):
        s.start()


# --- the host ----------------------------------------------------------------------------


def host_counters(s: NetworkProtocol) -> dict[str, int]:
    rows = s.read()
    return {**dict(zip(TCP_NAMES, rows[TCP][()], strict=True)),
            **dict(zip(UDP_NAMES, rows[UDP][()], strict=True))}


@pytest.mark.host
def test_host_has_every_column() -> None:
    s, _h = make_sampler(Path("/proc"))
    s.close()
    assert s.detail == ""


@pytest.mark.host
def test_host_loopback_connections_count_as_opens() -> None:
    """N loopback TCP connections raise ActiveOpens and PassiveOpens by at least N."""
    n = 20
    s, _h = make_sampler(Path("/proc"))
    try:
        before = host_counters(s)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(n)
            for _ in range(n):
                with socket.create_connection(server.getsockname()) as c:
                    conn, _addr = server.accept()
                    c.sendall(b"x")
                    assert conn.recv(1) == b"x"
                    conn.close()
        after = host_counters(s)
    finally:
        s.close()
    assert after["active_opens"] - before["active_opens"] >= n
    assert after["passive_opens"] - before["passive_opens"] >= n
    # Each connection: SYN, ACK, data, FIN... on both sides.
    assert after["in_segs"] - before["in_segs"] >= 3 * n
    assert after["out_segs"] - before["out_segs"] >= 3 * n


@pytest.mark.host
def test_host_udp_to_a_closed_port_counts_no_ports() -> None:
    """Datagrams to a loopback port nobody listens on count as NoPorts."""
    n = 25
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()  # free once the probe closes
    s, _h = make_sampler(Path("/proc"))
    try:
        before = host_counters(s)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for _ in range(n):
                # Unconnected: the ICMP port unreachable does not fail the next send.
                tx.sendto(b"ping", closed)
        after = host_counters(s)
    finally:
        s.close()
    assert after["no_ports"] - before["no_ports"] >= n
    assert after["out_datagrams"] - before["out_datagrams"] >= n
