"""Applications on the bus: OpenTelemetry metrics from other processes, end to end.

Beside the agent as users run it (the installed CLI, the shipped default config, root with
its default privilege drop), a Python application exports every instrument kind through
``UserEventsMetricExporter`` (tests/fixtures/otel_app.py, values declared in its PLAN),
and a second one writes the Rust exporter's byte layout with plain ctypes
(tests/fixtures/rust_otlp_writer.py). Real ``perf record``, ``rezolus-ue tail``, the
exporter's /metrics and ``top`` must show exactly what they published, and with nobody
listening the application must neither serialize nor write.

Each test runs on both transports: the uprobe transport on this host (``uprobe`` tier,
``transport = "uprobe"`` forced, where the agent defines ``rezolus_ue:otlp_metrics`` for
applications) and user_events (``kernel`` tier, in the VM on kernels without them, where
each application registers ``user_events:otlp_metrics`` itself).

A consumer must be reading before an application records what it checks (delta points
written while nobody listens are gone, by design), so the application greets, setting a
gauge outside PLAN, until every consumer shows a greeting; ``perf record`` starts the
application itself, with its events already enabled.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_otlp_decode import counter, exponential, gauge, histogram
from uprobe.conftest import shipped_config
from waiting import running, scaled

from rezolus_ue.consume import otlp
from rezolus_ue.consume.prometheus import app_name, app_type, attribute_labels
from rezolus_ue.linux.uprobe_stub import Stub
from rezolus_ue.linux.user_events import UserEventsData
from rezolus_ue.otel import wire
from rezolus_ue.publisher import event_slot
from rezolus_ue.schema import AGENT, CPU_USAGE, GROUPS
from tracefs_tools import Tracefs, find_tracefs

from .conftest import private_instance, threads_of, wait_for
from .test_agent_e2e import AgentProcess
from .tmux import tmux_session

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
#: What scripts/setup.sh installs: the CLI users run.
CLI = Path(sys.executable).parent / "rezolus-ue"
EVENT = wire.EVENT
#: The application's export interval: its reader's own thread exports, as in production.
EXPORT_MS = 200
#: Exports made with nobody listening, in the test of that.
QUIET_EXPORTS = 10
#: A perf script handler writing each otlp_metrics record's fields as a JSON line (the
#: buffer as hex where perf hands it over as bytes: user_events' ``__rel_loc u8[]``).
PERF_HANDLER = """\
import json, os
_out = open(os.environ["OTLP_RECORDS"], "w")
def trace_unhandled(event_name, context, fields, *rest):
    rec = {"event": event_name}
    for k, v in fields.items():
        rec[k] = {"hex": bytes(v).hex()} if isinstance(v, (bytes, bytearray)) else v
    _out.write(json.dumps(rec, default=str) + "\\n")
def trace_end():
    _out.close()
"""


def _fixture(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fixture_{name}", FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


otel_app = _fixture("otel_app")
APP = FIXTURES / "otel_app.py"
WRITER = FIXTURES / "rust_otlp_writer.py"


# --- the bus, the agent, the processes ------------------------------------------------------


class AppBus:
    """``otlp_metrics`` on one transport, with the agent running."""

    def __init__(self, transport: str, tfs: Tracefs, agent: AgentProcess) -> None:
        self.transport = transport
        self.group = GROUPS[transport]
        self.tfs = tfs
        self.agent = agent
        self._stub = Stub() if transport == "uprobe" else None

    def listened(self) -> bool:
        """Return whether any consumer has otlp_metrics enabled, as the kernel says."""
        if self._stub is not None:  # the reference counter, in our mapping of the stub
            return self._stub.counter(event_slot(EVENT)).value != 0
        st = self.tfs.user_events_status().events.get(EVENT)
        return bool(st and st.consumers)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep the event in existence for a consumer started before any application: on
        user_events a registration of our own (the kernel deletes an event nobody
        registers); on the uprobe transport the agent's definition already is."""
        if self.transport != "user_events":
            yield
            return
        with UserEventsData(self.tfs.root) as data:
            data.register(wire.SCHEMA.name_args)
            yield


