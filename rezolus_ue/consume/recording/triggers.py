"""Triggered dumps: ``[[trigger]]`` rules that make the flight recorder keep a window.

A rule watches one metric of one event (``config.TRIGGER_OPTIONS``: a counter as its rate
per second, a gauge as its value, a histogram or ``_dist`` metric by a percentile), its
series combined into one value per publish interval (max, min, sum or mean). It *fires*
once the value was above (or below) its threshold ``for`` intervals in a row; its window
runs from ``before`` ahead of the first of them to ``after`` past the last interval in
which it held, and is due once that much data time has passed without it holding again
(holding on extends the window, up to ``HOLD_LIMIT_NS``). Until then the rule does not
fire again: one incident, one file.

``Triggers`` is pure (publish intervals in, due ``Window``s out: unit-tested per
interval); ``TriggerDumps`` is the recorder's side, which writes each due window from the
ring's segments to ``dumps/trigger-<rule>-<time>.rzr`` and logs one line.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...config import format_duration
from ...errors import ConfigError
from ...metrics.family import Family, Kind
from ..intervals import Interval, Intervals, Rates
from ..records import Record
from .blocks import NATIVE_SUFFIX, MappedFile
from .dump import assemble
from .ring import DUMPS_DIR, Ring

log = logging.getLogger("rezolus_ue")

#: A condition that holds on is dumped after holding this long: a window must end.
HOLD_LIMIT_NS = 3600 * 10**9
_COMBINE = {"max": max, "min": min, "sum": sum, "mean": lambda v: sum(v) / len(v)}


def _families() -> dict[str, tuple[Family, bool]]:
    """Return every family by its event and by its ``_dist`` event (the bool)."""
    from ...metrics import catalog

    out: dict[str, tuple[Family, bool]] = {}
    for f in catalog.FAMILIES:
        out[f.event] = (f, False)
        if f.dist_schema is not None:
            out[f.dist_schema.name] = (f, True)
    return out


@dataclass(frozen=True)
class Rule:
    """One checked ``[[trigger]]`` rule."""

    name: str
    event: str
    metric: str
    #: The record field holding the value ("": the metric's own field).
    field: str
    counter: bool  # compare the rate per second
    dist: bool  # a _dist event: its records are filtered by their ``metric``
    labels: tuple[str, ...]
    over: str
    above: float | None
    below: float | None
    intervals: int
    before_ns: int
    after_ns: int

    @classmethod
    def from_config(cls, rule: Mapping[str, object], where: object = "<config>") -> Rule:
        """Return the rule for one of ``Config.triggers``; raise a one-line ConfigError
        naming the rule and the key if its event, metric or percentile do not fit."""
        name, event, metric = str(rule["name"]), str(rule["event"]), str(rule["metric"])
        pct = str(rule["percentile"])
        what = f"{where}: [[trigger]] {name!r}"
        fam = _families().get(event)
        if fam is None:
            raise ConfigError(f"{what} event: unknown event {event!r} (see `rezolus-ue"
                              " events`)")
        family, dist = fam
        metrics = {m.name: m for m in family.metrics if not dist or m.dist}
        m = metrics.get(metric)
        if m is None:
            raise ConfigError(f"{what} metric: {event} has no metric {metric!r}; it has "
                              + ", ".join(metrics))
        needs = dist or m.kind is Kind.HISTOGRAM
        if needs and not pct:
            raise ConfigError(f"{what} percentile: {event} {metric} needs one (p50, p90,"
                              " p99 or max)")
        if not needs and pct:
            raise ConfigError(f"{what} percentile: {event} {metric} is a {m.kind.value},"
                              " which has no percentiles")
        schema = family.dist_schema if dist else family.schema
        fields = {f.name for f in schema.fields} if schema is not None else set()
        field = pct if needs else metric
        if field not in fields:
            raise ConfigError(f"{what} percentile: {event} has no {pct}")
        return cls(name, event, metric, field, m.kind is Kind.COUNTER and not needs, dist,
                   tuple(lb.name for lb in family.labels), str(rule["over"]),
                   _num(rule["above"]), _num(rule["below"]), int(rule["for"]),  # type: ignore[call-overload]
                   int(rule["before"]), int(rule["after"]))  # type: ignore[call-overload]

    def holds(self, value: float) -> bool:
        """Return whether ``value`` meets the condition."""
        return (self.above is not None and value > self.above) or (
            self.below is not None and value < self.below)

    def condition(self) -> str:
        """Return the condition as the log line says it."""
        pct = f" {self.field}" if self.field != self.metric else ""
        op = f"> {self.above:g}" if self.above is not None else f"< {self.below:g}"
        unit = "/s" if self.counter else ""
        return (f"{self.over} {self.event} {self.metric}{pct}{unit} {op} for"
                f" {self.intervals} interval{'s' if self.intervals > 1 else ''}")


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def rules(config_rules: Iterable[Mapping[str, object]], where: object = "<config>"
          ) -> list[Rule]:
    """Return the checked rules of ``Config.triggers``."""
    return [Rule.from_config(r, where) for r in config_rules]


@dataclass(frozen=True)
class Window:
    """A fired rule's window of data time, due to be written."""

    rule: Rule
    start_ns: int  # ``before`` ahead of the first interval that held
    end_ns: int  # ``after`` past the last
    fired_ns: int  # the end of the interval it fired in
    peak: float  # the value furthest past the threshold


class _State:
    __slots__ = ("last_hold", "peak", "pending", "rates", "run", "run_start")

    def __init__(self) -> None:
        self.rates = Rates()
        self.run = 0
        self.run_start = 0
        self.pending: tuple[int, int] | None = None  # (first interval's start, fired at)
        self.last_hold = 0
        self.peak = 0.0


