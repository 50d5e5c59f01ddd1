"""``rezolus-ue view``: its page declarations and data model in-process, its server's
refusals, and its pages in a real headless chromium over a recording made by the installed
agent (``live`` tier), each chart's points checked against that recording.

Screenshots of every page land in tests/.output/view/ (gitignored) for people to look at.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from waiting import running, wait_for, wait_output

from rezolus_ue.consume.intervals import EVENT, split
from rezolus_ue.consume.recording import read_records
from rezolus_ue.consume.records import Histogram, Record
from rezolus_ue.consume.view import parse_range
from rezolus_ue.consume.view.model import Dataset, Span, series_name
from rezolus_ue.consume.view.pages import BANDS, PAGES, Chart, page
from rezolus_ue.consume.view.server import Server, View
from rezolus_ue.errors import ConfigError
from rezolus_ue.metrics import catalog, h2
from rezolus_ue.metrics.family import Kind

ROOT = Path(__file__).resolve().parent.parent
#: Where the browser tests leave their screenshots.
SHOTS = ROOT / "tests" / ".output" / "view"
REQUIRE = os.environ.get("REZOLUS_UE_REQUIRE_KERNEL_TESTS") == "1"


# -- the declarations ------------------------------------------------------------------

def test_every_sampler_is_on_exactly_one_page() -> None:
    on_pages = [s for p in PAGES for s in p.samplers]
    assert len(on_pages) == len(set(on_pages))
    assert set(on_pages) == {f.sampler for f in catalog.FAMILIES}


def test_charts_are_derived_from_the_families() -> None:
    for p in PAGES:
        ids = [c.id for c in p.charts]
        assert len(ids) == len(set(ids)), p.name
        for c in p.charts:
            assert {m.kind for m in c.metrics} == {c.kind}
            assert c.bands == (c.kind is Kind.HISTOGRAM)
    cpu = {c.id: c for c in page("cpu").charts}  # type: ignore[union-attr]
    assert not cpu["rezolus_cpu_usage.user_ns"].by_label  # summed over CPUs
    assert cpu["rezolus_cpu_usage.user_ns"].unit == "ns/s"
    disks = {c.id: c for c in page("disks").charts}  # type: ignore[union-attr]
    assert disks["rezolus_blockio_device.reads"].by_label


@pytest.mark.parametrize(("text", "want"), [
    ("10s..20s", (10.0, 20.0)), ("..30s", (None, 30.0)), ("-5m..", (-300.0, None)),
    ("0..1m", (0.0, 60.0)), ("60m..65m", (3600.0, 3900.0)), ("-2m..-1m", (-120.0, -60.0)),
])
def test_parse_range(text: str, want: tuple) -> None:
    assert parse_range(text) == want


@pytest.mark.parametrize("text", ["10s", "20s..10s", "x..1s", "-1m..-2m"])
def test_parse_range_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="range"):
        parse_range(text)


# -- the model, on records made here -----------------------------------------------------

def _tick(t: int, seq: int) -> Record:
    return Record(EVENT, t, 0, 1, {"seq": seq, "interval_ns": 10**9, "records": 0})


def _records() -> list[Record]:
    """Three intervals of two CPUs' usage, memory, a disk and a histogram."""
    out = []
    for i in range(3):
        t = (i + 1) * 10**9
        for cpu in (0, 1):
            out.append(Record("rezolus_cpu_usage", t + cpu, cpu, 1, {
                "cpu": cpu, "user_ns": (cpu + 1) * i * 10**8, "busy_ppm": 1000 * (cpu + i)}))
        out.append(Record("rezolus_memory", t + 5, 0, 1, {"free_bytes": 100 + i}))
        out.append(Record("rezolus_blockio_device", t + 6, 0, 1,
                          {"device": "vda", "reads": 10 * i * i}))
        counts = h2.new_counts()
        counts[h2.bucket_index(1000)] = 9
        counts[h2.bucket_index(10**6)] = i + 1
        out.append(Record("rezolus_syscall_latency", t + 7, 0, 1,
                          {"op": "read", "buckets": h2.encode_sparse(counts)}))
        out.append(_tick(t + 9, i))
    return out