@pytest.fixture(scope="module", params=[
    pytest.param("uprobe", marks=pytest.mark.uprobe, id="uprobe"),
    pytest.param("user_events", marks=pytest.mark.kernel, id="user_events"),
])
def app_bus(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppBus]:
    """The installed agent with the shipped config (``transport = "uprobe"`` forced on the
    uprobe transport), run as root with its default privilege drop: one per transport for
    the module (each test stops the consumers and applications it starts)."""
    transport = request.param
    tmp_path = tmp_path_factory.mktemp(f"app-bus-{transport}")
    if not CLI.exists():
        pytest.skip(f"{CLI} is not installed (run scripts/setup.sh)")
    tfs = Tracefs(find_tracefs(mount=True))
    config = shipped_config(tmp_path) if transport == "uprobe" else \
        ROOT / "configs" / "default.toml"
    group = GROUPS[transport]
    a = AgentProcess("run", "--config", str(config), command=(str(CLI),))
    try:
        need = (CPU_USAGE.name, AGENT.name) + ((EVENT,) if transport == "uprobe" else ())

        def started() -> bool:
            return running(a.proc, a.output, "agent") and "publishing " in a.output() and all(
                tfs.event_exists(group, n) for n in need)

        wait_for(started, timeout=600, step=0.2, what=f"the agent to publish on {group}",
                 seen=lambda: (a.output(), threads_of(a.proc.pid)))
        yield AppBus(transport, tfs, a)
        a.stop()
        assert "Traceback" not in a.output(), a.output()
    finally:
        a.stop()
        a.log.close()


class Driven:
    """A fixture application driven on stdin: one command a line, one JSON answer each."""

    def __init__(self, name: str, argv: list[str], log: Path,
                 prefix: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = log
        self.proc = subprocess.Popen([*prefix, *argv], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(log, "w"),  # noqa: SIM115
                                     text=True, start_new_session=True,
                                     env={**os.environ, **(env or {})})
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready: dict[str, Any] = self._answer()["ready"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _answer(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=scaled(120))
        except queue.Empty:
            raise AssertionError(f"{self.name} did not answer; threads:"
                                 f" {threads_of(self.proc.pid)}; its log:\n{self.errors()}"
                                 ) from None
        if not line:
            self.proc.wait(timeout=scaled(60))
            raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.errors()}")
        return json.loads(line)

    def send(self, command: str) -> dict[str, Any]:
        """Run ``command``; return its answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def errors(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """Wait for the exit a ``quit`` began (kill it if it does not come); return its
        status."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=scaled(120))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit:\n{self.errors()}") from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Consumers:
    """``rezolus-ue tail otlp_metrics --format json`` and ``rezolus-ue exporter``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = _free_port()
        self.tail_out = tmp / "tail.jsonl"
        self.procs: dict[str, subprocess.Popen] = {}
        self._start("tail", ["tail", EVENT, "--format", "json"], self.tail_out)
        # --stale: an application silent for that many of its export intervals loses its
        # series; generous, so that a loaded machine's late export resets no total here.
        self._start("exporter", ["exporter", "--listen", f"127.0.0.1:{self.port}",
                                 "--stale", "1000"])

    def _start(self, name: str, args: list[str], stdout: Path | None = None) -> None:
        self.procs[name] = subprocess.Popen(
            [str(CLI), *args], cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True,
            stdout=open(stdout or os.devnull, "w"),  # noqa: SIM115 - closed with the process
            stderr=open(self.tmp / f"{name}.err", "w"))  # noqa: SIM115

    def errors(self, name: str) -> str:
        return (self.tmp / f"{name}.err").read_text(errors="replace")

    def alive(self) -> bool:
        return all(running(p, lambda n=n: self.errors(n), n) for n, p in self.procs.items())

    def points(self, pid: int) -> list[dict[str, Any]]:
        """Return the data points tail printed so far from process ``pid``."""
        out = []
        for line in self.tail_out.read_text().splitlines():
            with contextlib.suppress(ValueError):  # the line being written
                d = json.loads(line)
                if d.get("event") == EVENT and d.get("pid") == pid:
                    out.append(d)
        return out

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        """Return the exporter's /metrics as (name, labels, value) samples; [] until it
        listens."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=scaled(60)) as r:
                return parse_exposition(r.read().decode())
        except OSError:
            return []

    def stop(self) -> None:
        """Stop each as Ctrl-C does; each must exit cleanly."""
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
        for name, p in self.procs.items():
            try:
                code = p.wait(timeout=scaled(120))
            except subprocess.TimeoutExpired:
                p.kill()
                code = p.wait()
            assert code in (0, 130, -signal.SIGINT), f"{name} exited {code}: {self.errors(name)}"
            assert "Traceback" not in self.errors(name), self.errors(name)


