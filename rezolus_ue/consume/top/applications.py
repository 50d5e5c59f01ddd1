"""The APP METRIC table: the metrics applications publish with OpenTelemetry (the
``otlp_metrics`` tracepoint, any process), one row per metric, attribute set and process:
its value (a gauge's level, a sum's total, a histogram's mean), its rate per second (a
monotonic sum's, a histogram's count's) and the publisher's pid and command. Reads
``otlp_metrics`` as a ``Feed``: the panel shows only once an application publishes.

A delta point's rate is over the point's own interval (its start to its time: the
application's export interval); a cumulative one's, between its last two points. A
delta sum's value is the total of the deltas top has seen. A series goes when its
publisher has sent nothing for three of its export intervals (60 s each until measured,
the SDKs' default), and at most ``MAX_SERIES`` are kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...metrics.family import Kind
from ..otlp import EVENT, DataPoint, Decoder, available
from ..prometheus import APP_INTERVAL_NS, DEFAULT_MAX_APP_SERIES, attribute_text
from ..records import Record
from .frame import Feed, Frame, Model, View
from .keys import UiState
from .layout import Block, Panel, table_block
from .widgets import Col, clean, desc, fmt_bytes, fmt_num, fmt_value, rtrunc, sort_rows

#: Most series kept: as many as the exporter holds by default.
MAX_SERIES = DEFAULT_MAX_APP_SERIES
#: Export intervals without a point after which a series goes.
STALE = 3
#: Units shown as durations and as bytes (UCUM, as OpenTelemetry writes them).
_DURATIONS = ("ns", "us", "ms", "s")
_BYTES = "By"


@dataclass(frozen=True, slots=True)
class AppRow:
    """One series as a frame shows it; ``value``/``rate`` None when unknown."""

    metric: str
    attributes: str  # "key=value ..." in key order
    unit: str
    kind: str  # Kind.COUNTER/GAUGE/HISTOGRAM's value: what the number is
    value: float | None
    rate: float | None  # per second
    pid: int
    comm: str


class _Series:
    """One series' latest point and what its rate needs."""

    __slots__ = ("interval_ns", "point", "prev", "row", "t_ns", "total")

    def __init__(self) -> None:
        self.point: DataPoint | None = None
        self.prev: tuple[int, float] | None = None  # the point before: (time, count/value)
        self.total: float = 0  # a delta sum's deltas (integers stay integers)
        self.t_ns = 0  # when its latest record was written (the records' clock)
        self.interval_ns = 0  # its export interval, measured
        self.row: AppRow | None = None


def _count(p: DataPoint) -> float | None:
    """Return what a point counts: a sum's value, a histogram's count."""
    h = p.histogram or p.exponential
    return float(h.count) if h is not None else p.value


class Applications:
    """The panel's ``Accumulator``: every series' latest point, from records as they come.

    Records the decoder cannot read are counted (``malformed``), never said: top owns the
    terminal."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self.max_series = max_series
        self.dropped = 0  # points of new series beyond ``max_series``
        self._decoder: Decoder | None = None
        self._series: dict[tuple, _Series] = {}

    def add(self, record: Record) -> None:
        """Take one ``otlp_metrics`` record."""
        if self._decoder is None:
            self._decoder = Decoder(on_malformed=lambda _message: None)
        for p in self._decoder.points(record):
            self.add_point(p, record.time_ns)

    @property
    def malformed(self) -> int:
        """Return how many records could not be decoded."""
        return sum(self._decoder.malformed.values()) if self._decoder is not None else 0

    def add_point(self, p: DataPoint, t_ns: int) -> None:
        """Take one data point, from a record written at ``t_ns``."""
        key = (p.pid, p.comm, p.metric, tuple(sorted(
            (k, attribute_text(v)) for k, v in p.attributes.items())))
        s = self._series.get(key)
        if s is None:
            if len(self._series) >= self.max_series:
                self.dropped += 1
                return
            s = self._series[key] = _Series()
        if p.temporality == "delta":
            if p.time_ns > p.start_ns > 0:
                s.interval_ns = p.time_ns - p.start_ns
        elif s.point is not None and t_ns > s.t_ns:
            s.interval_ns = t_ns - s.t_ns
        if p.temporality != "delta" and s.point is not None:
            prev = _count(s.point)
            s.prev = (s.point.time_ns, prev) if prev is not None else None
        if p.kind == "sum" and p.temporality == "delta" and p.value is not None:
            s.total += p.value
        s.point, s.t_ns, s.row = p, t_ns, None

    def rows(self, now_ns: int, frame_ns: int = 0) -> tuple[AppRow, ...]:
        """Return every series' row at ``now_ns``, dropping those whose publisher has been
        silent for ``STALE`` export intervals (or display intervals, ``frame_ns``)."""
        gone = [k for k, s in self._series.items()
                if now_ns - s.t_ns > STALE * max(s.interval_ns or APP_INTERVAL_NS, frame_ns)]
        for k in gone:
            del self._series[k]
        out = []
        for (pid, comm, metric, attrs), s in self._series.items():
            if s.row is None:
                s.row = _row(s, pid, comm, metric, attrs)
            out.append(s.row)
        return tuple(out)


def _row(s: _Series, pid: int, comm: str, metric: str, attrs: tuple) -> AppRow:
    p = s.point
    assert p is not None
    kind, value, rate = Kind.GAUGE, p.value, None
    h = p.histogram or p.exponential
    if h is not None:
        kind = Kind.HISTOGRAM
        value = h.sum / h.count if h.sum is not None and h.count else None
    elif p.kind == "sum":
        kind = Kind.COUNTER if p.monotonic else Kind.GAUGE
        if p.temporality == "delta":
            value = s.total
    if h is not None or (p.kind == "sum" and p.monotonic):
        count = _count(p)
        if p.temporality == "delta":
            dt = p.time_ns - p.start_ns
            rate = count / dt * 1e9 if count is not None and dt > 0 and p.start_ns else None
        elif s.prev is not None and count is not None:
            t0, c0 = s.prev
            dt = p.time_ns - t0
            rate = (count - c0) / dt * 1e9 if dt > 0 and count >= c0 else None  # else reset
    text = " ".join(f"{k}={v}" for k, v in attrs)
    return AppRow(metric, text, p.unit, kind.value, value, rate, pid, comm)


def derive(f: Frame) -> tuple[AppRow, ...]:
    """Return every application series at the frame."""
    acc = f.feeds.get(EVENT)
    if not isinstance(acc, Applications):
        return ()
    frame_ns = int(f.dt_s * 1e9) if f.dt_s else 0
    return acc.rows(f.t_ns, frame_ns)


def rows(v: View) -> tuple[AppRow, ...]:
    """Return the application rows of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, tuple) else ()


