"""``rezolus-ue top``'s model: records in, each panel's rows out (rates, resets, batches,
frames, rows that go), and the events top subscribes to, derived from its panels."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from top_host import (
    SCHEMAS,
    GiB,
    Host,
    MiB,
    S,
    feed,
    slow_ticks,
    troubled_host,
    two_intervals,
)

from rezolus_ue import schema
from rezolus_ue.consume.top import cgroups, cpu, disks, header, memory, network, samplers, scheduler
from rezolus_ue.consume.top.registry import COSTLY_EVENTS, PANELS, TOP_EVENTS, new_model, top_events
from rezolus_ue.metrics import catalog, h2


def test_events_are_what_the_panels_read_and_minimal() -> None:
    assert tuple(dict.fromkeys(e for p in PANELS for r in p.reads
                                             for e in r.events)) == TOP_EVENTS
    # Each read family is its sampler's own declaration, not a copy.
    for p in PANELS:
        for r in p.reads:
            declared = importlib.import_module(f"rezolus_ue.samplers.{r.family.sampler}")
            assert r.family in declared.FAMILIES, (p.name, r.family.event)
    assert set(TOP_EVENTS) <= set(SCHEMAS)
    assert len(set(TOP_EVENTS)) == len(TOP_EVENTS)
    # Histogram families come in by themselves; events no panel shows stay out.
    hist = {f.event for f in catalog.FAMILIES if f.histogram is not None}
    assert hist <= set(TOP_EVENTS)
    for unused in ("rezolus_cpu_softirq", "rezolus_tcp", "rezolus_memory_dist",
                   "rezolus_perf_hardware"):
        assert unused not in TOP_EVENTS


def test_cpu_shares_from_deltas() -> None:
    v = two_intervals().view
    assert v.frame == 2 and v.dt_s == pytest.approx(1.0)
    c0, c1 = cpu.rows(v).cpus
    assert c0.busy == pytest.approx(0.40)
    assert c0.user == pytest.approx(0.30) and c0.system == pytest.approx(0.10)
    assert c0.iowait == pytest.approx(0.05)
    assert c1.busy == pytest.approx(0.97)
    assert c1.irq == pytest.approx(0.02)
    assert c0.peak == pytest.approx(0.87) and c1.peak == pytest.approx(1.0)
    # All CPUs: (400 + 970) ms busy of 2000 ms.
    assert cpu.rows(v).total is not None and cpu.rows(v).total.busy == pytest.approx(0.685)


def test_first_frame_has_gauges_but_no_rates() -> None:
    m = new_model()
    m.ingest(Host().records())
    assert m.frames == 0 and m.batch_open
    m.flush()
    v = m.view
    assert v.frame == 1 and v.dt_s is None
    assert cpu.rows(v).cpus[0].busy == pytest.approx(0.123456)  # busy_ppm until deltas exist
    assert cpu.rows(v).cpus[0].user is None
    assert memory.rows(v) is not None and memory.rows(v)["total_bytes"] == 16 * GiB
    assert disks.rows(v)[0].reads_s is None


def test_rates() -> None:
    v = two_intervals().view
    sched = scheduler.rows(v).sched
    assert sched is not None and sched.ctxsw_s == pytest.approx(12_000)
    assert sched.forks_s == pytest.approx(4) and sched.running == 3
    nvme = next(d for d in disks.rows(v) if d.device == "nvme0n1")
    assert nvme.reads_s == pytest.approx(100) and nvme.writes_s == pytest.approx(200)
    assert nvme.read_bps == pytest.approx(4 * MiB) and nvme.write_bps == pytest.approx(8 * MiB)
    assert nvme.util == pytest.approx(0.5)
    assert nvme.r_await_ms == pytest.approx(1.0) and nvme.w_await_ms == pytest.approx(2.0)
    eth = next(n for n in network.rows(v) if n.interface == "eth0")
    assert eth.rx_bps == pytest.approx(10 * MiB) and eth.drops_s == pytest.approx(3)
    cg = {c.path: c for c in cgroups.rows(v)}
    assert cg["system.slice/svc2.service"].cpu == pytest.approx(0.5)
    assert cg["system.slice/svc1.service"].io_write_bps == pytest.approx(0)
    assert cg["system.slice/svc1.service"].io_read_bps == pytest.approx(MiB)
    agent = header.rows(v).agent
    assert agent is not None and agent.pid == 4242
    assert agent.cpu == pytest.approx(0.01) and agent.events_written == 1500
    # Records of the second tick over the one second since the first.
    assert v.events_per_s == pytest.approx(len(Host().records()))


def test_histograms_summed_per_frame() -> None:
    v = two_intervals().view
    assert [h.label for h in scheduler.rows(v).hists] == ["cpu_usage", "memory"]
    h = scheduler.rows(v).hists[0]
    assert h.metric == "refresh_us" and h.unit == "us" and h.count == 5
    assert h.p50 == h2.bucket_bounds(h2.bucket_index(130))[1]
    assert h.max == h2.bucket_bounds(h2.bucket_index(1000))[1]


def test_counter_reset_gives_no_rate_for_that_step() -> None:
    host = Host()
    m = new_model()
    for _ in range(2):
        m.ingest(host.records())
        m.flush()
        host.advance()
    before = {c.path: c.cpu for c in cgroups.rows(m.view)}
    # svc2 is re-created: its counters start again near zero.
    host.cg["system.slice/svc2.service"] = [S // 10, 0, 0, 0, 0, 100 * MiB, 0, 0, 0, 0]
    m.ingest(host.records())
    m.flush()
    assert m.view.resets == 1
    # No step this frame: the previous rate stays rather than a huge negative one.
    assert {c.path: c.cpu for c in cgroups.rows(m.view)}["system.slice/svc2.service"] == \
        before["system.slice/svc2.service"]
    host.advance()
    m.ingest(host.records())
    m.flush()
    assert {c.path: c.cpu for c in cgroups.rows(m.view)}["system.slice/svc2.service"] == \
        pytest.approx(0.5)


def test_batches_end_when_a_key_repeats() -> None:
    host = Host()
    m = new_model()
    first = host.records()
    host.advance()
    second = host.records()
    m.ingest(first + second)  # one poll held two ticks: the repeat ends the first batch
    assert m.frames == 1
    m.flush()
    assert m.frames == 2 and cpu.rows(m.view).cpus[0].user is not None


def test_display_interval_and_hold() -> None:
    host = Host()
    m = new_model(2.0)
    frames = []
    for _ in range(5):
        m.ingest(host.records())
        m.flush()
        frames.append(m.frames)
        host.advance()
    assert frames == [1, 1, 2, 2, 3]  # one frame per two ticks of one second
    assert m.view.dt_s == pytest.approx(2.0)
    m.hold = True
    for _ in range(3):
        m.ingest(host.records())
        m.flush()
        host.advance()
    assert m.frames == 3
    m.hold = False
    m.ingest(host.records())
    m.flush()
    assert m.frames == 4 and m.view.dt_s == pytest.approx(4.0)


def test_vanished_rows_are_dropped() -> None:
    host = Host()
    m = new_model()
    for _ in range(2):
        m.ingest(host.records())
        m.flush()
        host.advance()
    del host.disk["sda"]
    for _ in range(2):
        m.ingest(host.records())
        m.flush()
        host.advance()
    assert [d.device for d in disks.rows(m.view)] == ["nvme0n1"]


@pytest.mark.parametrize(("interval_s", "gap_ms"), [(1.0, 950), (0.5, 600)])
def test_a_slow_agent_whose_ticks_span_several_frames_still_gives_every_row_a_rate(
        interval_s: float, gap_ms: int) -> None:
    # Found in the 6.12 VM: frames commit on bursts (one per display interval), so several
    # per tick; rows were dropped as gone after two frames without a record, so a row seen
    # once per tick was new at each of its records and never had a rate.
    host = Host()
    m = new_model(interval_s)
    slow_ticks(m, host, 3, gap=gap_ms * 1_000_000)
    assert m.frames >= 9  # more frames than ticks: the case in point
    v = m.view
    assert disks.rows(v) and all(d.reads_s is not None for d in disks.rows(v))
    assert network.rows(v) and all(n.rx_bps is not None for n in network.rows(v))
    assert cgroups.rows(v) and all(c.cpu is not None for c in cgroups.rows(v))
    assert scheduler.rows(v).sched is not None and scheduler.rows(v).sched.ctxsw_s is not None
    assert header.rows(v).agent is not None and header.rows(v).agent.cpu is not None
    assert all(c.user is not None for c in cpu.rows(v).cpus)


def test_rows_of_an_event_that_stopped_go_after_three_of_its_periods() -> None:
    host = Host()
    m = new_model(1.0)
    for _ in range(3):
        m.ingest(host.records())
        m.flush()
        host.advance()
    assert cgroups.rows(m.view)
    for _ in range(4):  # the cgroup sampler stops publishing (it failed), the rest goes on
        m.ingest([r for r in host.records() if r.event != "rezolus_cgroup"])
        m.flush()
        host.advance()
    assert cgroups.rows(m.view) == () and disks.rows(m.view)


def test_samplers_come_from_the_agents_status_records() -> None:
    host = troubled_host()
    m = feed(host)
    rows = {r.sampler: r for r in samplers.rows(m.view)}
    assert rows["network"].state == "failed" and rows["network"].errors == 7
    assert rows["network"].why == "ValueError: bad rtnetlink reply"  # the error, when failed
    assert rows["tcp"].why.startswith("loading tcp.bpf.o: operation not permitted: run as")
    troubled = samplers.troubled(samplers.rows(m.view))
    assert [r.sampler for r in troubled] == ["network", "tcp", "cgroup"]
    # The agent stops publishing a sampler (removed by a reload): it goes with the publish.
    del host.status["tcp"]
    feed(host, 2, m)
    assert "tcp" not in {r.sampler for r in samplers.rows(m.view)}


def test_percentiles_match_h2() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        counts = h2.new_counts()
        h2.record(counts, rng.integers(0, 10**6, int(rng.integers(1, 500))))
        assert scheduler.percentiles(counts, int(counts.sum())) == h2.percentiles(
            counts, [0.5, 0.9, 0.99, 1.0])


def test_top_subscribes_to_cheap_events_unless_asked() -> None:
    cheap = top_events(False)
    assert cheap == tuple(schema.cheap(TOP_EVENTS)) and "rezolus_cpu_usage" in cheap
    assert not set(cheap) & set(COSTLY_EVENTS)
    assert top_events(True) == TOP_EVENTS
    assert {"rezolus_syscall_latency", "rezolus_scheduler_runqueue_latency"} <= set(
        COSTLY_EVENTS)
    assert set(cheap) | set(COSTLY_EVENTS) == set(TOP_EVENTS)


def test_every_table_sorts_by_columns_it_shows() -> None:
    from rezolus_ue.consume.top.keys import SORT_MODES

    tables = [p for p in PANELS if p.sorts]
    assert {p.name for p in tables} == {"disks", "network", "cgroups", "processes",
                                        "applications"}
    for p in tables:
        module = importlib.import_module(f"rezolus_ue.consume.top.{p.name}")
        assert len(p.sorts) == len(SORT_MODES) and tuple(module.SORTS) == p.sorts
        keys = {c.key for c in module.COLS if c.key}
        assert set(p.sorts) - {"name"} <= keys, p.name