def _cell(data: dict, chart: str, series: str) -> list:
    c = next(c for c in data["charts"] if c["id"] == chart)
    return c["data"][c["series"].index(series)]


def test_dataset_values_per_interval() -> None:
    ds = Dataset("t")
    assert ds.feed(_records()) == 3
    assert ds.times == [10**9 + 9, 2 * 10**9 + 9, 3 * 10**9 + 9]
    cpu = ds.page_data(page("cpu"))  # type: ignore[arg-type]
    # Counters: the sum over CPUs of each CPU's rate per second; none for the first.
    user = _cell(cpu, "rezolus_cpu_usage.user_ns", "user_ns")
    assert user[0] is None
    assert user[1] == pytest.approx(1e8 + 2e8)
    assert _cell(cpu, "rezolus_cpu_usage.busy_ppm", "busy_ppm") == [1000.0, 3000.0, 5000.0]
    mem = ds.page_data(page("memory"))  # type: ignore[arg-type]
    assert _cell(mem, "rezolus_memory.total_bytes", "free_bytes") == [100.0, 101.0, 102.0]
    disks = ds.page_data(page("disks"))  # type: ignore[arg-type]
    assert _cell(disks, "rezolus_blockio_device.reads", "vda")[1:] == pytest.approx([10, 30])
    sched = ds.page_data(page("scheduler"))  # type: ignore[arg-type]
    p50 = _cell(sched, "rezolus_syscall_latency.latency_ns", "p50")
    top = _cell(sched, "rezolus_syscall_latency.latency_ns", "max")
    assert p50 == [float(h2.bucket_bounds(h2.bucket_index(1000))[1])] * 3
    assert top == [float(h2.bucket_bounds(h2.bucket_index(10**6))[1])] * 3


def test_dataset_range_and_since() -> None:
    ds = Dataset("t")
    ds.feed(_records())
    data = ds.page_data(page("memory"), Span(1.0, None))  # type: ignore[arg-type]
    assert data["t_ns"] == ds.times[1:]
    data = ds.page_data(page("memory"), Span(-0.5, None))  # type: ignore[arg-type]
    assert data["t_ns"] == ds.times[2:]
    data = ds.page_data(page("memory"), since_ns=ds.times[0])  # type: ignore[arg-type]
    assert data["t_ns"] == ds.times[1:]


def test_live_dataset_keeps_its_window() -> None:
    ds = Dataset("t", keep_ns=10 * 10**9)
    for i in range(40):
        ds.feed([Record("rezolus_memory", i * 10**9, 0, 1, {"free_bytes": i}),
                 _tick(i * 10**9 + 1, i)])
    assert ds.times[-1] - ds.times[0] <= 11 * 10**9
    col = ds.series["rezolus_memory.total_bytes"]["free_bytes"]
    assert len(col) == len(ds.times) and col[-1] == 39.0


# -- the server's refusals ---------------------------------------------------------------

def test_a_taken_port_is_one_clear_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError) as e:
            Server(("127.0.0.1", port), View(Dataset("t")))
    msg = str(e.value)
    assert "\n" not in msg and f"port {port}" in msg and "--port" in msg


