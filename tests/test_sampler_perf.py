"""The perf_software and perf_hardware samplers: scaling and IPC arithmetic, the samplers end
to end with fake perf events (no kernel needed), and host cross-checks against counts the
test itself causes (context switches from sleeps, page faults from touching fresh memory).

There is no text parser here, so no golden files: the sysfs roots are made in tmp_path.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

import pytest
from helpers import FakeHandle, decoded, median_read_us, new_sampler, start_sampler

from rezolus_ue.errors import (
    KernelFeatureMissing,
    PermissionDenied,
    RezolusError,
    SamplerUnavailable,
)
from rezolus_ue.linux import perf_event as pe
from rezolus_ue.samplers import perf_counters as perf
from rezolus_ue.samplers.perf_counters import ipc_milli, scaled_delta
from rezolus_ue.samplers.perf_hardware import PERF_HARDWARE
from rezolus_ue.samplers.perf_hardware.sampler import PerfHardware
from rezolus_ue.samplers.perf_software import PERF_SOFTWARE
from rezolus_ue.samplers.perf_software.sampler import PerfSoftware


def sysfs(tmp_path: Path, online: str = "0-1", pmus: tuple[str, ...] = ()) -> Path:
    """Return a sysfs root with ``online`` CPUs and the named perf PMUs."""
    cpu = tmp_path / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text(online + "\n")
    for p in pmus:
        (tmp_path / "bus" / "event_source" / "devices" / p).mkdir(parents=True)
    return tmp_path


# --- arithmetic ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "prev", "expected"),
    [
        ((100, 10, 10), (0, 0, 0), 100),  # never multiplexed
        ((100, 20, 10), (0, 0, 0), 200),  # on the PMU half the time: doubled
        ((300, 40, 20), (100, 20, 10), 400),  # scaled by this period's share only
        ((300, 40, 10), (100, 20, 10), 0),  # not scheduled at all this period: unknown
        ((100, 40, 10), (100, 20, 5), 0),  # ran and counted nothing
        ((7, 3, 2), (0, 0, 0), 10),  # integer arithmetic, rounded down
        ((5, 10, 12), (0, 0, 0), 5),  # running > enabled cannot happen; never scale down
    ],
)
def test_scaled_delta(now: tuple[int, int, int], prev: tuple[int, int, int],
                      expected: int) -> None:
    assert scaled_delta(*now, prev) == expected


@pytest.mark.parametrize(
    ("instructions", "cycles", "expected"),
    [(0, 0, 0), (5, 0, 0), (1000, 1000, 1000), (2500, 1000, 2500), (1, 3, 333)],
)
def test_ipc_milli(instructions: int, cycles: int, expected: int) -> None:
    assert ipc_milli(instructions, cycles) == expected


# --- fake perf events ------------------------------------------------------------------


class FakeEvent:
    """A counting perf event whose count, enabled and running times the test sets."""

    opened: list[FakeEvent] = []

    def __init__(self, type_: int, config: int, cpu: int, group_fd: int = -1) -> None:
        self.type, self.config, self.cpu, self.group_fd = type_, config, cpu, group_fd
        self.fd = 1000 + len(FakeEvent.opened)
        self.value = self.enabled = self.running = 0
        self.closed = False
        self.reads = 0
        FakeEvent.opened.append(self)

    def read_count(self) -> int:
        self.reads += 1
        return self.value

    def read_group(self, members: int) -> tuple[int, ...]:
        """The leader's PERF_FORMAT_GROUP read: itself, then its members, in open order."""
        return self.decode_group(self.read_group_raw(members), members)

    def read_group_raw(self, members: int) -> bytes:
        """What read(2) returns for a group without times: u64 nr, then nr u64 values."""
        self.reads += 1
        group = [self] + [e for e in FakeEvent.opened if e.group_fd == self.fd]
        assert len(group) == members
        return struct.pack(f"={1 + members}Q", members, *(e.value for e in group))

    def decode_group(self, data: bytes, members: int) -> tuple[int, ...]:
        nr, *values = struct.unpack(f"={1 + members}Q", data)
        assert nr == members
        return tuple(values)

    def read_counter(self) -> pe.CounterValue:
        self.reads += 1
        return pe.CounterValue(self.value, self.enabled, self.running)

    def reset(self) -> None:
        self.value = 0

    def enable(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakePerfEvent:
    """Replaces perf.PerfEvent; ``fail`` maps a type to the error perf_event_open raises."""

    fail: dict[int, RezolusError] = {}
    fail_grouped: RezolusError | None = None

    @classmethod
    def _check(cls, type_: int) -> None:
        err = cls.fail.get(type_)
        if err is not None:
            raise err

    @classmethod
    def software(cls, config: int, cpu: int, pid: int = -1, **kw: object) -> FakeEvent:
        assert pid == -1
        cls._check(pe.PERF_TYPE_SOFTWARE)
        return FakeEvent(pe.PERF_TYPE_SOFTWARE, config, cpu)

    @classmethod
    def hardware(cls, config: int, cpu: int, pid: int = -1, *, read_format: int = 0,
                 **kw: object) -> FakeEvent:
        assert pid == -1 and read_format & pe.PERF_FORMAT_TOTAL_TIME_RUNNING
        cls._check(pe.PERF_TYPE_HARDWARE)
        return FakeEvent(pe.PERF_TYPE_HARDWARE, config, cpu)

    @classmethod
    def open(cls, attr: pe.PerfEventAttr, pid: int, cpu: int, group_fd: int = -1,
             flags: int = 0) -> FakeEvent:
        assert pid == -1 and attr.sample_period == 0  # counting, not sampling
        cls._check(attr.type)
        if group_fd >= 0 and cls.fail_grouped is not None:
            raise cls.fail_grouped
        leader = group_fd < 0
        assert bool(attr.flag("disabled")) is leader  # members follow the leader
        return FakeEvent(attr.type, attr.config, cpu, group_fd)


@pytest.fixture
def fake_perf(monkeypatch: pytest.MonkeyPatch) -> type[FakePerfEvent]:
    FakeEvent.opened = []
    FakePerfEvent.fail = {}
    FakePerfEvent.fail_grouped = None
    monkeypatch.setattr(perf, "PerfEvent", FakePerfEvent)
    return FakePerfEvent


def by_cpu_config(cpu: int, config: int) -> FakeEvent:
    return next(e for e in FakeEvent.opened if e.cpu == cpu and e.config == config)


def test_software_end_to_end(fake_perf: type[FakePerfEvent], tmp_path: Path) -> None:
    s, h = start_sampler(PerfSoftware, sysfs=sysfs(tmp_path, "0,2"))
    try:
        assert sorted({e.cpu for e in FakeEvent.opened}) == [0, 2]
        assert len(FakeEvent.opened) == 6
        s.sample(1_000_000_000)
        for cpu in (0, 2):
            by_cpu_config(cpu, pe.PERF_COUNT_SW_CONTEXT_SWITCHES).value = 10 + cpu
            by_cpu_config(cpu, pe.PERF_COUNT_SW_CPU_MIGRATIONS).value = 1
            by_cpu_config(cpu, pe.PERF_COUNT_SW_PAGE_FAULTS).value = 200
        s.sample(1_500_000_000)
        s.publish()
        # One group read per CPU per sample, of the leader (context switches).
        for e in FakeEvent.opened:
            leader = e.config == pe.PERF_COUNT_SW_CONTEXT_SWITCHES
            assert (e.group_fd < 0) is leader and e.reads == (2 if leader else 0)
    finally:
        s.close()
    assert all(e.closed for e in FakeEvent.opened)
    assert decoded(PERF_SOFTWARE.schema, h) == [
        {"cpu": 0, "context_switches": 10, "cpu_migrations": 1, "page_faults": 200},
        {"cpu": 2, "context_switches": 12, "cpu_migrations": 1, "page_faults": 200},
    ]
    dist = {(d["cpu"], d["metric"]): d for d in decoded(PERF_SOFTWARE.dist_schema, h)}
    assert dist[(0, "context_switches")]["max"] == 20  # 10 in half a second
    assert dist[(2, "page_faults")]["p50"] == 400


@pytest.mark.parametrize("cls", [PerfSoftware, PerfHardware])
def test_perf_samplers_oversample_only_when_asked(fake_perf: type[FakePerfEvent],
                                                 tmp_path: Path, cls: type) -> None:
    """Reading other CPUs' counters interrupts them: by default the agent does not wake
    the sampler between publish ticks, even with the _dist event enabled."""
    root = sysfs(tmp_path)
    for over, wanted in ((None, False), (False, False), (True, True)):
        opts = {} if over is None else {"oversample": over}
        s, _h = start_sampler(cls, sysfs=root, **opts)
        try:
            assert s.wanted and s.dist_wanted is wanted
        finally:
            s.close()


def test_software_not_wanted_reads_nothing(fake_perf: type[FakePerfEvent],
                                           tmp_path: Path) -> None:
    s, h = start_sampler(PerfSoftware, sysfs=sysfs(tmp_path))
    try:
        for handle in h.values():
            handle.word.value = 0
        s.sample(1)
        s.publish()
        assert all(e.reads == 0 for e in FakeEvent.opened)
    finally:
        s.close()


def test_software_permission_denied_names_the_remedy(fake_perf: type[FakePerfEvent],
                                                     tmp_path: Path) -> None:
    fake_perf.fail[pe.PERF_TYPE_SOFTWARE] = pe._open_error(
        1, pe.PerfEventAttr(type=pe.PERF_TYPE_SOFTWARE), -1, 0)  # EPERM
    s = new_sampler(PerfSoftware, sysfs=sysfs(tmp_path))
    with pytest.raises(SamplerUnavailable, match=r"perf_event_paranoid.*CAP_PERFMON") as ei:
        s.start()
    assert ei.value.sampler == "perf_software"
    assert isinstance(fake_perf.fail[pe.PERF_TYPE_SOFTWARE], PermissionDenied)


def test_software_closes_what_it_opened_on_failure(fake_perf: type[FakePerfEvent],
                                                   tmp_path: Path) -> None:
    s = new_sampler(PerfSoftware, sysfs=sysfs(tmp_path, "0-3"))
    orig = FakePerfEvent.open.__func__  # type: ignore[attr-defined]

    def flaky(cls, attr: pe.PerfEventAttr, pid: int, cpu: int, group_fd: int = -1,  # type: ignore[no-untyped-def]
              flags: int = 0) -> FakeEvent:
        if cpu == 2 and attr.config == pe.PERF_COUNT_SW_PAGE_FAULTS:
            raise RezolusError("perf_event_open(...): Too many open files")
        return orig(cls, attr, pid, cpu, group_fd, flags)

    fake_perf.open = classmethod(flaky)  # type: ignore[assignment,method-assign]
    try:
        with pytest.raises(SamplerUnavailable, match="Too many open files"):
            s.start()
    finally:
        fake_perf.open = classmethod(orig)  # type: ignore[assignment,method-assign]
    assert len(FakeEvent.opened) == 8 and all(e.closed for e in FakeEvent.opened)


def test_missing_online_file_is_unavailable(fake_perf: type[FakePerfEvent],
                                            tmp_path: Path) -> None:
    s = new_sampler(PerfSoftware, sysfs=tmp_path)
    with pytest.raises(SamplerUnavailable, match="online CPUs"):
        s.start()


def test_hardware_grouped_scaled_ipc(fake_perf: type[FakePerfEvent], tmp_path: Path) -> None:
    s, h = start_sampler(PerfHardware, sysfs=sysfs(tmp_path, "0"))
    try:
        cyc, ins, bm = (by_cpu_config(0, c) for c in perf.HARDWARE_COUNTERS)
        assert cyc.group_fd == -1 and ins.group_fd == bm.group_fd == cyc.fd
        assert s.detail == ""
        # Period 1: on the PMU all the time.
        for e, v in ((cyc, 1000), (ins, 2000), (bm, 10)):
            e.value, e.enabled, e.running = v, 100, 100
        s.sample(1)
        first = dict(s._over[PERF_HARDWARE].last)
        # Period 2: multiplexed, on the PMU a quarter of the time: increments x4.
        for e, v in ((cyc, 1500), (ins, 2250), (bm, 12)):
            e.value, e.enabled, e.running = v, 200, 125
        s.sample(2)
        s.publish()
    finally:
        s.close()
    assert first == {(0,): (1000, 2000, 10, 2000)}
    assert decoded(PERF_HARDWARE.schema, h) == [
        {"cpu": 0, "cycles": 3000, "instructions": 3000, "branch_misses": 18,
         "ipc_milli": 500},
    ]


def test_hardware_counters_never_go_back(fake_perf: type[FakePerfEvent],
                                         tmp_path: Path) -> None:
    """Scaling whole totals (value x enabled / running) can fall when the share of time on
    the PMU rises; scaling each increment cannot."""
    s, _h = start_sampler(PerfHardware, sysfs=sysfs(tmp_path, "0"))
    try:
        evs = [by_cpu_config(0, c) for c in perf.HARDWARE_COUNTERS]
        totals = []
        for value, enabled, running in ((100, 100, 10), (200, 200, 110), (300, 300, 210)):
            for e in evs:
                e.value, e.enabled, e.running = value, enabled, running
            s.sample(value)
            totals.append(s._over[PERF_HARDWARE].last[(0,)][0])
    finally:
        s.close()
    assert totals == [1000, 1100, 1200]
    assert 300 * 300 // 210 < 1000  # what whole-total scaling would have published


def test_hardware_no_pmu(fake_perf: type[FakePerfEvent], tmp_path: Path) -> None:
    fake_perf.fail[pe.PERF_TYPE_HARDWARE] = KernelFeatureMissing("hardware perf counters",
                                                                 "no PMU")
    root = sysfs(tmp_path, "0-1", ("software", "tracepoint", "breakpoint"))
    s = new_sampler(PerfHardware, sysfs=root)
    with pytest.raises(SamplerUnavailable, match=r"no PMU exposed by this CPU/VM.*"
                                                 r"breakpoint, software, tracepoint") as ei:
        s.start()
    assert ei.value.sampler == "perf_hardware"


def test_hardware_permission_denied(fake_perf: type[FakePerfEvent], tmp_path: Path) -> None:
    fake_perf.fail[pe.PERF_TYPE_HARDWARE] = PermissionDenied("refused: kernel.perf_event_"
                                                             "paranoid=2; run as root")
    s = new_sampler(PerfHardware, sysfs=sysfs(tmp_path))
    with pytest.raises(SamplerUnavailable, match="perf_event_paranoid=2; run as root"):
        s.start()


def test_hardware_group_refused_falls_back(fake_perf: type[FakePerfEvent],
                                           tmp_path: Path) -> None:
    fake_perf.fail_grouped = RezolusError("perf_event_open(...) was rejected as invalid")
    s, _h = start_sampler(PerfHardware, sysfs=sysfs(tmp_path, "0-1"))
    try:
        assert "not grouped" in s.detail
        live = [e for e in FakeEvent.opened if not e.closed]
        assert len(live) == 6 and all(e.group_fd == -1 for e in live)
        # The leader that was opened before the member failed is closed again.
        assert sum(e.closed for e in FakeEvent.opened) == 1
    finally:
        s.close()


def test_hardware_ungrouped_option(fake_perf: type[FakePerfEvent], tmp_path: Path) -> None:
    s, _h = start_sampler(PerfHardware, sysfs=sysfs(tmp_path, "0-1"), group=False)
    try:
        assert len(FakeEvent.opened) == 6
        assert all(e.group_fd == -1 for e in FakeEvent.opened)
    finally:
        s.close()


# --- the host --------------------------------------------------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="per-CPU perf events need root")


def total(s: PerfSoftware, column: int) -> int:
    rows = s.read()[PERF_SOFTWARE]
    return sum(v[column] for v in rows.values())


@pytest.mark.host
@root_only
def test_host_context_switches_count_our_sleeps() -> None:
    s, _h = start_sampler(PerfSoftware, sysfs=Path("/sys"))
    try:
        n = 50
        before = total(s, 0)
        for _ in range(n):
            time.sleep(0.001)  # each one blocks: a voluntary context switch
        after = total(s, 0)
    finally:
        s.close()
    assert after - before >= n


@pytest.mark.host
@root_only
def test_host_page_faults_count_fresh_memory() -> None:
    size = 64 << 20
    pages = size // mmap.PAGESIZE
    s, _h = start_sampler(PerfSoftware, sysfs=Path("/sys"))
    try:
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            if hasattr(mmap, "MADV_NOHUGEPAGE"):
                m.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per 4 KiB page, not per 2 MiB
            before = total(s, 2)
            for off in range(0, size, mmap.PAGESIZE):
                m[off] = 1
            after = total(s, 2)
        finally:
            m.close()
    finally:
        s.close()
    assert after - before >= pages


@pytest.mark.host
@root_only
def test_host_hardware_counts_or_says_why_not() -> None:
    s = new_sampler(PerfHardware)
    try:
        s.start()
    except SamplerUnavailable as e:
        # Unavailable is a pass when the reason is right: no CPU PMU in sysfs, or perms.
        pmus = {p.name for p in Path("/sys/bus/event_source/devices").iterdir()}
        if "no PMU" in e.reason:
            assert not pmus & {"cpu", "cpu_core", "cpu_atom"}, (pmus, e.reason)
        else:
            assert "perf_event_paranoid" in e.reason, e.reason
        print(f"perf_hardware unavailable here: {e.reason}")
        return
    try:
        s.bind({e.name: FakeHandle() for e in PerfHardware.events()})
        s.read()
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.1:
            pass
        rows = s.read()[PERF_HARDWARE]
    finally:
        s.close()
    assert sum(r[0] for r in rows.values()) > 0  # cycles
    assert sum(r[1] for r in rows.values()) > 0  # instructions
    assert max(r[3] for r in rows.values()) > 0  # ipc_milli


@pytest.mark.host
@root_only
def test_host_software_read_cost() -> None:
    """Median cost of one read() with the family wanted (reported; loosely bounded)."""
    s, _h = start_sampler(PerfSoftware, sysfs=Path("/sys"))
    try:
        median_us = median_read_us(s)
    finally:
        s.close()
    print(f"perf_software read(): median {median_us:.1f} us")
    assert median_us < 2000
