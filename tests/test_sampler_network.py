"""The network sampler: rtnetlink and sysfs decoding against fixtures (netlink decoded by
pyroute2 too, as the reference), the link-tracking logic against a fake kernel, the sampler
end to end, and the host's counters against loopback traffic the test makes.

Golden files: ``tests/fixtures/sysfs/network/<case>.expected.json`` (sysfs trees) and
``tests/fixtures/sysfs/network/netlink/<capture>.expected.json`` (rtnetlink dumps);
regenerate after a deliberate change with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest
tests/test_sampler_network.py`` and review the diff. The fixtures are described in
``tests/fixtures/sysfs/network/README.md``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import (
    FailingFile,
    FakeHandle,
    assert_silent_without_consumer,
    check_golden,
    decoded,
    sample_twice,
    start_sampler,
)

from rezolus_ue import config
from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.linux import rtnetlink as rtnl
from rezolus_ue.linux.rtnetlink import IFLA_STATS64, parse_link_names
from rezolus_ue.samplers.network import NETWORK
from rezolus_ue.samplers.network import sampler as ni
from rezolus_ue.samplers.network.sampler import (
    COUNTERS,
    NetworkInterfaces,
    RtnlLinks,
    SysfsLinks,
    interface_filter,
    parse_link_dump,
    parse_stats_dump,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sysfs" / "network"
NETLINK = FIXTURES / "netlink"
HDR = struct.Struct("=IHHII")
NLA = struct.Struct("=HH")
GETLINK_SEQ, GETSTATS_SEQ = 1, 2


def named(rows: dict) -> dict:
    return {str(k): dict(zip(COUNTERS, v, strict=True)) for k, v in rows.items()}


# --- netlink message surgery, to derive fixtures and fake a kernel -----------------------


def messages(data: bytes) -> list[bytes]:
    out, off = [], 0
    while off + HDR.size <= len(data):
        length = HDR.unpack_from(data, off)[0]
        out.append(data[off:off + length])
        off += (length + 3) & ~3
    return out


def join(msgs: list[bytes]) -> bytes:
    return b"".join(m + b"\0" * (-len(m) % 4) for m in msgs)


def with_seq(data: bytes, seq: int) -> bytes:
    """Return the dump with every message's sequence number set to ``seq``."""
    out = []
    for m in messages(data):
        length, mtype, flags, _seq, pid = HDR.unpack_from(m)
        out.append(HDR.pack(length, mtype, flags, seq, pid) + m[HDR.size:])
    return join(out)


def drop_attribute(data: bytes, atype: int) -> bytes:
    """Return an RTM_GETLINK dump without the top-level attribute ``atype`` in any link."""
    out = []
    for m in messages(data):
        _length, mtype, flags, seq, pid = HDR.unpack_from(m)
        if mtype != rtnl.RTM_NEWLINK:
            out.append(m)
            continue
        body, a = bytearray(m[HDR.size:HDR.size + 16]), HDR.size + 16
        while a + 4 <= len(m):
            alen, t = NLA.unpack_from(m, a)
            step = (alen + 3) & ~3
            if t & rtnl.NLA_TYPE_MASK != atype:
                body += m[a:a + step]
            a += step
        out.append(HDR.pack(HDR.size + len(body), mtype, flags, seq, pid) + bytes(body))
    return join(out)


def only_links(data: bytes, indexes: set[int]) -> bytes:
    """Return an RTM_GETLINK dump keeping only the links of ``indexes`` (and NLMSG_DONE)."""
    return join([m for m in messages(data) if HDR.unpack_from(m)[1] != rtnl.RTM_NEWLINK
                 or struct.unpack_from("=i", m, HDR.size + 4)[0] in indexes])


def renamed(data: bytes, old: str, new: str) -> bytes:
    """Return an RTM_GETLINK dump with link ``old`` named ``new`` (of the same length)."""
    assert len(old) == len(new) and data.count(old.encode() + b"\0") == 1
    return data.replace(old.encode() + b"\0", new.encode() + b"\0")