_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Return the samples of a text exposition: (name, labels, value)."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")),
                        float(m.group(3))))
    return out


# --- what consumers show, added up --------------------------------------------------------


Key = tuple[str, tuple[tuple[str, Any], ...]]


def totals(points: Iterable[dict[str, Any]]) -> dict[Key, Any]:
    """Return each series' ``otel_app.Totals`` from data points (``DataPoint.to_json``
    form), as a reader that saw them all adds them up: delta points add, cumulative ones
    and gauges replace (the latest, by their time), distributions merge."""
    out: dict[Key, Any] = {}
    for p in sorted(points, key=lambda p: p["time_unix_nano"]):
        if p["metric"] == otel_app.GREETING:
            continue
        k = otel_app.key(p["metric"], p["attributes"])
        delta = p["temporality"] == "delta" and p["kind"] != "gauge"
        t = out[k] if delta and k in out else otel_app.Totals()
        out[k] = t
        h = p.get("histogram") or p.get("exponential")
        if h is None:
            t.value = (t.value or 0) + p["value"] if delta else p["value"]
            continue
        t.count += h["count"]
        t.sum += h["sum"]
        t.min = h["min"] if t.min is None else min(t.min, h["min"])
        t.max = h["max"] if t.max is None else max(t.max, h["max"])
        if "counts" in h:
            t.buckets = [a + b for a, b in zip(t.buckets or [0] * len(h["counts"]),
                                               h["counts"], strict=True)]
        else:
            t.zero_count += h["zero_count"]
    return out


@dataclass(frozen=True)
class Want:
    """One sample the exporter must serve."""

    name: str
    labels: dict[str, str]
    value: float


def exporter_wants(points: Iterable[dict[str, Any]], sums: dict[Key, Any], pid: int
                   ) -> tuple[list[Want], set[str]]:
    """Return (the samples the exporter must serve for ``sums``, named and typed as its
    prometheus module names OTLP points, and the drop reasons of the kinds it does not
    serve), from the points' metadata."""
    meta = {otel_app.key(p["metric"], p["attributes"]): p for p in points}
    wants, dropped = [], set()
    for k, t in sums.items():
        p = meta[k]
        ptype, reason = app_type(p["kind"], p["monotonic"], p["temporality"])
        if reason:
            dropped.add(reason)
            continue
        name = app_name(p["metric"], p["unit"], p["kind"], p["monotonic"])
        labels = {**attribute_labels(p["attributes"]), "pid": str(pid)}
        if ptype != "histogram":
            wants.append(Want(name, labels, t.value))
            continue
        wants += [Want(f"{name}_count", labels, t.count), Want(f"{name}_sum", labels, t.sum)]
        cum = 0
        bounds = p["histogram"]["bounds"]
        for le, c in zip([*bounds, float("inf")], t.buckets, strict=True):
            cum += c
            wants.append(Want(f"{name}_bucket", {**labels, "le": le}, cum))
    return wants, dropped


def unmet(wants: list[Want], samples: list[tuple[str, dict[str, str], float]]) -> list[str]:
    """Return what the exposition lacks of ``wants``: each a line saying what it has."""
    out = []
    for w in wants:
        got = [v for name, labels, v in samples if name == w.name and all(
            _label_eq(labels.get(k), v) for k, v in w.labels.items())]
        if got != [w.value]:
            out.append(f"{w.name}{w.labels}: want {w.value}, served {got}")
    return out


def _label_eq(text: str | None, want: object) -> bool:
    if text is None:
        return False
    if isinstance(want, float):  # a bucket bound: "+Inf", "100", "0.5"...
        return float(text) == want
    return text == want


def greet_until(greet: Callable[[int], None], seen: Callable[[], bool], what: str,
                show: Callable[[], object]) -> None:
    """Greet with 1, 2, ... until ``seen()``: every consumer reads the application."""
    n = iter(range(1, 1 << 30))

    def greeted() -> bool:
        greet(next(n))
        return seen()

    wait_for(greeted, timeout=300, step=0.5, what=what, seen=show)


