"""``rezolus-ue top``: the model (rates, resets, frames), the renderer and the keys, in-process.

Records are built from the real schemas (packed, then unpacked, as the subscription would
decode them); the expected figures below are worked out by hand from those records.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import termios
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console
from rich.text import Text

from rezolus_ue import schema
from rezolus_ue.consume import top
from rezolus_ue.consume import top_keys as tk
from rezolus_ue.consume import top_panels as tp
from rezolus_ue.consume import top_widgets as tw
from rezolus_ue.consume.records import Record
from rezolus_ue.consume.top_keys import UiState, handle_key, split_keys
from rezolus_ue.consume.top_model import TOP_EVENTS, Model
from rezolus_ue.consume.top_render import render
from rezolus_ue.metrics import catalog, h2
from rezolus_ue.metrics.family import histogram_records

S = 1_000_000_000
GiB = 1 << 30
MiB = 1 << 20
_SCHEMAS = schema.by_name()


def rec(event: str, t_ns: int, *values: object) -> Record:
    """Return a record of ``event`` as the subscription delivers it: packed, then decoded."""
    sch = _SCHEMAS[event]
    return Record(event, t_ns, 0, 4242, sch.unpack(sch.pack(*values)))


def hist_recs(event: str, t_ns: int, labels: tuple, scalars: tuple, values: list[int]
              ) -> list[Record]:
    """Return the record(s) of a histogram event whose interval saw ``values``."""
    sch = _SCHEMAS[event]
    counts = h2.new_counts()
    h2.record(counts, values)
    return [Record(event, t_ns, 0, 4242, sch.unpack(sch.pack(*r)))
            for r in histogram_records(sch, labels, scalars, counts)]


class Host:
    """A small machine whose counters advance by chosen amounts each interval."""

    def __init__(self, ncpu: int = 2, cgroups: int = 3) -> None:
        self.ncpu = ncpu
        self.t = 1000 * S
        # Per CPU: user nice system idle iowait irq softirq steal (ns since boot).
        self.cpu = [[50 * S, 1 * S, 20 * S, 900 * S, 5 * S, 1 * S, 2 * S, 0] for _ in
                    range(ncpu)]
        self.sched = [1_000_000, 5000]
        self.disk = {"nvme0n1": [1000, 2000, 0, 0, 10 * MiB, 20 * MiB, 0, 5 * S, 6 * S, 7 * S],
                     "sda": [10, 20, 0, 0, 1 * MiB, 2 * MiB, 0, 1 * S, 1 * S, 1 * S]}
        self.net = {"eth0": [100 * MiB, 50 * MiB, 100_000, 80_000, 0, 0, 0, 0],
                    "lo": [1 * MiB, 1 * MiB, 1000, 1000, 0, 0, 0, 0]}
        self.cg = {f"system.slice/svc{i}.service": [i * S, i * S // 2, i * S // 2, 0, 0,
                                                    (i + 1) * 100 * MiB, 0, 0, 0, 0]
                   for i in range(cgroups)}
        self.agent_cpu = [1 * S, S // 2]
        self.written = 1000
        # PSI stall totals (us) of cpu, memory, io: some, full.
        self.psi = {"cpu": [0, 0], "memory": [0, 0], "io": [0, 0]}
        #: Each sampler's (state, reason, last_error, errors), as rezolus_agent_status says.
        self.status = {"cpu_usage": ("active", "", "", 0), "memory": ("active", "", "", 0)}

    def advance(self, cpu: list[list[int]] | None = None, dt: int = S) -> None:
        """Move time on by ``dt``; add ``cpu[i]`` (8 state deltas) to each CPU."""
        self.t += dt
        idle = [dt // 10, 0, 0, dt - dt // 10, 0, 0, 0, 0]  # 10% busy unless told
        for i, d in enumerate(cpu or [idle] * self.ncpu):
            self.cpu[i] = [a + b for a, b in zip(self.cpu[i], d, strict=True)]
        self.sched[0] += 12_000
        self.sched[1] += 4
        for name, inc in (("nvme0n1", (100, 200, 4 * MiB, 8 * MiB, S // 2)),
                          ("sda", (0, 1, 0, 4096, S // 100))):
            if name not in self.disk:
                continue
            d = self.disk[name]
            d[0] += inc[0]
            d[1] += inc[1]
            d[4] += inc[2]
            d[5] += inc[3]
            d[7] += inc[0] * 1_000_000  # 1 ms per read
            d[8] += inc[1] * 2_000_000  # 2 ms per write
            d[9] += inc[4]
        n = self.net["eth0"]
        n[0] += 10 * MiB
        n[1] += 1 * MiB
        n[2] += 1000
        n[3] += 500
        n[6] += 3
        for i, v in enumerate(self.cg.values()):
            v[0] += i * S // 4  # svc0 0%, svc1 25%, svc2 50% of a CPU
            v[1] += i * S // 8
            v[2] += i * S // 8
            v[6] += i * MiB
        self.agent_cpu[0] += S // 100
        self.written += 500
        # cpu: some task stalled 5% of the time; io: 20% some, 10% full.
        for res, (some, full) in (("cpu", (0.05, 0)), ("memory", (0, 0)), ("io", (0.2, 0.1))):
            self.psi[res][0] += int(some * dt / 1000)
            self.psi[res][1] += int(full * dt / 1000)

    def records(self, dist_max: dict[int, int] | None = None) -> list[Record]:
        """Return one agent tick's records, in the order the agent writes them."""
        t = self.t
        out = []
        for i, c in enumerate(self.cpu):
            out.append(rec("rezolus_cpu_usage", t, i, *c, 123_456))
        for i in range(self.ncpu):
            mx = (dist_max or {}).get(i, 0)
            out.append(rec("rezolus_cpu_usage_dist", t + 10, i, "busy_ppm", mx // 2, 0, 0, 0,
                           mx))
        out.append(rec("rezolus_scheduler", t + 20, *self.sched, 3, 1))
        out.append(rec("rezolus_memory", t + 30, 16 * GiB, 2 * GiB, 12 * GiB, 256 * MiB,
                       6 * GiB, 12 * MiB, 0, 512 * MiB, 2 * GiB, 2 * GiB))
        for res, (some, full) in self.psi.items():  # avg10: 3% some, 1% full everywhere
            out.append(rec("rezolus_pressure", t + 35, res, 30_000, 10_000, some, full))
        for name, d in self.disk.items():
            out.append(rec("rezolus_blockio_device", t + 40, name, *d, 2))
        for name, d in self.net.items():
            out.append(rec("rezolus_network_interface", t + 50, name, *d))
        for name, d in self.cg.items():
            out.append(rec("rezolus_cgroup", t + 60, name, *d))
        out.append(rec("rezolus_agent", t + 70, 4242, (self.t - 900 * S), *self.agent_cpu,
                       48 * MiB, 12, 2, self.written, 0, 0, 0, 6, 1))
        out += hist_recs("rezolus_agent_sampler", t + 80, ("cpu_usage",), (1, 10, 0),
                         [100, 120, 130, 400, 1000])
        out += hist_recs("rezolus_agent_sampler", t + 81, ("memory",), (1, 10, 0), [50] * 4)
        for name, st in self.status.items():
            out.append(rec("rezolus_agent_status", t + 82, name, *st))
        return out