def nlmsg_error(seq: int, err: int, mtype: int = rtnl.NLMSG_ERROR) -> bytes:
    return HDR.pack(36 if mtype == rtnl.NLMSG_ERROR else 20, mtype, 0, seq, 0) + \
        struct.pack("=i", -err) + (HDR.pack(0, 0, 0, seq, 0) if mtype == rtnl.NLMSG_ERROR else b"")


GETLINK = (NETLINK / "getlink-modern.bin").read_bytes()
GETSTATS = (NETLINK / "getstats-modern.bin").read_bytes()
GETLINK_OLD = (NETLINK / "getlink-old.bin").read_bytes()

# --- decoding: golden files and pyroute2 as the reference --------------------------------


@pytest.mark.parametrize("capture", ["getlink-modern", "getlink-old"])
def test_golden_link_dump(capture: str) -> None:
    rows, done = parse_link_dump((NETLINK / f"{capture}.bin").read_bytes(), GETLINK_SEQ)
    assert done
    check_golden(NETLINK / f"{capture}.expected.json", named(rows))


def test_golden_stats_dump() -> None:
    stats, done = parse_stats_dump(GETSTATS, GETSTATS_SEQ)
    names, done2 = parse_link_names(GETLINK, GETLINK_SEQ)
    assert done and done2
    assert names == {1: "lo", 2: "ifb0", 3: "ifb1", 4: "eth0"}
    check_golden(NETLINK / "getstats-modern.expected.json",
                 {names[i]: named(stats)[str(i)] for i in stats})


def test_old_capture_is_modern_without_stats64() -> None:
    assert drop_attribute(GETLINK, IFLA_STATS64) == GETLINK_OLD
    modern, _ = parse_link_dump(GETLINK, GETLINK_SEQ)
    old, _ = parse_link_dump(GETLINK_OLD, GETLINK_SEQ)
    # The 32-bit struct is the 64-bit one truncated.
    assert old == {k: tuple(x % 2**32 for x in v) for k, v in modern.items()}


def pyroute2_rows(data: bytes, key: str, attr: str) -> dict:
    marshal = pytest.importorskip("pyroute2.netlink.rtnl.marshal")
    rows = {}
    for msg in marshal.MarshalRtnl().parse(data):
        stats = msg.get(attr)
        if stats is not None:
            rows[msg.get(key)] = tuple(stats[c] for c in COUNTERS)
    return rows


@pytest.mark.parametrize(("capture", "attr"), [("getlink-modern", "IFLA_STATS64"),
                                               ("getlink-old", "IFLA_STATS")])
def test_link_dump_agrees_with_pyroute2(capture: str, attr: str) -> None:
    data = (NETLINK / f"{capture}.bin").read_bytes()
    assert parse_link_dump(data)[0] == pyroute2_rows(data, "IFLA_IFNAME", attr)


def test_stats_dump_agrees_with_pyroute2() -> None:
    assert parse_stats_dump(GETSTATS)[0] == pyroute2_rows(GETSTATS, "ifindex",
                                                           "IFLA_STATS_LINK_64")
    ifinfmsg = pytest.importorskip("pyroute2.netlink.rtnl.marshal").MarshalRtnl().parse(GETLINK)
    assert parse_link_names(GETLINK)[0] == {m.get("index"): m.get("IFLA_IFNAME")
                                            for m in ifinfmsg if m.get("IFLA_IFNAME")}


def encode_link(name: str, stats: dict | None, seq: int = 7, index: int = 9,
                stats_attr: str = "IFLA_STATS64") -> bytes:
    """Return one RTM_NEWLINK message encoded by pyroute2."""
    mod = pytest.importorskip("pyroute2.netlink.rtnl.ifinfmsg")
    msg = mod.ifinfmsg()
    msg["index"] = index
    attrs: list = [("IFLA_IFNAME", name), ("IFLA_MTU", 1500)]
    if stats is not None:
        attrs.append((stats_attr, stats))
    msg["attrs"] = attrs
    msg["header"]["type"] = rtnl.RTM_NEWLINK
    msg["header"]["sequence_number"] = seq
    msg.encode()
    return bytes(msg.data)