# --- the tests ------------------------------------------------------------------------------


def test_every_instrument_reaches_perf_tail_and_the_exporter_exactly(
        app_bus: AppBus, tmp_path: Path) -> None:
    """Every instrument kind, through the SDK's periodic reader: perf decodes each record,
    tail's data points and the exporter's series add up to what the application recorded
    (a counter's total to what it added), and every point was written, none dropped."""
    perf = shutil.which("perf")
    assert perf, "perf is not installed: scripts/setup.sh installs it"
    assert not app_bus.listened(), "something already reads otlp_metrics: counts would be off"
    perf_data = tmp_path / "perf.data"
    with app_bus.held():
        # perf enables the event, then starts the application: it reads every record.
        app = Driven("otel_app", [sys.executable, str(APP), "--transport", app_bus.transport,
                                  "--interval-ms", str(EXPORT_MS)], tmp_path / "app.err",
                     prefix=(perf, "record", "-q", "-e", f"{app_bus.group}:{EVENT}", "-a",
                             "-o", str(perf_data), "--"))
    pid = app.ready["pid"]
    c = Consumers(tmp_path)
    try:
        def both_read() -> bool:
            c.alive()
            greeting = app_name(otel_app.GREETING, "", "gauge", False)
            return any(p["metric"] == otel_app.GREETING for p in c.points(pid)) and any(
                n == greeting and lab.get("pid") == str(pid) for n, lab, _v in c.samples())

        greet_until(lambda n: app.send(f"greet {n}"), both_read,
                    "tail and the exporter to read the application's greeting",
                    lambda: (c.errors("tail"), c.errors("exporter"), app.send("stats")))
        for _step in otel_app.PLAN:
            app.send("step")
        want = otel_app.expected()
        wait_for(lambda: c.alive() and totals(c.points(pid)) == want, timeout=120, step=0.5,
                 what="tail to show every series' totals",
                 seen=lambda: (totals(c.points(pid)), want))
        points = c.points(pid)
        wants, dropped = exporter_wants(points, want, pid)
        wait_for(lambda: c.alive() and not unmet(wants, c.samples()), timeout=120, step=0.5,
                 what="the exporter to serve every series' totals",
                 seen=lambda: unmet(wants, c.samples()))
        drops = {lab["reason"]: v for n, lab, v in c.samples()
                 if n == "rezolus_exporter_otlp_dropped_points_total"}
        assert all(drops.get(r, 0) > 0 for r in dropped), (dropped, drops)
        stats = app.send("quit")
    finally:
        try:
            c.stop()
        finally:
            code = app.stop()  # perf's: it exits once the application has
    assert code == 0, app.errors()

    # Every point was serialized and written, none dropped: perf listened all along.
    assert stats["dropped"] == stats["not_enabled"] == 0, stats
    assert stats["written"] == stats["serialized"] == stats["points"] > 0, stats
    _check_metadata(points)
    _check_perf(app_bus, perf, perf_data, tmp_path, pid, stats["written"], want)


def _check_metadata(points: list[dict[str, Any]]) -> None:
    """Each instrument's points carry its unit, description, scope and the resource, with
    the kind its instrument makes."""
    kinds = {"create_counter": ("sum", True), "create_observable_counter": ("sum", True),
             "create_up_down_counter": ("sum", False),
             "create_observable_up_down_counter": ("sum", False),
             "create_gauge": ("gauge", False), "create_observable_gauge": ("gauge", False)}
    for inst in otel_app.INSTRUMENTS:
        mine = [p for p in points if p["metric"] == inst.name]
        assert mine, f"tail showed no point of {inst.name}"
        kind = kinds.get(inst.create) or (
            ("exponential_histogram", False) if inst.adds == "exponential" else
            ("histogram", False))
        for p in mine:
            assert (p["kind"], p["monotonic"]) == kind, (inst, p)
            assert (p["unit"], p["description"], p["scope"]) == (
                inst.unit, inst.description, otel_app.SCOPE), p
            assert p["resource"]["service.name"] == otel_app.SERVICE, p


