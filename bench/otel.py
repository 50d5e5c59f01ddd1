"""Cost of an application's OpenTelemetry metrics over the bus, per data point, beside the
SDK's own ways of handling the same points.

    sudo .venv/bin/python bench/otel.py [--series 100] [-n 20] [--rounds 9]

One process, one set of instruments (a counter and a histogram, ``--series`` attribute
sets each, delta temporality as ``UserEventsMetricExporter`` prefers), recorded the same
way for every configuration, each its own MeterProvider:

* aggregation alone: ``counter.add`` / ``histogram.record``, no collection;
* ``InMemoryMetricReader``: the measurements, then the SDK's collection of the points;
* ``UserEventsMetricExporter`` through ``PeriodicExportingMetricReader``, with no consumer
  (the disabled check) and with one (a private ftrace instance: every point serialized and
  written, on the transport this kernel gives applications);
* ``OTLPMetricExporter`` (opentelemetry-exporter-otlp-proto-http) to an HTTP sink on
  127.0.0.1 in a process of its own, the same reader around it.

Then ``export()`` alone, of one collected MetricsData, for each exporter. The figures are
ns per data point (a cycle's time over the points it exports) and their ratios, each
configuration taking turns with the others in every round, in one run. Needs root (the
consumer); on the uprobe transport the event is defined here unless an agent has.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from publish import per_op_ns  # noqa: E402  (bench/ is sys.path[0] when run)

from rezolus_ue.otel import wire  # noqa: E402
from rezolus_ue.schema import GROUPS  # noqa: E402
from tracefs_tools import Tracefs, find_tracefs  # noqa: E402

#: Histogram values recorded, one per series in turn: spread over the default buckets.
VALUES = (0.3, 4.0, 12.0, 60.0, 240.0, 900.0, 3000.0)


class Pipeline:
    """One MeterProvider with one reader, and the benchmark's instruments on it."""

    def __init__(self, reader: Any, collect: Callable[[], object], series: int) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource

        self.reader = reader
        #: Collect (and export, for an exporting reader) now.
        self.collect = collect
        self.provider = MeterProvider(metric_readers=[reader], resource=Resource.create(
            {"service.name": "bench", "service.instance.id": "9f1c2b7e-4a3d-4c11"}))
        meter = self.provider.get_meter("bench")
        self.counter = meter.create_counter("bench.requests", unit="{request}")
        self.histogram = meter.create_histogram("bench.latency", unit="ms")
        self.attrs = [{"partition": f"p{i:04d}", "operation": "GetBlobProperties",
                       "status_code": "200"} for i in range(series)]
        #: Data points one cycle exports: one per series of each instrument.
        self.points = 2 * series

    def record(self) -> None:
        """Record one measurement per series of each instrument."""
        add, rec = self.counter.add, self.histogram.record
        for i, a in enumerate(self.attrs):
            add(1, a)
            rec(VALUES[i % len(VALUES)], a)

    def cycles(self, k: int) -> None:
        """Run k cycles: record, then collect (and export)."""
        for _ in range(k):
            self.record()
            self.collect()

    def records(self, k: int) -> None:
        """Record k times, collecting nothing: the SDK's aggregation alone."""
        for _ in range(k):
            self.record()

    def close(self) -> None:
        self.provider.shutdown()


def temporality() -> dict[type, Any]:
    """Return the temporality every pipeline asks for: the user_events exporter's."""
    from rezolus_ue.otel.exporter import TEMPORALITY

    return dict(TEMPORALITY)


class _Sink(BaseHTTPRequestHandler):
    """Accept an OTLP/HTTP export and answer 200 with an empty response, keeping the
    connection (HTTP/1.1), as a collector does."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_sink() -> None:
    """Serve the sink on a free port of 127.0.0.1 until killed; print the port first."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    print(server.server_address[1], flush=True)
    server.serve_forever()


