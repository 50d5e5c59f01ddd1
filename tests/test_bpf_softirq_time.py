"""cpu_softirq_time on the host: real BPF programs, fake user_events handles.

Loopback TCP traffic is received in NET_RX softirqs: while attached, net_rx time grows on
some CPU and the net_rx duration histogram counts handler runs. Programs are attached only
while active.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest
from helpers import bpf_struct, decoded, require_bpf_object, start_sampler
from test_bpf_loader import attached_prog_ids, loaded_progs
from waiting import wait_for

from rezolus_ue.bpf.libbpf import num_possible_cpus
from rezolus_ue.metrics import h2
from rezolus_ue.samplers.cpu_softirq import SOFTIRQ_KINDS
from rezolus_ue.samplers.cpu_softirq_time import SOFTIRQ_DURATION, SOFTIRQ_TIME
from rezolus_ue.samplers.cpu_softirq_time.sampler import CpuSoftirqTime

pytestmark = pytest.mark.host

NET_RX = SOFTIRQ_KINDS.index("net_rx")


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    require_bpf_object("cpu_softirq_time")


def loopback_traffic(nbytes: int = 32 << 20) -> None:
    """Send ``nbytes`` over a loopback TCP connection (received in NET_RX softirqs)."""
    srv = socket.create_server(("127.0.0.1", 0))
    with srv, socket.create_connection(srv.getsockname()) as c:
        a, _ = srv.accept()
        got = 0

        def drain() -> None:
            nonlocal got
            while data := a.recv(1 << 20):
                got += len(data)

        t = threading.Thread(target=drain)
        t.start()
        chunk = b"x" * 65536
        for _ in range(nbytes // len(chunk)):
            c.sendall(chunk)
        c.shutdown(socket.SHUT_WR)
        t.join()
        a.close()
    assert got == nbytes


def test_loopback_traffic_is_net_rx_time() -> None:
    s, _handles = start_sampler(CpuSoftirqTime)
    try:
        s.activate()
        before = s._times["time_ns"].copy()
        loopback_traffic()
        after = s._times["time_ns"].copy()
        s.deactivate()
    finally:
        s.close()
    grew = after - before
    assert (grew >= 0).all(), "softirq time went back"
    assert grew[:, NET_RX].sum() > 0, grew


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_publish_end_to_end(attach: str) -> None:
    s, handles = start_sampler(CpuSoftirqTime, attach=attach)
    try:
        assert f"attaches as {attach})" in s.detail
        s.activate()
        loopback_traffic()
        s.publish()
        s.deactivate()
    finally:
        s.close()
    times = decoded(SOFTIRQ_TIME.schema, handles)
    assert times and all(0 <= r["cpu"] < (os.cpu_count() or 1) for r in times)  # type: ignore[operator]
    assert sum(r["net_rx_ns"] for r in times) > 0  # type: ignore[misc]
    durations = {r["kind"]: r for r in decoded(SOFTIRQ_DURATION.schema, handles)}
    assert set(durations) <= set(SOFTIRQ_KINDS)
    r = durations["net_rx"]
    assert r["parts"] == 1  # a handful of buckets
    counts = h2.decode_sparse(r["buckets"])  # type: ignore[arg-type]
    assert r["count"] > 0 and int(counts.sum()) == r["count"]
    assert 0 < r["p50"] <= r["p99"] <= r["max"]
    assert 0 < r["attached_ns"] < 60 * 10**9


def test_programs_loaded_only_while_active() -> None:
    s, _handles = start_sampler(CpuSoftirqTime)
    try:
        assert not s.bpf.loaded
        s.activate()
        ids = {p.id for p in s.bpf.programs}
        names = loaded_progs()
        kind = s.bpf.attach_kinds.replace("tp_btf", "btf").replace("raw_tp", "raw")
        kind = kind.replace("tracepoint", "tp")
        assert {names[i] for i in ids} == {f"sirq_{kind}_entry", f"sirq_{kind}_exit"}
        assert ids <= attached_prog_ids()
        view = s._times
        loopback_traffic(4 << 20)
        s.deactivate()
        wait_for(lambda: not ids & set(loaded_progs()), step=0.05,
                 what="its programs to be unloaded after deactivate")
        total = int(view["time_ns"].sum())
        assert total > 0
        s.activate()
        loopback_traffic(4 << 20)
        s.deactivate()
        assert s._times is view and int(view["time_ns"].sum()) > total, "not cumulative"
    finally:
        s.close()


def test_silent_without_consumer() -> None:
    s, handles = start_sampler(CpuSoftirqTime, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())


def test_per_cpu_layout_is_two_cache_lines() -> None:
    assert bpf_struct("cpu_softirq_time", "softirq_time").itemsize == 128
    s, _handles = start_sampler(CpuSoftirqTime)
    try:
        assert len(s._times) == num_possible_cpus()
    finally:
        s.close()
