"""``rezolus-ue record``: keep records on disk, or a rolling window.

``record FILE`` writes every record of the selected events to a recording (the native
``.rzr`` format, or Parquet with pyarrow; see ``files`` and docs/recording.md) until
``--duration`` or Ctrl-C. ``record --ring DIR`` is a flight recorder: records go to segment
files of bounded size (``ring``); the oldest are deleted beyond ``--max-size`` /
``--max-age``; ``SIGUSR1`` or ``rezolus-ue dump`` (``dump``) writes the window held to one
file.

The record source is injectable (the hidden ``--source-file``: a recording, or JSON lines
on a file or stdin), so tests run real recorder processes without a kernel.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Protocol

from ...config import DURATION_HELP, SYSTEM_CONFIG, duration_arg, format_duration, path_arg
from ...errors import ConfigError
from ..records import Record
from ..source import COSTLY_HELP, Source, open_test_source
from . import files as recfiles
from . import parquet
from .blocks import RecordingError, recording_meta
from .dump import DumpServer
from .ring import Ring, running_recorder
from .triggers import TriggerDumps, load_rules

log = logging.getLogger("rezolus_ue")

#: Flush early when this many records are buffered, to bound memory and block size.
MAX_BUFFER = 50_000
#: Longest wait in one poll, so signals and the flush clock are served promptly.
POLL_MS = 200
MIN_RING_SIZE = 1 << 20
DEFAULT_RING_SIZE = 100 << 20
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
SIZE_HELP = "a number of bytes with an optional K, M, G or T (powers of 1024), e.g. 100M, 1G"


def parse_size(text: str) -> int:
    """Return a size such as ``"100M"`` in bytes; raise ValueError if malformed."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"invalid size {text!r}: use {SIZE_HELP}")
    try:
        value = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(f"invalid size {text!r}: use {SIZE_HELP}") from None
    n = int(value * 1024 ** " kmgt".index(m.group(2).lower() or " "))
    if n >= 1 << 63:
        raise ValueError(f"size {text!r} is too large")
    return n


