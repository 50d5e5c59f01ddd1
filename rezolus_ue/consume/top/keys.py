"""``rezolus-ue top``: the UI state (sort, filter, interval, pause, screens) and the keys
that change it. Pure: ``handle_key(ui, key)`` returns the next state. ``KEYS`` describes
every key once: the help screen and the key line are drawn from it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .replay import SEEK_LONG_NS, SEEK_SHORT_NS, SPEEDS, Position, fmt_speed
from .widgets import fmt_interval

#: Display intervals that ``+`` and ``-`` step through (seconds).
INTERVALS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class SortMode:
    """One sort mode: every table sorts by its own column for it (``Panel.sorts``)."""

    name: str
    key: str  # the key choosing it directly, as top's P and M ("": only s and S)
    what: str


#: Sort modes in the order ``s`` cycles through them.
SORT_MODES = (
    SortMode("cpu", "P", "CPU"),
    SortMode("mem", "M", "memory"),
    SortMode("io", "I", "IO"),
    SortMode("name", "", "name"),
)
_DIRECT = {m.key: i for i, m in enumerate(SORT_MODES) if m.key}

ESC, ENTER, BACKSPACE = "\x1b", "\n", "\x7f"
LEFT, RIGHT, PGUP, PGDN = "\x1b[D", "\x1b[C", "\x1b[5~", "\x1b[6~"
#: Replay seeks: each key's step in ns of data time.
SEEKS = {LEFT: -SEEK_SHORT_NS, RIGHT: SEEK_SHORT_NS, "[": -SEEK_LONG_NS, "]": SEEK_LONG_NS,
         PGUP: -SEEK_LONG_NS, PGDN: SEEK_LONG_NS}


@dataclass(frozen=True)
class UiState:
    """What the user chose: everything the screen needs besides the model."""

    interval_s: float = 1.0
    paused: bool = False
    sort: int = 0  # an index of SORT_MODES
    filter: str = ""
    editing: bool = False  # typing a filter after '/'
    help: bool = False
    #: The samplers screen: every sampler's state, errors and why (key e).
    samplers: bool = False
    quit: bool = False
    #: False for ``--once``: no key footer, no padding to the screen height.
    interactive: bool = True
    #: Seconds since the last record (set by the loop; shown when the agent goes quiet).
    silent_s: float = 0.0
    #: Subscribed to the costly events too (``--costly``, key c).
    costly: bool = False
    #: Replaying a recording (``--from``): the replay keys act, and ``paused`` stops it.
    replay: bool = False
    #: The replay's speed, an index of ``replay.SPEEDS``.
    speed: int = 0
    #: A move the loop makes and clears: ``("step", 0)``, ``("by", ns)``, ``("to", text)``.
    jump: tuple[str, object] | None = None
    #: The time being typed after ``g`` (None: not typing one).
    goto: str | None = None
    #: Why the last ``g`` was refused (shown until the next key).
    goto_error: str = ""
    #: Where the replay is (set by the loop; shown in the header).
    position: Position | None = None

    @property
    def mode(self) -> SortMode:
        """Return the sort mode."""
        return SORT_MODES[self.sort]


@dataclass(frozen=True)
class Key:
    """A key as the help screen and the key line show it."""

    keys: str  # as the help screen writes them
    short: str  # as the key line writes them ("": the help screen only)
    what: str  # in a word or three, as the key line and ``--help`` say it
    help: str  # the help screen's text
    drop: int  # the key line drops the highest first when narrow
    #: Acts only in a replay (``--from``): shown there only.
    replay: bool = False


_DIRECT_KEYS = tuple(m.key for m in SORT_MODES if m.key)

#: Every key, in the help screen's order.
KEYS = (
    Key("q", "q", "quit", "quit (closes this help first)", 0),
    Key("p, space", "p", "pause", "pause the display (data keeps being counted)", 2),
    Key("s / S", " ".join(("s", *_DIRECT_KEYS)), "sort", "cycle the sort mode: "
        + ", ".join(m.name for m in SORT_MODES) + " (each table's column for each: below)", 0),
    Key(" / ".join(_DIRECT_KEYS), "", "sort by " + ", ".join(
        m.what for m in SORT_MODES if m.key), "sort by " + ", ".join(
        m.what for m in SORT_MODES if m.key) + " (as top's P and M)", 0),
    Key("/", "/", "filter", "filter rows by label text (Enter keeps, Esc clears)", 1),
    Key("+ / -", "+/-", "interval", "slower / faster refresh ("
        + ", ".join(map(fmt_interval, INTERVALS)) + ")", 3),
    Key("e", "e", "samplers", "every sampler: state, errors and why (as the agent publishes"
        " them)", 1),
    Key("h, ?", "h", "help", "toggle this help", 0),
    Key("c", "c", "costly", "costly events on/off: the BPF-counted latency histograms, which"
        " every syscall, switch, IO or packet pays for while on (also --costly)", 1),
    Key("p, space", "spc", "pause", "pause or resume the replay", 1, replay=True),
    Key(". / n", ".", "step", "show the next interval (pauses)", 0, replay=True),
    Key("← / →", "←→", "±10s", f"seek back / forward {SEEK_SHORT_NS // 10**9} s", 0,
        replay=True),
    Key("[ / ], PgUp / PgDn", "[]", "±1m", f"seek back / forward {SEEK_LONG_NS // 10**9} s",
        2, replay=True),
    Key("g", "g", "go to", "go to a time: HH:MM:SS on the recording's clock, an offset from"
        " its start (90s, 5m) or from the interval shown (+10s, -1m)", 1, replay=True),
    Key("< / >", "<>", "speed", "slower / faster replay: "
        + ", ".join(map(fmt_speed, SPEEDS)), 1, replay=True),
)


def keys_for(replay: bool) -> tuple[Key, ...]:
    """Return the keys that act in a replay (``replay``) or on live data, in order: a
    replay's pause key replaces the live one."""
    if not replay:
        return tuple(k for k in KEYS if not k.replay)
    mine = {k.keys for k in KEYS if k.replay}
    return tuple(k for k in KEYS if k.replay or k.keys not in mine)