def _check_perf(app_bus: AppBus, perf: str, data: Path, tmp: Path, pid: int, written: int,
                want: dict[Key, Any]) -> None:
    """perf decoded every record: protocol 0 and the version in its own text, and a
    buffer opentelemetry-proto parses to one data point, adding up to ``want``."""
    script = subprocess.run([perf, "script", "-i", str(data)], capture_output=True,
                            text=True, timeout=scaled(300))
    assert script.returncode == 0, script.stderr[-2000:]
    lines = [ln for ln in script.stdout.splitlines() if f"{app_bus.group}:{EVENT}:" in ln]
    assert len(lines) == written, (len(lines), written, script.stdout[-2000:])
    for ln in lines:
        assert re.search(r"\bprotocol=0\b", ln) and re.search(r'\bversion="?v0\.19\.00\b', ln), ln

    handler = tmp / "otlp_records.py"
    handler.write_text(PERF_HANDLER)
    out = tmp / "otlp_records.jsonl"
    script = subprocess.run([perf, "script", "-i", str(data), "-s", str(handler)],
                            capture_output=True, text=True, timeout=scaled(300),
                            env={**os.environ, "OTLP_RECORDS": str(out)})
    assert script.returncode == 0, script.stderr[-2000:]
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    records = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(records) == written, (len(records), written)
    points = []
    for r in records:
        assert r["protocol"] == wire.PROTOCOL_OTLP, r
        # perf hands a char[8] without its NUL as bytes (user_events), a string otherwise.
        version = r["version"]
        version = bytes.fromhex(version["hex"]) if isinstance(version, dict) else str(
            version).encode()
        assert version.rstrip(b"\0") == wire.VERSION, r
        buf = r["buffer"]
        buffer = bytes.fromhex(buf["hex"]) if isinstance(buf, dict) else \
            wire.buffer_from_text(buf)
        request = ExportMetricsServiceRequest.FromString(buffer)
        (rm,) = request.resource_metrics
        (sm,) = rm.scope_metrics
        (metric,) = sm.metrics
        data = getattr(metric, metric.WhichOneof("data"))
        assert len(data.data_points) == 1, metric
        points += [p.to_json() for p in otlp.decode(buffer, pid)]
    assert totals(points) == want