def test_read_only_and_local_by_default() -> None:
    from rezolus_ue.cli import build_parser
    from rezolus_ue.consume.view import DEFAULT_BIND

    args = build_parser().parse_args(["view"])
    assert args.bind == DEFAULT_BIND == "127.0.0.1"
    server = Server(("127.0.0.1", 0), View(Dataset("t")))
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        req = urllib.request.Request(url + "/api/meta", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/static/..%2fserver.py", timeout=10)
        assert e.value.code == 404
        with urllib.request.urlopen(url + "/static/uPlot.iife.min.js", timeout=10) as r:
            assert b"uPlot" in r.read(4096)
    finally:
        server.shutdown()
        server.server_close()


def test_vendored_assets_ship_with_their_licence() -> None:
    static = ROOT / "rezolus_ue" / "consume" / "view" / "static"
    version = (static / "VERSION").read_text().split()
    assert version[0] == "uplot" and re.fullmatch(r"1\.6\.\d+", version[1])
    assert f"uPlot {version[1]}" in (static / "README.md").read_text()
    assert "MIT" in (static / "uPlot.LICENSE").read_text()
    assert "consume/view/static/*" in (ROOT / "pyproject.toml").read_text()
    html = (static / "view.js").read_text()
    assert "http://" not in html and "https://" not in html  # nothing from the network


def test_cli_refuses_compare_without_a_recording() -> None:
    from rezolus_ue.consume.view import run

    args = argparse.Namespace(source=None, compare=Path("x"), compare_range=None, range=None)
    with pytest.raises(ConfigError, match="--compare needs --from"):
        run(args)


# -- in a browser, over the installed agent's recording ----------------------------------

def _cli() -> str:
    cli = Path(sys.executable).parent / "rezolus-ue"
    if not cli.exists():
        pytest.skip(f"{cli} is not installed (run scripts/setup.sh)")
    return str(cli)


def _need(what: str) -> None:
    """Skip for want of ``what``, or under CI fail: a browser test must not go green by
    not running."""
    if REQUIRE:
        pytest.fail(f"{what} (REZOLUS_UE_REQUIRE_KERNEL_TESTS=1: scripts/setup.sh --dev"
                    " installs it)")
    pytest.skip(f"{what} (scripts/setup.sh --dev installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from browser import Browser, find_chromium

    binary = find_chromium()
    if binary is None:
        _need("chromium is not installed")
    try:
        import websocket  # noqa: F401
    except ImportError:
        _need("websocket-client is not installed")
    with Browser(binary) as b:  # type: ignore[arg-type]
        yield b


class Proc:
    """A subprocess of the installed CLI, its output in a file."""

    def __init__(self, tmp: Path, name: str, *args: str) -> None:
        self.name = name
        self.out = tmp / f"{name}.log"
        with open(self.out, "wb") as f:
            self.proc = subprocess.Popen([_cli(), *args], stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def url(self) -> str:
        text = wait_output(self.proc, self.output, r"http://\S+/", name=self.name,
                           timeout=120)
        return re.search(r"http://\S+/", text).group(0)  # type: ignore[union-attr]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """The installed agent, publishing every 200 ms (procfs samplers only)."""
    from kernel.conftest import Bus
    from kernel.test_agent_e2e import without_bpf

    from rezolus_ue.schema import AGENT, CPU_USAGE
    from tracefs_tools import Tracefs, find_tracefs

    tmp = tmp_path_factory.mktemp("view")
    a = Proc(tmp, "agent", "run", "--config", str(without_bpf(tmp)), "--interval", "200ms")
    bus = Bus(Tracefs(find_tracefs(mount=True)))
    a.bus = bus  # type: ignore[attr-defined]
    try:
        wait_for(lambda: running(a.proc, a.output, "agent")
                 and {CPU_USAGE.name, AGENT.name} <= bus.registered(), timeout=240, step=0.2,
                 log=a.output)
        yield a
    finally:
        assert a.stop() == 0, a.output()


@pytest.fixture(scope="module")
def recording(agent: Proc, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few seconds of the agent's cheap events, recorded by the installed CLI."""
    tmp = tmp_path_factory.mktemp("rec")
    path = tmp / "run.rzr"
    rec = Proc(tmp, "record", "record", str(path), "--duration", "3s")
    assert rec.proc.wait(timeout=300) == 0, rec.output()
    return path


@pytest.fixture(scope="module")
def served(recording: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rezolus-ue view --from`` the recording, with its second half as the compare."""
    tmp = tmp_path_factory.mktemp("served")
    v = Proc(tmp, "view", "view", "--from", str(recording), "--port", "0")
    try:
        yield v.url()
    finally:
        assert v.stop() == 0, v.output()
        assert "Traceback" not in v.output()


class Oracle:
    """Each chart's expected values, from the recording read with the project's reader:
    gauges summed over CPUs, counters' rates from consecutive values, histograms'
    percentiles of their merged buckets. Keyed by interval end (ns)."""

    def __init__(self, path: Path) -> None:
        self.intervals = {iv.end_ns: iv for iv in split(read_records(path))}
        self.ends = sorted(self.intervals)

    def _before(self, end: int, event: str, ident: object) -> Record | None:
        """Return the series' latest record in an earlier interval."""
        for e in reversed(self.ends[:self.ends.index(end)]):
            prev = self.intervals[e].records
            r = next((r for r in reversed(prev) if r.event == event and _ident(r) == ident),
                     None)
            if r is not None:
                return r
        return None

    def value(self, chart: Chart, series: str, end: int) -> float | None:
        f = chart.family
        recs = [r for r in self.intervals[end].records if r.event == f.event]
        if chart.bands:
            hs = [h for r in recs if (h := r.histogram()) is not None]
            if not hs or not sum(h.sum() for h in hs):
                return None
            total = Histogram(np.sum([h.counts for h in hs], axis=0))
            q = dict(BANDS)[series]
            return float(total.percentile(q * 100))
        metric = chart.metrics[0].name if chart.by_label else series
        if chart.by_label:
            recs = [r for r in recs if series_name(f, r.fields) == series]
        kind = next(m.kind for m in chart.metrics if m.name == metric)
        out = None
        for r in recs:
            if kind is Kind.GAUGE:
                v: float | None = float(r[metric])  # type: ignore[arg-type]
            else:
                prev = self._before(end, f.event, _ident(r))
                v0 = None if prev is None else prev[metric]
                v = None if prev is None or r[metric] < v0 or r.time_ns <= prev.time_ns \
                    else (r[metric] - v0) * 1e9 / (r.time_ns - prev.time_ns)  # type: ignore[operator]
            if v is not None:
                out = v if out is None else out + v
        return out


def _ident(r: Record) -> object:
    from rezolus_ue.schema import by_name

    label = next((f.name for f in by_name()[r.event].fields if f.unit == "label"), None)
    return r.fields.get(label) if label else None


def _drawn(p: object) -> list[dict]:
    return p.evaluate("window.rezolusView.charts")  # type: ignore[attr-defined]


def _check_page(p: object, oracle: Oracle, name: str, ds: str = "a") -> int:
    """Check every chart's points at three times against the oracle; return how many."""
    charts = {c.id: c for c in page(name).charts}  # type: ignore[union-attr]
    checked = 0
    for drawn in _drawn(p):
        if drawn["ds"] != ds:
            continue
        chart = charts[drawn["id"]]
        t_ns = drawn["t_ns"]
        assert len(t_ns) >= 3, drawn["id"]
        for i in (1, len(t_ns) // 2, len(t_ns) - 1):
            for series, values in zip(drawn["series"], drawn["data"], strict=True):
                want = oracle.value(chart, series, t_ns[i])
                got = values[i]
                assert (got is None) == (want is None), (drawn["id"], series, i, got, want)
                if want is not None:
                    assert got == pytest.approx(want, rel=1e-9), (drawn["id"], series, i)
                checked += 1
    return checked


def _load(p: object, url: str) -> None:
    p.goto(url)  # type: ignore[attr-defined]
    wait_for(lambda: p.evaluate("window.rezolusView.ready"), timeout=60,  # type: ignore[attr-defined]
             what=f"{url} to draw its charts",
             seen=lambda: p.evaluate("window.rezolusView.errors"))  # type: ignore[attr-defined]


@pytest.mark.live
def test_pages_show_the_recording(browser: object, served: str, recording: Path) -> None:
    oracle = Oracle(recording)
    p = browser.page()  # type: ignore[attr-defined]
    meta_pages = []
    for pg in PAGES:
        _load(p, f"{served}page/{pg.name}")
        meta = p.evaluate("fetch('/api/meta').then(r => r.json())")
        present = next(m["present"] for m in meta["pages"] if m["name"] == pg.name)
        meta_pages.append((pg.name, present))
        p.screenshot(SHOTS / f"{pg.name}.png")
        p.pump()
        assert p.errors == [], (pg.name, p.errors)
        drawn = _drawn(p)
        assert bool(drawn) == present, pg.name
        if present:
            assert _check_page(p, oracle, pg.name) > 0
    # What the agent publishes here without BPF: these pages have data.
    assert {n for n, present in meta_pages if present} >= {
        "cpu", "memory", "scheduler", "network", "processes", "agent"}


@pytest.mark.live
def test_range_selector_changes_what_is_drawn(browser: object, served: str,
                                              recording: Path) -> None:
    oracle = Oracle(recording)
    p = browser.page()  # type: ignore[attr-defined]
    _load(p, f"{served}page/memory")
    before = _drawn(p)[0]["t_ns"]
    first, last = before[0], before[-1]
    start = (first + (last - first) // 3) / 1e9 - first / 1e9
    p.evaluate(f"document.getElementById('start').value = '{start:.3f}';"
               "document.getElementById('range').requestSubmit()")
    wait_for(lambda: p.evaluate("window.rezolusView.loads") == 2, timeout=30)
    after = _drawn(p)[0]["t_ns"]
    assert 3 <= len(after) < len(before)
    assert after == [t for t in before if t >= first + int(start * 1e9)]
    assert "start=" in p.evaluate("location.search")
    _check_page(p, oracle, "memory")
    p.screenshot(SHOTS / "memory-range.png")
    p.pump()
    assert p.errors == []


@pytest.mark.live
def test_compare_two_ranges_side_by_side(browser: object, recording: Path,
                                         tmp_path: Path) -> None:
    oracle = Oracle(recording)
    v = Proc(tmp_path, "view", "view", "--from", str(recording), "--compare",
             str(recording), "--range", "..1s", "--compare-range=-1s..", "--port", "0")
    try:
        url = v.url()
        p = browser.page()  # type: ignore[attr-defined]
        _load(p, f"{url}page/cpu")
        drawn = _drawn(p)
        a = {c["id"]: c["t_ns"] for c in drawn if c["ds"] == "a"}
        b = {c["id"]: c["t_ns"] for c in drawn if c["ds"] == "b"}
        assert a.keys() == b.keys() and a
        some = next(iter(a))
        assert max(a[some]) < min(b[some])  # the start beside the end
        assert p.evaluate("document.querySelectorAll('.row .cell').length") == 2 * len(a)
        _check_page(p, oracle, "cpu", "a")
        _check_page(p, oracle, "cpu", "b")
        p.screenshot(SHOTS / "cpu-compare.png")
        p.pump()
        assert p.errors == []
    finally:
        assert v.stop() == 0, v.output()


@pytest.mark.live
def test_live_follows_only_while_a_page_is_open(browser: object, agent: Proc,
                                                tmp_path: Path) -> None:
    from rezolus_ue.schema import CPU_USAGE

    bus = agent.bus  # type: ignore[attr-defined]
    v = Proc(tmp_path, "view-live", "view", "--port", "0")
    try:
        url = v.url()
        # Nobody has a page open: nothing is subscribed.
        assert not bus.consumers(CPU_USAGE.name)
        p = browser.page()  # type: ignore[attr-defined]
        _load(p, f"{url}page/cpu")
        wait_for(lambda: bus.consumers(CPU_USAGE.name), timeout=60)

        def points() -> int:
            drawn = _drawn(p)
            return min((len(c["t_ns"]) for c in drawn), default=0)

        wait_for(lambda: points() >= 5, timeout=60, seen=points)
        n = points()
        wait_for(lambda: points() > n, timeout=60, seen=points)  # it keeps following
        p.screenshot(SHOTS / "cpu-live.png")
        p.pump()
        assert p.errors == []
        p.goto("about:blank")  # the tab leaves: its event stream closes
        wait_for(lambda: not bus.consumers(CPU_USAGE.name), timeout=60)
    finally:
        assert v.stop() == 0, v.output()
        assert "Traceback" not in v.output()
