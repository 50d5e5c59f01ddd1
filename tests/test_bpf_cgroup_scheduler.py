"""cgroup_scheduler on the host: real BPF programs, real cgroups, fake user_events handles.

A child moved into a fresh cgroup v2 group burns a known amount of CPU time (measured by
its own clock, so the truth does not depend on how busy the machine is) and then sleeps a
few times: the group's slot is published under its path with that CPU time (and the same
as the kernel's own cpu.stat), switches and run-queue waits. With more groups than
max_cgroups, the others count in "(other)" until a walk hands them a slot.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import bpf_struct, decoded, require_bpf_object, start_sampler
from test_bpf_loader import attached_prog_ids, loaded_progs
from waiting import wait_for

from rezolus_ue.errors import RezolusError
from rezolus_ue.metrics import h2
from rezolus_ue.samplers.cgroup.sampler import parse_cpu_stat
from rezolus_ue.samplers.cgroup_scheduler import CGROUP_RUNQUEUE_LATENCY, CGROUP_SCHEDULER
from rezolus_ue.samplers.cgroup_scheduler.sampler import (
    OTHER_LABEL,
    CgroupScheduler,
    cgroup2_root,
)

pytestmark = pytest.mark.host

#: The child's program: wait for the go byte, burn CPU seconds (argv[1]), sleep 20 times.
CHILD = """
import sys, time
sys.stdin.read(1)
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    pass
for _ in range(20):
    time.sleep(0.002)
"""


@pytest.fixture(scope="module")
def root() -> Path:
    require_bpf_object("cgroup_scheduler")
    try:
        return cgroup2_root(Path("/proc"))
    except RezolusError as e:
        pytest.skip(str(e))


@contextlib.contextmanager
def cgroups(root: Path, *names: str) -> Iterator[list[Path]]:
    """Create cgroups ``names`` below ``root`` (this process's pid appended); remove them."""
    dirs = [root / f"{n}_{os.getpid()}" for n in names]
    made = []
    try:
        for d in dirs:
            d.mkdir()
            made.append(d)
        yield dirs
    finally:
        for d in made:
            # The children have been reaped; the group empties a moment later.
            wait_for(lambda d=d: _rmdir(d), timeout=5, step=0.05,
                     what=f"the emptied cgroup {d} to be removed")


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def burn_in(group: Path, cpu_seconds: float) -> None:
    """Run a child in ``group`` that burns ``cpu_seconds`` of CPU, then sleeps a little."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(cpu_seconds)],
                             stdin=subprocess.PIPE)
    try:
        (group / "cgroup.procs").write_text(str(child.pid))
        assert child.stdin is not None
        child.stdin.write(b"g")
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def label(root: Path, d: Path) -> str:
    return "/" + str(d.relative_to(root))


def kernel_usage_ns(d: Path) -> int:
    return parse_cpu_stat((d / "cpu.stat").read_bytes())[0]


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_cgroup_cpu_time_and_waits(root: Path, attach: str) -> None:
    with cgroups(root, "rezolus_ue_test") as (group,):
        s, handles = start_sampler(CgroupScheduler, attach=attach)
        try:
            assert f"attaches as {attach})" in s.detail
            path = label(root, group)
            slots = {lb: slot for slot, lb in s.slot_labels().items()}
            assert slots[OTHER_LABEL] == 0 and path in slots
            s.activate()
            s.publish()  # the baseline interval
            for h in handles.values():
                h.payloads.clear()
            burn_in(group, 0.3)
            s.publish()
            s.deactivate()
            kernel_ns = kernel_usage_ns(group)
        finally:
            s.close()
    recs = {r["cgroup"]: r for r in decoded(CGROUP_SCHEDULER.schema, handles)}
    assert OTHER_LABEL in recs
    r = recs[path]
    assert r["cpu_usage_ns"] >= 0.2e9, r
    # The same place in the scheduler charges both (all classes since Linux 6.8).
    assert abs(r["cpu_usage_ns"] - kernel_ns) <= 0.1 * kernel_ns, (r, kernel_ns)  # type: ignore[operator]
    assert r["voluntary"] >= 10, r  # the sleeps
    assert r["runqueue_wait_ns"] > 0 and r["offcpu_ns"] >= 10 * 2_000_000, r
    hists = [x for x in decoded(CGROUP_RUNQUEUE_LATENCY.schema, handles) if x["cgroup"] == path]
    assert hists, "no run-queue latency record for the group"
    counts = sum((h2.decode_sparse(x["buckets"]) for x in hists), h2.new_counts())  # type: ignore[arg-type]
    assert hists[0]["count"] >= 10 and int(counts.sum()) == hists[0]["count"]
    assert 0 < hists[0]["attached_ns"] < 120 * 10**9


def test_groups_beyond_max_cgroups_count_in_other(root: Path) -> None:
    with cgroups(root, "rezolus_ue_test_a", "rezolus_ue_test_b") as (a, b):
        pa, pb = label(root, a), label(root, b)
        s, handles = start_sampler(CgroupScheduler, max_cgroups=1,
                                   include=[f"/rezolus_ue_test_?_{os.getpid()}"])
        try:
            # Both match, one slot: the tie (no CPU used yet) goes to the first path.
            assert s.slot_labels() == {0: OTHER_LABEL, 1: pa}
            assert "1 of 2 matching cgroups have slots" in s.detail
            s.activate()
            values = s._values()
            burn_in(a, 0.2)
            burn_in(b, 0.4)
            grew = s._values() - values
            # b used the most CPU since the last walk: the slot is b's now, from zero.
            s.rescan()
            assert s.slot_labels() == {0: OTHER_LABEL, 1: pb}
            s.publish()
            s.deactivate()
        finally:
            s.close()
    cpu = bpf_struct("cgroup_scheduler", "cgroup_sched_counters").names.index("cpu_ns")  # type: ignore[union-attr]
    assert grew[1, cpu] >= 0.15e9  # a's time, in a's slot
    assert grew[0, cpu] >= 0.3e9  # b's time (and the rest of the system's), in other
    recs = {r["cgroup"]: r for r in decoded(CGROUP_SCHEDULER.schema, handles)}
    assert set(recs) == {OTHER_LABEL, pb}
    assert recs[pb]["cpu_usage_ns"] < 0.1e9, "the slot's previous totals leaked"


def test_programs_loaded_only_while_active(root: Path) -> None:
    s, _handles = start_sampler(CgroupScheduler)
    try:
        assert not s.bpf.loaded
        s.activate()
        ids = {p.id for p in s.bpf.programs}
        names = loaded_progs()
        assert len(ids) == 4 and all(names[i].startswith("cgs_") for i in ids)
        assert ids <= attached_prog_ids()
        time.sleep(0.1)
        s.deactivate()
        wait_for(lambda: not ids & set(loaded_progs()), step=0.05,
                 what="its programs to be unloaded after deactivate")
        total = int(s._values().sum())
        assert total > 0
        s.activate()  # the same maps, and the same slots
        time.sleep(0.1)
        s.deactivate()
        assert int(s._values().sum()) > total, "not cumulative"
    finally:
        s.close()


def test_silent_without_consumer(root: Path) -> None:
    s, handles = start_sampler(CgroupScheduler, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())
