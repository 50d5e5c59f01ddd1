"""network_traffic on the host: real BPF programs, fake user_events handles.

A loopback TCP transfer of K bytes raises the rx and tx byte counters by at least K (lo
both sends and receives every packet); UDP datagrams to a closed port are dropped by the
kernel with reason NO_SOCKET, and the drops record under that name. Also, in-process: the
drop reason names parsed from kfree_skb's format.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from helpers import FakeHandle, decoded, require_bpf_object, start_sampler

from rezolus_ue.samplers.network_traffic import NETWORK_DROPS, NETWORK_TRAFFIC
from rezolus_ue.samplers.network_traffic.sampler import (
    DROP_REASONS,
    OTHER,
    NetworkTraffic,
    drop_reason_names,
)

#: Bytes sent over loopback per transfer.
K = 8 << 20


def loopback_transfer(nbytes: int, chunk: int = 1 << 16) -> int:
    """Connect to a listener on 127.0.0.1, send ``nbytes``, close; return what the peer
    read (all of it: the transfer is checked, not assumed)."""
    received: list[int] = []
    with socket.create_server(("127.0.0.1", 0)) as srv:
        srv.settimeout(30)

        def drain() -> None:
            conn, _ = srv.accept()
            total = 0
            with conn:
                while data := conn.recv(1 << 20):
                    total += len(data)
            received.append(total)

        reader = threading.Thread(target=drain)
        reader.start()
        buf = b"\xa5" * chunk
        with socket.create_connection(srv.getsockname(), timeout=30) as c:
            left = nbytes
            while left > 0:
                left -= c.send(buf[:left])
        reader.join(30)
    assert received == [nbytes], f"peer read {received}, sent {nbytes}"
    return nbytes


@pytest.fixture
def bpf_built() -> None:
    require_bpf_object("network_traffic")


def totals(handles: dict[str, FakeHandle]) -> dict[str, object]:
    """Return the last rezolus_network_traffic record written."""
    return decoded(NETWORK_TRAFFIC.schema, handles)[-1]


# --- in-process --------------------------------------------------------------------------

FMT = ('"skbaddr=%p reason: %s", REC->skbaddr, __print_symbolic(REC->reason,'
       ' { 2, "NOT_SPECIFIED" }, { 3, "NO_SOCKET" }, { 300, "TOO_BIG" },'
       ' { 128, "MAX" })')


def test_drop_reason_names_from_the_format() -> None:
    names = drop_reason_names(FMT)
    assert len(names) == DROP_REASONS
    assert names[0] == OTHER
    assert names[2] == "NOT_SPECIFIED" and names[3] == "NO_SOCKET" and names[128] == "MAX"
    assert names[4] == "REASON_4"  # unnamed slots keep their number


def test_drop_reason_names_without_a_format() -> None:
    names = drop_reason_names("")
    assert names[0] == OTHER and names[7] == "REASON_7"


def test_reason_names_fit_the_label() -> None:
    width = NETWORK_DROPS.schema.fields[0].type.size
    assert all(len(n) < width for n in drop_reason_names(FMT))


# --- host --------------------------------------------------------------------------------


@pytest.mark.host
@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_loopback_transfer_raises_rx_and_tx_bytes(bpf_built: None, attach: str) -> None:
    s, handles = start_sampler(NetworkTraffic, attach=attach)
    try:
        assert f"attaches as {attach})" in s.detail
        s.activate()
        s.publish()
        before = totals(handles)
        loopback_transfer(K)
        s.publish()
        after = totals(handles)
        s.deactivate()
    finally:
        s.close()
    for f in ("rx_bytes", "tx_bytes"):
        assert after[f] - before[f] >= K, (f, before, after)  # type: ignore[operator]
    for f in ("rx_packets", "tx_packets"):
        assert after[f] > before[f], (f, before, after)  # type: ignore[operator]


@pytest.mark.host
def test_udp_to_a_closed_port_is_dropped_with_no_socket(bpf_built: None) -> None:
    n = 50
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()  # bound, then closed: nobody listens there
    s, handles = start_sampler(NetworkTraffic)
    try:
        s.activate()
        s.publish()
        before = {r["reason"]: r["drops"] for r in decoded(NETWORK_DROPS.schema, handles)}
        total_before = totals(handles)["drops"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for _ in range(n):
                tx.sendto(b"x", closed)
                time.sleep(0.0005)  # ICMP replies are rate-limited; drops are not
        s.publish()
        s.deactivate()
    finally:
        s.close()
    records = decoded(NETWORK_DROPS.schema, handles)
    after = {r["reason"]: r["drops"] for r in records[len(before):]}
    assert after.get("NO_SOCKET", 0) - before.get("NO_SOCKET", 0) >= n, after
    assert totals(handles)["drops"] - total_before >= n  # type: ignore[operator]
    assert all(isinstance(r, str) and r for r in after)


@pytest.mark.host
def test_programs_loaded_only_while_active(bpf_built: None) -> None:
    s, _handles = start_sampler(NetworkTraffic)
    try:
        assert not s.bpf.loaded and "detached: no consumer" in s.detail
        s.activate()
        assert s.bpf.attached
        assert sorted(p.name.split("_", 2)[2] for p in s.bpf.programs) == ["drop", "rx", "tx"]
        traffic = s._traffic
        loopback_transfer(1 << 16)
        s.deactivate()
        assert not s.bpf.loaded
        rx = int(traffic["rx_bytes"].sum())
        assert rx >= 1 << 16
        s.activate()  # the same kept maps: still cumulative
        s.deactivate()
        assert s._traffic is traffic and int(traffic["rx_bytes"].sum()) >= rx
    finally:
        s.close()


@pytest.mark.host
def test_silent_without_consumer(bpf_built: None) -> None:
    s, handles = start_sampler(NetworkTraffic, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())
