"""scheduler_runqueue on the host: real BPF programs, fake user_events handles.

A CPU hog pinned beside a sleeper makes run-queue latency; the sampler publishes it, and
the records decode with the family schemas. Programs are attached only while active.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import decoded, require_bpf_object, start_sampler
from test_bpf_loader import PREFIX, attached_prog_ids, loaded_progs
from waiting import wait_for

from rezolus_ue.errors import RezolusError
from rezolus_ue.metrics import h2
from rezolus_ue.samplers.scheduler_runqueue import (
    SCHEDULER_OFFCPU,
    SCHEDULER_RUNNING,
    SCHEDULER_RUNQUEUE_LATENCY,
    SCHEDULER_SWITCHES,
)
from rezolus_ue.samplers.scheduler_runqueue.sampler import SchedulerRunqueue

pytestmark = pytest.mark.host

HISTOGRAMS = (SCHEDULER_RUNQUEUE_LATENCY, SCHEDULER_RUNNING, SCHEDULER_OFFCPU)


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    require_bpf_object("scheduler_runqueue")


@contextlib.contextmanager
def contention(cpu: int = 0) -> Iterator[None]:
    """Run a CPU hog on ``cpu`` and pin this process beside it."""
    hog = subprocess.Popen([sys.executable, "-c",
                            f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        time.sleep(0.2)  # the hog is spinning
        yield
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()


def sleep_often(seconds: float, nap: float = 0.001) -> None:
    """Sleep ``nap`` over and over: each wakeup queues behind the hog."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(nap)


def test_hog_beside_sleeper_makes_runqueue_latency() -> None:
    s, _handles = start_sampler(SchedulerRunqueue)
    try:
        s.activate()
        view = s._hists[SCHEDULER_RUNQUEUE_LATENCY]
        before = view.copy()
        with contention():
            sleep_often(0.5)
        counts, reset = h2.delta(view.copy(), before)
        s.deactivate()
    finally:
        s.close()
    assert not reset
    assert counts.sum() > 0
    p99 = h2.percentiles(counts, [0.99])[0]
    assert p99 > 0


def test_programs_loaded_only_while_active() -> None:
    """On demand: nothing of ours in the kernel until activate, nothing after deactivate;
    the kept maps (and the views over them) survive, so totals stay cumulative."""
    s, _handles = start_sampler(SchedulerRunqueue)
    try:
        prefix = PREFIX[s.bpf.attach_kinds]
        ours = {prefix + h for h in ("wakeup", "wakenew", "switch")}
        assert not s.bpf.loaded and not s.bpf.programs
        assert "detached: no consumer" in s.detail
        s.activate()
        ids = {p.id for p in s.bpf.programs}
        names = loaded_progs()
        assert {names[i] for i in ids} == ours
        assert ids <= attached_prog_ids()
        assert s.detail.startswith("attached (")
        view = s._hists[SCHEDULER_RUNQUEUE_LATENCY]
        time.sleep(0.1)
        s.deactivate()
        wait_for(lambda: not ids & set(loaded_progs()), step=0.05,
                 what="its programs to be unloaded after deactivate")
        total = int(view.sum())
        assert total > 0
        s.activate()  # and again: new programs, the same maps
        ids2 = {p.id for p in s.bpf.programs}
        assert ids2 <= attached_prog_ids() and not ids2 & ids
        time.sleep(0.1)
        s.deactivate()
        assert s._hists[SCHEDULER_RUNQUEUE_LATENCY] is view
        assert int(view.sum()) >= total, "counts lost across unload/load"
        assert s.bpf.loads == 3  # start (verify), and one per activation
    finally:
        s.close()
    wait_for(lambda: not ids2 & set(loaded_progs()), step=0.05,
             what="its programs to be unloaded after close()")