class Triggers:
    """The rules' state, advanced one publish interval at a time. Pure: no clock, no I/O."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self._state = [_State() for _ in self.rules]

    def value(self, i: int, iv: Interval) -> float | None:
        """Return rule ``i``'s combined value in ``iv`` (None: no series had one)."""
        rule, st = self.rules[i], self._state[i]
        vals: list[float] = []
        for r in iv.records:
            if r.event != rule.event or (rule.dist and r.fields.get("metric") != rule.metric):
                continue
            v = r.fields.get(rule.field)
            if not isinstance(v, int | float):
                continue
            if rule.counter:
                rate = st.rates.rate(tuple(r.fields.get(n) for n in rule.labels), int(v),
                                     r.time_ns)
                if rate is None:
                    continue
                v = rate
            vals.append(float(v))
        return _COMBINE[rule.over](vals) if vals else None  # type: ignore[operator]

    def feed(self, iv: Interval) -> list[Window]:
        """Take one publish interval; return the windows it made due."""
        out: list[Window] = []
        for i, rule in enumerate(self.rules):
            st = self._state[i]
            v = self.value(i, iv)
            held = v is not None and rule.holds(v)
            if held:
                if st.run == 0:
                    st.run_start = iv.start_ns
                st.run += 1
                st.last_hold = iv.end_ns
            else:
                st.run = 0
            if st.pending is None:
                if held and st.run >= rule.intervals:
                    st.pending, st.peak = (st.run_start, iv.end_ns), v  # type: ignore[assignment]
                continue
            if held:
                assert v is not None
                st.peak = max(st.peak, v) if rule.above is not None else min(st.peak, v)
            if (not held and iv.end_ns >= st.last_hold + rule.after_ns) or (
                    iv.end_ns - st.pending[0] >= HOLD_LIMIT_NS):
                out.append(self._close(i))
                st.run = 0
        return out

    def flush(self) -> list[Window]:
        """Return every fired window now (the recording ends): what was held is written."""
        return [self._close(i) for i, st in enumerate(self._state) if st.pending is not None]

    def _close(self, i: int) -> Window:
        rule, st = self.rules[i], self._state[i]
        assert st.pending is not None
        start, fired = st.pending
        st.pending = None
        return Window(rule, start - rule.before_ns, st.last_hold + rule.after_ns, fired,
                      st.peak)


# --- the recorder's side --------------------------------------------------------------


class TriggerDumps:
    """The recorder's triggers: ``feed`` the records as they come; when ``due``, write the
    ring's buffered records, then call ``write`` (each window in a thread of its own, as
    ``SIGUSR1``'s dumps are); ``close`` writes what fired but is not due yet."""

    def __init__(self, rules: Sequence[Rule], ring: Ring) -> None:
        self.triggers = Triggers(rules)
        self.intervals = Intervals()
        self.ring = ring
        self._due: list[Window] = []
        self._threads: list[threading.Thread] = []

    @property
    def due(self) -> bool:
        """Return whether a window waits to be written."""
        return bool(self._due)

    def feed(self, records: list[Record]) -> None:
        """Take records as the recorder reads them."""
        for iv in self.intervals.feed(records):
            self._due += self.triggers.feed(iv)

    def write(self) -> None:
        """Start writing every due window from the ring's segments (written first)."""
        for win in self._due:
            out = self._path(win.rule.name)
            t = threading.Thread(target=self._run, name="rezolus-trigger", daemon=False,
                                 args=(self.ring.snapshot(), out, win))
            t.start()
            self._threads.append(t)
        self._due = []
        self._threads = [t for t in self._threads if t.is_alive()]

    def close(self) -> None:
        """Write the windows that fired (the recording stops), then wait for every write."""
        for iv in self.intervals.flush():
            self._due += self.triggers.feed(iv)
        self._due += self.triggers.flush()
        self.write()
        for t in self._threads:
            t.join()

    def _path(self, name: str) -> Path:
        d = self.ring.root / DUMPS_DIR
        d.mkdir(exist_ok=True)
        stem = f"trigger-{name}-" + time.strftime("%Y%m%d-%H%M%S")
        path, k = d / f"{stem}{NATIVE_SUFFIX}", 1
        while path.exists():
            k += 1
            path = d / f"{stem}-{k}{NATIVE_SUFFIX}"
        return path

    def _run(self, files: list[MappedFile], out: Path, win: Window) -> None:
        rule = win.rule
        try:
            res = assemble(files, out, window=(win.start_ns, win.end_ns))
            log.info("trigger %s fired (%s; peak %g): wrote %s, %d records, %s before to %s"
                     " after", rule.name, rule.condition(), win.peak, out, res.records,
                     format_duration(rule.before_ns) if rule.before_ns else "0s",
                     format_duration(rule.after_ns) if rule.after_ns else "0s")
        except Exception as e:  # a dump must never take the recorder down
            log.warning("trigger %s fired (%s) but its dump failed: %s", rule.name,
                        rule.condition(), e)
        finally:
            for f in files:
                with contextlib.suppress(Exception):
                    f.close()


def load_rules(path: Path | None) -> list[Rule]:
    """Return the ``[[trigger]]`` rules of config ``path`` (None: the system config, if
    there is one, as ``run`` reads it)."""
    from ...config import SYSTEM_CONFIG, load
    from ...samplers import options

    if path is None:
        if not SYSTEM_CONFIG.exists():
            return []
        path = SYSTEM_CONFIG
    cfg = load(path, options())
    return rules(cfg.triggers, path)


__all__ = ["HOLD_LIMIT_NS", "Rule", "TriggerDumps", "Triggers", "Window", "load_rules",
           "rules"]
