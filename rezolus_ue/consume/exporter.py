"""``rezolus-ue exporter``: a Prometheus text-exposition endpoint fed by the tracepoints.

The exporter reads the ``user_events:rezolus_*`` tracepoints (``rezolus_ue:rezolus_*`` on
the uprobe transport) like any consumer (or, with ``--from``, a recording), keeps the
latest values in a ``prometheus.State`` and serves them as text exposition format 0.0.4 on
``GET /metrics`` (default ``http://127.0.0.1:9745/metrics``). Names, units, labels and
staleness are ``prometheus``'s (docs/prometheus.md embeds its table). Applications'
OpenTelemetry metrics (``otlp_metrics``, from any process) are served beside them, named
as OpenTelemetry's Prometheus exporters name them (docs/applications.md).

I/O lives at the edges: ``serve_http`` (a ``ThreadingHTTPServer`` in a daemon thread; a
scrape renders a snapshot copied under the lock, one render at a time, reused until the
state changes) and ``run`` (the subscription polled in the main thread).
"""

from __future__ import annotations

import argparse
import errno
import gzip
import html
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..config import path_arg
from ..errors import ConfigError, RezolusError
from .prometheus import (
    DEFAULT_MAX_APP_SERIES,
    DEFAULT_STALE,
    SELECTIONS,
    State,
    exposition,
)
from .records import Record
from .source import COSTLY_HELP, RECORDING_HELP, Source

log = logging.getLogger("rezolus_ue")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9745
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_MS = 250

# --- I/O: the HTTP endpoint and the subscription loop ---------------------------------------

def index_page(groups: Sequence[str], recording: str | None = None,
               series: Mapping[str, int] | None = None) -> bytes:
    """Return the ``/`` page: where the metrics come from (the tracepoint groups followed,
    or the recording), so a reader knows what to ask perf or ftrace for, and the events
    that have ``series`` now (event -> label sets held)."""
    from ..schema import GROUPS

    transport = {g: t for t, g in GROUPS.items()}
    if recording is not None:
        origin = f"the recording <code>{html.escape(recording)}</code>"
    elif groups:
        origin = " and ".join(f"the <code>{g}:rezolus_*</code> tracepoints"
                              f" ({transport.get(g, g)} transport)" for g in groups)
    else:
        origin = ("the <code>user_events:rezolus_*</code> tracepoints, or"
                  " <code>rezolus_ue:rezolus_*</code> on kernels without user_events"
                  " (none followed yet: is the agent running?)")
    events = ""
    if series:
        items = "".join(
            f"<li><code>{html.escape(e)}</code>: {n} label set{'s' * (n != 1)}"
            f"{_SELECTION_NOTE if e in SELECTIONS else ''}</li>\n"
            for e, n in sorted(series.items()))
        events = f"<p>Events with series now:</p>\n<ul>\n{items}</ul>\n"
    return (f"""<!doctype html>
<html><head><title>rezolus-ue exporter</title></head>
<body><h1>rezolus-ue exporter</h1>
<p>Linux telemetry from {origin}, in Prometheus text format:
<a href="/metrics">/metrics</a>.</p>
{events}</body></html>
""").encode()


#: Said of a selection event on the ``/`` page (``prometheus.SELECTIONS``).
_SELECTION_NOTE = " (those of its latest interval only)"