def full_stats(**values: int) -> dict[str, int]:
    from pyroute2.netlink.rtnl.ifinfmsg import stats_names

    return {n: values.get(n, 0) for n in stats_names}


def test_decodes_pyroute2_messages_at_the_limits() -> None:
    pytest.importorskip("pyroute2")
    top = 2**64 - 1
    data = (encode_link("veth0123456789a", full_stats(rx_bytes=top, tx_packets=2**32, tx_dropped=5))
            + encode_link("nostats", None, index=10)
            + nlmsg_error(7, 0, ni.NLMSG_DONE))
    rows, done = parse_link_dump(data, 7)
    assert done
    assert rows == {"veth0123456789a": (top, 0, 0, 2**32, 0, 0, 0, 5)}  # nostats: left out


def test_keep_filters_by_name() -> None:
    rows, _ = parse_link_dump(GETLINK, None, keep=lambda n: n.startswith("ifb"))
    assert list(rows) == ["ifb0", "ifb1"]


def test_other_sequence_numbers_are_skipped() -> None:
    stale = with_seq(GETLINK, 41)
    rows, done = parse_link_dump(stale + with_seq(GETLINK_OLD, 42), 42)
    assert done
    assert rows == parse_link_dump(GETLINK_OLD)[0]
    assert parse_link_dump(stale, 42) == ({}, False)


def test_errors_raise_with_errno() -> None:
    with pytest.raises(OSError) as e:
        parse_link_dump(nlmsg_error(3, errno.EPERM), 3)
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:  # a dump that failed part way
        parse_stats_dump(nlmsg_error(3, errno.EMSGSIZE, ni.NLMSG_DONE), 3)
    assert e.value.errno == errno.EMSGSIZE
    assert parse_link_dump(nlmsg_error(3, 0), 3) == ({}, False)  # an ACK is no error
    assert parse_link_dump(nlmsg_error(4, errno.EPERM), 3) == ({}, False)  # not ours


@pytest.mark.parametrize("cut", [0, 3, 16, 17, 100, 1467, 1468, 1469, len(GETLINK) - 1])
def test_truncated_datagrams_do_not_fail(cut: int) -> None:
    rows, done = parse_link_dump(GETLINK[:cut], GETLINK_SEQ)
    assert not done
    assert set(rows) <= {"lo", "ifb0", "ifb1", "eth0"}


def test_malformed_attribute_lengths_end_the_link() -> None:
    # nla_len 0 would loop forever if trusted; nla_len past the message is cut off.
    for bad_len in (0, 3, 0xFFFF):
        hdr_len = HDR.size + 16 + 8
        msg = (HDR.pack(hdr_len, rtnl.RTM_NEWLINK, 2, 1, 0) + b"\0" * 16
               + NLA.pack(bad_len, rtnl.IFLA_IFNAME) + b"lo\0\0")
        assert parse_link_dump(msg + nlmsg_error(1, 0, ni.NLMSG_DONE), 1) == ({}, True)


@pytest.mark.parametrize(
    ("include", "exclude", "names"),
    [
        ((), (), ["lo", "eth0", "veth1", "docker0", "wlp0s20f3"]),
        ((), ("lo",), ["eth0", "veth1", "docker0", "wlp0s20f3"]),
        (("e*", "w*"), (), ["eth0", "wlp0s20f3"]),
        (("*",), ("veth*", "docker?"), ["lo", "eth0", "wlp0s20f3"]),
        (("ETH0",), (), []),  # case-sensitive, as the kernel
        (("eth[0-9]",), ("eth0",), []),
    ],
)
def test_interface_filter(include: tuple, exclude: tuple, names: list[str]) -> None:
    keep = interface_filter(include, exclude)
    candidates = ["lo", "eth0", "veth1", "docker0", "wlp0s20f3"]
    assert [n for n in candidates if keep(n)] == names
    assert [n for n in candidates if keep(n)] == names  # cached answers agree


