"""``rezolus-ue top``'s screen, rendered in-process from a model fed by a small machine's
records (tests/top_host.py) and compared as text."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from rich.text import Span, Text
from top_host import SCHEMAS, Host, MiB, S, feed, hist_recs, text_of, troubled_host, two_intervals

from rezolus_ue.consume.top import scheduler, widgets
from rezolus_ue.consume.top.keys import UiState, handle_key
from rezolus_ue.consume.top.registry import new_model, top_events
from rezolus_ue.metrics import catalog, h2


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


@pytest.mark.skipif(RUNQ not in SCHEMAS, reason="no run-queue latency event in the catalog")
def test_any_histogram_event_shows_in_the_scheduler_panel() -> None:
    host = Host()
    m = new_model()
    # 90 waits of 5us, 10 of 2ms (in ns): p50 = p90 ~5us, p99 = max ~2ms (upper edges).
    waits = [5000] * 90 + [2_000_000] * 10
    for _ in range(2):
        m.ingest(host.records() + hist_recs(RUNQ, host.t + 90, (), (S,), waits))
        m.flush()
        host.advance()
    h = scheduler.rows(m.view).hists[0]
    assert h.event == RUNQ and h.count == 100 and h.unit == "ns"
    out = text_of(m, 100, 30)
    row = next(ln for ln in out.split("\n") if "scheduler runqueue latency" in ln)
    p50 = widgets.fmt_value(h2.bucket_bounds(h2.bucket_index(5000))[1], "ns")
    p99 = widgets.fmt_value(h2.bucket_bounds(h2.bucket_index(2_000_000))[1], "ns")
    assert re.search(rf"latency\s+100\s+{p50}\s+{p50}\s+{p99}\s+{p99}", row), row
    # It comes before the agent's own refresh cost.
    assert out.index("scheduler runqueue latency") < out.index("agent sampler refresh")


SIZE = "rezolus_blockio_size"


@pytest.mark.skipif(SIZE not in SCHEMAS, reason="no block IO size event in the catalog")
def test_bytes_have_one_style_in_every_panel() -> None:
    """A byte histogram's values read as the disk, memory and cgroup panels' bytes do."""
    host = Host()
    m = new_model()
    sizes = [4096] * 90 + [MiB] * 10
    for _ in range(2):
        m.ingest(host.records() + hist_recs(SIZE, host.t + 90, ("read",), (S,), sizes))
        m.flush()
        host.advance()
    h = next(h for h in scheduler.rows(m.view).hists if h.event == SIZE)
    assert h.unit == "bytes"
    out = text_of(m, 120, 40)
    row = next(ln for ln in out.split("\n") if "blockio size" in ln)
    p50 = widgets.fmt_bytes(h2.bucket_bounds(h2.bucket_index(4096))[1])
    p99 = widgets.fmt_bytes(h2.bucket_bounds(h2.bucket_index(MiB))[1])
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
    for model in (two_intervals(), two_intervals(ncpu=64, cgroups=40), new_model()):
        lines = text_of(model, w, h).split("\n")[:-1]
        assert len(lines) == h
        assert max(len(line) for line in lines) <= w


def test_waiting_says_what_top_waits_for_and_subscribed_to() -> None:
    m = new_model(host="testhost")
    assert "subscribing to" in text_of(m)  # drawn before subscribing: at once
    m.subscribed = ()
    out = text_of(m)
    assert "waiting for the agent (sudo rezolus-ue run)" in out
    assert "none of top's events is registered" in out
    m.subscribed = ("rezolus_agent", "rezolus_cpu_usage")
    out = text_of(m, 100, 30)
    assert "waiting for the first records from the agent" in out
    assert "subscribed to 2 of" in out and "rezolus_cpu_usage" in out
    missing = [e for e in top_events(False) if e not in m.subscribed]
    assert f"not registered (yet): {missing[0]}, {missing[1]}," in out.replace("\n  ", " ")


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
    m1 = new_model()
    m1.ingest(Host().records())
    m1.flush()
    assert "psi cpu 3.0/1.0% mem 3.0/1.0%" in text_of(m1, 120, 30)


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
    subject = scheduler.hist_subject(event, fam.histogram.name, fam.histogram.unit)
    got = scheduler.fit_hist_name(subject, label, width)
    assert got == name and len(got) <= width


def test_every_histogram_row_name_says_its_subsystem_at_80_columns() -> None:
    # The name column at 80x24 is 23 cells; each family's name must still start with its
    # subsystem (the event's first word, or its abbreviation), never cut from the left.
    short = dict(scheduler.ABBREVIATIONS)
    for fam in catalog.FAMILIES:
        h = fam.histogram
        if h is None:
            continue
        subject = scheduler.hist_subject(fam.event, h.name, h.unit)
        name = scheduler.fit_hist_name(subject, "x" * 40, 23)
        first = fam.event.removeprefix("rezolus_").split("_")[0]
        assert name.split()[0] in (first, short.get(first)), (fam.event, name)


def test_rows_of_one_histogram_event_share_one_subject() -> None:
    host = Host()
    m = new_model()
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


def test_costly_off_is_said_on_screen_and_how_to_turn_it_on() -> None:
    m = two_intervals()
    off = text_of(m, 120, 60)
    assert "costly off (c)" in off.split("\n")[1]  # the header
    assert scheduler.COSTLY_OFF[:40] in off and "key c, --costly" in off  # under the histograms
    on = text_of(m, 120, 60, UiState(costly=True))
    assert "costly off" not in on and scheduler.COSTLY_OFF[:40] not in on
    assert "c costly" in text_of(m, 80, 24)  # the key line


def _ansi(segments: object) -> str:
    return "".join(s.style.render(s.text) if s.style else s.text for s in segments)  # type: ignore[attr-defined]


@pytest.mark.parametrize("line", [
    Text("plain"),
    Text("all bold", "bold"),
    Text.assemble(("CPU ", "bold"), ("42%", "bold red"), " tail"),
    Text("base and span", "dim", spans=[Span(4, 7, "red")]),
    Text("overlapping", spans=[Span(0, 6, "red"), Span(3, 9, "bold")]),
])
def test_screen_segments_are_richs(line: Text) -> None:
    """As rich draws the line inside the joined screen (where its style is a span)."""
    con = Console(width=40, force_terminal=True, color_system="truecolor")
    assert _ansi(widgets.segments(line, con)) == _ansi(Text("\n").join([line]).render(con))


def test_screen_draws_each_line_once_cut_to_the_width() -> None:
    con = Console(width=10, height=3, force_terminal=True, color_system="truecolor")
    scr = widgets.Screen([Text.assemble(("cpu", "bold"), " 42%"), Text("x" * 12),
                     Text("界" * 6)])
    assert scr.ansi(con, 10, 3) == ("\x1b[H\x1b[1mcpu\x1b[0m 42%\x1b[K\r\n" + "x" * 10
                                    + "\x1b[K\r\n" + "界" * 5 + "\x1b[K\x1b[J")
    assert scr.plain == "cpu 42%\n" + "x" * 12 + "\n" + "界" * 6
    mono = Console(width=10, height=3, force_terminal=True, color_system=None)
    assert scr.ansi(mono, 10, 2) == "\x1b[Hcpu 42%\x1b[K\r\n" + "x" * 10 + "\x1b[K\x1b[J"


def test_waiting_shows_the_subscriptions_reason_and_it_stays_beside_stale_data() -> None:
    m = new_model(host="testhost")
    m.subscribed = ()
    m.waiting = ("no agent is running, but 52 rezolus_ue events are still defined (an agent"
                 " that was killed, or stopped while a consumer held them): `sudo rezolus-ue"
                 " cleanup` removes them; then start it with `sudo rezolus-ue run`")
    out = text_of(m, 100, 30)
    assert "waiting: why, below" in out
    assert "waiting: no agent is running, but 52 rezolus_ue events" in out
    assert "cleanup` removes them" in out  # wrapped, not cut
