"""``rezolus-ue tail``: decoded records, one per line, as text or JSON lines.

The equivalent of ``perf record -e 'user_events:rezolus_*' -a`` (``rezolus_ue:rezolus_*``
on the uprobe transport) + ``perf script`` live, without perf, and never disturbing other
consumers. Applications' OpenTelemetry metrics (``otlp_metrics``, from any process) print
as one line per data point, with the publishing process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from .intervals import EVENT as TICK
from .otlp import DataPoint, Decoder
from .records import APP_EVENTS, Record
from .source import COSTLY_HELP, RECORDING_HELP

#: Longest wait for records in one poll.
POLL_MS = 1000
#: Once a record arrived, wait this much longer before reading: the rest of the publish's
#: burst comes in the same batch instead of a wakeup and a read per record.
SETTLE_MS = 50
#: After a stop was asked for while writing, how long a write may stay blocked (its
#: reader has stopped reading: a full pipe) before tail gives up the unwritten lines.
WRITE_GRACE_S = 2.0

_EPILOG = """\
examples:
  sudo rezolus-ue tail                              every cheap event
  sudo rezolus-ue tail --costly                     every event, BPF-counted ones too
  sudo rezolus-ue tail rezolus_cpu_usage            one event
  sudo rezolus-ue tail 'rezolus_memory*' --format json \\
      | jq 'select(.event == "rezolus_memory") | .available_bytes'
  sudo rezolus-ue tail otlp_metrics                 applications' OpenTelemetry metrics
  rezolus-ue tail --from /var/tmp/rec.rzr rezolus_cpu_usage

tail finds the events in either group; perf needs the one in use (`rezolus-ue check`
says which):
  sudo perf record -e 'user_events:rezolus_*' -a -o - | perf script -i -
  sudo perf record -e 'rezolus_ue:rezolus_*' -a -o - | perf script -i -   (uprobe transport)"""


def _stamp(time_ns: int, wall_offset_ns: int) -> str:
    t = (time_ns + wall_offset_ns) / 1e9
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1e6) % 1_000_000:06d}"


def format_text(r: Record, wall_offset_ns: int) -> str:
    """Return one record as a line: local time, [writing CPU], event, field=value pairs."""
    stamp = _stamp(r.time_ns, wall_offset_ns)
    parts = []
    for k, v in r.fields.items():
        if k == "buckets" and isinstance(v, bytes):
            h = r.histogram()
            parts.append(f"buckets=<{h.nonzero() if h is not None else 0} non-zero>")
        elif isinstance(v, str):
            parts.append(f"{k}={v}" if v and " " not in v else f"{k}={v!r}")
        elif isinstance(v, bytes):
            parts.append(f"{k}={v.hex()}")
        else:
            parts.append(f"{k}={v}")
    # perf script's layout: the CPU the record was written on in brackets, then the event.
    return f"{stamp} [{r.common_cpu:03d}] {r.event}: " + " ".join(parts)


def format_json(r: Record, wall_offset_ns: int) -> str:
    """Return one record as a JSON line: ``Record.to_json`` with ``time`` (epoch ns)."""
    return json.dumps(r.to_json(wall_offset_ns), separators=(",", ":"))


def _text_value(v: object) -> str:
    s = str(v)
    return s if s and not any(c in s for c in " ,{}=\"'") else repr(s)


def _point_values(p: DataPoint) -> dict[str, object]:
    """Return what a text line shows of a point's value(s), by name, in order."""
    if p.histogram is not None:
        h = p.histogram
        return {"count": h.count, "sum": h.sum, "min": h.min, "max": h.max,
                "buckets": f"<{sum(1 for c in h.counts if c)} non-zero>"}
    if p.exponential is not None:
        e = p.exponential
        nz = sum(1 for c in e.positive_counts + e.negative_counts if c) + (e.zero_count > 0)
        return {"count": e.count, "sum": e.sum, "min": e.min, "max": e.max,
                "scale": e.scale, "buckets": f"<{nz} non-zero>"}
    return {"value": p.value}


def format_point_text(r: Record, p: DataPoint, wall_offset_ns: int) -> str:
    """Return one data point of an ``otlp_metrics`` record as a line: the record's time
    and CPU, then metric{attributes}, kind, temporality, value(s), unit, publisher."""
    attrs = ",".join(f"{k}={_text_value(v)}" for k, v in p.attributes.items())
    kind = f"{p.kind} {p.temporality}" + (" monotonic" if p.monotonic else "")
    values = " ".join(f"{k}={v}" for k, v in _point_values(p).items() if v is not None)
    unit = f" unit={p.unit if ' ' not in p.unit else repr(p.unit)}" if p.unit else ""
    return (f"{_stamp(r.time_ns, wall_offset_ns)} [{r.common_cpu:03d}] {r.event}:"
            f" {p.metric}{{{attrs}}} {kind} {values or 'value=none'}{unit} pid={p.pid}"
            f" comm={_text_value(p.comm) if p.comm else '?'}")


def format_point_json(r: Record, p: DataPoint, wall_offset_ns: int) -> str:
    """Return one data point as a JSON line: the record's metadata (``event``,
    ``time_ns``, ``common_cpu``, ``common_pid``), ``DataPoint.to_json`` and ``time``."""
    out: dict[str, Any] = {"event": r.event, "time_ns": r.time_ns,
                           "common_cpu": r.common_cpu, "common_pid": r.common_pid}
    out.update(p.to_json())
    out["time"] = r.time_ns + wall_offset_ns
    return json.dumps(out, separators=(",", ":"))