# --- sysfs -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["modern", "old"])
def test_golden_sysfs(case: str) -> None:
    links = SysfsLinks(FIXTURES / case / "class" / "net", lambda _n: True)
    try:
        rows = links.read()
    finally:
        links.close()
    check_golden(FIXTURES / f"{case}.expected.json", named(rows))


def test_sysfs_values_are_the_files() -> None:
    net = FIXTURES / "modern" / "class" / "net"
    links = SysfsLinks(net, lambda _n: True)
    rows = links.read()
    links.close()
    assert sorted(rows) == ["eth0", "ifb0", "lo", "veth0123456789a"]  # no bonding_masters
    for name, values in rows.items():
        assert values == tuple(int((net / name / "statistics" / c).read_text())
                               for c in COUNTERS)
    assert rows["veth0123456789a"][0] == 2**64 - 1


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def add_interface(net: Path, name: str, value: int) -> None:
    d = net / name / "statistics"
    d.mkdir(parents=True)
    for c in COUNTERS:
        (d / c).write_text(f"{value}\n")


def test_sysfs_list_is_refreshed_at_most_once_a_second(tmp_path: Path) -> None:
    net = tmp_path / "class" / "net"
    add_interface(net, "eth0", 1)
    clock = Clock()
    links = SysfsLinks(net, lambda _n: True, clock)
    try:
        assert list(links.read()) == ["eth0"]
        add_interface(net, "eth1", 2)
        shutil.rmtree(net / "eth0")  # its kept-open files still read (a regular fs)
        clock.ns = 999_999_999
        assert list(links.read()) == ["eth0"]
        clock.ns = 1_000_000_000
        assert links.read() == {"eth1": (2,) * 8}
    finally:
        links.close()


def test_sysfs_interface_removed_between_refreshes(tmp_path: Path) -> None:
    net = tmp_path / "class" / "net"
    add_interface(net, "eth0", 1)
    add_interface(net, "eth1", 2)
    clock = Clock()
    links = SysfsLinks(net, lambda _n: True, clock)
    try:
        links.read()
        links._files["eth0"][3].close()
        links._files["eth0"][3] = FailingFile(  # type: ignore[call-overload]
            errno.ENODEV, "No such device")
        assert list(links.read()) == ["eth1"]  # ENODEV: dropped, not an error
        clock.ns = 2_000_000_000
        assert list(links.read()) == ["eth0", "eth1"]  # back after the next refresh
    finally:
        links.close()


# --- rtnetlink against a fake kernel ------------------------------------------------------


class Notifications(list):
    """Link notifications queued for the monitor socket; a pipe is readable (for poll)
    while any is queued."""

    def __init__(self) -> None:
        super().__init__()
        self.r, self.w = os.pipe()

    def append(self, data: bytes) -> None:
        super().append(data)
        os.write(self.w, b"x")

    def pop(self, i: int = -1) -> bytes:
        os.read(self.r, 1)
        return super().pop(i)


class FakeKernel:
    """Answers RTM_GETLINK and RTM_GETSTATS dumps from captures; counts the requests."""

    def __init__(self, getstats: bool = True) -> None:
        self.getlink = GETLINK
        self.getstats = getstats
        self.requests: list[int] = []
        self.notifications = Notifications()

    def opener(self, groups: int) -> object:
        return FakeMonitor(self) if groups else FakeSocket(self)