class Exporter:
    """The shared state between the subscription (ingest) and the HTTP threads (render).

    Scrapes render from a snapshot copied under the lock, one render at a time: scrapes
    that arrive meanwhile wait for it and share its text, and a scrape with nothing new
    since the last render reuses it. A slow machine therefore never piles up renders
    (each scrape timing out and retrying would otherwise start one more).

    Staleness is judged at the start of the last poll that drained the rings, not at the
    scrape: a series is dropped only when the exporter had read everything published and
    its event had not come for ``stale`` intervals. An exporter that falls behind (starved
    of CPU, ingesting a large burst) keeps serving its last values instead of forgetting
    every series because it read nothing for a while (seen once under a CPU hog: a scrape
    served no family at all).
    """

    def __init__(self, stale: int = DEFAULT_STALE, native_buckets: bool = False,
                 clock: Callable[[], int] | None = time.monotonic_ns,
                 max_app_series: int = DEFAULT_MAX_APP_SERIES) -> None:
        self.state = State(stale, max_app_series=max_app_series)
        self.native_buckets = native_buckets
        self.renders = 0
        # None: data time (a replayed recording), the newest record's time, so that the
        # series of a recording's end stay however long it is served.
        self._data_ns = 0
        self._clock = clock or (lambda: self._data_ns)
        self._lock = threading.Lock()  # guards state and _version
        self._render_lock = threading.Lock()  # one render at a time; guards _cache
        self._version = 0  # bumped by every change of state
        self._cache: tuple[int, str, dict[bool, bytes]] | None = None
        #: When the last completed poll began (follow): everything published before it
        #: has been ingested. None: not following, staleness is judged by the clock.
        self._drained_ns: int | None = None
        self._source: Source | None = None
        self._recording: str | None = None

    def follows(self, src: Source, recording: object = None) -> None:
        """Name what the metrics come from on the ``/`` page: ``src``'s tracepoints, or
        ``recording``."""
        self._source, self._recording = src, None if recording is None else str(recording)

    def index(self) -> bytes:
        """Return the ``/`` page (``index_page``) for the source followed now."""
        from .subscription import Subscription

        src = self._source
        groups = src.groups if isinstance(src, Subscription) else ()
        with self._lock:
            series = self.state.series_by_event()
        return index_page(groups, self._recording, series)

    def ingest(self, records: Sequence[Record], lost: int | None = None) -> None:
        """Take one poll's records in (and the subscription's lost-record count)."""
        if not records and (lost is None or lost == self.state.lost):
            return
        if records:
            self._data_ns = max(self._data_ns, records[-1].time_ns)
        now = self._clock()
        with self._lock:
            self.state.ingest(records, now)
            if lost is not None:
                self.state.lost = lost
            self._version += 1

    def render(self) -> str:
        """Return the exposition of the current state."""
        with self._render_lock:
            return self._render_locked()[1]

    def body(self, gzipped: bool = False) -> bytes:
        """Return the exposition as the HTTP body, gzip-compressed or not (cached)."""
        with self._render_lock:
            _version, text, bodies = self._render_locked()
            if gzipped not in bodies:
                raw = bodies.get(False) or text.encode()
                bodies[False] = raw
                if gzipped:  # level 1: the scrape's CPU matters more than its bytes
                    bodies[True] = gzip.compress(raw, compresslevel=1)
            return bodies[gzipped]

    def _render_locked(self) -> tuple[int, str, dict[bool, bytes]]:
        with self._lock:
            now = self._clock() if self._drained_ns is None else self._drained_ns
            if self.state.prune(now):
                self._version += 1
            if self._cache is not None and self._cache[0] == self._version:
                return self._cache
            version, snap = self._version, self.state.copy()
        # Rendering runs outside the state lock: ingest goes on meanwhile.
        self._cache = (version, exposition(snap, native_buckets=self.native_buckets), {})
        self.renders += 1
        return self._cache

    def follow(self, src: Source, stop: Callable[[], bool], poll_ms: int = POLL_MS) -> None:
        """Poll ``src`` and ingest until ``stop()`` is true (a recording's end keeps its
        last values served)."""
        while not stop():
            began = self._clock()
            self.ingest(src.poll(poll_ms), src.lost)
            self._drained_ns = began


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    timeout = 300  # s: reap connections left idle (a scraper gone without closing)

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        status, gzipped = 200, False
        if path == "/metrics":
            gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
            body, ctype = self.server.body(gzipped), CONTENT_TYPE
        elif path == "/":
            body, ctype = self.server.index(), "text/html; charset=utf-8"
        else:
            status, body, ctype = 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    body: Callable[[bool], bytes]
    index: Callable[[], bytes]

    def handle_error(self, request: object, client_address: object) -> None:
        # A scraper that timed out and hung up is not worth a traceback on stderr.
        log.debug("http: request from %s failed", client_address, exc_info=True)


def parse_listen(text: str) -> tuple[str, int]:
    """Return (host, port) of ``HOST:PORT``, ``[V6ADDR]:PORT`` or ``:PORT`` (all addresses)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT, e.g."
                          f" {DEFAULT_HOST}:{DEFAULT_PORT}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def serve_http(host: str, port: int, body: Callable[[bool], bytes],
               index: Callable[[], bytes] | None = None) -> _Server:
    """Return a bound HTTP server (not yet serving) whose /metrics returns ``body(gzip)``
    (``Exporter.body``) and / returns ``index()`` (``Exporter.index``)."""
    cls = _Server
    if ":" in host:
        cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        server = cls((host, port), _Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            why = "address already in use"
        elif e.errno in (errno.EACCES, errno.EPERM):
            why = "permission denied (ports below 1024 need root)"
        elif e.errno == errno.EADDRNOTAVAIL or isinstance(e, socket.gaierror):
            why = "no such local address"
        else:
            why = e.strerror or str(e)
        raise RezolusError(f"cannot listen on {where}: {why}; choose another address with"
                           " --listen HOST:PORT") from None
    server.body = body
    server.index = index or (lambda: index_page(()))
    return server


def run(args: argparse.Namespace) -> int:
    """Serve /metrics and follow the tracepoints until SIGINT/SIGTERM; return 0."""
    from ..api import open_source
    from ..schema import EVENTS, cheap
    from . import otlp
    from .records import APP_EVENTS

    host, port = args.listen
    exporter = Exporter(args.stale, args.native_buckets,
                        clock=time.monotonic_ns if args.source is None else None,
                        max_app_series=args.max_app_series)
    # Bind first: a taken port fails at once.
    server = serve_http(host, port, exporter.body, exporter.index)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="rezolus-ue-exporter-http", daemon=True)
    thread.start()
    h, p = server.server_address[:2]
    url = f"http://{f'[{h}]:{p}' if ':' in str(h) else f'{h}:{p}'}/metrics"
    events = [e.name for e in EVENTS if not (args.no_dist and e.name.endswith("_dist"))]
    if not (args.costly or args.source):  # a recording's costly events cost nothing now
        events = cheap(events)
    if not args.no_apps and otlp.available():
        events += list(APP_EVENTS)
    stop: list[int] = []
    following = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)
        if not following.is_set():
            raise KeyboardInterrupt  # still waiting for the agent: break out of the wait

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not args.no_wait:  # said before the wait; with --no-wait, once there is data
            log.info("serving Prometheus metrics on %s", url)
        with open_source(args.source, events, wait=not args.no_wait, asked=False) as src:
            exporter.follows(src, args.source)
            if args.no_wait:
                log.info("serving Prometheus metrics on %s", url)
            if args.source is None:
                log.info("following %d events", len(src.events))
            else:
                log.info("serving the records of %s", args.source)
            following.set()
            exporter.follow(src, lambda: bool(stop))
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.shutdown()
        server.server_close()
    st = exporter.state
    log.info("stopped: %d records, %d skipped, %d lost", st.records, st.skipped, st.lost)
    return 0


def _listen(text: str) -> tuple[str, int]:
    try:
        return parse_listen(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--listen ")) from None


def _stale(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of publish intervals"
                                         " from 1 to 1000")
    return int(text)


def _max_series(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 10_000_000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of series from 0 to"
                                         " 10000000")
    return int(text)


_DESCRIPTION = """\
Follow the cheap rezolus-ue tracepoints (every one with --costly): user_events:rezolus_*,
or rezolus_ue:rezolus_* on kernels without user_events (the uprobe transport; GET / says
which it follows). Serve the latest values in Prometheus text format on GET /metrics.
Names are rezolus_<event>_<metric>: counters end in _total, ns and us become seconds, ppm
a ratio; *_dist quantiles become <gauge>_dist and <counter>_per_second gauges with a
quantile label; histograms become summaries. A label set not seen for --stale publish
intervals is dropped; a process, as soon as an interval leaves it out of its top N.
docs/prometheus.md lists every name, with scrape configs and PromQL examples.