def two_intervals(ncpu: int = 2, cgroups: int = 3) -> Model:
    """Return a model fed two agent ticks one second apart (the worked example)."""
    host = Host(ncpu, cgroups)
    m = Model(1.0, host="testhost", kernel="6.8.0-test")
    m.ingest(host.records())
    m.flush()
    # CPU0: user 300ms nice 0 system 100ms idle 550ms iowait 50ms -> busy 40.0%
    # CPU1: user 900ms system 50ms irq 10ms softirq 10ms idle 30ms -> busy 97.0%
    host.advance([[300_000_000, 0, 100_000_000, 550_000_000, 50_000_000, 0, 0, 0],
                  [900_000_000, 0, 50_000_000, 30_000_000, 0, 10_000_000, 10_000_000, 0]]
                 + [[S // 10, 0, 0, S * 9 // 10, 0, 0, 0, 0]] * (ncpu - 2))
    m.ingest(host.records(dist_max={0: 870_000, 1: 1_000_000}))
    m.flush()
    return m


def text_of(model: Model, width: int = 80, height: int = 24, ui: UiState | None = None
            ) -> str:
    con = Console(width=width, height=height, record=True, color_system=None,
                  force_terminal=False)
    con.print(render(model, width, height, ui or UiState()))
    return con.export_text()


# --- the model -------------------------------------------------------------------------


def test_events_list_is_known_and_minimal() -> None:
    assert set(TOP_EVENTS) <= set(_SCHEMAS)
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
    c0, c1 = v.cpus
    assert c0.busy == pytest.approx(0.40)
    assert c0.user == pytest.approx(0.30) and c0.system == pytest.approx(0.10)
    assert c0.iowait == pytest.approx(0.05)
    assert c1.busy == pytest.approx(0.97)
    assert c1.irq == pytest.approx(0.02)
    assert c0.peak == pytest.approx(0.87) and c1.peak == pytest.approx(1.0)
    # All CPUs: (400 + 970) ms busy of 2000 ms.
    assert v.cpu_total is not None and v.cpu_total.busy == pytest.approx(0.685)


def test_first_frame_has_gauges_but_no_rates() -> None:
    m = Model()
    m.ingest(Host().records())
    assert m.frames == 0 and m.batch_open
    m.flush()
    v = m.view
    assert v.frame == 1 and v.dt_s is None
    assert v.cpus[0].busy == pytest.approx(0.123456)  # busy_ppm until deltas exist
    assert v.cpus[0].user is None
    assert v.memory is not None and v.memory["total_bytes"] == 16 * GiB
    assert v.disks[0].reads_s is None


def test_rates() -> None:
    v = two_intervals().view
    assert v.sched is not None and v.sched.ctxsw_s == pytest.approx(12_000)
    assert v.sched.forks_s == pytest.approx(4) and v.sched.running == 3
    nvme = next(d for d in v.disks if d.device == "nvme0n1")
    assert nvme.reads_s == pytest.approx(100) and nvme.writes_s == pytest.approx(200)
    assert nvme.read_bps == pytest.approx(4 * MiB) and nvme.write_bps == pytest.approx(8 * MiB)
    assert nvme.util == pytest.approx(0.5)
    assert nvme.r_await_ms == pytest.approx(1.0) and nvme.w_await_ms == pytest.approx(2.0)
    eth = next(n for n in v.nets if n.interface == "eth0")
    assert eth.rx_bps == pytest.approx(10 * MiB) and eth.drops_s == pytest.approx(3)
    cg = {c.path: c for c in v.cgroups}
    assert cg["system.slice/svc2.service"].cpu == pytest.approx(0.5)
    assert cg["system.slice/svc1.service"].io_write_bps == pytest.approx(0)
    assert cg["system.slice/svc1.service"].io_read_bps == pytest.approx(MiB)
    assert v.agent is not None and v.agent.pid == 4242
    assert v.agent.cpu == pytest.approx(0.01) and v.agent.events_written == 1500
    # Records of the second tick over the one second since the first.
    assert v.events_per_s == pytest.approx(len(Host().records()))


def test_histograms_summed_per_frame() -> None:
    v = two_intervals().view
    assert [h.label for h in v.hists] == ["cpu_usage", "memory"]
    h = v.hists[0]
    assert h.metric == "refresh_us" and h.unit == "us" and h.count == 5
    assert h.p50 == h2.bucket_bounds(h2.bucket_index(130))[1]
    assert h.max == h2.bucket_bounds(h2.bucket_index(1000))[1]


def test_counter_reset_gives_no_rate_for_that_step() -> None:
    host = Host()
    m = Model()
    for _ in range(2):
        m.ingest(host.records())
        m.flush()
        host.advance()
    before = {c.path: c.cpu for c in m.view.cgroups}
    # svc2 is re-created: its counters start again near zero.
    host.cg["system.slice/svc2.service"] = [S // 10, 0, 0, 0, 0, 100 * MiB, 0, 0, 0, 0]
    m.ingest(host.records())
    m.flush()
    assert m.view.resets == 1
    # No step this frame: the previous rate stays rather than a huge negative one.
    assert {c.path: c.cpu for c in m.view.cgroups}["system.slice/svc2.service"] == \
        before["system.slice/svc2.service"]
    host.advance()
    m.ingest(host.records())
    m.flush()
    assert {c.path: c.cpu for c in m.view.cgroups}["system.slice/svc2.service"] == \
        pytest.approx(0.5)


def test_batches_end_when_a_key_repeats() -> None:
    host = Host()
    m = Model()
    first = host.records()
    host.advance()
    second = host.records()
    m.ingest(first + second)  # one poll held two ticks: the repeat ends the first batch
    assert m.frames == 1
    m.flush()
    assert m.frames == 2 and m.view.cpus[0].user is not None


def test_display_interval_and_hold() -> None:
    host = Host()
    m = Model(2.0)
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
    m = Model()
    for _ in range(2):
        m.ingest(host.records())
        m.flush()
        host.advance()
    del host.disk["sda"]
    for _ in range(2):
        m.ingest(host.records())
        m.flush()
        host.advance()
    assert [d.device for d in m.view.disks] == ["nvme0n1"]


# --- rendering -------------------------------------------------------------------------


def test_render_80x24() -> None:
    out = text_of(two_intervals())
    lines = out.split("\n")[:-1]
    assert len(lines) == 24
    assert max(len(line) for line in lines) <= 80
    assert "testhost" in lines[0] and "agent 4242" in lines[0]
    assert "lost 0" in lines[1]
    assert re.search(r"CPU 68\.5%.*usr 60\.0%", out)  # (300 + 900) / 2000
    assert re.search(r"0\[.*\] 40\.0%", out) and re.search(r"1\[.*\] 97\.0%", out)
    assert "Mem" in out and "4.0G/16G 25.0%" in out and "avail 12G" in out
    assert "ctxsw/s 12k" in out and "runnable 3" in out
    assert re.search(r"nvme0n1\s+300\s+100\s+200\s+12M\s+4\.0M\s+8\.0M.*50\.0%", out)
    assert re.search(r"eth0\s+11M\s+10M\s+1\.0M\s+1\.5k", out)
    assert re.search(r"svc2\.service\s+50\.0%", out)
    assert "q quit" in lines[-1]


RUNQ = "rezolus_scheduler_runqueue_latency"


@pytest.mark.skipif(RUNQ not in _SCHEMAS, reason="no run-queue latency event in the catalog")
def test_any_histogram_event_shows_in_the_scheduler_panel() -> None:
    host = Host()
    m = Model()
    # 90 waits of 5us, 10 of 2ms (in ns): p50 = p90 ~5us, p99 = max ~2ms (upper edges).
    waits = [5000] * 90 + [2_000_000] * 10
    for _ in range(2):
        m.ingest(host.records() + hist_recs(RUNQ, host.t + 90, (), (S,), waits))
        m.flush()
        host.advance()
    h = m.view.hists[0]
    assert h.event == RUNQ and h.count == 100 and h.unit == "ns"
    out = text_of(m, 100, 30)
    row = next(ln for ln in out.split("\n") if "scheduler runqueue latency" in ln)
    p50 = tw.fmt_value(h2.bucket_bounds(h2.bucket_index(5000))[1], "ns")
    p99 = tw.fmt_value(h2.bucket_bounds(h2.bucket_index(2_000_000))[1], "ns")
    assert re.search(rf"latency\s+100\s+{p50}\s+{p50}\s+{p99}\s+{p99}", row), row
    # It comes before the agent's own refresh cost.
    assert out.index("scheduler runqueue latency") < out.index("agent sampler refresh")


SIZE = "rezolus_blockio_size"


@pytest.mark.skipif(SIZE not in _SCHEMAS, reason="no block IO size event in the catalog")
def test_bytes_have_one_style_in_every_panel() -> None:
    """A byte histogram's values read as the disk, memory and cgroup panels' bytes do."""
    host = Host()
    m = Model()
    sizes = [4096] * 90 + [MiB] * 10
    for _ in range(2):
        m.ingest(host.records() + hist_recs(SIZE, host.t + 90, ("read",), (S,), sizes))
        m.flush()
        host.advance()
    h = next(h for h in m.view.hists if h.event == SIZE)
    assert h.unit == "bytes"
    out = text_of(m, 120, 40)
    row = next(ln for ln in out.split("\n") if "blockio size" in ln)
    p50 = tw.fmt_bytes(h2.bucket_bounds(h2.bucket_index(4096))[1])
    p99 = tw.fmt_bytes(h2.bucket_bounds(h2.bucket_index(MiB))[1])
    assert re.search(rf"\s100\s+{p50}\s+{p50}\s+{p99}\s+{p99}", row), row
    assert re.fullmatch(r"\d\.\dK", p50) and re.fullmatch(r"\d\.\dM", p99)
    assert "bytes" not in row and not re.search(r"\d[kM]B|\dk\b", row), row
    assert "4.0G/16G" in out  # the memory panel's, in the same style


def test_render_120x40_two_columns() -> None:
    out = text_of(two_intervals(ncpu=8, cgroups=12), 120, 40)
    lines = out.split("\n")[:-1]
    assert len(lines) == 40 and max(len(line) for line in lines) <= 120
    assert "│" in lines[5]
    assert "agent refresh cpu_usage" in out
    # Wide enough for the per-CPU peak: CPU1's interval max was 100%.
    assert re.search(r"1\[.*\] 97\.0%\s*↑100%", out)
    assert re.search(r"7\[.*\] 10\.0%", out)
    assert "svc11.service" in out  # every cgroup fits


def test_80x24_degrades_with_many_cpus_and_cgroups() -> None:
    out = text_of(two_intervals(ncpu=64, cgroups=40))
    lines = out.split("\n")[:-1]
    assert len(lines) == 24 and max(len(line) for line in lines) <= 80
    assert "0-63" in out  # a heat strip instead of 64 bars
    assert re.search(r"CGROUP \+\d+", out)  # how many rows did not fit
    # The busiest cgroup is first (sorted by CPU).
    cg_rows = [ln for ln in lines if "svc" in ln]
    assert "svc39.service" in cg_rows[0]


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40), (200, 60), (40, 12)])
def test_no_line_wider_than_the_screen(size: tuple[int, int]) -> None:
    w, h = size
    for model in (two_intervals(), two_intervals(ncpu=64, cgroups=40), Model()):
        lines = text_of(model, w, h).split("\n")[:-1]
        assert len(lines) == h
        assert max(len(line) for line in lines) <= w


def test_waiting_says_what_top_waits_for_and_subscribed_to() -> None:
    m = Model(host="testhost")
    assert "subscribing to" in text_of(m)  # drawn before subscribing: at once
    m.subscribed = ()
    out = text_of(m)
    assert "waiting for the agent (sudo rezolus-ue run)" in out
    assert "none of top's events is registered" in out
    m.subscribed = ("rezolus_agent", "rezolus_cpu_usage")
    out = text_of(m, 100, 30)
    assert "waiting for the first records from the agent" in out
    assert "subscribed to 2 of" in out and "rezolus_cpu_usage" in out
    assert re.search(r"not registered \(yet\): rezolus_agent_status, rezolus_pressure", out)


def test_filter_sort_pause_and_help_in_render() -> None:
    m = two_intervals(cgroups=5)
    out = text_of(m, ui=UiState(filter="svc3"))
    assert "svc3.service" in out and "svc4.service" not in out and "nvme0n1" not in out
    assert "filter 'svc3'" in out
    mem_sorted = text_of(m, ui=UiState(sort=1))
    rows = [ln for ln in mem_sorted.split("\n") if "svc" in ln]
    assert "svc4" in rows[0]  # most memory first
    by_name = text_of(m, ui=UiState(sort=3))
    rows = [ln for ln in by_name.split("\n") if "svc" in ln]
    assert "svc0" in rows[0]
    assert "PAUSED" in text_of(m, ui=UiState(paused=True))
    assert "Keys and panels" in text_of(m, ui=UiState(help=True))


def test_once_output_is_not_padded_and_has_no_footer() -> None:
    out = text_of(two_intervals(), 80, 1000, UiState(interactive=False))
    assert "q quit" not in out
    assert not out.endswith("\n\n")
    assert "svc2.service" in out


# --- keys ------------------------------------------------------------------------------


def test_keys() -> None:
    ui = UiState()
    ui = handle_key(ui, "p")
    assert ui.paused
    assert not handle_key(ui, "p").paused
    sorts = [ui.sort]
    for _ in range(len(tk.SORTS)):
        ui = handle_key(ui, "s")
        sorts.append(ui.sort)
    assert sorts == [0, 1, 2, 3, 0]
    assert handle_key(ui, "S").sort == len(tk.SORTS) - 1
    ui = handle_key(UiState(interval_s=1.0), "+")
    assert ui.interval_s == 2.0
    ui = handle_key(handle_key(ui, "-"), "-")
    assert ui.interval_s == 0.5
    assert handle_key(UiState(interval_s=60.0), "+").interval_s == 60.0
    assert handle_key(UiState(interval_s=0.1), "-").interval_s == 0.1
    assert handle_key(UiState(interval_s=1.5), "+").interval_s == 2.0
    assert handle_key(UiState(), "q").quit
    h = handle_key(UiState(), "h")
    assert h.help and not handle_key(h, "q").quit and not handle_key(h, "q").help


def test_filter_editing() -> None:
    ui = handle_key(UiState(), "/")
    assert ui.editing
    for k in "nvqx":
        ui = handle_key(ui, k)
    assert ui.filter == "nvqx" and not ui.quit  # q is text while typing
    ui = handle_key(ui, "\x7f")
    ui = handle_key(ui, "\n")
    assert ui.filter == "nvq" and not ui.editing
    assert handle_key(ui, "\x1b").filter == ""  # Esc clears a kept filter
    ui = handle_key(handle_key(ui, "/"), "\x1b")
    assert ui.filter == "" and not ui.editing


def test_split_keys() -> None:
    assert split_keys("qs") == ["q", "s"]
    assert split_keys("\x1b[A+") == ["\x1b[A", "+"]
    assert split_keys("\x1b") == ["\x1b"]
    assert split_keys("\r") == ["\n"]
    assert split_keys("\x1b[15~h") == ["\x1b[15~", "h"]


# --- formatting and the command line ---------------------------------------------------


def test_formatting() -> None:
    assert tw.fmt_num(0) == "0" and tw.fmt_num(3.46) == "3.5" and tw.fmt_num(12_345) == \
        "12k" and tw.fmt_num(1_234_567) == "1.2M"
    assert tw.fmt_bytes(512) == "512" and tw.fmt_bytes(1536) == "1.5K"
    assert tw.fmt_bytes(16 * GiB) == "16G"
    assert tw.fmt_pct(0.4) == "40.0%" and tw.fmt_pct(1.0) == "100%"
    assert tw.fmt_uptime(3 * 3600 + 12 * 60) == "3h12m"
    assert tw.fmt_value(1500, "us") == "1.5ms" and tw.fmt_value(120, "us") == "120us"
    # Byte values, histograms' included, in one style: binary K, M, G.
    for n in (512, 4608, 52 * 1024, 3 * MiB, 16 * GiB):
        assert tw.fmt_value(n, "bytes") == tw.fmt_bytes(n)
    assert tw.fmt_value(4608, "bytes") == "4.5K" and tw.fmt_bytes(52 * 1024) == "52K"


def test_add_parser() -> None:
    p = argparse.ArgumentParser()
    top.add_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(["top", "--interval", "500ms", "--once", "--no-wait"])
    assert args.func is top.run and args.interval == 0.5 and args.once and args.no_wait
    assert p.parse_args(["top", "-i", "2"]).interval == 2.0
    with pytest.raises(SystemExit):
        p.parse_args(["top", "--interval", "1ms"])


def test_histogram_spark_shape() -> None:
    counts = h2.new_counts()
    h2.record(counts, [10] * 8 + [12] * 2)
    spark = tw._spark(counts, 3).plain
    assert spark == "█ ▂" and np.count_nonzero(counts) == 2


def test_percentiles_match_h2() -> None:
    from rezolus_ue.consume.top_model import _percentiles

    rng = np.random.default_rng(1)
    for _ in range(20):
        counts = h2.new_counts()
        h2.record(counts, rng.integers(0, 10**6, int(rng.integers(1, 500))))
        assert _percentiles(counts, int(counts.sum())) == h2.percentiles(
            counts, [0.5, 0.9, 0.99, 1.0])


# --- the I/O loop, with a stand-in subscription (the pure parts are tested above) --------


class FakeSubscription:
    """Hands out one agent tick per poll, then quiet (as the agent's bursts look)."""

    exhausted = False  # live: never

    def __init__(self, ticks: int, key_fd: int) -> None:
        self.host = Host()
        self.left = ticks
        self.quiet = False
        self.key_fd = key_fd
        self.lost = 0
        self.events = list(TOP_EVENTS)

    def poll(self, timeout_ms: int) -> list[Record]:
        if self.quiet or not self.left:
            if not self.left and not self.quiet:  # the last frame is drawn: quit
                os.write(self.key_fd, b"q")
            self.quiet = False
            time.sleep(timeout_ms / 1000)
            return []
        self.quiet = True
        self.left -= 1
        self.host.advance()
        return self.host.records()


class FakeLive:
    def __init__(self) -> None:
        self.frames: list[str] = []

    def update(self, renderable: Text, refresh: bool = False) -> None:
        assert refresh
        self.frames.append(renderable.plain)


def run_loop(live: FakeLive, sub: Callable[[int], FakeSubscription | None],
             keys: bytes = b"") -> None:
    """Run top's loop on an 80x24 screen until the stand-in subscription has quit it;
    ``sub(key_fd)`` is the subscription to start with (None: the loop subscribes)."""
    r, w = os.pipe()
    try:
        os.write(w, keys)
        console = SimpleNamespace(size=SimpleNamespace(width=80, height=24))
        top._loop([sub(w)], Model(), UiState(), live, console, r)
    finally:
        os.close(r)
        os.close(w)


def test_loop_draws_a_frame_per_tick_and_quits_on_q() -> None:
    live = FakeLive()
    run_loop(live, lambda w: FakeSubscription(3, w), b"s")
    # The waiting screen, then one frame per tick; the key redrew at once (sort mem).
    assert "waiting for the first records" in live.frames[0]
    assert "subscribed to" in live.frames[0]
    assert sum("CPU " in f for f in live.frames) == 3
    assert "mem▼" in live.frames[-1]  # the sorted column


def test_cbreak_restores_the_terminal_on_error() -> None:
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        with pytest.raises(RuntimeError), top.cbreak(slave):
            assert termios.tcgetattr(slave)[3] & termios.ICANON == 0
            os.write(master, b"\x1b[Aq")
            assert top.read_keys(slave, 1.0) == ["\x1b[A", "q"]
            raise RuntimeError
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


# --- a slow agent, the samplers' status, pressure ------------------------------------------


def slow_ticks(m: Model, host: Host, ticks: int, bursts: int = 4, gap: int = 800_000_000
               ) -> None:
    """Feed ``ticks`` agent ticks, each in ``bursts`` bursts ``gap`` apart with quiet
    between (flush), as a slow agent delivers them: under emulation, BPF samplers loading
    in the background spread one tick's records over seconds."""
    for _ in range(ticks):
        recs = host.records()
        n = -(-len(recs) // bursts)
        for k in range(bursts):
            m.ingest([dataclasses.replace(r, time_ns=r.time_ns + k * gap)
                      for r in recs[k * n : (k + 1) * n]])
            m.flush()
        host.advance(dt=bursts * gap)


@pytest.mark.parametrize(("interval_s", "gap_ms"), [(1.0, 950), (0.5, 600)])
def test_a_slow_agent_whose_ticks_span_several_frames_still_gives_every_row_a_rate(
        interval_s: float, gap_ms: int) -> None:
    # Found in the 6.12 VM: frames commit on bursts (one per display interval), so several
    # per tick; rows were dropped as gone after two frames without a record, so a row seen
    # once per tick was new at each of its records and never had a rate.
    host = Host()
    m = Model(interval_s)
    slow_ticks(m, host, 3, gap=gap_ms * 1_000_000)
    assert m.frames >= 9  # more frames than ticks: the case in point
    v = m.view
    assert v.disks and all(d.reads_s is not None for d in v.disks)
    assert v.nets and all(n.rx_bps is not None for n in v.nets)
    assert v.cgroups and all(c.cpu is not None for c in v.cgroups)
    assert v.sched is not None and v.sched.ctxsw_s is not None
    assert v.agent is not None and v.agent.cpu is not None
    assert all(c.user is not None for c in v.cpus)


def test_rows_of_an_event_that_stopped_go_after_three_of_its_periods() -> None:
    host = Host()
    m = Model(1.0)
    for _ in range(3):
        m.ingest(host.records())
        m.flush()
        host.advance()
    assert m.view.cgroups
    for _ in range(4):  # the cgroup sampler stops publishing (it failed), the rest goes on
        m.ingest([r for r in host.records() if r.event != "rezolus_cgroup"])
        m.flush()
        host.advance()
    assert m.view.cgroups == () and m.view.disks


def troubled_host() -> Host:
    host = Host()
    host.status.update({
        "tcp": ("unavailable", "loading tcp.bpf.o: operation not permitted: run as root, or"
                " grant CAP_BPF and CAP_PERFMON", "loading tcp.bpf.o: operation not"
                " permitted", 1),
        "network": ("failed", "", "ValueError: bad rtnetlink reply", 7),
        "cgroup": ("active", "", "OSError: [Errno 19] No such device", 2),
        "perf_hardware": ("disabled", "disabled in config", "", 0),
    })
    return host


def feed(host: Host, ticks: int = 2, m: Model | None = None) -> Model:
    m = m or Model(1.0)
    for _ in range(ticks):
        m.ingest(host.records())
        m.flush()
        host.advance()
    return m


def test_samplers_come_from_the_agents_status_records() -> None:
    host = troubled_host()
    m = feed(host)
    rows = {r.sampler: r for r in m.view.samplers}
    assert rows["network"].state == "failed" and rows["network"].errors == 7
    assert rows["network"].why == "ValueError: bad rtnetlink reply"  # the error, when failed
    assert rows["tcp"].why.startswith("loading tcp.bpf.o: operation not permitted: run as")
    assert [r.sampler for r in tp.troubled(m.view.samplers)] == ["network", "tcp", "cgroup"]
    # The agent stops publishing a sampler (removed by a reload): it goes with the publish.
    del host.status["tcp"]
    feed(host, 2, m)
    assert "tcp" not in {r.sampler for r in m.view.samplers}


def test_samplers_panel_and_header_at_80x24() -> None:
    out = text_of(feed(troubled_host()))
    lines = out.split("\n")
    assert "samplers 1 failed 1 unavailable (e)" in lines[0]
    i = next(k for k, ln in enumerate(lines) if ln.startswith("SAMPLER"))
    assert lines[i].split() == ["SAMPLER", "state", "err", "why", "(e:", "every", "sampler)"]
    assert lines[i + 1] == "network failed         7  ValueError: bad rtnetlink reply"
    assert lines[i + 2].startswith("tcp     unavailable    1  loading tcp.bpf.o: operation")
    assert lines[i + 2].endswith("…") and len(lines[i + 2]) == 80  # cut, not wrapped
    assert lines[i + 3] == ("cgroup  active         2  recovered; latest error: OSError:"
                            " [Errno 19] No such …")
    assert "perf_hardware" not in out  # disabled: the user's choice, not a problem


def test_samplers_panel_sits_atop_the_right_column_when_wide() -> None:
    out = text_of(feed(troubled_host()), 140, 30)
    first = out.split("\n")[2]
    assert first.startswith("CPU ") and first.split("│")[1].lstrip().startswith("SAMPLER")


def test_key_e_shows_every_sampler_with_its_whole_reason() -> None:
    m = feed(troubled_host())
    ui = handle_key(UiState(), "e")
    assert ui.samplers
    out = text_of(m, 80, 24, ui)
    assert "cpu_usage" in out and "perf_hardware" in out and "disabled in config" in out
    # The reason wraps instead of being cut.
    assert "grant CAP_BPF and CAP_PERFMON" in out.replace("\n", " ").replace("  ", " ")
    assert not handle_key(ui, "e").samplers and not handle_key(ui, "\x1b").samplers
    assert not handle_key(ui, "q").quit  # q closes the screen first, like help


def test_header_shows_load_and_pressure() -> None:
    m = two_intervals()
    m.loadavg = (0.52, 1.5, 12.25)
    out = text_of(m, 120, 30)
    # Stall shares over the frame from the stall-time counters: cpu 5% some; io 20%/10%.
    assert "load 0.52 1.50 12.25" in out
    assert "psi cpu 5.0/0% mem 0/0% io 20/10%" in out
    # One record so far: the kernel's 10 s averages stand in (3% some, 1% full).
    m1 = Model()
    m1.ingest(Host().records())
    m1.flush()
    assert "psi cpu 3.0/1.0% mem 3.0/1.0%" in text_of(m1, 120, 30)


def test_read_loadavg(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "loadavg"
    f.write_text("0.52 1.50 12.25 3/456 7890\n")
    assert top.read_loadavg(str(f)) == (0.52, 1.5, 12.25)
    assert top.read_loadavg(str(tmp_path / "missing")) is None
    f.write_text("garbage\n")
    assert top.read_loadavg(str(f)) is None


@pytest.mark.parametrize(("event", "label", "width", "name"), [
    ("rezolus_scheduler_runqueue_latency", "", 30, "scheduler runqueue latency"),
    ("rezolus_scheduler_runqueue_latency", "", 23, "sched runqueue latency"),
    ("rezolus_syscall_latency", "poll", 23, "syscall latency poll"),
    ("rezolus_softirq_duration", "net_rx", 23, "softirq duration net_rx"),
    ("rezolus_agent_sampler", "cpu_softirq_time", 23, "agent refr cpu_softirq…"),
    ("rezolus_agent_sampler", "cpu_usage", 23, "agent refresh cpu_usage"),
    ("rezolus_cgroup_runqueue_latency", "/", 23, "cgroup runq latency /"),
    ("rezolus_cgroup_runqueue_latency", "/system.slice/docker-0123abcd.scope", 23,
     "cg runq lat …abcd.scope"),
    ("rezolus_blockio_size", "read", 23, "blockio size read"),
    ("rezolus_tcp_connect_latency", "", 12, "tcp conn lat"),
    ("rezolus_tcp_connect_latency", "", 8, "tcp con…"),
])
def test_histogram_rows_are_named_by_subsystem_metric_and_label(
        event: str, label: str, width: int, name: str) -> None:
    fam = next(f for f in catalog.FAMILIES if f.event == event)
    assert fam.histogram is not None
    subject = tp.hist_subject(event, fam.histogram.name, fam.histogram.unit)
    got = tp.fit_hist_name(subject, label, width)
    assert got == name and len(got) <= width


def test_every_histogram_row_name_says_its_subsystem_at_80_columns() -> None:
    # The name column at 80x24 is 23 cells; each family's name must still start with its
    # subsystem (the event's first word, or its abbreviation), never cut from the left.
    short = dict(tp._ABBREVIATIONS)
    for fam in catalog.FAMILIES:
        h = fam.histogram
        if h is None:
            continue
        name = tp.fit_hist_name(tp.hist_subject(fam.event, h.name, h.unit), "x" * 40, 23)
        first = fam.event.removeprefix("rezolus_").split("_")[0]
        assert name.split()[0] in (first, short.get(first)), (fam.event, name)


def test_rows_of_one_histogram_event_share_one_subject() -> None:
    host = Host()
    m = Model()
    for _ in range(2):
        recs = host.records()
        for op in ("read", "poll", "filesystem"):
            recs += hist_recs("rezolus_syscall_latency", host.t + 95, (op,), (S,), [5000])
        m.ingest(recs)
        m.flush()
        host.advance()
    rows = [ln for ln in text_of(m, 80, 40).split("\n") if ln.startswith("syscall")]
    # "filesystem" needs the short form at 80 columns; its siblings follow it.
    assert [r.split()[:3] for r in rows] == [["syscall", "lat", op]
                                           for op in ("filesystem", "poll", "read")], rows


def test_loop_draws_the_first_screen_before_subscribing(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    live = FakeLive()
    key_fd: list[int] = []

    def subscribe(wait: bool, costly: bool = False) -> FakeSubscription:
        assert wait and live.frames, "subscribed before anything was drawn"
        return FakeSubscription(1, key_fd[0])

    monkeypatch.setattr(top, "_subscribe", subscribe)
    run_loop(live, lambda w: key_fd.append(w))  # type: ignore[func-returns-value]
    assert "subscribing to" in live.frames[0]
    assert any("CPU " in f for f in live.frames)


# --- costly events: off unless asked, and said so -------------------------------------------


def test_top_subscribes_to_cheap_events_unless_asked() -> None:
    from rezolus_ue.consume.top_model import COSTLY_EVENTS, top_events

    cheap = top_events(False)
    assert cheap == tuple(schema.cheap(TOP_EVENTS)) and "rezolus_cpu_usage" in cheap
    assert not set(cheap) & set(COSTLY_EVENTS)
    assert top_events(True) == TOP_EVENTS
    assert {"rezolus_syscall_latency", "rezolus_scheduler_runqueue_latency"} <= set(
        COSTLY_EVENTS)
    assert set(cheap) | set(COSTLY_EVENTS) == set(TOP_EVENTS)


def test_key_c_toggles_the_costly_events() -> None:
    ui = handle_key(UiState(), "c")
    assert ui.costly and not handle_key(ui, "c").costly


def test_costly_off_is_said_on_screen_and_how_to_turn_it_on() -> None:
    m = two_intervals()
    off = text_of(m, 120, 60)
    assert "costly off (c)" in off.split("\n")[1]  # the header
    assert tp.COSTLY_OFF[:40] in off and "key c, --costly" in off  # under the histograms
    on = text_of(m, 120, 60, UiState(costly=True))
    assert "costly off" not in on and tp.COSTLY_OFF[:40] not in on
    assert "c costly" in text_of(m, 80, 24)  # the key line


class ClosingSubscription(FakeSubscription):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_loop_resubscribes_with_the_costly_events_on_key_c(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    live = FakeLive()
    first: list[ClosingSubscription] = []
    asked: list[bool] = []

    def subscribe(wait: bool, costly: bool = False) -> FakeSubscription:
        asked.append(costly)
        return FakeSubscription(2, first[0].key_fd)

    def start(w: int) -> ClosingSubscription:
        first.append(ClosingSubscription(5, w))
        return first[0]

    monkeypatch.setattr(top, "_subscribe", subscribe)
    run_loop(live, start, b"c")
    assert first[0].closed and asked == [True]  # closed, then subscribed with them
    assert any(f"subscribing to {len(TOP_EVENTS)} events" in f for f in live.frames)
    assert "costly off" not in live.frames[-1] and "CPU " in live.frames[-1]


def test_costly_option_in_the_cli() -> None:
    from rezolus_ue.cli import build_parser

    assert build_parser().parse_args(["top", "--costly"]).costly
    assert not build_parser().parse_args(["top"]).costly


# --- drawing ---------------------------------------------------------------------------------


def _ansi(segments: object) -> str:
    return "".join(s.style.render(s.text) if s.style else s.text for s in segments)  # type: ignore[attr-defined]


@pytest.mark.parametrize("line", [
    Text("plain"),
    Text("all bold", "bold"),
    Text.assemble(("CPU ", "bold"), ("42%", "bold red"), " tail"),
    Text("base and span", "dim", spans=[tw.Span(4, 7, "red")]),
    Text("overlapping", spans=[tw.Span(0, 6, "red"), tw.Span(3, 9, "bold")]),
])
def test_screen_segments_are_richs(line: Text) -> None:
    """As rich draws the line inside the joined screen (where its style is a span)."""
    con = Console(width=40, force_terminal=True, color_system="truecolor")
    assert _ansi(tw._segments(line, con)) == _ansi(Text("\n").join([line]).render(con))


def test_screen_draws_each_line_once_cut_to_the_width() -> None:
    con = Console(width=10, height=3, force_terminal=True, color_system="truecolor")
    scr = tw.Screen([Text.assemble(("cpu", "bold"), " 42%"), Text("x" * 12),
                     Text("界" * 6)])
    assert scr.ansi(con, 10, 3) == ("\x1b[H\x1b[1mcpu\x1b[0m 42%\x1b[K\r\n" + "x" * 10
                                    + "\x1b[K\r\n" + "界" * 5 + "\x1b[K\x1b[J")
    assert scr.plain == "cpu 42%\n" + "x" * 12 + "\n" + "界" * 6
    mono = Console(width=10, height=3, force_terminal=True, color_system=None)
    assert scr.ansi(mono, 10, 2) == "\x1b[Hcpu 42%\x1b[K\r\n" + "x" * 10 + "\x1b[K\x1b[J"


def test_waiting_shows_the_subscriptions_reason_and_it_stays_beside_stale_data() -> None:
    m = Model(host="testhost")
    m.subscribed = ()
    m.waiting = ("no agent is running, but 52 rezolus_ue events are still defined (an agent"
                 " that was killed, or stopped while a consumer held them): `sudo rezolus-ue"
                 " cleanup` removes them; then start it with `sudo rezolus-ue run`")
    out = text_of(m, 100, 30)
    assert "waiting: why, below" in out
    assert "waiting: no agent is running, but 52 rezolus_ue events" in out
    assert "cleanup` removes them" in out  # wrapped, not cut
