"""The dashboard's pages and their charts, derived from the metric catalog.

A page is one declaration: its title and the samplers whose families it shows. Every
chart is derived from those families' declarations (``metrics.family``):

* a family without labels, or labelled by CPU only (summed over CPUs), gets one chart per
  kind and unit of its counters and gauges, a series per metric;
* a family with other labels (device, interface, cgroup, process...) gets one chart per
  metric, a series per label value (the ``TOP`` largest over the range shown);
* a histogram gets one chart of its percentiles over each interval (merged over its
  labels), drawn as bands.

Counters are drawn as rates per second, gauges as their level.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ...metrics import catalog
from ...metrics.family import Family, Kind, Metric

#: The label summed over rather than drawn as series: a per-CPU family is shown whole.
SUMMED_LABEL = "cpu"
#: The series a labelled chart draws: the largest over the range shown.
TOP = 8
#: The percentiles a histogram's chart draws, as (series name, quantile), low to high.
BANDS = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


@dataclass(frozen=True)
class Page:
    """One page of the dashboard: the samplers whose families it charts."""

    name: str
    title: str
    samplers: tuple[str, ...]

    @property
    def charts(self) -> tuple[Chart, ...]:
        """Return the page's charts, in the catalog's order."""
        return charts_of(self)

    @property
    def events(self) -> tuple[str, ...]:
        """Return the events the page's charts read."""
        return tuple(dict.fromkeys(c.family.event for c in self.charts))


#: Every page, in the navigation's order.
PAGES: tuple[Page, ...] = (
    Page("cpu", "CPU", ("cpu_usage", "cpu_frequency", "cpu_interrupts", "cpu_softirq",
                        "cpu_softirq_time", "cpu_migrations", "perf_software",
                        "perf_hardware")),
    Page("memory", "Memory", ("memory",)),
    Page("scheduler", "Scheduler", ("scheduler", "scheduler_runqueue", "syscall")),
    Page("disks", "Disks", ("blockio", "blockio_requests")),
    Page("network", "Network", ("network", "network_protocol", "network_traffic", "tcp",
                                "tcp_traffic")),
    Page("cgroups", "Cgroups", ("cgroup", "cgroup_scheduler")),
    Page("processes", "Processes", ("processes",)),
    Page("agent", "Agent", ("agent",)),
)


@dataclass(frozen=True)
class Chart:
    """One chart: metrics of one family, as series per metric, per label or percentile.

    ``by_label``: a series per label value (one metric); else a series per metric, summed
    over ``SUMMED_LABEL``. ``metrics`` hold one histogram for a chart of percentiles.
    """

    id: str
    title: str
    unit: str
    family: Family
    metrics: tuple[Metric, ...]
    by_label: bool

    @property
    def kind(self) -> Kind:
        """Return what the chart's metrics are (all of one kind)."""
        return self.metrics[0].kind

    @property
    def bands(self) -> bool:
        """Return whether the chart draws a histogram's percentiles as bands."""
        return self.kind is Kind.HISTOGRAM


def _unit(m: Metric) -> str:
    return f"{m.unit}/s" if m.kind is Kind.COUNTER else m.unit


def _family_charts(f: Family) -> list[Chart]:
    labelled = any(lb.name != SUMMED_LABEL for lb in f.labels)
    out: list[Chart] = []
    if labelled:
        for m in f.scalars:
            out.append(Chart(f"{f.event}.{m.name}", f"{f.event} {m.name}", _unit(m), f,
                             (m,), True))
    else:
        groups: dict[tuple[Kind, str], list[Metric]] = {}
        for m in f.scalars:
            groups.setdefault((m.kind, m.unit), []).append(m)
        for (_kind, _u), ms in groups.items():
            name = ms[0].name if len(ms) == 1 else _unit(ms[0])
            title = f.event + (" (all CPUs)" if f.labels else "") + f" {name}"
            out.append(Chart(f"{f.event}.{ms[0].name}", title, _unit(ms[0]), f, tuple(ms),
                             False))
    if (h := f.histogram) is not None:
        out.append(Chart(f"{f.event}.{h.name}", f"{f.event} {h.name} percentiles", h.unit, f,
                         (h,), False))
    return out


@cache
def charts_of(page: Page) -> tuple[Chart, ...]:
    """Return the charts of ``page``'s samplers' families."""
    return tuple(c for f in catalog.FAMILIES if f.sampler in page.samplers
                 for c in _family_charts(f))


def page(name: str) -> Page | None:
    """Return the page called ``name``, or None."""
    return next((p for p in PAGES if p.name == name), None)


def all_events() -> tuple[str, ...]:
    """Return every event some page reads."""
    return tuple(dict.fromkeys(e for p in PAGES for e in p.events))
