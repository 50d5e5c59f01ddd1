"""tcp on the host: real BPF programs on tracepoints, fake user_events handles.

One loopback TCP connection carrying K bytes: its connect (SYN_SENT -> ESTABLISHED) is
in the connect latency histogram, its received segments in srtt and jitter, its reads in
packet latency; the retransmit counter is published (zero is fine on loopback). And
tcp_traffic, whose function hooks this host cannot attach, is unavailable saying why
(it runs in the VM: tests/kernel/test_tcp_traffic.py).
"""

from __future__ import annotations

import pytest
from helpers import decoded, new_sampler, require_bpf_object, start_sampler
from test_bpf_network_traffic import K, loopback_transfer

from rezolus_ue.bpf.loader import Features
from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.metrics import h2
from rezolus_ue.samplers.tcp import (
    TCP_CONNECT_LATENCY,
    TCP_JITTER,
    TCP_PACKET_LATENCY,
    TCP_RETRANSMIT,
    TCP_SRTT,
)
from rezolus_ue.samplers.tcp.sampler import Tcp
from rezolus_ue.samplers.tcp_traffic.sampler import NO_FUNCTION_HOOKS, TcpTraffic, missing_hooks

HISTOGRAMS = (TCP_PACKET_LATENCY, TCP_SRTT, TCP_JITTER, TCP_CONNECT_LATENCY)


@pytest.fixture
def bpf_built() -> None:
    require_bpf_object("tcp")


@pytest.mark.host
@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_loopback_connection_fills_the_histograms(bpf_built: None, attach: str) -> None:
    s, handles = start_sampler(Tcp, attach=attach)
    try:
        assert f"attaches as {attach})" in s.detail
        s.publish()  # before any consumer: closes the (empty) interval
        for h in handles.values():
            h.payloads.clear()
        s.activate()
        loopback_transfer(K)
        s.publish()
        s.deactivate()
    finally:
        s.close()
    for fam in HISTOGRAMS:
        recs = decoded(fam.schema, handles)
        assert recs, f"{fam.event}: no record"
        counts = sum((h2.decode_sparse(r["buckets"]) for r in recs), h2.new_counts())
        assert recs[0]["count"] >= 1 and int(counts.sum()) == recs[0]["count"], fam.event
        assert recs[0]["attached_ns"] > 0
    (conn,) = decoded(TCP_CONNECT_LATENCY.schema, handles)
    assert conn["count"] >= 1 and conn["max"] > 0  # our connect, perhaps others
    (srtt,) = decoded(TCP_SRTT.schema, handles)
    assert srtt["count"] >= 2 and srtt["p50"] > 0  # segments both ways, RTT sampled
    (retrans,) = decoded(TCP_RETRANSMIT.schema, handles)
    assert retrans["retransmits"] >= 0 and retrans["retransmit_errors"] >= 0


@pytest.mark.host
def test_counts_accumulate_across_activations(bpf_built: None) -> None:
    s, _handles = start_sampler(Tcp)
    try:
        view = s._hists[TCP_CONNECT_LATENCY]
        for _ in range(2):
            s.activate()
            loopback_transfer(1 << 12)
            s.deactivate()
            assert not s.bpf.loaded
        assert int(view.sum()) >= 2
    finally:
        s.close()


@pytest.mark.host
def test_silent_without_consumer(bpf_built: None) -> None:
    s, handles = start_sampler(Tcp, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())


# --- tcp_traffic: function hooks ----------------------------------------------------------


class Kinds(Features):
    """Has exactly the function hook kinds given."""

    def __init__(self, fentry: bool, kprobe: bool) -> None:
        super().__init__(tracefs=None)
        self._fentry, self._kprobe = fentry, kprobe

    def trampolines(self) -> bool:
        return self._fentry

    def kprobes(self) -> bool:
        return self._kprobe


@pytest.mark.parametrize(("fentry", "kprobe", "attach", "why"), [
    (True, True, "auto", None),
    (False, True, "auto", None),
    (True, False, "auto", None),
    (False, False, "auto", "needs kprobes"),
    (False, True, "fentry", "cannot attach fentry"),
    (True, False, "kprobe", "no kprobes"),
    (True, True, "kprobe", None),
])
def test_missing_hooks(fentry: bool, kprobe: bool, attach: str, why: str | None) -> None:
    got = missing_hooks(Kinds(fentry, kprobe), attach)
    assert got is None if why is None else why in (got or "")


@pytest.mark.host
def test_tcp_traffic_unavailable_here_says_why() -> None:
    f = Features()
    if f.kprobes() or f.trampolines():
        pytest.skip("this kernel has kprobes or fentry: tcp_traffic runs here")
    s = new_sampler(TcpTraffic)
    with pytest.raises(SamplerUnavailable) as e:
        s.start()
    assert e.value.reason == NO_FUNCTION_HOOKS
    assert "needs kprobes (CONFIG_KPROBES) or fentry" in str(e.value)