def test_no_consumer_means_no_write_and_no_serialization(app_bus: AppBus, tmp_path: Path) -> None:
    """With nobody listening, exports read the enable word and stop: nothing serialized,
    nothing handed to the kernel. strace counts the syscalls: on user_events a record is a
    writev to ``user_events_data``; on the uprobe transport a record is a call of the
    stub's function, no syscall at all, which the exporter's counters count instead.
    Then a consumer (an ftrace instance) enables the event, and the same run writes."""
    strace = shutil.which("strace")
    assert strace, "strace is not installed: scripts/setup.sh --dev installs it"
    assert not app_bus.listened(), "something already reads otlp_metrics"
    trace = tmp_path / "strace.txt"
    prefix = (strace, "-f", "-qq", "-y", "-e", "trace=write,writev", "-o", str(trace))
    # Exports on `flush` only: each runs in the thread that answers, so every answer's
    # counters are those of whole exports.
    # No bytecode caches: their writes would be the interpreter's, not the exporter's.
    app = Driven("otel_app", [sys.executable, str(APP), "--transport", app_bus.transport],
                 tmp_path / "app.err", prefix=prefix, env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        for _step in otel_app.PLAN:
            app.send("step")
            app.send("flush")
        for _ in range(QUIET_EXPORTS - len(otel_app.PLAN)):
            quiet = app.send("flush")
        assert not app_bus.listened()
        assert quiet["exports"] == QUIET_EXPORTS, quiet
        assert quiet["not_enabled"] == quiet["points"] > 0, quiet
        assert quiet["written"] == quiet["serialized"] == quiet["dropped"] == 0, quiet
        with private_instance(app_bus.tfs) as inst:
            app_bus.tfs.enable(app_bus.group, EVENT, instance=inst)
            wait_for(lambda: app.send("stats")["enabled"], timeout=60, step=0.05,
                     what="the application to see ftrace listening")
            heard = app.send("flush")
            app_bus.tfs.disable(app_bus.group, EVENT, instance=inst)
        end = app.send("quit")
    finally:
        code = app.stop()
    assert code == 0, app.errors()
    # Observable instruments report at every export: the one export heard writes them.
    assert heard["serialized"] == heard["written"] > 0, heard
    assert heard["not_enabled"] == quiet["not_enabled"], (quiet, heard)
    writes = _writes(trace.read_text())
    to_bus = [w for w in writes if "user_events_data" in w]
    others = [w for w in writes if "user_events_data" not in w and not re.search(
        r"^\d+\s+write\(1<pipe:", w)]  # its answers on stdout
    assert not others, others[:20]
    # Each record is one writev on user_events, none on the uprobe transport: all of
    # them came after ftrace enabled the event.
    assert len(to_bus) == (end["written"] if app_bus.transport == "user_events" else 0), (
        len(to_bus), end)


def _writes(strace_out: str) -> list[str]:
    """Return strace's write and writev lines (``-y``: each fd with its path), each
    ``PID  call(``: strace pads the pid with spaces."""
    return [ln for ln in strace_out.splitlines() if re.match(r"^\d+\s+(write|writev)\(", ln)]


def test_a_rust_layout_writer_is_read_by_tail_the_exporter_and_top_as_ours(
        app_bus: AppBus, tmp_path: Path) -> None:
    """A process writing the Rust exporter's bytes by ctypes (its own registration on
    user_events; the stub's slot on the uprobe transport) is another application like
    ours: tail prints each point as rezolus_ue's decoder decodes its buffer in process,
    and the exporter and top show its series. top reads what tail reads (one decoder,
    whatever the transport), so it is watched on this host only: in the kernel tier's
    emulated CPUs it costs a minute of the tier's budget."""
    writer = Driven("rust_otlp_writer", [sys.executable, str(WRITER), "--transport",
                                         app_bus.transport, "--tracefs", str(app_bus.tfs.root)],
                    tmp_path / "writer.err")
    pid = writer.ready["pid"]
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    greeting = gauge(0.75)
    mark = otlp.decode(greeting, pid, comm)[0]
    c = Consumers(tmp_path)
    try:
        watch_top = app_bus.transport == "uprobe"
        with (tmux_session(f"cd {ROOT} && {CLI} top", 200, 60) if watch_top
              else contextlib.nullcontext()) as top:
            def shown(screen: str, p: otlp.DataPoint) -> bool:
                return any(p.metric in ln and str(pid) in ln for ln in screen.splitlines())

            def all_read() -> bool:
                c.alive()
                name = app_name(mark.metric, mark.unit, mark.kind, mark.monotonic)
                return bool(c.points(pid)) and any(
                    n == name and lab.get("pid") == str(pid) for n, lab, _v in c.samples()
                ) and (top is None or shown(top.screen(), mark))

            greet_until(lambda _n: writer.send(f"write {greeting.hex()}"), all_read,
                        "tail, the exporter and top to read the writer",
                        lambda: (c.errors("tail"), c.errors("exporter"),
                                 top and top.screen()))
            buffers = [counter(), histogram(), exponential()]
            for buf in buffers:
                assert writer.send(f"write {buf.hex()}")["enabled"]
            ours = [p.to_json() for buf in buffers for p in otlp.decode(buf, pid, comm)]

            def tail_points() -> list[dict[str, Any]]:
                return [{k: v for k, v in p.items() if k not in (
                    "event", "time_ns", "common_cpu", "common_pid", "time")}
                    for p in c.points(pid) if p["metric"] != mark.metric]

            wait_for(lambda: c.alive() and tail_points() == ours, timeout=120, step=0.5,
                     what="tail to print the writer's points as decoded in process",
                     seen=lambda: (tail_points(), ours))
            wants, dropped = exporter_wants(ours, totals(ours), pid)
            wait_for(lambda: c.alive() and not unmet(wants, c.samples()), timeout=120,
                     step=0.5, what="the exporter to serve the writer's series",
                     seen=lambda: unmet(wants, c.samples()))
            served = [p for buf in buffers for p in otlp.decode(buf, pid, comm)
                      if not app_type(p.kind, p.monotonic, p.temporality)[1]]

            # top drops a publisher silent for three of its intervals: greet on while
            # waiting, which changes none of the checked series.
            def top_shows() -> bool:
                writer.send(f"write {greeting.hex()}")
                screen = top.screen()
                return all(shown(screen, p) for p in served)

            if top is not None:
                wait_for(top_shows, timeout=120, step=0.5,
                         what="top to show the writer's series", seen=top.screen)
            writer.send("quit")
    finally:
        try:
            c.stop()
        finally:
            writer.stop()
    assert dropped <= {"exponential_histogram"}, dropped