def format_size(n: int) -> str:
    """Return ``n`` bytes as a short human-readable text."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


# --- sinks ------------------------------------------------------------------------------------


class Sink(Protocol):
    """Where the recorder writes: one file, a Parquet journal, or a ring."""

    def write(self, records: list[Record]) -> None: ...

    def tick(self) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """A recording at ``path`` in either format (``files.open_writer``)."""

    def __init__(self, path: Path, fmt: str = "native", *, overwrite: bool = False) -> None:
        self.path = path
        self.writer = recfiles.open_writer(path, fmt, recording_meta(), overwrite=overwrite)

    def write(self, records: list[Record]) -> None:
        """Write the records (one block of the file, or of a Parquet file's journal)."""
        self.writer.write(records)

    def tick(self) -> None:
        """Nothing to maintain."""

    def close(self) -> None:
        """Finish the file."""
        self.writer.close()


# --- the recording loop -----------------------------------------------------------------------


@dataclass
class Control:
    """Flags the signal handlers set and the loop reads."""

    stop: bool = False
    dump: bool = False
    #: Set once recording: before, a stop signal interrupts whatever we wait for.
    running: bool = False


@dataclass
class LoopStats:
    """What a recording session did."""

    records: int = 0
    events: set[str] = field(default_factory=set)
    lost: int = 0


def record_loop(source: Source, sink: Sink, ctl: Control, *, flush_ns: int,
                duration_ns: int | None = None, on_dump: Callable[[], None] | None = None,
                clock: Callable[[], int] = time.monotonic_ns,
                triggers: TriggerDumps | None = None) -> LoopStats:
    """Move records from ``source`` to ``sink`` until ``ctl.stop``, the duration, or the
    source's end; write them every ``flush_ns`` (and before a dump, or a ``triggers``
    window that is due)."""
    stats = LoopStats()
    start = clock()
    deadline = None if duration_ns is None else start + duration_ns
    next_flush = start + flush_ns
    buf: list[Record] = []
    while True:
        now = clock()
        if ctl.stop or getattr(source, "exhausted", False) or (deadline and now >= deadline):
            break
        until = next_flush if deadline is None else min(next_flush, deadline)
        recs = source.poll(max(1, min(until - now, POLL_MS * 10**6) // 10**6))
        if recs:
            buf.extend(recs)
            stats.records += len(recs)
            stats.events.update(r.event for r in recs)
            if triggers is not None:
                triggers.feed(recs)
        now = clock()
        due = triggers is not None and triggers.due
        if now >= next_flush or len(buf) >= MAX_BUFFER or ctl.dump or due:
            sink.write(buf)
            buf = []
            next_flush = now + flush_ns
            if source.lost != stats.lost:
                log.warning("%d records lost (the kernel ring was full: the recorder was"
                            " too slow)", source.lost - stats.lost)
                stats.lost = source.lost
        else:
            sink.tick()
        if due:
            triggers.write()  # type: ignore[union-attr]
        if ctl.dump:
            ctl.dump = False
            if on_dump is not None:
                on_dump()
    # What reached the rings before the stop is recorded too (a live source's drain).
    rest = getattr(source, "drain", lambda: [])()
    buf.extend(rest)
    stats.records += len(rest)
    stats.events.update(r.event for r in rest)
    if triggers is not None:
        triggers.feed(rest)
    sink.write(buf)
    if triggers is not None:
        triggers.close()
    return stats


# --- commands ---------------------------------------------------------------------------------


def _install_signals(ctl: Control) -> None:
    def on_usr1(_sig: int, _frame: object) -> None:
        ctl.dump = True

    def on_stop(_sig: int, _frame: object) -> None:
        # Before recording (waiting for the agent), or asked twice: stop at once.
        if ctl.stop or not ctl.running:
            raise KeyboardInterrupt
        ctl.stop = True

    # SIGUSR1 must never kill us (its default action), even while we wait for the agent.
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)


def run_record(args: argparse.Namespace) -> int:
    """Record until --duration, Ctrl-C/SIGTERM, or the end of --source-file."""
    events = list(args.events)
    target: str | None = args.target
    if args.ring is not None:
        if target is not None:
            events.insert(0, target)
        if args.format == "parquet":
            raise ConfigError("--ring writes native segments; dump them as Parquet with"
                              " `rezolus-ue dump --format parquet`")
    else:
        if target is None:
            raise ConfigError("record needs a FILE, or --ring DIR for a flight recorder")
        for opt in ("max_size", "max_age"):
            if getattr(args, opt) is not None:
                raise ConfigError(f"--{opt.replace('_', '-')} needs --ring DIR")
    if args.source_file is None:
        # Validate event names before waiting for the agent.
        from ..subscription import resolve_events

        events = resolve_events(events or None, costly=args.costly)
    ctl = Control()
    _install_signals(ctl)
    ring: Ring | None = None
    server: DumpServer | None = None
    # Refuse what will fail before waiting for the agent; create files only once it is here.
    if args.ring is not None:
        pid = running_recorder(args.ring) if args.ring.is_dir() else None
        if pid is not None:
            raise RecordingError(f"another recorder (pid {pid}) is writing {args.ring}; stop"
                                 " it or use another --ring")
        where = f"ring {args.ring} (max {format_size(args.max_size or DEFAULT_RING_SIZE)}" + (
            f", {format_duration(args.max_age)}" if args.max_age else "") + ")"
    else:
        path = Path(target)  # type: ignore[arg-type]
        fmt = recfiles.format_of(path, args.format)
        if fmt == "parquet":
            parquet._pyarrow()
        recfiles.check_output(path, fmt, args.force)
        where = str(path)
    rules = load_rules(args.config)  # a bad rule is refused before waiting for the agent
    if rules and args.ring is None and args.config is not None:
        raise ConfigError(f"{args.config}: [[trigger]] rules need --ring DIR")
    source = _open_source(args, events)
    watch: TriggerDumps | None = None
    try:
        if args.ring is not None:
            ring = Ring(args.ring, max_size=args.max_size or DEFAULT_RING_SIZE,
                        max_age_ns=args.max_age, segment_size=args.segment_size,
                        segment_ns=args.segment_age)
            ring.open()
            sink: Sink = ring
            server = DumpServer(ring)
            watch = TriggerDumps(rules, ring) if rules else None
        else:
            sink = FileSink(path, fmt, overwrite=args.force)
        try:
            ctl.running = True
            log.info("recording to %s%s (Ctrl-C to stop%s)", where,
                     f" for {format_duration(args.duration)}" if args.duration else "",
                     "; SIGUSR1 or `rezolus-ue dump` to dump" if ring else "")
            stats = record_loop(source, sink, ctl, flush_ns=args.flush,
                                duration_ns=args.duration,
                                on_dump=server.serve if server else None, triggers=watch)
        finally:
            if server is not None:
                server.join()
            sink.close()
    finally:
        source.close()
    lost = f", {stats.lost} lost by the kernel" if stats.lost else ""
    log.info("recorded %d records of %d events to %s%s", stats.records, len(stats.events),
             where, lost)
    return 0


def _open_source(args: argparse.Namespace, events: list[str]) -> Source:
    if args.source_file is not None:
        return open_test_source(args.source_file, events or None)
    from ...api import open_source

    return open_source(None, events or None, wait=not args.no_wait, asked=bool(args.events))


# --- argument parsing -------------------------------------------------------------------------


def _arg_size(text: str) -> int:
    try:
        n = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return n


def _arg_ring_size(text: str) -> int:
    n = _arg_size(text)
    if n < MIN_RING_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r} is too small: at least 1M")
    return n


_RECORD_EPILOG = """\
examples:
  sudo rezolus-ue record run.rzr --duration 10m            every cheap event, 10 minutes
  sudo rezolus-ue record run.rzr --costly                  every event, BPF-counted too
  sudo rezolus-ue record cpu.rzr 'rezolus_cpu*'            some events, until Ctrl-C
  sudo rezolus-ue record run.parquet                       Parquet: Rezolus's viewer opens it
  sudo rezolus-ue record --ring /var/lib/rezolus-ue/ring --max-size 1G --max-age 1h
  sudo rezolus-ue dump incident.rzr                        write the ring's window
  rezolus-ue tail --from run.rzr                           read it back

Read recordings with pandas or DuckDB: see docs/recording.md."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``record`` subcommand."""
    p = sub.add_parser(
        "record", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] FILE [EVENT ...]\n"
              "       %(prog)s --ring DIR [--max-size SIZE] [--max-age DURATION] [EVENT ...]",
        help="record events to a file, or keep a rolling window (flight recorder)",
        description="Subscribe to rezolus-ue tracepoints (like `tail`) and write every record"
        " to FILE, a columnar recording: native .rzr (crash-safe, needs nothing) or Parquet."
        " With --ring, keep the last --max-size/--max-age of records in segment files in DIR;"
        " SIGUSR1 or `rezolus-ue dump` writes that window to one file.",
        epilog=_RECORD_EPILOG,
    )
    p.add_argument("target", nargs="?", metavar="FILE",
                   help="recording to write (one file in either format)")
    p.add_argument("events", nargs="*", metavar="EVENT",
                   help="event names or shell globs (default: every cheap rezolus-ue event,"
                   " and applications' otlp_metrics when the otel extra is installed: each"
                   " record's OTLP buffer as written, with the publisher's pid and comm;"
                   " a pattern takes costly events too)")
    p.add_argument("--costly", action="store_true", help=COSTLY_HELP)
    p.add_argument("-d", "--duration", type=duration_arg, metavar="DURATION",
                   help=f"stop after DURATION ({DURATION_HELP}); default: until Ctrl-C")
    p.add_argument("--format", choices=("native", "parquet"),
                   help="native .rzr (default) or parquet, one file Rezolus's viewer opens"
                   " (default if FILE ends .parquet;"
                   " needs pyarrow)")
    p.add_argument("--force", action="store_true",
                   help="overwrite FILE if it is a regular file; nothing else is ever"
                   " replaced")
    p.add_argument("--flush", type=duration_arg, default=10**9, metavar="DURATION",
                   help="write buffered records this often: a crash loses at most this much"
                   " (default 1s)")
    p.add_argument("--no-wait", action="store_true",
                   help="exit at once if the agent is not running, instead of waiting")
    ring = p.add_argument_group("flight recorder")
    ring.add_argument("--ring", type=path_arg, metavar="DIR",
                      help="keep a rolling window in segment files in DIR")
    ring.add_argument("--max-size", type=_arg_ring_size, metavar="SIZE",
                      help=f"bound the segments' total size: {SIZE_HELP} (default 100M)")
    ring.add_argument("--max-age", type=duration_arg, metavar="DURATION",
                      help="delete segments older than DURATION (default: size bound only)")
    ring.add_argument("-c", "--config", type=path_arg, metavar="FILE",
                      help="read [[trigger]] rules from this config file (default:"
                      f" {SYSTEM_CONFIG} if it exists): each writes a window of the ring"
                      " to DIR/dumps/ when its condition holds")
    ring.add_argument("--segment-size", type=_arg_size, help=argparse.SUPPRESS)
    ring.add_argument("--segment-age", type=duration_arg, help=argparse.SUPPRESS)
    # Tests and replays: read records from a recording or JSON lines ("-": stdin).
    p.add_argument("--source-file", metavar="FILE", help=argparse.SUPPRESS)
    p.set_defaults(func=run_record)