def test_collect_always_attaches_at_start() -> None:
    s, _handles = start_sampler(SchedulerRunqueue, collect="always")
    try:
        ids = {p.id for p in s.bpf.programs}
        assert ids and ids <= attached_prog_ids()
        s.activate()
        s.deactivate()  # the last consumer left: stays attached
        assert ids <= attached_prog_ids()
        assert "collect always" in s.detail
    finally:
        s.close()
    wait_for(lambda: not ids & set(loaded_progs()), step=0.05)


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_publish_end_to_end(attach: str) -> None:
    s, handles = start_sampler(SchedulerRunqueue, attach=attach)
    try:
        assert f"attaches as {attach})" in s.detail
        s.publish()  # before any consumer: closes the (empty) interval
        for h in handles.values():
            h.payloads.clear()
        s.activate()
        with contention():
            sleep_often(0.5)
        t0 = time.perf_counter_ns()
        s.publish()
        publish_us = (time.perf_counter_ns() - t0) / 1000
        s.deactivate()
    finally:
        s.close()
    print(f"publish took {publish_us:.0f} us")
    for fam in HISTOGRAMS:
        recs = decoded(fam.schema, handles)
        assert recs, f"{fam.event}: no record"
        r = recs[0]
        assert all(x["parts"] == len(recs) for x in recs)
        counts = sum((h2.decode_sparse(x["buckets"]) for x in recs), h2.new_counts())
        assert r["count"] > 0 and int(counts.sum()) == r["count"], fam.event
        assert 0 < r["p50"] <= r["p90"] <= r["p99"] <= r["p999"] <= r["max"], (fam.event, r)
        assert 0 < r["attached_ns"] < 10 * 10**9
        assert r["grouping_power"] == h2.GROUPING_POWER
    switches = decoded(SCHEDULER_SWITCHES.schema, handles)
    assert switches and all(0 <= r["cpu"] < os.cpu_count() for r in switches)  # type: ignore[operator]
    cpu0 = next(r for r in switches if r["cpu"] == 0)
    assert cpu0["voluntary"] > 0 and cpu0["involuntary"] > 0


def test_first_record_after_activate_covers_only_the_attached_time() -> None:
    s, handles = start_sampler(SchedulerRunqueue)
    try:
        s.activate()
        with contention():
            sleep_often(0.3)
        s.publish()
        s.deactivate()
        # Detached: load now is not counted.
        with contention():
            sleep_often(0.2)
        for h in handles.values():
            h.payloads.clear()
        s.activate()
        time.sleep(0.05)
        s.publish()
        s.deactivate()
    finally:
        s.close()
    (rec,) = decoded(SCHEDULER_RUNQUEUE_LATENCY.schema, handles)
    assert 0 < rec["attached_ns"] < 0.25e9
    # A few wakeups happen in 50 ms on an idle machine, but not the hog-sized burst.
    assert rec["count"] < 5000


def test_silent_without_consumer() -> None:
    s, handles = start_sampler(SchedulerRunqueue, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())


def test_switch_counters_layout_is_per_cpu_cache_lines() -> None:
    s, _handles = start_sampler(SchedulerRunqueue)
    try:
        sw = s._switches
        assert sw.dtype.itemsize == 64
        s.activate()
        time.sleep(0.1)
        s.deactivate()
        total = sw["voluntary"] + sw["involuntary"] + sw["idle"]
        assert np.count_nonzero(total) >= 1
    finally:
        s.close()


def test_activate_async_loads_in_a_thread_and_reports_when_done() -> None:
    s, _handles = start_sampler(SchedulerRunqueue)
    try:
        s.activate_async()
        wait_for(s.poll_activation, step=0.05,
                 what="the asynchronous activation to finish loading")
        assert s.bpf.attached and s.detail.startswith("attached (")
        s.activate_async()  # already attached: nothing to do
        assert s.poll_activation()
        s.deactivate()
        assert not s.bpf.loaded
    finally:
        s.close()


def test_activate_async_failure_surfaces_in_poll() -> None:
    s, _handles = start_sampler(SchedulerRunqueue)
    try:
        s._bpf.path = s._bpf.path.with_name("no-such-object.bpf.o")  # unloaded: next load
        s.activate_async()
        with pytest.raises(RezolusError, match="no-such-object"):
            wait_for(s.poll_activation, step=0.05)
    finally:
        s.close()