def fmt(x: float | None, unit: str) -> str:
    """Return a value in its unit in a few cells: durations as 1.5ms, bytes as 1.5K,
    other numbers as 0.25, 123, 12.3k (the unit is the table's column)."""
    if x is None:
        return "-"
    sign, a = ("-", -x) if x < 0 else ("", x)
    if unit in _DURATIONS and a:
        return sign + fmt_value(a, unit)  # type: ignore[arg-type]
    if unit == _BYTES:
        return sign + fmt_bytes(a)
    if a == 0 or a >= 10:
        return sign + fmt_num(a)
    return sign + (f"{a:.0e}" if a < 0.001 else f"{a:.3g}")


def label(r: AppRow) -> str:
    """Return what the filter (key /) matches: metric, attributes, pid and command."""
    return f"{r.metric} {r.attributes} {r.pid} {r.comm}"


#: Sort keys by column, in ``keys.SORT_MODES`` order.
SORTS: dict[str, Callable[[AppRow], object]] = {
    "rate": lambda r: (desc(r.rate), r.metric),
    "value": lambda r: (desc(r.value), r.metric),
    "pid": lambda r: (r.pid, r.metric, r.attributes),
    "name": lambda r: (r.metric, r.attributes, r.pid),
}
COLS = (
    Col("APP METRIC", 28, lambda r: r.metric, fit=lambda r, w: rtrunc(clean(r.metric), w)),
    Col("attributes", 16, lambda r: r.attributes, label=True, flex=True, drop=3,
        fit=lambda r, w: rtrunc(clean(r.attributes), w)),
    Col("value", 8, lambda r: fmt(r.value, r.unit), key="value"),
    Col("rate/s", 8, lambda r: fmt(r.rate, r.unit if r.kind == Kind.COUNTER.value else ""),
        key="rate"),
    Col("unit", 9, lambda r: r.unit, label=True, drop=4,
        fit=lambda r, w: rtrunc(clean(r.unit), w)),
    Col("pid", 7, lambda r: str(r.pid), key="pid"),
    Col("comm", 15, lambda r: r.comm, label=True, drop=2,
        fit=lambda r, w: rtrunc(clean(r.comm), w)),
)


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the table's block (None until an application publishes)."""
    col = PANEL.sort(ui)
    shown = sort_rows(rows(model.view), SORTS[col], label, ui.filter)
    return table_block("APP METRIC", COLS, shown, width, col, 7)


NAME = "applications"
PANEL = Panel(
    NAME, (), derive, block, "wide",
    help=(("APP METRIC", "applications' OpenTelemetry metrics (otlp_metrics, any process):"
           " value (a gauge's level, a sum's total, a histogram's mean), rate per second"
           " (a counter's, a histogram's count's), pid and command; shown once one"
           " publishes"),),
    sorts=tuple(SORTS),
    feeds=(Feed(EVENT, Applications, available),))
