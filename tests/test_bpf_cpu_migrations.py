"""cpu_migrations on the host: real BPF programs, fake user_events handles.

A process that flips its own affinity between CPU 0 and CPU 1 N times is moved N times
(each change leaves it no choice): the migration totals rise by at least N, in both
directions, and the records decode with the family schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from helpers import bpf_struct, decoded, require_bpf_object, start_sampler
from test_bpf_loader import attached_prog_ids, loaded_progs
from waiting import wait_for

from rezolus_ue.bpf.libbpf import num_possible_cpus
from rezolus_ue.samplers.cpu_migrations import CPU_MIGRATIONS
from rezolus_ue.samplers.cpu_migrations.sampler import CpuMigrations

pytestmark = pytest.mark.host

FLIPS = 200


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    require_bpf_object("cpu_migrations")


@pytest.fixture
def affinity() -> Iterator[None]:
    before = os.sched_getaffinity(0)
    yield
    os.sched_setaffinity(0, before)


def flip(n: int) -> None:
    """Move this process between CPU 0 and 1: ``n`` forced migrations (after a first move
    that may find it on CPU 0 already)."""
    os.sched_setaffinity(0, {0})
    for i in range(n):
        os.sched_setaffinity(0, {1 - i % 2})


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_affinity_flips_are_counted(affinity: None, attach: str) -> None:
    s, handles = start_sampler(CpuMigrations, attach=attach)
    try:
        assert f"attaches as {attach})" in s.detail
        s.activate()
        m = s._migrations
        before_from, before_to = m["from"].copy(), m["to"].copy()
        flip(FLIPS)
        got_from, got_to = m["from"] - before_from, m["to"] - before_to
        s.publish()
        s.deactivate()
    finally:
        s.close()
    assert int(got_to.sum()) >= FLIPS and int(got_from.sum()) >= FLIPS
    # Half the flips land on each CPU, half leave each.
    assert got_to[0] >= FLIPS // 2 and got_to[1] >= FLIPS // 2, got_to
    assert got_from[0] >= FLIPS // 2 and got_from[1] >= FLIPS // 2, got_from
    recs = {r["cpu"]: r for r in decoded(CPU_MIGRATIONS.schema, handles)}
    assert {0, 1} <= set(recs)
    assert sum(r["to"] for r in recs.values()) >= FLIPS  # type: ignore[misc]


def test_programs_loaded_only_while_active(affinity: None) -> None:
    s, _handles = start_sampler(CpuMigrations)
    try:
        assert not s.bpf.loaded
        s.activate()
        ids = {p.id for p in s.bpf.programs}
        assert len(ids) == 1 and loaded_progs()[next(iter(ids))].startswith("mig_")
        assert ids <= attached_prog_ids()
        flip(10)
        s.deactivate()
        wait_for(lambda: not ids & set(loaded_progs()), step=0.05,
                 what="its programs to be unloaded after deactivate")
        total = int(s._migrations["to"].sum())
        flip(10)  # detached: not counted
        assert int(s._migrations["to"].sum()) == total
        s.activate()
        flip(10)
        s.deactivate()
        assert int(s._migrations["to"].sum()) >= total + 10, "not cumulative"
    finally:
        s.close()


def test_silent_without_consumer() -> None:
    s, handles = start_sampler(CpuMigrations, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())


def test_layout_is_one_cache_line_per_cpu() -> None:
    migrations_dtype = bpf_struct("cpu_migrations", "cpu_migrations")
    assert migrations_dtype.itemsize == 64
    s, _handles = start_sampler(CpuMigrations)
    try:
        assert s._migrations.dtype == migrations_dtype
        assert len(s._migrations) == num_possible_cpus()
    finally:
        s.close()