Applications' OpenTelemetry metrics (the otlp_metrics tracepoint, from any process; needs
the otel extra) are served too, named as OpenTelemetry's Prometheus exporters name them,
with pid and comm labels: delta points add up into counters and histograms; a process
silent for --stale of its export intervals loses its series. docs/applications.md."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``exporter`` subcommand to the CLI's subparsers."""
    p = sub.add_parser(
        "exporter", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="serve the tracepoints as Prometheus metrics on HTTP",
        description=_DESCRIPTION,
        epilog="examples:\n"
        "  sudo rezolus-ue exporter\n"
        "  sudo rezolus-ue exporter --listen 0.0.0.0:9745 --native-buckets\n"
        "  sudo rezolus-ue exporter --costly          BPF-counted families too (they cost)\n"
        "  curl -s http://127.0.0.1:9745/metrics | grep '^rezolus_cpu_usage'\n"
        "  curl -s http://127.0.0.1:9745/           which tracepoints it follows\n"
        "  rezolus-ue exporter --from incident.rzr    the values at the recording's end\n"
        "  scrape config: static_configs: [{targets: ['HOST:9745']}]",
    )
    p.add_argument("--listen", metavar="HOST:PORT", type=_listen,
                   default=(DEFAULT_HOST, DEFAULT_PORT),
                   help=f"address to serve on (default: {DEFAULT_HOST}:{DEFAULT_PORT}; use"
                   f" 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT} for a remote Prometheus)")
    p.add_argument("--stale", metavar="N", type=_stale, default=DEFAULT_STALE,
                   help="drop a label set (a CPU, device, cgroup...) not seen for N publish"
                   f" intervals (default: {DEFAULT_STALE})")
    p.add_argument("--native-buckets", action="store_true",
                   help="also expose each histogram as a classic Prometheus histogram"
                   " (*_histogram_bucket{le=...}) from its H2 buckets: 8 series per doubling of"
                   " the values' range, per label set")
    p.add_argument("--no-dist", action="store_true",
                   help="do not follow the *_dist events: the agent then does not oversample"
                   " (cheaper), and no quantile gauges are exported")
    p.add_argument("--costly", action="store_true",
                   help=COSTLY_HELP + "; without it their metrics are not exported")
    p.add_argument("--max-app-series", metavar="N", type=_max_series,
                   default=DEFAULT_MAX_APP_SERIES,
                   help="hold at most N series of applications' metrics (a histogram's"
                   " buckets, _sum and _count each count); the points of new series past it"
                   " are dropped, counted as reason series_limit of"
                   " rezolus_exporter_otlp_dropped_points_total"
                   f" (default: {DEFAULT_MAX_APP_SERIES})")
    p.add_argument("--no-apps", action="store_true",
                   help="do not follow applications' otlp_metrics tracepoint")
    p.add_argument("--no-wait", action="store_true",
                   help="fail at once if the agent is not publishing, instead of waiting")
    p.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                   help=f"serve {RECORDING_HELP} instead of the live tracepoints: every"
                   " record is ingested, then /metrics shows the values at its end, judged"
                   " stale by its clock")
    p.set_defaults(func=run)