def step_interval(current: float, up: bool) -> float:
    """Return the next display interval above (or below) ``current`` in ``INTERVALS``."""
    if up:
        return next((v for v in INTERVALS if v > current + 1e-9), INTERVALS[-1])
    return next((v for v in reversed(INTERVALS) if v < current - 1e-9), INTERVALS[0])


def handle_key(ui: UiState, key: str) -> UiState:
    """Return the UI state after one key."""
    if ui.goto_error:
        ui = replace(ui, goto_error="")
    if ui.goto is not None:
        if key in (ENTER, "\r"):
            return replace(ui, goto=None, jump=("to", ui.goto) if ui.goto.strip() else None)
        if key == ESC:
            return replace(ui, goto=None)
        if key in (BACKSPACE, "\b"):
            return replace(ui, goto=ui.goto[:-1])
        if len(key) == 1 and key.isprintable():
            return replace(ui, goto=ui.goto + key)
        return ui
    if ui.editing:
        if key in (ENTER, "\r"):
            return replace(ui, editing=False)
        if key == ESC:
            return replace(ui, editing=False, filter="")
        if key in (BACKSPACE, "\b"):
            return replace(ui, filter=ui.filter[:-1])
        if key == "\x15":  # Ctrl-U, as in a shell
            return replace(ui, filter="")
        if len(key) == 1 and key.isprintable():
            return replace(ui, filter=ui.filter + key)
        return ui
    if ui.help and key in ("h", "?", ESC, "q"):
        return replace(ui, help=False)  # q closes help first, like less
    if ui.samplers and key in ("e", ESC, "q"):
        return replace(ui, samplers=False)
    if ui.replay and not ui.help and not ui.samplers:
        moved = _replay_key(ui, key)
        if moved is not None:
            return moved
    match key:
        case "q" | "Q":
            return replace(ui, quit=True)
        case "p" | " ":
            return replace(ui, paused=not ui.paused)
        case "s":
            return replace(ui, sort=(ui.sort + 1) % len(SORT_MODES))
        case "S":
            return replace(ui, sort=(ui.sort - 1) % len(SORT_MODES))
        case _ if key in _DIRECT:
            return replace(ui, sort=_DIRECT[key])
        case "/":
            return replace(ui, editing=True, help=False)
        case "+" | "=":
            return replace(ui, interval_s=step_interval(ui.interval_s, up=True))
        case "-" | "_":
            return replace(ui, interval_s=step_interval(ui.interval_s, up=False))
        case "h" | "?":
            return replace(ui, help=not ui.help, samplers=False)
        case "e":
            return replace(ui, samplers=True, help=False)
        case "c":
            return replace(ui, costly=not ui.costly)
        case _ if key == ESC and ui.filter:
            return replace(ui, filter="")
    return ui


def _replay_key(ui: UiState, key: str) -> UiState | None:
    """Return the state after a replay key, None if ``key`` is not one."""
    if key in SEEKS:
        return replace(ui, jump=("by", SEEKS[key]))
    match key:
        case "." | "n":
            return replace(ui, jump=("step", 0), paused=True)
        case "g":
            return replace(ui, goto="")
        case "<":
            return replace(ui, speed=max(ui.speed - 1, 0))
        case ">":
            return replace(ui, speed=min(ui.speed + 1, len(SPEEDS) - 1))
    return None


def split_keys(data: str) -> list[str]:
    """Return the keys in a chunk read from the terminal; escape sequences are one key each.

    Arrow and function keys (``ESC [ ... final``) come back whole, so they are ignored
    rather than read as ``[`` and a letter; a lone ESC is the Escape key.
    """
    keys: list[str] = []
    i = 0
    while i < len(data):
        c = data[i]
        if c == ESC and i + 1 < len(data) and data[i + 1] in "[O":
            j = i + 2
            while j < len(data) and not (data[j].isalpha() or data[j] == "~"):
                j += 1
            keys.append(data[i : j + 1])
            i = j + 1
        else:
            keys.append(ENTER if c == "\r" else c)
            i += 1
    return keys
