"""``rezolus-ue top``: a full-screen, top-style view of the agent's tracepoints.

One module per panel (``header``, ``cpu``, ``memory``, ``samplers``, ``scheduler``,
``disks``, ``network``, ``cgroups``, ``processes``), each declaring the events it reads,
how it derives its rows from a frame, its columns and sort keys, and how it draws; the
``registry`` lists them, and top subscribes to what they read. Beneath them:

* ``frame``: ``Model`` ingests records and commits one ``View`` of every panel's rows per
  display interval of *data* time (a frame is drawn when an agent tick's records have
  arrived, never on a timer of its own);
* ``layout`` (what a panel is; how panels share the lines), ``widgets`` (formats, bars,
  tables, the screen's lines) and ``keys`` (the UI state and the keys that change it);
* ``screen``: ``render(model, width, height, ui)``, pure: a rich ``Text`` of exactly the
  screen's lines from the latest view.

* ``replay``: ``--from``'s recording, indexed by publish interval, and the clock that
  plays it (pause, step, seek, speed).

This module does the I/O: it polls the record source (live: ``loop``), or plays a
recording (``replay_loop``), reads keys from stdin in cbreak mode (restoring the terminal
on any exit) and redraws the alternate screen (``AltScreen``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import select
import signal
import sys
import termios
import textwrap
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from ...config import path_arg
from ...errors import RezolusError
from ..records import Record
from ..source import COSTLY_HELP, RECORDING_HELP
from .frame import Model
from .keys import KEYS, UiState, handle_key, keys_for, split_keys
from .registry import COSTLY_EVENTS, TOP_EVENTS, complete, feed_events, new_model, top_events
from .replay import SPEEDS, Playback, Replay, parse_goto
from .screen import render, render_screen

# --- I/O: terminal, subscription, loop --------------------------------------------------

#: How long the data must be quiet before the agent's tick counts as complete.
SETTLE_MS = 100
#: Longest wait for records before looking at the keyboard again.
KEY_POLL_MS = 100


@contextlib.contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Put the terminal in cbreak mode (keys unbuffered, no echo; Ctrl-C still works);
    restore it on exit, whatever the exit."""
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def read_keys(fd: int, timeout_s: float = 0.0) -> list[str]:
    """Return the keys waiting on ``fd`` (waiting up to ``timeout_s`` for the first)."""
    ready, _, _ = select.select([fd], [], [], timeout_s)
    if not ready:
        return []
    try:
        data = os.read(fd, 256)
    except (BlockingIOError, InterruptedError):
        return []
    return split_keys(data.decode(errors="replace"))


class AltScreen:
    """The terminal's alternate screen, redrawn whole from each ``Screen`` (as
    ``Live(screen=True, auto_refresh=False)`` with ``update(refresh=True)``, which the
    loop's tests stand in for): the cursor hidden meanwhile, both restored on exit."""

    def __init__(self, console: Any) -> None:
        self.console = console

    def __enter__(self) -> AltScreen:
        self.console.set_alt_screen(True)
        self.console.show_cursor(False)
        return self

    def __exit__(self, *exc: object) -> None:
        self.console.show_cursor(True)
        self.console.set_alt_screen(False)

    def update(self, screen: Any, refresh: bool = True) -> None:
        """Draw ``screen`` (a ``widgets.Screen``) at once."""
        size = self.console.size
        self.console.file.write(screen.ansi(self.console, size.width, size.height))
        self.console.file.flush()