class FakeSocket:
    def __init__(self, kernel: FakeKernel) -> None:
        self.k = kernel
        self.queue: list[bytes] = []

    def send(self, req: bytes) -> int:
        _len, mtype, _flags, seq, _pid = HDR.unpack_from(req)
        self.k.requests.append(mtype)
        if mtype == rtnl.RTM_GETLINK:
            msgs = messages(with_seq(self.k.getlink, seq))
            self.queue = [join(msgs[:2]), join(msgs[2:])]  # two datagrams
        elif self.k.getstats:
            self.queue = [with_seq(GETSTATS, seq)]
        else:
            self.queue = [nlmsg_error(seq, errno.EOPNOTSUPP)]
        return len(req)

    def recv(self, _size: int) -> bytes:
        return self.queue.pop(0)

    def close(self) -> None:
        pass


class FakeMonitor(FakeSocket):
    def fileno(self) -> int:
        return self.k.notifications.r

    def close(self) -> None:
        os.close(self.k.notifications.r)
        os.close(self.k.notifications.w)

    def recv(self, _size: int) -> bytes:
        if not self.k.notifications:
            raise BlockingIOError(errno.EAGAIN, "empty")
        return self.k.notifications.pop(0)


def test_rtnl_names_once_then_stats_only() -> None:
    k = FakeKernel()
    links = RtnlLinks(lambda _n: True, k.opener)  # type: ignore[arg-type]
    assert links.getstats
    # The stats are captured first; names are looked up when they are parsed.
    assert k.requests == [rtnl.RTM_GETSTATS, rtnl.RTM_GETLINK]
    k.requests.clear()
    rows = links.read()
    assert k.requests == [rtnl.RTM_GETSTATS]
    assert named(rows) == json.loads((NETLINK / "getstats-modern.expected.json").read_text())
    # A link notification (added, removed, renamed): names are dumped again.
    k.notifications.append(b"any RTM_NEWLINK")
    k.requests.clear()
    links.read()
    assert k.requests == [rtnl.RTM_GETSTATS, rtnl.RTM_GETLINK]
    k.requests.clear()
    links.read()
    assert k.requests == [rtnl.RTM_GETSTATS]


def test_rtnl_unnamed_link_index_triggers_a_names_dump() -> None:
    k = FakeKernel()
    k.getlink = only_links(GETLINK, {1, 2, 3})  # eth0 (4) not there yet
    links = RtnlLinks(interface_filter((), ("ifb*",)), k.opener)  # type: ignore[arg-type]
    assert k.requests == [rtnl.RTM_GETSTATS, rtnl.RTM_GETLINK, rtnl.RTM_GETLINK]
    k.getlink = GETLINK
    k.requests.clear()
    assert list(links.read()) == ["lo", "eth0"]
    assert k.requests == [rtnl.RTM_GETSTATS, rtnl.RTM_GETLINK]
    k.requests.clear()
    assert list(links.read()) == ["lo", "eth0"]  # filtered links are known, not unnamed
    assert k.requests == [rtnl.RTM_GETSTATS]


def test_rtnl_captures_are_named_when_parsed() -> None:
    """Captures between publish ticks are parsed at the publish tick, with the names the
    links have then: one dump per capture, names dumped once, after a notification."""
    k = FakeKernel()
    links = RtnlLinks(lambda _n: True, k.opener)  # type: ignore[arg-type]
    k.requests.clear()
    raws = [links.capture() for _ in range(3)]
    assert k.requests == [rtnl.RTM_GETSTATS] * 3
    k.notifications.append(b"any RTM_NEWLINK")  # e.g. a rename, after the captures
    k.getlink = renamed(GETLINK, "eth0", "wan0")
    parsed = [links.parse(r) for r in raws]
    assert k.requests == [rtnl.RTM_GETSTATS] * 3 + [rtnl.RTM_GETLINK]
    assert all("wan0" in p and "eth0" not in p for p in parsed)
    assert parsed[0] == parsed[2]


def test_rtnl_kernel_without_getstats_dumps_links() -> None:
    k = FakeKernel(getstats=False)
    links = RtnlLinks(lambda _n: True, k.opener)  # type: ignore[arg-type]
    assert not links.getstats
    k.requests.clear()
    assert links.read() == parse_link_dump(GETLINK)[0]
    assert k.requests == [rtnl.RTM_GETLINK]


