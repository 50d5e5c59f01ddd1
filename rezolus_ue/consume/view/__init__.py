"""``rezolus-ue view``: a local web dashboard of the live agent or of recordings.

``pages`` declares the pages (derived from the metric catalog), ``model`` turns records
into each chart's series per publish interval, ``server`` serves them read-only with the
vendored uPlot (``static/``): nothing is fetched from the network.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from ...config import duration_arg, parse_duration, path_arg
from ...errors import ConfigError
from ..source import COSTLY_HELP, RECORDING_HELP

log = logging.getLogger("rezolus_ue")

#: The default port: beside the exporter's 9745.
DEFAULT_PORT = 9746
DEFAULT_BIND = "127.0.0.1"

_EPILOG = f"""\
ranges: START..END, offsets from the start of the data (negative: from its end), each a
  duration (100ms, 90s, 5m, 1h); either end may be left out: 10m..20m, ..30s,
  --range=-5m.. (a negative start needs the =)

examples:
  sudo rezolus-ue view                          follow the live agent on port {DEFAULT_PORT}
  rezolus-ue view --from run.rzr                a recording
  rezolus-ue view --from before.rzr --compare after.rzr
                                                two recordings side by side
  rezolus-ue view --from run.rzr --range 0s..5m --compare-range 60m..65m
                                                two ranges of one recording side by side
  ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} HOST 'sudo rezolus-ue view'
                                                then open http://127.0.0.1:{DEFAULT_PORT}/ here

See docs/view.md."""


def parse_range(text: str) -> tuple[float | None, float | None]:
    """Return (start, end) offsets in seconds of ``START..END`` (None: an open end)."""
    if ".." not in text:
        raise ValueError(f"range {text!r}: expected START..END, e.g. 10m..20m or -5m..")
    out: list[float | None] = []
    for part in text.split("..", 1):
        part = part.strip()
        if not part:
            out.append(None)
            continue
        sign, size = (-1, part[1:]) if part.startswith("-") else (1, part)
        try:
            out.append(0.0 if size == "0" else sign * parse_duration(size) / 1e9)
        except ValueError as e:
            raise ValueError(f"range {text!r}: {e}") from None
    start, end = out
    if start is not None and end is not None and (start < 0) == (end < 0) and end <= start:
        raise ValueError(f"range {text!r}: the end must come after the start")
    return start, end


def _range_arg(text: str) -> tuple[float | None, float | None]:
    try:
        return parse_range(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a port number, 0 to 65535"
                                         " (0: any free port)")
    return int(text)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``view`` subcommand."""
    p = sub.add_parser(
        "view", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="a local web dashboard of the live agent or of recordings",
        description="Serve a read-only web dashboard: a page per subsystem (CPU, memory,"
        " scheduler, disks, network, cgroups, processes, the agent) with a chart per"
        " metric family (counters as rates, histograms as percentile bands), a time range"
        " and a side-by-side compare of two recordings or two ranges. Without --from it"
        " follows the live agent, subscribed only while a browser has a page open. Listens"
        " on 127.0.0.1 only unless --bind says otherwise; reach it from another machine"
        " with ssh -L. Works offline: its scripts are part of the package.",
        epilog=_EPILOG)
    p.add_argument("-p", "--port", type=_port, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--bind", default=DEFAULT_BIND, metavar="ADDRESS",
                   help=f"address to listen on (default {DEFAULT_BIND}: this machine only;"
                   " 0.0.0.0 or :: shows the host's metrics to the network)")
    p.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                   help=f"show {RECORDING_HELP} instead of the live agent")
    p.add_argument("--compare", type=path_arg, metavar="FILE2",
                   help="show FILE2 beside --from's recording")
    p.add_argument("--range", dest="range", type=_range_arg, metavar="START..END",
                   help="the range shown at first (the page can change it)")
    p.add_argument("--compare-range", type=_range_arg, metavar="START..END",
                   help="compare this range of the recording (FILE2's, with --compare)"
                   " with --range's")
    p.add_argument("--keep", type=duration_arg, default=3600 * 10**9, metavar="DURATION",
                   help="live: how much history the page can show (default 1h)")
    p.add_argument("--costly", action="store_true", help=COSTLY_HELP)
    p.set_defaults(func=run)


def load(path: Path, name: str | None = None) -> object:
    """Return a recording's dataset (``model.Dataset``), every interval of it."""
    from ..source import RecordingSource
    from .model import Dataset

    src = RecordingSource(path, batch=50_000)
    ds = Dataset(name or path.name, src.wall_offset_ns)
    while not src.exhausted:
        ds.feed(src.poll(0))
    ds.flush()
    return ds


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard until SIGINT/SIGTERM; return 0."""
    from ...schema import cheap
    from ..intervals import EVENT
    from .model import Dataset, Span
    from .pages import all_events
    from .server import Follower, Server, View, url_of

    if args.compare is not None and args.source is None:
        raise ConfigError("--compare needs --from: it compares two recordings")
    if args.compare_range is not None and args.source is None:
        raise ConfigError("--compare-range needs --from: it compares ranges of a recording")
    span_a = Span(*args.range) if args.range else Span()
    span_b = Span(*args.compare_range) if args.compare_range else None
    if args.compare is not None and span_b is None:
        span_b = Span()
    follower = None
    b = None
    if args.source is None:
        from ..subscription import monotonic_to_wall_offset_ns

        events = [*all_events(), EVENT]
        if not args.costly:
            events = cheap(events)
        a = Dataset("live", monotonic_to_wall_offset_ns(), keep_ns=args.keep)
        follower = Follower(a, events)
    else:
        a = load(args.source)
        if args.compare is not None:
            b = load(args.compare)
        elif span_b is not None:
            b = a
    server = Server((args.bind, args.port), View(a, b, follower=follower,  # type: ignore[arg-type]
                                                 spans=(span_a, span_b)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="rezolus-ue-view-http", daemon=True)
    thread.start()
    what = "the live agent (subscribed while a page is open)" if follower else (
        f"{args.source}" + (f" beside {args.compare}" if args.compare else ""))
    log.info("serving %s on %s", what, url_of(server))
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set())
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        server.shutdown()
        server.server_close()
    return 0
