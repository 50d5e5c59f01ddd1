"""Pure tests of ``rezolus-ue exporter``: names, labels, TYPE/HELP, escaping, summaries,
classic histograms and staleness, on realistic records (packed and unpacked through the
real event schemas, ``_dist`` records from the agent's own ``Oversampler``).

Every exposition is checked with ``parse_strict``, a strict text-format 0.0.4 parser written
here; and with ``prometheus_client``'s parser when that package is installed.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from rezolus_ue.consume import exporter as ex
from rezolus_ue.consume import otlp
from rezolus_ue.consume import prometheus as prom
from rezolus_ue.consume.intervals import EVENT as TICK
from rezolus_ue.consume.records import APP_EVENTS, Record
from rezolus_ue.errors import ConfigError, RezolusError
from rezolus_ue.metrics import catalog, h2
from rezolus_ue.metrics.family import Family, Kind, Oversampler, histogram_records
from rezolus_ue.samplers.processes import OPTIONS as PROCESS_OPTIONS
from rezolus_ue.samplers.processes import PROCESS, PROCESSES
from rezolus_ue.schema import by_name, cheap

S = 1_000_000_000
MS = 1_000_000
SCHEMAS = by_name()
#: Applications' events, which the exporter follows beside ours where it can decode them.
APPS = list(APP_EVENTS) if otlp.available() else []

# --- realistic records ----------------------------------------------------------------------


def record(event: str, t_ns: int, *values: object) -> Record:
    """Return a Record as a consumer decodes it: packed and unpacked by the event schema."""
    schema = SCHEMAS[event]
    return Record(event, t_ns, 0, 4242, schema.unpack(schema.pack(*values)))


class Publisher:
    """Publishes one family like the agent: samples every 100 ms, records once per second."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self.over = Oversampler(family)
        self.t = 0

    def publish(self, samples: Sequence[dict[tuple, Sequence[int]]]) -> list[Record]:
        """Return one interval's records (family event, then its _dist event) from samples."""
        for rows in samples:
            self.t += 100 * MS
            self.over.add(self.t, rows)
        main, dist = self.over.publish()
        out = [record(self.family.event, self.t, *r) for r in main]
        if self.family.dist_schema is not None:
            out += [record(self.family.dist_schema.name, self.t, *r) for r in dist]
        return out


def hist_records(t_ns: int, sampler: str, scalars: Sequence[int],
                 values: Sequence[int] | np.ndarray) -> list[Record]:
    """Return one interval's rezolus_agent_sampler records for refresh times ``values`` (us)."""
    counts = h2.new_counts()
    h2.record(counts, values)
    return hist_counts_records(t_ns, sampler, scalars, counts)


def hist_counts_records(t_ns: int, sampler: str, scalars: Sequence[int],
                        counts: np.ndarray, family: Family = catalog.AGENT_SAMPLER
                        ) -> list[Record]:
    """Return one interval's records of a histogram family from its bucket ``counts``."""
    labels = (sampler,) if family.labels else ()
    return [record(family.event, t_ns, *r)
            for r in histogram_records(family.schema, labels, scalars, counts)]


LABEL_VALUES: dict[str, tuple[object, ...]] = {
    "cpu": (0, 1), "device": ("nvme0n1", "sda"), "interface": ("eth0", "lo"),
    "resource": ("cpu", "io"), "sampler": ("cpu_usage", "network"),
    "cgroup": ("/system.slice/ssh.service", '/user.slice/we"ird\\name'),
    "op": ("read", "write"), "kind": ("net_rx", "timer"), "reason": ("NO_SOCKET", "OTHER"),
    "state": ("active", "failed"), "last_error": ("", 'KeyError: "cpu"'),
    "pid": (1, 2), "comm": ("systemd", "kworker/0:1"), "user": ("root", "www-data"),
}


def every_family_records(intervals: int = 2) -> list[Record]:
    """Return ``intervals`` publishes of every family of the catalog, with two label sets."""
    out: list[Record] = []
    for f in catalog.FAMILIES:
        keys = [tuple(LABEL_VALUES[lb.name][i] for lb in f.labels) for i in range(2)]
        keys = list(dict.fromkeys(keys))  # no labels: one key
        if f.histogram is not None:
            for i in range(intervals):
                for k in keys:
                    counts = h2.new_counts()
                    h2.record(counts, [10, 120, 130, 4000 + i])
                    out += hist_counts_records((i + 1) * S, *(k or ("",)),
                                               [i + 1] * len(f.scalars), counts, f)
            continue
        pub = Publisher(f)
        base = 1000
        for _ in range(intervals):
            samples = []
            for _s in range(10):
                base += 1000
                samples.append({k: [base * (j + 1) for j in range(len(f.scalars))]
                                for k in keys})
            out += pub.publish(samples)
    out.sort(key=lambda r: r.time_ns)
    return out


# --- a strict text-format 0.0.4 parser -------------------------------------------------------

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]Inf|NaN")
TYPES = ("counter", "gauge", "summary", "histogram", "untyped")