def write_records(records: Iterable[Record], fmt: str, out: TextIO,
                  wall_offset_ns: int, stop: Callable[[], bool] | None = None,
                  points: Decoder | None = None) -> int:
    """Write records in ``fmt`` ("text" or "json"), until ``stop()`` if given; return how
    many (whole records only: a stop lands between two). ``points`` decodes applications'
    records (``otlp_metrics``) into a line per data point; a malformed one prints none."""
    line = format_json if fmt == "json" else format_text
    point = format_point_json if fmt == "json" else format_point_text
    n = 0
    for r in records:
        if stop is not None and stop():
            break
        if points is not None and r.event in APP_EVENTS:
            out.writelines(point(r, p, wall_offset_ns) + "\n" for p in points.points(r))
        else:
            out.write(line(r, wall_offset_ns) + "\n")
        n += 1
    return n


class _StalledOutput(Exception):
    """stdout's reader stopped reading while tail was asked to stop."""


class _Stopper:
    """SIGINT/SIGTERM for ``tail``: stop between two lines, once.

    The first signal asks to stop; while tail is blocked (waiting for records, or for the
    agent) it also raises KeyboardInterrupt there to end the wait. While it writes, the
    write may finish its lines for WRITE_GRACE_S; one still blocked then (a reader that
    stopped reading, the pipe full) is abandoned, or tail could never be stopped. Later
    signals are ignored: closing the perf events waits for a grace period per tracepoint,
    and a second Ctrl-C must not break that off half-way.
    """

    def __init__(self) -> None:
        self.requested = False
        self.blocked = True
        self.writing = False

    def __call__(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGALRM:
            if self.writing:
                raise _StalledOutput
            return
        if self.requested:
            return
        self.requested = True
        if self.blocked:
            raise KeyboardInterrupt
        if self.writing:
            signal.setitimer(signal.ITIMER_REAL, WRITE_GRACE_S)

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """Mark a write to stdout (which blocks while the pipe is full)."""
        self.writing = True
        try:
            yield
        finally:
            self.writing = False
            if self.requested:
                signal.setitimer(signal.ITIMER_REAL, 0)

    def __enter__(self) -> _Stopper:
        self._previous = {s: signal.signal(s, self)
                          for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def _abandon_stdout() -> None:
    """Point stdout at /dev/null: the lines still buffered would block the exit again."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)


def run(args: argparse.Namespace) -> int:
    """Follow the selected events until interrupted (or --count records, or the end of
    the recording --from names)."""
    from ..api import open_source, resolve_events

    # A recording keeps only the events this version knows, as a live subscription does;
    # replaying costly events costs nothing, so it shows every one unless named.
    events = resolve_events(args.events, costly=args.costly or args.source is not None)
    points = Decoder() if any(e in APP_EVENTS for e in events) else None
    # The tick record (one per publish interval, ``intervals.EVENT``) comes with every
    # subscription; tail prints it where the selection has it (the default set, a glob
    # such as rezolus_*, its name), as perf would, and not beside a list that leaves it out.
    ticks = TICK in events
    seen = lost = 0
    with _Stopper() as stopper:
        try:
            with open_source(args.source, events, wait=not args.no_wait,
                             asked=bool(args.events)) as src:
                offset = src.wall_offset_ns
                while not (stopper.requested or src.exhausted
                           or (args.count is not None and seen >= args.count)):
                    stopper.blocked = True
                    try:
                        recs = src.poll(POLL_MS, SETTLE_MS)
                    finally:
                        stopper.blocked = False
                    if not ticks:
                        recs = [r for r in recs if r.event != TICK]
                    if args.count is not None:
                        recs = recs[: args.count - seen]
                    with stopper.write():
                        seen += write_records(recs, args.format, sys.stdout, offset,
                                              lambda: stopper.requested, points)
                        sys.stdout.flush()
                    if src.lost != lost:
                        print(f"rezolus-ue: {src.lost - lost} records lost (consumer too"
                              " slow; the kernel ring was full)", file=sys.stderr)
                        lost = src.lost
        except KeyboardInterrupt:
            if not stopper.requested:
                raise
        except _StalledOutput:
            _abandon_stdout()
            print(f"rezolus-ue: stopped with lines unwritten: stdout's reader had not read"
                  f" for {WRITE_GRACE_S:g} s (the pipe was full)", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``tail`` subcommand."""
    p = sub.add_parser(
        "tail", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="print decoded records as they arrive (text or JSON lines)",
        description="Subscribe to rezolus-ue tracepoints (perf_event_open, one ring per CPU),"
        " user_events:rezolus_* or, on kernels without user_events, rezolus_ue:rezolus_*,"
        " and print each record: time, event, fields. Waits for the agent unless --no-wait."
        " Applications' OpenTelemetry metrics, otlp_metrics (user_events:otlp_metrics or"
        " rezolus_ue:otlp_metrics, from every process, whether the agent runs or not; it"
        " needs the otel extra), print one line per data point: metric{attributes}, kind,"
        " value(s), publishing pid and comm.",
        epilog=_EPILOG,
    )
    p.add_argument("events", nargs="*", metavar="EVENT",
                   help="event names or shell globs (default: every cheap rezolus-ue event,"
                   " and otlp_metrics when the otel extra is installed, subscribed as soon"
                   " as an application registers it; a pattern takes costly events too)")
    p.add_argument("--costly", action="store_true", help=COSTLY_HELP)
    p.add_argument("-f", "--format", choices=("text", "json"), default="text",
                   help="text (default) or JSON lines, for jq")
    p.add_argument("-n", "--count", type=_positive, metavar="N",
                   help="exit after N records")
    p.add_argument("--no-wait", action="store_true",
                   help="exit at once if the agent is not running, instead of waiting")
    p.add_argument("--from", dest="source", type=Path, metavar="FILE",
                   help=f"print {RECORDING_HELP} instead of live records")
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return n
