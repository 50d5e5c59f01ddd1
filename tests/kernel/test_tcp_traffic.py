"""tcp_traffic in the VM (kprobes and fentry): a loopback TCP transfer of K bytes is counted
as at least K bytes sent and K received, once with each kind of function hook forced.

Plus the tracepoint samplers (tcp, network_traffic) on this older kernel, whose
tracepoints have fewer arguments than the host's (CO-RE guards: no kfree_skb rx_sk, no
tcp_retransmit_skb err).
"""

from __future__ import annotations

import pytest
from helpers import decoded, require_bpf_object, start_sampler
from test_bpf_network_traffic import loopback_transfer

from rezolus_ue.bpf.loader import Features
from rezolus_ue.samplers.network_traffic import NETWORK_TRAFFIC
from rezolus_ue.samplers.network_traffic.sampler import NetworkTraffic
from rezolus_ue.samplers.tcp import TCP_CONNECT_LATENCY
from rezolus_ue.samplers.tcp.sampler import Tcp
from rezolus_ue.samplers.tcp_traffic import TCP_TRAFFIC
from rezolus_ue.samplers.tcp_traffic.sampler import TcpTraffic

pytestmark = pytest.mark.kernel

#: Bytes per transfer: small, the VM emulates its CPUs.
K = 1 << 20
#: Program names per forced kind (bpf/tcp_traffic.bpf.c).
PROGRAMS = {"fentry": {"tt_fexit_send", "tt_fentry_recv"},
            "kprobe": {"tt_kret_send", "tt_kprobe_recv"}}


@pytest.mark.parametrize("attach", ["kprobe", "fentry"])
def test_loopback_transfer_counts_bytes_both_ways(attach: str) -> None:
    require_bpf_object("tcp_traffic")
    f = Features()
    if not (f.kprobes() if attach == "kprobe" else f.trampolines()):
        pytest.skip(f"this kernel cannot attach {attach}")
    s, handles = start_sampler(TcpTraffic, attach=attach)
    try:
        s.activate()
        assert s.bpf.attach_kinds == attach
        assert {p.name for p in s.bpf.programs} == PROGRAMS[attach]
        s.publish()
        loopback_transfer(K)
        s.publish()
        s.deactivate()
    finally:
        s.close()
    before, after = decoded(TCP_TRAFFIC.schema, handles)
    for d in ("rx", "tx"):
        assert after[f"{d}_bytes"] - before[f"{d}_bytes"] >= K, (d, before, after)  # type: ignore[operator]
        assert after[f"{d}_packets"] > before[f"{d}_packets"], (d, before, after)  # type: ignore[operator]


def test_tracepoint_samplers_on_this_kernel() -> None:
    require_bpf_object("tcp")
    require_bpf_object("network_traffic")
    tcp, tcp_handles = start_sampler(Tcp)
    net, net_handles = start_sampler(NetworkTraffic)
    try:
        tcp.activate()
        net.activate()
        net.publish()
        loopback_transfer(K)
        tcp.publish()
        net.publish()
    finally:
        tcp.close()
        net.close()
    (conn,) = decoded(TCP_CONNECT_LATENCY.schema, tcp_handles)
    assert conn["count"] >= 1
    before, after = decoded(NETWORK_TRAFFIC.schema, net_handles)
    assert after["rx_bytes"] - before["rx_bytes"] >= K  # type: ignore[operator]
    assert after["tx_bytes"] - before["tx_bytes"] >= K  # type: ignore[operator]