# --- the sampler -------------------------------------------------------------------------


def make_sampler(sysfs: Path, enabled: bool = True, **options: object
                 ) -> tuple[NetworkInterfaces, dict[str, FakeHandle]]:
    return start_sampler(NetworkInterfaces, sysfs / "no-procfs", sysfs, enabled=enabled,
                         **options)


def test_default_options() -> None:
    opts = config.defaults(config.sampler_options({NetworkInterfaces.name:
                                                   NetworkInterfaces.options}))
    assert opts.samplers["network"] == {"enabled": True, "interfaces": (), "exclude": (),
                                        "source": "auto"}


@pytest.mark.parametrize("case", ["modern", "old"])
def test_sampler_publishes_one_record_per_interface(case: str) -> None:
    s, h = make_sampler(FIXTURES / case)  # a fixture root: auto reads sysfs
    try:
        assert s.source == "sysfs" and s.detail == ""
        assert s.wanted and s.dist_wanted
        sample_twice(s)
    finally:
        s.close()
    expected = json.loads((FIXTURES / f"{case}.expected.json").read_text())
    records = decoded(NETWORK.schema, h)
    assert records == [{"interface": name, **v} for name, v in expected.items()]
    assert NETWORK.dist_schema is not None
    dist = decoded(NETWORK.dist_schema, h)
    assert len(dist) == len(expected) * len(COUNTERS)
    for d in dist:
        # Nothing changed between the two samples: total as read, rate 0.
        assert (d["value"], d["p50"], d["max"]) == (expected[d["interface"]][d["metric"]], 0, 0)


def test_sampler_options_filter_interfaces() -> None:
    s, h = make_sampler(FIXTURES / "modern", interfaces=("e*", "v*", "lo"), exclude=("veth*",))
    try:
        s.sample(1)
        s.publish()
    finally:
        s.close()
    records = decoded(NETWORK.schema, h)
    assert [r["interface"] for r in records] == ["eth0", "lo"]


def test_sampler_reads_nothing_without_consumer() -> None:
    s, h = make_sampler(FIXTURES / "modern", enabled=False)
    assert not s.wanted
    assert_silent_without_consumer(s, h)


def test_sampler_without_class_net_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SamplerUnavailable, match="class/net does not exist"):
        make_sampler(tmp_path)


def refuse_netlink(_groups: int = 0) -> socket.socket:
    raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")


def test_sampler_netlink_refused_and_required_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ni, "open_rtnetlink", refuse_netlink)
    with pytest.raises(SamplerUnavailable, match="rtnetlink unavailable: Address family"):
        make_sampler(FIXTURES / "modern", source="netlink")


@pytest.mark.host
def test_sampler_falls_back_to_sysfs_when_netlink_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ni, "open_rtnetlink", refuse_netlink)
    s, _h = make_sampler(Path("/sys"))
    try:
        assert s.source == "sysfs"
        assert s.detail.startswith("rtnetlink unavailable: Address family not supported")
        assert ("lo",) in s.read()[NETWORK]
    finally:
        s.close()


# --- the host ----------------------------------------------------------------------------


@pytest.mark.host
def test_host_uses_netlink_getstats() -> None:
    s, _h = make_sampler(Path("/sys"))
    try:
        assert s.source == "netlink" and s.detail == ""
        assert s._rtnl is not None and s._rtnl.getstats
        rows = s.read()[NETWORK]
    finally:
        s.close()
    assert set(rows) == {(n,) for n in os.listdir("/sys/class/net")
                         if (Path("/sys/class/net") / n / "statistics").is_dir()}