class Paced:
    """A recording replayed at the pace it was recorded: data time follows wall time from
    the first record on, so ``top --from`` plays frames as the live top drew them."""

    live = False
    lost = 0

    def __init__(self, src: Any, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.src = src
        self.events = src.events
        self._buf: collections.deque = collections.deque()
        self._start: tuple[int, int] | None = None  # (wall, data) time of the first record
        self._clock = clock

    @property
    def exhausted(self) -> bool:
        """Return whether every record was replayed."""
        return self.src.exhausted and not self._buf

    def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
        """Return the records whose time has come, waiting up to ``timeout_ms``."""
        if not self._buf and not self.src.exhausted:
            self._buf.extend(self.src.poll(0))
        now = self._clock()
        if self._buf and self._start is None:
            self._start = (now, self._buf[0].time_ns)
        due = -1 if self._start is None else self._start[1] + now - self._start[0]
        out = []
        while self._buf and self._buf[0].time_ns <= due:
            out.append(self._buf.popleft())
        if not out:
            wait_ns = timeout_ms * 10**6
            if self._buf:
                wait_ns = min(wait_ns, self._buf[0].time_ns - due)
            time.sleep(max(0, wait_ns) / 1e9)
        return out

    def close(self) -> None:
        """Close the recording."""
        self.src.close()


def subscribe(model: Model, costly: bool = False, wait: bool = True) -> Any:
    """Return a Subscription to ``top_events(costly)`` that never blocks: it subscribes
    as the agent registers events and sets ``model.waiting`` to why nothing comes. Without
    ``wait``, raise that reason at once instead."""
    from ..subscription import Subscription

    def note(message: str) -> None:
        model.waiting = message

    sub = Subscription(top_events(costly) + feed_events(), lazy=True, on_state=note,
                       asked=False)
    if not wait and not sub.ready:
        sub.close()
        raise RezolusError(sub.state or "no rezolus-ue event is registered")
    return sub


def read_loadavg(path: str = "/proc/loadavg") -> tuple[float, float, float] | None:
    """Return the 1, 5 and 15 minute load averages, or None where they cannot be read.

    The one figure top reads itself: no event carries it, and top runs on the host it
    shows (a subscription reads this host's tracepoints only).
    """
    try:
        with open(path, "rb") as f:
            one, five, fifteen = f.read(64).split()[:3]
        return float(one), float(five), float(fifteen)
    except (OSError, ValueError):
        return None


def _run_once(model: Model, wait: bool, source: str | None = None,
              costly: bool = False) -> int:
    from rich.console import Console

    from ...api import open_source

    with open_source(source, top_events(costly) + feed_events(), wait=wait,
                     asked=False) as sub:
        model.subscribed = tuple(sub.events)
        # The second frame is the first with a full interval; a third if we started
        # mid-tick and some rows had no earlier record to take a rate from.
        while model.frames < 2 or (model.frames < 3 and not complete(model.view)):
            if sub.exhausted:  # a recording too short for a full interval: what it has
                model.flush()
                break
            recs = sub.poll(SETTLE_MS)
            if recs:
                model.ingest(recs)
            else:
                model.flush()
            model.lost = sub.lost
    model.loadavg = read_loadavg() if source is None else None
    console = Console(highlight=False)
    width, height = console.size
    if not console.is_terminal:
        height = 10_000  # for scripts: every row, not a screenful
    console.print(render(model, width, height, UiState(interval_s=model.interval_ns / 1e9,
                                                       interactive=False, costly=costly)))
    return 0


def _run_live(model: Model, ui: UiState, wait: bool, source: str | None = None) -> int:
    from rich.console import Console

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise RezolusError("top needs a terminal; for a snapshot in scripts use --once")
    pb = None if source is None else Playback(open_replay(source))
    # With --no-wait, subscribe before the screen: its error prints as one plain line.
    # Else the loop subscribes after the first screen is drawn: opening a perf event per
    # event and CPU takes seconds on a slow machine, and the screen says what top awaits.
    sub = None if wait or pb is not None else subscribe(model, ui.costly, wait=False)
    console = Console(highlight=False)
    fd = sys.stdin.fileno()

    def on_term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwind through the finally blocks: restore the terminal

    old_term = signal.signal(signal.SIGTERM, on_term)
    subs = [sub]  # the loop replaces it once the agent appears; closed here either way
    try:
        with cbreak(fd), AltScreen(console) as live:
            if pb is not None:
                replay_loop(pb, model, ui, live, console, fd)
            else:
                loop(subs, model, ui, live, console, fd)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if subs[0] is not None:
            subs[0].close()
    return 0


def loop(subs: list, model: Model, ui: UiState, live: Any, console: Any, fd: int, *,
          replay: bool = False) -> None:
    """Poll records and keys; redraw when a frame is committed, a key changed the UI,
    the terminal was resized, or (only while no data comes) once a second to say so.
    ``replay``: a recording, whose host's load average is not this one's, and whose
    costly events cost nothing: they are always read. Key c changes the subscription:
    the loop closes it and subscribes again to ``top_events(ui.costly)``."""
    sub = subs[0]
    costly = ui.costly
    drawn: tuple = ()
    last_data = time.monotonic()
    if sub is None:  # the first screen, before subscribing
        size = console.size
        live.update(render_screen(model, size.width, size.height, ui), refresh=True)
    while True:
        now = time.monotonic()
        keys: list[str] = []
        if sub is None:
            sub = subs[0] = subscribe(model, costly)
            model.subscribed = tuple(sub.events)
            keys = read_keys(fd, 0.0)
        else:
            recs = sub.poll(SETTLE_MS if model.batch_open else KEY_POLL_MS)
            now = time.monotonic()
            if recs:
                model.ingest(recs)
                last_data = now
            elif model.batch_open and (now - last_data >= SETTLE_MS / 1000 or sub.exhausted):
                model.flush()
            if sub.exhausted:
                last_data = now  # the end of a recording: nothing is late
            model.lost = sub.lost
            model.subscribed = tuple(sub.events)
            keys = read_keys(fd)
        for k in keys:
            ui = handle_key(ui, k)
        if ui.quit:
            return
        if replay:
            ui = replace(ui, costly=True)
        elif ui.costly != costly and sub is not None:
            sub.close()  # its perf events go: the agent detaches what no one else needs
            sub = subs[0] = None
            model.subscribed = None
        costly = ui.costly
        model.interval_ns = int(ui.interval_s * 1e9)
        model.hold = ui.paused
        silent = now - last_data if sub is not None else 0.0
        stale = int(silent) if silent >= max(3 * ui.interval_s, 3.0) else 0
        size = console.size
        state = (model.frames, size, stale, ui, model.subscribed, model.waiting)
        if state != drawn:
            drawn = state
            model.loadavg = None if replay else read_loadavg()
            live.update(render_screen(model, size.width, size.height,
                                      replace(ui, silent_s=silent)), refresh=True)


def open_replay(source: str | os.PathLike[str]) -> Replay:
    """Return ``source``'s replay: top's events and the agent's tick records, which mark
    the publish intervals exactly."""
    from ..intervals import EVENT, split
    from ..recording import read_meta, read_records

    meta = read_meta(source)
    return Replay(split(read_records(source, (*TOP_EVENTS, *feed_events(), EVENT))),
                  int(meta.get("wall_offset_ns", 0) or 0))


#: At full speed, the longest the replay loop feeds intervals between two screens.
MAX_SPEED_BUDGET_S = 0.05


def feed(model: Model, records: list[Record]) -> None:
    """Give ``model`` one whole publish interval: its batch ends with it."""
    model.ingest(records)
    model.flush()


def rebuild(pb: Playback, model: Model, i: int) -> Model:
    """Return a fresh model showing interval ``i``: fed from the intervals one frame
    before it, so its first frame is a frame's interval back and ``i``'s has rates."""
    r = pb.replay
    fresh = new_model(model.interval_ns / 1e9, host=model.host, kernel=model.kernel)
    fresh.subscribed = model.subscribed
    if i < 0:
        return fresh
    period = r.ends[i] - r.ends[i - 1] if i > 0 else model.interval_ns
    back = max(1, round(model.interval_ns / max(period, 1)))
    for j in range(max(0, i - back), i + 1):
        feed(fresh, r.interval(j))
    pb.jump(i)
    return fresh


def steer(pb: Playback, model: Model, ui: UiState) -> tuple[Model, UiState]:
    """Make ``ui.jump``'s move: return the model to show and the state, the move done."""
    kind, arg = ui.jump  # type: ignore[misc]
    ui = replace(ui, jump=None)
    r = pb.replay
    if kind == "step":
        frames = model.frames
        while model.frames == frames and r.read(pb.shown + 1):
            pb.jump(pb.shown + 1)
            feed(model, r.interval(pb.shown))
        return model, ui
    r.read(0)  # the recording's start
    now = r.ends[pb.shown] if 0 <= pb.shown < len(r) else (r.first_ns or 0)
    if kind == "by":
        target = now + int(arg)  # type: ignore[call-overload]
    else:
        try:
            target = parse_goto(str(arg), r.first_ns or 0, now, r.wall_offset_ns)
        except ValueError as e:
            return model, replace(ui, goto_error=str(e))
    return rebuild(pb, model, r.find(target)), ui


def replay_loop(pb: Playback, model: Model, ui: UiState, live: Any, console: Any,
                fd: int) -> None:
    """Play ``pb``'s recording: feed each interval when due at the chosen speed (one whole
    interval, one batch), make the keys' moves, and redraw when a frame is committed, a
    key changed the UI or the position moved. Costly events are in the recording: read."""
    ui = replace(ui, replay=True, costly=True)
    drawn: tuple = ()
    model.subscribed = TOP_EVENTS
    while True:
        wait = KEY_POLL_MS / 1000 if pb.paused or pb.ended else min(
            pb.wait_ns() / 1e9, KEY_POLL_MS / 1000)
        keys = read_keys(fd, wait)
        for k in keys:  # each move made before the next key: "[." steps from a minute back
            ui = handle_key(ui, k)
            if ui.quit:
                return
            model.interval_ns = int(ui.interval_s * 1e9)
            if ui.paused != pb.paused:
                pb.set_paused(ui.paused)
            if SPEEDS[ui.speed] != pb.speed:
                pb.set_speed(SPEEDS[ui.speed])
            if ui.jump is not None:
                model, ui = steer(pb, model, ui)
        if not keys:
            until = time.monotonic() + MAX_SPEED_BUDGET_S
            while due := pb.due():
                for i in due:
                    feed(model, pb.replay.interval(i))
                if time.monotonic() >= until:
                    break
        ui = replace(ui, position=pb.position())
        size = console.size
        state = (id(model), model.frames, size, ui)
        if state != drawn:
            drawn = state
            live.update(render_screen(model, size.width, size.height, ui), refresh=True)


def run(args: argparse.Namespace) -> int:
    """Run ``rezolus-ue top``; return the exit status."""
    if args.source is None:
        uname = os.uname()
        model = new_model(args.interval, host=uname.nodename, kernel=uname.release)
    else:  # the recording's host, as far as it says
        from ..recording import read_meta

        model = new_model(args.interval, host=str(read_meta(args.source).get("hostname", "")))
    # A recording's costly events cost nothing to replay: read them all.
    costly = args.costly or args.source is not None
    if args.once:
        return _run_once(model, wait=not args.no_wait, source=args.source, costly=costly)
    return _run_live(model, UiState(interval_s=args.interval, costly=costly),
                     wait=not args.no_wait, source=args.source)


def _seconds(text: str) -> float:
    from ...config import parse_duration

    try:
        s = float(text)  # a bare number is seconds, as in top -d
    except ValueError:
        try:
            s = parse_duration(text) / 1e9
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    if not 0.1 <= s <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: expected 100ms to 1h")
    return s


_EPILOG = textwrap.fill(  # each key's text on one line: no-break spaces while filling
    "; ".join(f"{k.keys} {k.what}{' (--from)' if k.replay else ''}".replace(" ", "\xa0")
              for k in KEYS if not k.replay or all(j.keys != k.keys for j in keys_for(False))),
    88,
    initial_indent="keys: ", subsequent_indent="      ").replace("\xa0", " ") + """

examples:
  sudo rezolus-ue top                     watch (waits for the agent if it is not running)
  sudo rezolus-ue top --interval 2s       redraw every 2 s of data
  sudo rezolus-ue top --once > top.txt    one full frame, every row, for scripts
  sudo rezolus-ue top --costly            with the BPF-counted latency histograms too
  rezolus-ue top --from run.rzr           replay a recording at the pace it was recorded:
                                          pause, step, seek and speed it with the keys

top subscribes only to the cheap events its panels show, so the agent samples nothing
else for it:
""" + textwrap.fill(", ".join(top_events(False)), 88, initial_indent="  ",
                    subsequent_indent="  ") + """

and with --costly (or key c) to the costly ones too, whose BPF programs every syscall,
context switch, softirq, IO or packet pays for while top runs:
""" + textwrap.fill(", ".join(COSTLY_EVENTS), 88, initial_indent="  ",
                    subsequent_indent="  ") + """

Applications' OpenTelemetry metrics (otlp_metrics, from any process; with the otel extra)
are read too, never waited for: the APP METRIC table shows once one publishes."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``top`` subcommand."""
    p = sub.add_parser(
        "top", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="full-screen live view: CPU, memory, scheduler, disks, network, cgroups,"
        " processes",
        description="A top-style view of the running agent's tracepoints: load and pressure\n"
        "stalls, per-CPU busy bars with the interval's peak, memory, scheduler activity\n"
        "and histograms, disk and network rates, the busiest cgroups and processes,\n"
        "applications' OpenTelemetry metrics, and the samplers that failed or cannot\n"
        "run, with why (key e lists every sampler).\n"
        "Redraws when an interval's records have arrived, not on a timer of its own.",
        epilog=_EPILOG,
    )
    p.add_argument("-i", "--interval", type=_seconds, default=1.0, metavar="DURATION",
                   help="display refresh: redraw once this much data time has passed"
                   " (default 1s; 2, 500ms, 5s; frames never come faster than the agent"
                   " publishes)")
    p.add_argument("--no-wait", action="store_true",
                   help="exit with a message if the agent is not running, instead of waiting")
    p.add_argument("--once", action="store_true",
                   help="print one frame to stdout after the first full interval and exit")
    p.add_argument("--costly", action="store_true",
                   help=COSTLY_HELP + "; top's latency histograms need them (key c"
                   " toggles them while it runs)")
    p.add_argument("--from", dest="source", type=path_arg, metavar="FILE",
                   help=f"replay {RECORDING_HELP} instead of the live tracepoints (every"
                   " event it holds: replaying costs nothing)")
    p.set_defaults(func=run)