@dataclass
class PFamily:
    name: str
    type: str = ""
    help: str | None = None
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def _unescape(text: str, quote: bool) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt not in ("\\", "n") + (('"',) if quote else ()):
                raise ValueError(f"bad escape \\{nxt} in {text!r}")
            out.append("\n" if nxt == "n" else nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _labels(text: str, line: str) -> tuple[dict[str, str], str]:
    """Parse ``{a="b",...}`` at the start of ``text``; return (labels, the rest)."""
    labels: dict[str, str] = {}
    i = 1
    while True:
        if text[i] == "}":
            return labels, text[i + 1 :]
        m = LABEL_NAME_RE.match(text, i)
        assert m, f"bad label name: {line}"
        name = m.group()
        assert not name.startswith("__"), line
        assert name not in labels, f"duplicate label {name}: {line}"
        i = m.end()
        assert text[i : i + 2] == '="', f"expected =\": {line}"
        i += 2
        j = i
        while text[j] != '"':
            assert text[j] != "\n"
            j += 2 if text[j] == "\\" else 1
        labels[name] = _unescape(text[i:j], quote=True)
        i = j + 1
        if text[i] == ",":
            i += 1
            assert text[i] != "}", f"trailing comma: {line}"  # we never write one
        else:
            assert text[i] == "}", f"expected , or }}: {line}"


def _family_of(name: str, fams: dict[str, PFamily]) -> PFamily:
    if name in fams and fams[name].type in ("counter", "gauge", "untyped", "summary"):
        return fams[name]
    for suffix, types in (("_count", ("summary", "histogram")), ("_sum", ("summary", "histogram")),
                          ("_bucket", ("histogram",))):
        base = name.removesuffix(suffix)
        if base != name and base in fams and fams[base].type in types:
            return fams[base]
    raise AssertionError(f"sample {name} has no TYPE line before it")


def parse_strict(text: str) -> dict[str, PFamily]:
    """Return the families of a text exposition, asserting every rule of format 0.0.4."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    fams: dict[str, PFamily] = {}
    current: str | None = None
    done: set[str] = set()
    series: set[tuple[str, frozenset]] = set()

    def enter(name: str) -> None:
        nonlocal current
        if current != name:
            assert name not in done, f"family {name} is not contiguous"
            if current is not None:
                done.add(current)
            current = name

    for line in text[:-1].split("\n"):
        assert line, "no empty lines"
        assert line == line.strip(), f"stray whitespace: {line!r}"
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _hash, kind, rest = line.split(" ", 2)
            name, _sp, arg = rest.partition(" ")
            assert NAME_RE.fullmatch(name), line
            fam = fams.setdefault(name, PFamily(name))
            enter(name)
            if kind == "HELP":
                assert fam.help is None, f"second HELP for {name}"
                fam.help = _unescape(arg, quote=False)
            else:
                assert not fam.type, f"second TYPE for {name}"
                assert not fam.samples, f"TYPE after samples of {name}"
                assert arg in TYPES, line
                fam.type = arg
            continue
        assert not line.startswith("#"), f"unexpected comment: {line}"
        m = NAME_RE.match(line)
        assert m, f"bad sample: {line}"
        name, rest = m.group(), line[m.end() :]
        labels: dict[str, str] = {}
        if rest.startswith("{"):
            labels, rest = _labels(rest, line)
        parts = rest.split(" ")
        assert parts[0] == "" and len(parts) in (2, 3), f"bad value part: {line}"
        assert FLOAT_RE.fullmatch(parts[1]), f"bad value {parts[1]!r}: {line}"
        if len(parts) == 3:
            assert re.fullmatch(r"-?\d+", parts[2]), f"bad timestamp: {line}"
        fam = _family_of(name, fams)
        enter(fam.name)
        key = (name, frozenset(labels.items()))
        assert key not in series, f"duplicate series: {line}"
        series.add(key)
        value = float(parts[1])
        if fam.type == "counter":
            assert value >= 0, line
        if fam.type in ("summary", "histogram") and name == fam.name + "_count":
            assert value >= 0 and value == int(value), line
        if fam.type == "summary" and name == fam.name:
            assert 0 <= float(labels["quantile"]) <= 1, line
        if fam.type == "histogram":
            assert name != fam.name, f"bare sample in histogram: {line}"
            if name.endswith("_bucket"):
                assert FLOAT_RE.fullmatch(labels["le"]), line
        fam.samples.append((name, labels, value))
    for fam in fams.values():
        assert fam.type, f"{fam.name}: HELP without TYPE"
        if fam.type == "histogram":
            _check_histogram(fam)
        if fam.type == "summary":
            sets = {frozenset((k, v) for k, v in lb.items() if k != "quantile")
                    for n, lb, _v in fam.samples if n == fam.name}
            counts = {frozenset(lb.items()) for n, lb, _v in fam.samples
                      if n == fam.name + "_count"}
            assert sets <= counts, f"{fam.name}: a quantile label set without _count"
    return fams


def _check_histogram(fam: PFamily) -> None:
    buckets: dict[frozenset, list[tuple[float, float]]] = {}
    counts: dict[frozenset, float] = {}
    for name, labels, value in fam.samples:
        rest = frozenset((k, v) for k, v in labels.items() if k != "le")
        if name == fam.name + "_bucket":
            buckets.setdefault(rest, []).append((float(labels["le"]), value))
        elif name == fam.name + "_count":
            counts[rest] = value
    for key, bs in buckets.items():
        les = [le for le, _c in bs]
        assert les == sorted(les), f"{fam.name}: buckets out of order"
        assert les[-1] == math.inf, f"{fam.name}: no +Inf bucket"
        cum = [c for _le, c in bs]
        assert cum == sorted(cum), f"{fam.name}: buckets not cumulative"
        assert counts[key] == cum[-1], f"{fam.name}: _count != +Inf bucket"


def parse(text: str) -> dict[str, PFamily]:
    """Return ``parse_strict(text)``, also checked by prometheus_client where installed."""
    fams = parse_strict(text)
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return fams
    theirs = {f.name: f for f in text_string_to_metric_families(text)}
    for name, fam in fams.items():
        # prometheus_client names a counter family without its _total suffix.
        assert theirs[name.removesuffix("_total") if fam.type == "counter" else name].type \
            == fam.type
    return fams


GOOD = """# HELP a_total help \\\\ and \\n
# TYPE a_total counter
a_total{x="1"} 1
# TYPE h histogram
h_bucket{le="1"} 1
h_bucket{le="+Inf"} 2
h_count 2
"""


@pytest.mark.parametrize(("text", "error"), [
    (GOOD.replace("# TYPE a_total counter\n", ""), "no TYPE line"),
    (GOOD + "# TYPE a_total counter\n", "contiguous"),
    (GOOD + 'a_total{x="1"} 2\n', "contiguous"),
    (GOOD.replace('a_total{x="1"} 1\n', 'a_total{x="1"} 1\na_total{x="1"} 2\n'), "duplicate"),
    (GOOD.replace('{x="1"}', '{x="\\q"}'), "bad escape"),
    (GOOD.replace('{x="1"}', '{x="1",x="2"}'), "duplicate label"),
    (GOOD.replace(" 1\n", " one\n", 1), "bad value"),
    (GOOD.replace('h_bucket{le="+Inf"} 2', 'h_bucket{le="+Inf"} 0'), "cumulative"),
    (GOOD.replace("h_count 2", "h_count 3"), "_count"),
    (GOOD.replace('h_bucket{le="+Inf"} 2\n', ""), "+Inf"),
    (GOOD.rstrip("\n"), "newline"),
])
def test_parse_strict_rejects(text: str, error: str) -> None:
    assert parse_strict(GOOD)["a_total"].help == "help \\ and \n"
    with pytest.raises((AssertionError, ValueError), match=re.escape(error)):
        parse_strict(text)


def test_prometheus_client_agrees() -> None:
    pytest.importorskip("prometheus_client", reason="prometheus_client is not installed (it"
                        " is not a dependency); parse_strict checked the format instead")
    from prometheus_client.parser import text_string_to_metric_families

    st = ex.State()
    st.ingest(every_family_records(3))
    text = ex.exposition(st, native_buckets=True)
    theirs = list(text_string_to_metric_families(text))
    assert len(theirs) == len(parse_strict(text))


def values(fams: dict[str, PFamily], name: str) -> dict[frozenset, float]:
    """Return the samples named ``name`` keyed by their label sets."""
    fam = _family_of(name, fams)
    return {frozenset(lb.items()): v for n, lb, v in fam.samples if n == name}


def one(fams: dict[str, PFamily], name: str, **labels: str) -> float:
    return values(fams, name)[frozenset(labels.items())]


# --- naming ---------------------------------------------------------------------------------


def test_names_are_unique_valid_and_free_of_suffix_clashes() -> None:
    metrics = prom.all_metrics()
    names = [pm.name for pm in metrics]
    assert len(names) == len(set(names))
    taken = set(names)
    for pm in metrics:
        assert NAME_RE.fullmatch(pm.name) and pm.name.startswith("rezolus_")
        assert not pm.name.startswith("rezolus_rezolus_")
        derived = {"summary": ["_count", "_sum"], "histogram": ["_bucket", "_count", "_sum"]}
        for suffix in derived.get(pm.type, []):
            assert pm.name + suffix not in taken, pm.name + suffix
        assert (pm.type == "counter") == pm.name.endswith("_total"), pm.name


def test_every_catalog_metric_is_exposed() -> None:
    by_source = {(pm.event, pm.source, pm.type) for pm in prom.all_metrics()}
    for f in catalog.FAMILIES:
        for m in f.metrics:
            if m.kind is Kind.HISTOGRAM:
                assert (f.event, m.name, "summary") in by_source
                assert (f.event, m.name, "histogram") in by_source
                continue
            assert (f.event, m.name, m.kind.value) in by_source
            if m.dist:
                assert (f"{f.event}_dist", m.name, "gauge") in by_source


def test_units_become_base_units() -> None:
    by = {pm.name: pm for pm in prom.all_metrics()}
    assert by["rezolus_cpu_usage_user_seconds_total"].divisor == 10**9
    assert by["rezolus_pressure_some_stall_seconds_total"].divisor == 10**6
    assert by["rezolus_cpu_usage_busy_ratio"].divisor == 10**6
    assert by["rezolus_perf_hardware_ipc"].divisor == 1000
    assert by["rezolus_cpu_frequency_hertz"].divisor == 1  # not ..._frequency_frequency_...
    assert by["rezolus_scheduler_running_seconds"].type == "summary"
    assert by["rezolus_scheduler_running_attached_seconds"].type == "gauge"
    assert by["rezolus_network_interface_rx_bytes_total"].divisor == 1
    assert by["rezolus_blockio_device_busy_seconds_per_second"].divisor == 10**9
    assert by["rezolus_agent_sampler_refresh_seconds"].type == "summary"
    # Every ns/us/ppm metric was converted: no raw unit suffix is left.
    assert not [n for n in by if re.search(r"_(ns|us|ppm|milli|hz)(_|$)", n)]


def test_renames_are_all_still_needed() -> None:
    natural = {f"{f.event}_{m.name}" for f in catalog.FAMILIES for m in f.metrics
               if (f.event, m.name) not in prom.RENAMES}
    fams = {f.event: f for f in catalog.FAMILIES}
    for (event, metric), _new in prom.RENAMES.items():
        assert metric in {m.name for m in fams[event].metrics}
        assert f"{event}_{metric}" in natural, f"{event}.{metric} no longer collides"


def test_help_says_where_from_and_unit() -> None:
    by = {pm.name: pm for pm in prom.all_metrics()}
    h = by["rezolus_cpu_usage_user_seconds_total"].help
    assert h == ("time in user mode (excluding nice); seconds, from rezolus_cpu_usage.user_ns"
                 " (ns / 1e9)")
    assert "1000000 = 100%" not in by["rezolus_cpu_usage_busy_ratio"].help


# --- exposition -----------------------------------------------------------------------------

CPU_VALUES = [2_310_000_000, 0, 950_000_000, 10_000_000_000, 5_000_000, 1_000_000, 2_000_000,
              0]  # user..steal ns


def test_counter_gauge_and_dist_of_cpu_usage() -> None:
    pub = Publisher(catalog.CPU_USAGE)
    busy = [100_000, 200_000, 300_000, 400_000, 500_000, 600_000, 700_000, 800_000,
            900_000, 950_000]  # ppm, one per 100 ms sample
    samples = [{(0,): [*CPU_VALUES, b], (1,): [*CPU_VALUES, 0]} for b in busy]
    st = ex.State()
    st.ingest(pub.publish(samples))
    text = ex.exposition(st)
    assert '\nrezolus_cpu_usage_user_seconds_total{cpu="0"} 2.31\n' in text
    assert "# TYPE rezolus_cpu_usage_user_seconds_total counter\n" in text
    assert ("# HELP rezolus_cpu_usage_user_seconds_total time in user mode (excluding nice);"
            " seconds, from rezolus_cpu_usage.user_ns (ns / 1e9)\n") in text
    fams = parse(text)
    assert one(fams, "rezolus_cpu_usage_idle_seconds_total", cpu="1") == 10.0
    assert one(fams, "rezolus_cpu_usage_busy_ratio", cpu="0") == 0.95
    assert fams["rezolus_cpu_usage_busy_ratio_dist"].type == "gauge"
    # Nearest rank over ten levels: p50 = 5th, p90 = 9th, p99 = max = 10th.
    q = {lb["quantile"]: v for _n, lb, v in fams["rezolus_cpu_usage_busy_ratio_dist"].samples
         if lb["cpu"] == "0"}
    assert q == {"0.5": 0.5, "0.9": 0.9, "0.99": 0.95, "1": 0.95}
    # Series sorted by CPU number; the quantile gauge never mixes with the level.
    assert text.index('busy_ratio{cpu="0"}') < text.index('busy_ratio{cpu="1"}')
    assert all("quantile" not in lb for _n, lb, _v in fams["rezolus_cpu_usage_busy_ratio"].samples)


def test_counter_dist_is_a_per_second_rate() -> None:
    pub = Publisher(catalog.NETWORK)
    n = len(catalog.NETWORK.scalars)
    # rx_bytes grows by 1000 per 100 ms step nine times, then 50_000 in one step: a burst.
    totals = [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 59_000]
    st = ex.State()
    st.ingest(pub.publish([{("eth0",): [t] + [0] * (n - 1)} for t in totals]))
    fams = parse(ex.exposition(st))
    assert one(fams, "rezolus_network_interface_rx_bytes_total", interface="eth0") == 59_000
    name = "rezolus_network_interface_rx_bytes_per_second"
    assert fams[name].type == "gauge"
    # Ten rates (the first sample has no predecessor): nine of 10_000 B/s, one of 500_000.
    assert one(fams, name, interface="eth0", quantile="0.5") == 10_000
    assert one(fams, name, interface="eth0", quantile="0.9") == 10_000
    assert one(fams, name, interface="eth0", quantile="1") == 500_000


def test_label_values_are_escaped() -> None:
    f = catalog.CGROUP_FAMILY
    path = '/a"b\\c\nd'
    st = ex.State()
    st.ingest([record(f.event, S, path, *range(len(f.scalars)))])
    text = ex.exposition(st)
    assert 'rezolus_cgroup_memory_bytes{cgroup="/a\\"b\\\\c\\nd"} 5\n' in text
    fams = parse(text)
    assert one(fams, "rezolus_cgroup_memory_bytes", cgroup=path) == 5


def test_help_is_escaped() -> None:
    assert prom.escape_help("a\\b\nc") == "a\\\\b\\nc"
    assert prom.escape_label('x"y\\z\n') == 'x\\"y\\\\z\\n'


def test_summary_from_histogram_records() -> None:
    values_us = [100] * 50 + [1000] * 45 + [20_000] * 4 + [200_000]
    st = ex.State()
    st.ingest(hist_records(S, "cpu_usage", [1, 10, 0], values_us))
    st.ingest(hist_records(2 * S, "cpu_usage", [1, 20, 0], values_us))
    fams = parse(ex.exposition(st))
    name = "rezolus_agent_sampler_refresh_seconds"
    assert fams[name].type == "summary"
    upper = {v: int(h2.UPPER[h2.bucket_index(v)]) for v in set(values_us)}
    q = {lb["quantile"]: v for n, lb, v in fams[name].samples if n == name}
    assert q == {"0.5": upper[100] / 1e6, "0.9": upper[1000] / 1e6, "0.99": upper[20_000] / 1e6,
                 "0.999": upper[200_000] / 1e6, "1": upper[200_000] / 1e6}
    assert one(fams, name + "_count", sampler="cpu_usage") == 200  # accumulated
    assert one(fams, "rezolus_agent_sampler_refreshes_total", sampler="cpu_usage") == 20
    assert one(fams, "rezolus_agent_sampler_status", sampler="cpu_usage") == 1
    # Without --native-buckets, no classic histogram.
    assert name + "_histogram" not in fams


def test_summary_quantiles_are_nan_after_an_empty_interval() -> None:
    st = ex.State()
    st.ingest(hist_records(S, "memory", [1, 1, 0], [500]))
    st.ingest(hist_counts_records(2 * S, "memory", [1, 2, 0], h2.new_counts()))
    fams = parse(ex.exposition(st))
    name = "rezolus_agent_sampler_refresh_seconds"
    q = [v for n, _lb, v in fams[name].samples if n == name]
    assert len(q) == 5 and all(math.isnan(v) for v in q)
    assert one(fams, name + "_count", sampler="memory") == 1


def test_native_buckets_accumulate_interval_deltas() -> None:
    st = ex.State()
    st.ingest(hist_records(S, "network", [1, 1, 0], [100, 100, 130]))
    st.ingest(hist_records(2 * S, "network", [1, 2, 0], [100, 5000]))
    text = ex.exposition(st, native_buckets=True)
    fams = parse(text)
    name = "rezolus_agent_sampler_refresh_seconds_histogram"
    assert fams[name].type == "histogram"
    b = {lb["le"]: v for n, lb, v in fams[name].samples if n == name + "_bucket"}
    i100, i130, i5000 = (h2.bucket_index(v) for v in (100, 130, 5000))
    edge = {i: repr(int(h2.UPPER[i]) / 1e6) for i in range(h2.BUCKETS)}
    # From the empty bucket below the lowest non-empty one up to the highest, then +Inf.
    assert list(b) == [edge[i] for i in range(i100 - 1, i5000 + 1)] + ["+Inf"]
    assert b[edge[i100 - 1]] == 0
    assert b[edge[i100]] == 3
    assert b[edge[i130]] == 4
    assert b[edge[i5000 - 1]] == 4
    assert b[edge[i5000]] == 5 and b["+Inf"] == 5
    assert one(fams, name + "_count", sampler="network") == 5
    assert one(fams, "rezolus_agent_sampler_refresh_seconds_count", sampler="network") == 5


def test_native_buckets_from_a_record_split_in_parts() -> None:
    counts = h2.new_counts()
    counts[:450] = 1  # 450 non-zero buckets: more than one 4 KiB record holds
    recs = hist_counts_records(S, "cgroup", [1, 1, 0], counts)
    assert len(recs) > 1 and recs[-1].fields["parts"] == len(recs)
    st = ex.State()
    st.ingest(recs)
    fams = parse(ex.exposition(st, native_buckets=True))
    name = "rezolus_agent_sampler_refresh_seconds_histogram"
    b = [v for n, _lb, v in fams[name].samples if n == name + "_bucket"]
    assert len(b) == 451 and b[-2] == b[-1] == 450
    assert one(fams, "rezolus_agent_sampler_refresh_seconds_count", sampler="cgroup") == 450


def test_every_family_parses_strictly() -> None:
    st = ex.State()
    st.ingest(every_family_records(3))
    assert st.skipped == 0
    text = ex.exposition(st, native_buckets=True)
    fams = parse(text)
    exposed = {pm.name for pm in prom.all_metrics()}
    assert set(fams) == exposed  # every metric present, nothing else
    for pm in prom.all_metrics():
        assert fams[pm.name].type == pm.type
        assert fams[pm.name].help == pm.help
        for _n, lb, _v in fams[pm.name].samples:
            assert set(lb) - {"quantile", "le"} == set(pm.labels)


def test_empty_state_has_only_the_exporter_metrics() -> None:
    fams = parse(ex.exposition(ex.State()))
    assert set(fams) == {pm.name for pm in prom.SELF_METRICS}


def test_unknown_events_and_metrics_are_skipped_and_counted() -> None:
    st = ex.State()
    st.ingest([Record("rezolus_future", S, 0, 1, {"x": 1}),
               Record("rezolus_cpu_usage_dist", S, 0, 1,
                      {"cpu": 0, "metric": "nope", "value": 1, "p50": 1, "p90": 1, "p99": 1,
                       "max": 1}),
               Record("rezolus_cpu_cores", S, 0, 1, {}),  # a field missing
               Record("rezolus_cpu_cores", S, 0, 1, {"online": "2"}),  # of another type
               Record("rezolus_agent_sampler", S, 0, 1,  # buckets cut short
                      {**hist_records(S, "x", [1, 1, 0], [5])[0].fields, "buckets": b"\0"})])
    assert (st.records, st.skipped, st.series()) == (5, 5, 0)
    fams = parse(ex.exposition(st))
    assert one(fams, "rezolus_exporter_skipped_records_total") == 5


# --- staleness ------------------------------------------------------------------------------


def cpu_records(t_ns: int, cpus: Sequence[int]) -> list[Record]:
    return [record("rezolus_cpu_usage", t_ns, c, *CPU_VALUES, 500_000) for c in cpus]


def cpus_exposed(st: ex.State) -> set[str]:
    fams = parse(ex.exposition(st))
    if "rezolus_cpu_usage_busy_ratio" not in fams:
        return set()
    return {lb["cpu"] for _n, lb, _v in fams["rezolus_cpu_usage_busy_ratio"].samples}


def test_label_set_dropped_after_stale_publishes() -> None:
    st = ex.State(stale=3)
    st.ingest(cpu_records(1 * S, [0, 1, 2]))
    st.ingest(cpu_records(2 * S, [0, 1]))  # cpu 2 went offline
    assert cpus_exposed(st) == {"0", "1", "2"}
    st.ingest(cpu_records(3 * S, [0, 1]))
    st.ingest(cpu_records(4 * S, [0, 1]))  # three publishes without cpu 2 ...
    assert cpus_exposed(st) == {"0", "1", "2"}
    st.ingest(cpu_records(5 * S, [0, 1]))  # ... seen once the fourth starts: dropped
    assert cpus_exposed(st) == {"0", "1"}
    st.ingest(cpu_records(6 * S, [2, 0, 1]))  # back online, whatever the order
    assert cpus_exposed(st) == {"0", "1", "2"}


def test_stale_is_configurable() -> None:
    st = ex.State(stale=1)
    st.ingest(cpu_records(1 * S, [0, 1]))
    st.ingest(cpu_records(2 * S, [0]))
    assert cpus_exposed(st) == {"0", "1"}
    st.ingest(cpu_records(3 * S, [0]))
    assert cpus_exposed(st) == {"0"}
    with pytest.raises(ValueError):
        ex.State(stale=0)


def test_a_silent_event_is_dropped_by_time() -> None:
    st = ex.State(stale=3)
    for t in (1, 2, 3):
        st.ingest(cpu_records(t * S, [0, 1]), now_ns=t * S)
    st.prune(6 * S)  # three intervals after the last record: still there
    assert cpus_exposed(st) == {"0", "1"}
    st.prune(6 * S + 1)  # the agent stopped
    assert cpus_exposed(st) == set()
    st.ingest(cpu_records(10 * S, [0]), now_ns=10 * S)  # it came back
    assert cpus_exposed(st) == {"0"}


def test_event_with_a_single_publish_uses_the_interval_of_others() -> None:
    st = ex.State(stale=3)
    st.ingest(cpu_records(1 * S, [0]), now_ns=1 * S)
    st.ingest(cpu_records(2 * S, [0]), now_ns=2 * S)  # measures 1 s
    f = catalog.CPU_CORES
    st.ingest([record(f.event, 2 * S, 4)], now_ns=2 * S)  # one publish only
    st.prune(4 * S)
    assert st.rows(f.event)
    st.prune(5 * S + 1)
    assert not st.rows(f.event)


def test_dist_series_are_keyed_by_metric_for_staleness() -> None:
    pub = Publisher(catalog.CPU_USAGE)
    st = ex.State(stale=1)
    for _ in range(4):  # four publishes of one CPU: one _dist record per publish
        st.ingest(pub.publish([{(0,): [*CPU_VALUES, 500_000]}] * 10))
    assert st.rows("rezolus_cpu_usage_dist")
    assert st.rows("rezolus_cpu_usage_dist")[(((0,), "busy_ppm"))].gen == 3


def test_copy_is_a_snapshot() -> None:
    st = ex.State()
    st.ingest(hist_records(S, "network", [1, 1, 0], [100]))
    snap = st.copy()
    st.ingest(hist_records(2 * S, "network", [1, 2, 0], [100]))
    st.ingest(cpu_records(2 * S, [0]))
    fams = parse(ex.exposition(snap, native_buckets=True))
    assert one(fams, "rezolus_agent_sampler_refresh_seconds_count", sampler="network") == 1
    assert "rezolus_cpu_usage_busy_ratio" not in fams


# --- the busiest processes: a selection ------------------------------------------------------


def process(t_ns: int, pid: int, comm: str = "worker", start_s: int = 1, cpu_s: int = 1,
            state: str = "S") -> Record:
    """Return a rezolus_process record: process ``pid`` started ``start_s`` after boot,
    ``cpu_s`` seconds of user CPU; the other values from their names' position."""
    values = {"start_ns": start_s * S, "cpu_user_ns": cpu_s * S}
    return record(PROCESS.event, t_ns, pid, comm, "wörker", "/system.slice/a.service", state,
                  *(values.get(m.name, j) for j, m in enumerate(PROCESS.scalars)))


def summary(t_ns: int, published: int = 0) -> Record:
    """Return the rezolus_processes record that ends an interval."""
    return record(PROCESSES.event, t_ns, *(published if m.name == "published" else j + 1
                                           for j, m in enumerate(PROCESSES.scalars)))


def interval(t_ns: int, procs: Sequence[tuple[int, str, int]], summary_first: bool = False,
             cpu_s: int = 1) -> list[Record]:
    """Return one publish of the processes sampler: the (pid, comm, start_s) processes,
    then the summary (or the summary first: the order is the sampler's to choose), then
    the agent's tick record, which ends the interval."""
    recs = [process(t_ns + i * 1000, pid, comm, start, cpu_s)
            for i, (pid, comm, start) in enumerate(procs)]
    end = summary(t_ns + (-1000 if summary_first else len(procs) * 1000), len(procs))
    tick = Record(TICK, t_ns + (len(procs) + 1) * 1000, 0, 1,
                  {"seq": t_ns // S, "interval_ns": S, "records": len(procs) + 1})
    return [end, *recs, tick] if summary_first else [*recs, end, tick]


def processes_exposed(st: ex.State) -> dict[tuple[str, str, str], float]:
    """Return the processes exposed: (pid, comm, start_ns) -> user CPU seconds."""
    fams = parse(ex.exposition(st))
    fam = fams.get("rezolus_process_cpu_user_seconds_total")
    return {(lb["pid"], lb["comm"], lb["start_ns"]): v for _n, lb, v in fam.samples} \
        if fam else {}


def test_process_series_are_labelled_by_pid_comm_and_start_only() -> None:
    st = ex.State()
    st.ingest([process(S, 7, "café-wörker", start_s=3, cpu_s=2, state="R")])
    fams = parse(ex.exposition(st))
    for pm in prom.family_metrics(PROCESS):
        assert pm.labels == ("pid", "comm", "start_ns")
        assert [lb for _n, lb, _v in fams[pm.name].samples] == [
            {"pid": "7", "comm": "café-wörker", "start_ns": str(3 * S)}]
    assert one(fams, "rezolus_process_cpu_user_seconds_total", pid="7", comm="café-wörker",
               start_ns=str(3 * S)) == 2.0
    # The selection names fields of its family.
    for event, sel in prom.SELECTIONS.items():
        family = next(f for f in (PROCESS, PROCESSES) if f.event == event)
        assert set(sel.labels) <= set(family.schema.field_names)


def test_a_state_change_keeps_the_series() -> None:
    st = ex.State()
    st.ingest([process(S, 7, state="R"), summary(S + 1)])
    st.ingest([process(2 * S, 7, state="D", cpu_s=5), summary(2 * S + 1)])
    assert processes_exposed(st) == {("7", "worker", str(S)): 5.0}


@pytest.mark.parametrize("summary_first", [False, True], ids=["summary_last", "summary_first"])
def test_a_process_that_leaves_the_top_n_goes_with_its_interval(summary_first: bool) -> None:
    """Series exist for the processes of the latest interval only: one that left the
    top N is gone once the interval without it has been read, whichever order the
    summary comes in."""
    st = ex.State(stale=3)
    st.ingest(interval(1 * S, [(1, "a", 1), (2, "b", 1)], summary_first))
    assert set(processes_exposed(st)) == {("1", "a", str(S)), ("2", "b", str(S))}
    st.ingest(interval(2 * S, [(1, "a", 1), (3, "c", 1)], summary_first))
    assert set(processes_exposed(st)) == {("1", "a", str(S)), ("3", "c", str(S))}
    # Many intervals of processes that each stay one interval: never more than one's.
    for i in range(3, 40):
        st.ingest(interval(i * S, [(10 * i + j, "x", 1) for j in range(4)], summary_first))
        assert {int(pid) for pid, _c, _s in processes_exposed(st)} == {
            10 * i + j for j in range(4)}
    assert len(st.rows(PROCESS.event)) == 4


def test_a_reused_pid_is_a_new_series() -> None:
    """pid 100 exits at 5 s of CPU; a new process gets pid 100 and the same comm: its
    counters start a series of their own (start_ns tells them apart), never a
    continuation of the old one's."""
    st = ex.State()
    for t, start, cpu in ((1, 1, 5), (2, 1, 5), (3, 3, 9)):
        st.ingest([process(t * S, 100, "sh", start_s=start, cpu_s=cpu),
                   summary(t * S + 1), Record(TICK, t * S + 2, 0, 1, {"seq": t})])
    assert processes_exposed(st) == {("100", "sh", str(3 * S)): 9.0}


def test_without_the_summary_a_process_goes_after_stale_publishes() -> None:
    """With no summary to end intervals (a recording of rezolus_process alone), a process
    that left goes like any label set: after --stale publishes."""
    st = ex.State(stale=1, families=(PROCESS,))
    st.ingest([process(1 * S, 1), process(1 * S + 1, 2)])
    st.ingest([process(2 * S, 1)])
    assert {pid for pid, _c, _s in processes_exposed(st)} == {"1", "2"}
    st.ingest([process(3 * S, 1)])
    assert {pid for pid, _c, _s in processes_exposed(st)} == {"1"}


def test_process_series_are_bounded_as_docs_say() -> None:
    """docs/prometheus.md's bound, from the declared defaults: a full top N of processes,
    all new every interval, makes (top_cpu + top_rss + top_io) x metrics series."""
    top = {o.key: o.default for o in PROCESS_OPTIONS}
    n = top["top_cpu"] + top["top_rss"] + top["top_io"]
    metrics = len(prom.family_metrics(PROCESS))
    st = ex.State(families=(PROCESS, PROCESSES))
    for i in range(1, 6):
        st.ingest(interval(i * S, [(1000 * i + j, "x", i) for j in range(n)]))
    samples = [line for line in ex.exposition(st).splitlines()
               if line.startswith("rezolus_process_")]
    assert len(samples) == n * metrics
    doc = (Path(__file__).resolve().parents[1] / "docs" / "prometheus.md").read_text()
    doc = " ".join(doc.split())
    said = (f"with the defaults, {n} ({top['top_cpu']} + {top['top_rss']} + {top['top_io']})"
            f" processes x {metrics} metrics: {n * metrics} series")
    assert said in doc, said


def test_processes_summary_names() -> None:
    by = {pm.name: pm for pm in prom.family_metrics(PROCESSES)}
    assert by["rezolus_processes"].type == "gauge"  # not rezolus_processes_processes
    assert by["rezolus_processes_forks_total"].type == "counter"
    assert by["rezolus_processes_exited_cpu_seconds_total"].divisor == 10**9
    assert by["rezolus_processes_load_1m"].divisor == 1000
    for pm in by.values():
        assert (pm.type == "counter") == pm.name.endswith("_total") and pm.labels == ()
    st = ex.State()
    st.ingest([record(PROCESSES.event, S, *(
        {"load_1m_milli": 1250, "published": 30}.get(m.name, 1) for m in PROCESSES.scalars))])
    fams = parse(ex.exposition(st))
    assert one(fams, "rezolus_processes_load_1m") == 1.25
    assert one(fams, "rezolus_processes_published") == 30


# --- the exporter: lock, follow loop, HTTP --------------------------------------------------


class FakeSubscription:
    """Stands in for ``Subscription``: poll() hands out prepared batches, then stops."""

    def __init__(self, batches: list[list[Record]], stop: threading.Event) -> None:
        self.batches = batches
        self.stop = stop
        self.lost = 0

    def poll(self, timeout_ms: int) -> list[Record]:
        if not self.batches:
            self.stop.set()
            return []
        self.lost += 1
        return self.batches.pop(0)


def test_follow_ingests_until_stopped() -> None:
    stop = threading.Event()
    exp = ex.Exporter(clock=lambda: 5 * S)
    sub = FakeSubscription([cpu_records(S, [0]), cpu_records(2 * S, [0, 1])], stop)
    exp.follow(sub, stop.is_set, poll_ms=1)
    fams = parse(exp.render())
    assert one(fams, "rezolus_exporter_records_total") == 3
    assert one(fams, "rezolus_exporter_lost_records_total") == 2
    assert one(fams, "rezolus_cpu_usage_busy_ratio", cpu="1") == 0.5


def test_a_starved_exporter_keeps_its_series_until_it_has_caught_up() -> None:
    """Staleness is judged where the exporter last drained the rings: one that read
    nothing for a while (starved of CPU) serves its last values, not an empty page; once
    it has read everything and an event still did not come, that event's series go."""
    now = [1 * S]
    exp = ex.Exporter(clock=lambda: now[0])
    stop = threading.Event()
    seen: list[str] = []

    def starved() -> list[Record]:
        now[0] = 10 * S  # the exporter did not run for 8 s: a scrape comes meanwhile
        seen.append(exp.render())
        return []

    def caught_up() -> list[Record]:
        seen.append(exp.render())  # drained at 10 s: the agent has been silent since 2 s
        stop.set()
        return []

    script = [lambda: cpu_records(1 * S, [0]),
              lambda: (now.__setitem__(0, 2 * S), cpu_records(2 * S, [0]))[1],
              starved, list, caught_up]  # list: the poll that began at 10 s, empty

    class Scripted:
        lost = 0

        def poll(self, timeout_ms: int) -> list[Record]:
            return script.pop(0)()

    exp.follow(Scripted(), stop.is_set, poll_ms=1)
    assert 'rezolus_cpu_usage_busy_ratio{cpu="0"}' in seen[0], seen[0]
    assert "\nrezolus_cpu_usage" not in seen[1], seen[1]


@pytest.fixture
def server() -> object:
    exp = ex.Exporter(native_buckets=True)
    srv = ex.serve_http("127.0.0.1", 0, exp.body, exp.index)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield exp, srv
    srv.shutdown()
    srv.server_close()


def get(srv: object, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    host, port = srv.server_address[:2]  # type: ignore[attr-defined]
    req = urllib.request.Request(f"http://{host}:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_http_metrics_index_and_404(server: tuple[ex.Exporter, object]) -> None:
    exp, srv = server
    exp.ingest(every_family_records(2))
    status, headers, body = get(srv, "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = parse(body.decode())
    assert "rezolus_agent_sampler_refresh_seconds_histogram" in fams
    status, headers, body = get(srv, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'href="/metrics"' in body
    status, _h, _b = get(srv, "/nope")
    assert status == 404


@pytest.mark.parametrize(("groups", "recording", "says"), [
    (["rezolus_ue"], None, ["rezolus_ue:rezolus_*</code> tracepoints (uprobe transport)"]),
    (["user_events"], None, ["user_events:rezolus_*</code> tracepoints (user_events"]),
    ([], None, ["user_events:rezolus_*", "rezolus_ue:rezolus_*", "none followed yet"]),
    ([], "/tmp/a<b>.rzr", ["the recording <code>/tmp/a&lt;b&gt;.rzr</code>"]),
])
def test_index_page_names_what_it_follows(groups: list[str], recording: str | None,
                                          says: list[str]) -> None:
    """The `/` page names the tracepoint group followed (the transport in use), both
    while none is, or the recording."""
    page = ex.index_page(groups, recording).decode()
    assert all(s in page for s in says), page
    assert 'href="/metrics"' in page


def test_index_page_lists_the_events_with_series(server: tuple[ex.Exporter, object]) -> None:
    exp, srv = server
    assert b"Events with series" not in get(srv, "/")[2]
    exp.ingest([*cpu_records(S, [0, 1]), *interval(S, [(1, "a", 1), (2, "b", 1)])])
    page = get(srv, "/")[2].decode()
    assert "<li><code>rezolus_cpu_usage</code>: 2 label sets</li>" in page, page
    assert ("<li><code>rezolus_process</code>: 2 label sets (those of its latest interval"
            " only)</li>") in page, page
    assert "<li><code>rezolus_processes</code>: 1 label set</li>" in page, page


def test_http_gzip(server: tuple[ex.Exporter, object]) -> None:
    exp, srv = server
    exp.ingest(every_family_records(2))
    _s, plain_headers, plain = get(srv, "/metrics")
    status, headers, body = get(srv, "/metrics", **{"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert "Content-Encoding" not in plain_headers
    assert len(body) < len(plain) and gzip.decompress(body) == plain


def test_render_while_ingesting(server: tuple[ex.Exporter, object]) -> None:
    exp, srv = server
    stop = threading.Event()

    def feed() -> None:
        pub = Publisher(catalog.CPU_USAGE)
        t = 0
        while not stop.is_set():
            t += 1
            exp.ingest(pub.publish([{(c,): [*CPU_VALUES, 10 * t] for c in range(8)}] * 2)
                       + hist_records(t * S, "cpu_usage", [1, t, 0], [100, 200]))
            # Let the server's thread in between ingests: a loop that never blocks holds
            # the GIL for whole switch intervals, and each request took seconds.
            time.sleep(0)

    th = threading.Thread(target=feed)
    th.start()
    try:
        for _ in range(20):
            _s, _h, body = get(srv, "/metrics")
            parse(body.decode())
    finally:
        stop.set()
        th.join(10)


def test_renders_are_cached_until_something_changes() -> None:
    now = [1 * S]
    exp = ex.Exporter(clock=lambda: now[0])
    exp.ingest(cpu_records(1 * S, [0]))
    now[0] = 2 * S
    exp.ingest(cpu_records(2 * S, [0]))  # the interval is known: 1 s
    first = exp.render()
    assert exp.body(True) == gzip.compress(first.encode(), compresslevel=1)
    assert exp.body(False) == first.encode()
    assert (exp.render(), exp.renders) == (first, 1)
    exp.ingest([], lost=0)  # an empty poll changes nothing
    assert exp.renders == 1 and exp.render() == first
    exp.ingest(cpu_records(3 * S, [0, 1]))
    assert 'cpu="1"' in exp.render() and exp.renders == 2
    now[0] = 10 * S  # the agent went silent: pruning changes the text
    assert "\nrezolus_cpu_usage" not in exp.render() and exp.renders == 3


def test_records_are_counted_by_event() -> None:
    """What tells that the exporter received every record of each event."""
    exp = ex.Exporter()
    exp.ingest([*cpu_records(1 * S, [0, 1]), Record("rezolus_nonesuch", 1 * S, 0, 1, {})])
    exp.ingest(cpu_records(2 * S, [0, 1]))
    fams = parse(exp.render())
    assert one(fams, "rezolus_exporter_event_records_total", event="rezolus_cpu_usage") == 4
    assert one(fams, "rezolus_exporter_event_records_total", event="rezolus_nonesuch") == 1
    assert one(fams, "rezolus_exporter_records_total") == 5


def test_concurrent_scrapes_share_one_render(server: tuple[ex.Exporter, object],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    exp, srv = server
    exp.ingest(every_family_records(2))
    slow = ex.exposition

    def exposition(*a: object, **kw: object) -> str:
        time.sleep(0.5)  # a slow machine: scrapes arrive while one renders
        return slow(*a, **kw)

    monkeypatch.setattr(ex, "exposition", exposition)
    bodies: list[bytes] = []
    threads = [threading.Thread(target=lambda: bodies.append(get(srv, "/metrics")[2]))
               for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(bodies) == 5 and len(set(bodies)) == 1
    assert exp.renders == 1


def test_a_scraper_hanging_up_is_not_a_traceback(server: tuple[ex.Exporter, object],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _exp, srv = server
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        srv.handle_error(None, ("127.0.0.1", 1))  # type: ignore[attr-defined]
    assert capsys.readouterr().err == ""


def test_port_in_use_is_one_line_naming_address_and_option() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RezolusError) as e:
            ex.serve_http("127.0.0.1", port, ex.Exporter().body)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"127.0.0.1:{port}" in msg and "already in use" in msg and "--listen" in msg


def test_bad_listen_address() -> None:
    with pytest.raises(RezolusError, match="no such local address"):
        ex.serve_http("192.0.2.1", 0, ex.Exporter().body)  # TEST-NET: never a local address


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:9745", ("127.0.0.1", 9745)),
    (":9100", ("", 9100)),
    ("[::1]:9745", ("::1", 9745)),
    ("localhost:0", ("localhost", 0)),
])
def test_parse_listen(text: str, want: tuple[str, int]) -> None:
    assert ex.parse_listen(text) == want


@pytest.mark.parametrize("text", ["9745", "host:", "host:http", "host:70000"])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        ex.parse_listen(text)


# --- command line and docs ------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rezolus-ue")
    ex.add_parser(p.add_subparsers(dest="command"))
    return p


def test_add_parser_defaults() -> None:
    args = parser().parse_args(["exporter"])
    assert args.func is ex.run
    assert args.listen == ("127.0.0.1", 9745)
    assert (args.stale, args.native_buckets, args.no_wait, args.no_dist) == (3, False, False,
                                                                             False)


def test_add_parser_options() -> None:
    args = parser().parse_args(["exporter", "--listen", "0.0.0.0:9100", "--stale", "5",
                                "--native-buckets", "--no-wait", "--no-dist"])
    assert args.listen == ("0.0.0.0", 9100)
    assert (args.stale, args.native_buckets, args.no_wait, args.no_dist) == (5, True, True, True)


@pytest.mark.parametrize("argv", [["--listen", "nope"], ["--stale", "0"], ["--stale", "x"]])
def test_add_parser_rejects(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["exporter", *argv])
    assert "error:" in capsys.readouterr().err


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["exporter", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "--listen HOST:PORT" in out and "docs/prometheus.md" in out


def test_docs_table_lists_every_metric() -> None:
    # Freshness: tests/test_docs.py (docs/prometheus.md is one of rezolus_ue.docs's files).
    current = (Path(__file__).resolve().parents[1] / "docs" / "prometheus.md").read_text()
    for pm in prom.all_metrics():
        assert f"| `{pm.name}` |" in current


# --- run(): the command, with the subscription replaced ------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedSubscription:
    """Replaces ``Subscription`` in ``run``: records, a scrape from inside, then a signal."""

    made: list[ScriptedSubscription] = []
    port = 0
    signum = signal.SIGTERM

    def __init__(self, events: Sequence[str] | None = None, *, wait: bool = True,
                 asked: bool = True) -> None:
        self.wanted, self.wait = list(events or []), wait
        self.polls, self.lost, self.closed, self.scraped = 0, 0, False, b""
        self.port = ScriptedSubscription.port
        ScriptedSubscription.made.append(self)

    @property
    def events(self) -> list[str]:
        return self.wanted

    def poll(self, timeout_ms: int) -> list[Record]:
        self.polls += 1
        if self.polls <= 2:
            return cpu_records(self.polls * S, [0, 1])
        if self.polls == 3:  # the HTTP thread answers while the main thread polls
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=10) as r:
                self.scraped = r.read()
            os.kill(os.getpid(), self.signum)
            return []
        raise AssertionError("polled after the signal")

    def __enter__(self) -> ScriptedSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> type[ScriptedSubscription]:
    from rezolus_ue.consume import subscription

    monkeypatch.setattr(subscription, "Subscription", ScriptedSubscription)
    ScriptedSubscription.made = []
    ScriptedSubscription.port = free_port()
    return ScriptedSubscription


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_serves_and_stops_on_signal(scripted: type[ScriptedSubscription],
                                        signum: int) -> None:
    scripted.signum = signum
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    args = parser().parse_args(["exporter", "--listen", f"127.0.0.1:{scripted.port}"])
    assert ex.run(args) == 0
    sub = scripted.made[0]
    assert sub.wait and sub.closed and sub.polls == 3
    # Every cheap event, _dist included: a service scraped for ever attaches no BPF.
    assert sub.wanted == cheap(SCHEMAS) + APPS and len(sub.wanted) < len(SCHEMAS)
    fams = parse(sub.scraped.decode())
    assert one(fams, "rezolus_cpu_usage_busy_ratio", cpu="1") == 0.5
    assert before == {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", scripted.port), 2):
        pass  # the server is closed


def test_run_no_wait_and_no_dist(scripted: type[ScriptedSubscription]) -> None:
    args = parser().parse_args(["exporter", "--listen", f"127.0.0.1:{scripted.port}",
                                "--no-wait", "--no-dist"])
    assert ex.run(args) == 0
    sub = scripted.made[0]
    assert not sub.wait
    assert sub.wanted and not [e for e in sub.wanted if e.endswith("_dist")]


def test_run_costly_follows_every_event(scripted: type[ScriptedSubscription]) -> None:
    args = parser().parse_args(["exporter", "--listen", f"127.0.0.1:{scripted.port}",
                                "--no-wait", "--costly"])
    assert ex.run(args) == 0
    assert scripted.made[0].wanted == list(SCHEMAS) + APPS


def test_run_signal_while_waiting_for_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    from rezolus_ue.consume import subscription

    class Waiting:
        def __init__(self, events: object, *, wait: bool, asked: bool = True) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the agent never comes: the signal must break the wait
            raise AssertionError("not interrupted")

    monkeypatch.setattr(subscription, "Subscription", Waiting)
    port = free_port()
    t0 = time.monotonic()
    assert ex.run(parser().parse_args(["exporter", "--listen", f"127.0.0.1:{port}"])) == 0
    assert time.monotonic() - t0 < 5


def test_run_port_in_use_fails_before_subscribing(scripted: type[ScriptedSubscription]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", scripted.port))
        s.listen()
        with pytest.raises(RezolusError, match="--listen"):
            ex.run(parser().parse_args(["exporter", "--listen", f"127.0.0.1:{scripted.port}"]))
    assert scripted.made == []