@contextlib.contextmanager
def sink() -> Iterator[str]:
    """Yield the URL of an OTLP/HTTP sink running in a process of its own (its CPU is not
    this process's, as a collector's would not be)."""
    proc = subprocess.Popen([sys.executable, __file__, "--sink"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1/metrics"
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def event_defined(tfs: Tracefs, transport: str) -> Iterator[None]:
    """Make sure ``otlp_metrics`` exists for the exporter: on the uprobe transport define it
    as the agent does, unless an agent has (its definitions are left alone)."""
    if transport != "uprobe" or tfs.event_exists(GROUPS["uprobe"], wire.EVENT):
        yield
        return
    from rezolus_ue.publisher import open_publisher

    pub = open_publisher(tfs.root, "uprobe")
    try:
        pub.register([wire.SCHEMA])
        yield
    finally:
        pub.close()


@contextlib.contextmanager
def consumer(tfs: Tracefs, group: str) -> Iterator[None]:
    """Enable ``otlp_metrics`` in a private ftrace instance for the duration."""
    inst = f"rezolus_bench_otel_{os.getpid()}"
    tfs.create_instance(inst)
    try:
        tfs.enable(group, wire.EVENT, instance=inst)
        try:
            yield
        finally:
            tfs.disable(group, wire.EVENT, instance=inst)
    finally:
        tfs.remove_instance(inst)


#: The configurations timed, in the order printed.
CYCLES = ("InMemoryMetricReader", "UserEventsMetricExporter", "OTLP/HTTP")
ALONE = ("export() alone: UserEventsMetricExporter", "export() alone: OTLP/HTTP")
AGGREGATION = "aggregation alone (record)"


def measure(series: int, n: int, rounds: int) -> dict[str, Any]:
    """Return ns per data point of each configuration and of each export() alone, with no
    consumer and with one, and the exporter's counters."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import (
        InMemoryMetricReader,
        PeriodicExportingMetricReader,
    )

    from rezolus_ue.otel import UserEventsMetricExporter

    tfs = Tracefs(find_tracefs(mount=True))
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(sink())
        ours = UserEventsMetricExporter()
        group = GROUPS[ours.transport]
        stack.enter_context(event_defined(tfs, ours.transport))
        if ours.enabled:
            raise SystemExit(f"otel: skipped: a consumer already reads {group}:{wire.EVENT}")
        otlp = OTLPMetricExporter(endpoint=url, preferred_temporality=temporality())
        memory = InMemoryMetricReader(preferred_temporality=temporality())
        readers = {name: PeriodicExportingMetricReader(e, export_interval_millis=math.inf)
                   for name, e in zip(CYCLES[1:], (ours, otlp), strict=True)}
        pipes = {CYCLES[0]: Pipeline(memory, memory.get_metrics_data, series),
                 **{name: Pipeline(r, r.force_flush, series) for name, r in readers.items()}}
        for p in pipes.values():
            stack.callback(p.close)
        ref = pipes[CYCLES[0]]
        ref.record()
        data = ref.reader.get_metrics_data()  # one MetricsData, for export() alone

        def exports(exporter: Any) -> Callable[[int], None]:
            def run(k: int) -> None:
                for _ in range(k):
                    exporter.export(data)
            return run

        def checks(k: int) -> None:
            for _ in range(k):
                if ours.enabled:
                    raise AssertionError("a consumer is listening")

        fns = {**{name: p.cycles for name, p in pipes.items()},
               **dict(zip(ALONE, (exports(ours), exports(otlp)), strict=True))}
        check = per_op_ns({"check": checks}, n * 1000, rounds)["check"]
        quiet = per_op_ns({AGGREGATION: ref.records, **fns}, n, rounds)
        with consumer(tfs, group):
            written = ours.written
            heard = per_op_ns(fns, n, rounds)
            written = ours.written - written
    points = ref.points
    return {"transport": ours.transport, "points": points, "check": check,
            "quiet": {k: v / points for k, v in quiet.items()},
            "heard": {k: v / points for k, v in heard.items()},
            "written": written, "dropped": ours.dropped}


def report(res: dict[str, Any]) -> None:
    """Print the figures and their ratios."""
    quiet, heard = res["quiet"], res["heard"]
    print(f"transport: {res['transport']} ({GROUPS[res['transport']]}:{wire.EVENT});"
          f" {res['points']} data points per export (a counter and a histogram)")
    print(f"disabled check (exporter.enabled + branch): {res['check']:.1f} ns")
    print(f"{'ns per data point':45s} {'no consumer':>12s} {'consumer':>12s}")
    print(f"{AGGREGATION:45s} {quiet[AGGREGATION]:12.1f} {'-':>12s}")
    for k in (*CYCLES, *ALONE):
        print(f"{k:45s} {quiet[k]:12.1f} {heard[k]:12.1f}")
    print(f"records written with the consumer: {res['written']}, dropped: {res['dropped']}")
    print("ratios (same run):")
    ours, otlp, memory = CYCLES[1], CYCLES[2], CYCLES[0]
    for label, a, b in (
        ("export() alone, enabled: ours / OTLP-HTTP", heard[ALONE[0]], heard[ALONE[1]]),
        ("export cycle, enabled: ours / OTLP-HTTP", heard[ours], heard[otlp]),
        ("export cycle, no consumer: ours / InMemoryMetricReader", quiet[ours], quiet[memory]),
        ("export cycle, enabled: ours / InMemoryMetricReader", heard[ours], heard[memory]),
        ("export() alone: no consumer / enabled", quiet[ALONE[0]], heard[ALONE[0]]),
        ("aggregation alone / InMemoryMetricReader cycle", quiet[AGGREGATION], quiet[memory]),
    ):
        print(f"  ratio {label:58s} {a / b:8.3f} x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=100,
                    help="attribute sets per instrument (default 100)")
    ap.add_argument("-n", type=int, default=20, help="export cycles per timed run")
    ap.add_argument("--rounds", type=int, default=9, help="timed runs of each (median)")
    ap.add_argument("--sink", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sink:
        serve_sink()
        return 0
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        print("otel: skipped: opentelemetry-exporter-otlp-proto-http is not installed"
              " (pip install -e '.[dev]')")
        return 0
    report(measure(args.series, args.n, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