@pytest.mark.host
def test_host_netlink_agrees_with_sysfs() -> None:
    """Every netlink counter lies between sysfs readings taken just before and after."""
    sysfs = SysfsLinks(Path("/sys/class/net"), lambda _n: True)
    rtnl = RtnlLinks(lambda _n: True)
    try:
        before = sysfs.read()
        mid = rtnl.read()
        after = sysfs.read()
    finally:
        sysfs.close()
        rtnl.close()
    assert set(mid) == set(before) == set(after)
    for name, values in mid.items():
        for lo, v, hi in zip(before[name], values, after[name], strict=True):
            assert lo <= v <= hi, name


@pytest.mark.host
def test_host_live_dumps_agree_with_pyroute2() -> None:
    sock = ni.open_rtnetlink()
    try:
        for request, parse, key, attr in (
                (ni.link_dump_request, parse_link_dump, "IFLA_IFNAME", "IFLA_STATS64"),
                (ni.stats_dump_request, parse_stats_dump, "ifindex", "IFLA_STATS_LINK_64")):
            sock.send(request(5))
            data = b""
            while True:
                d = sock.recv(65536)
                data += d
                if parse(d, 5)[1]:
                    break
            assert parse(data, 5)[0] == pyroute2_rows(data, key, attr)
    finally:
        sock.close()


@pytest.mark.host
@pytest.mark.parametrize("source", ["netlink", "sysfs"])
def test_host_loopback_bytes_are_counted(source: str) -> None:
    """Sending K bytes over loopback TCP raises lo's rx_bytes and tx_bytes by >= K."""
    k = 1_000_000
    s, _h = make_sampler(Path("/sys"), interfaces=("lo",), source=source)
    try:
        before = s.read()[NETWORK]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname()) as c:
                conn, _addr = server.accept()
                with conn:
                    c.sendall(b"x" * k)
                    c.shutdown(socket.SHUT_WR)
                    got = 0
                    while chunk := conn.recv(65536):
                        got += len(chunk)
        assert got == k
        after = s.read()[NETWORK]
    finally:
        s.close()
    assert list(after) == [("lo",)]
    b, a = dict(zip(COUNTERS, before[("lo",)], strict=True)), dict(
        zip(COUNTERS, after[("lo",)], strict=True))
    assert a["rx_bytes"] - b["rx_bytes"] >= k
    assert a["tx_bytes"] - b["tx_bytes"] >= k
    assert a["rx_packets"] - b["rx_packets"] >= 3  # handshake, data, FIN at the least


NETNS_SCRIPT = textwrap.dedent("""
    import ctypes, json, subprocess, sys
    from rezolus_ue.samplers.network.sampler import RtnlLinks
    CLONE_NEWNET = 0x40000000
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
        sys.exit(f"unshare: errno {ctypes.get_errno()}")
    def ip(*a):
        subprocess.run(["ip", *a], check=True, capture_output=True)
    links = RtnlLinks(lambda n: n != "lo")
    seen = [sorted(links.read())]
    ip("link", "add", "rzt0", "type", "veth", "peer", "name", "rzt0peer")
    seen.append(sorted(links.read()))
    ip("link", "set", "rzt0", "name", "rzt0renamed15b")
    seen.append(sorted(links.read()))
    ip("link", "del", "rzt0renamed15b")
    seen.append(sorted(links.read()))
    print(json.dumps(seen))
""")


@pytest.mark.host
def test_host_links_added_renamed_removed_are_tracked() -> None:
    """In a private network namespace: a veth pair appears, is renamed, and goes."""
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's ip")
    p = subprocess.run([sys.executable, "-c", NETNS_SCRIPT], capture_output=True, text=True,
                       timeout=60, cwd=Path(__file__).parent.parent)
    if p.returncode != 0 and ("unshare" in p.stderr or "veth" in p.stderr):
        pytest.skip(f"cannot make a network namespace with a veth pair: {p.stderr[-300:]}")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == [
        [],
        ["rzt0", "rzt0peer"],
        ["rzt0peer", "rzt0renamed15b"],
        [],
    ]
