"""Pure tests of metric families: how they become events, the Oversampler's rates and
percentiles, and histogram records split to fit a ring-buffer page.

Expected percentiles are worked by hand with nearest rank: the ``ceil(q * n)``-th smallest
of the interval's ``n`` samples (at least the first).
"""

from __future__ import annotations

import math
import random
from itertools import pairwise

import numpy as np
import pytest

from rezolus_ue.encoding import MAX_NAME_ARGS, MAX_PAYLOAD, REL_BYTES, U8, U32, U64, char_array
from rezolus_ue.metrics import catalog, h2
from rezolus_ue.metrics.family import (
    DIST,
    HIST_QUANTILES,
    METRIC_NAME_MAX,
    Family,
    Kind,
    Label,
    Oversampler,
    counter,
    gauge,
    histogram,
    histogram_records,
    sparse_histogram_records,
)

S = 1_000_000_000  # one second in ns

CPU = Label("cpu", U32, "CPU number")
NAME = Label("name", char_array(16), "a name")


def fam(*metrics, labels=(CPU,), event: str = "rezolus_test") -> Family:  # type: ignore[no-untyped-def]
    return Family(event, "test", "A test family.", labels, metrics)


# --- schema derivation -------------------------------------------------------------------


def test_schema_fields_labels_scalars_then_histogram() -> None:
    f = fam(counter("a", "ops", "a"), gauge("b", "bytes", "b", dist=False),
            histogram("lat_ns", "ns", "latency"), labels=(CPU, NAME))
    s = f.schema
    assert s.name == "rezolus_test"
    assert s.sampler == "test"
    assert s.field_names == (
        "cpu", "name", "a", "b",
        "count", "p50", "p90", "p99", "p999", "max",
        "grouping_power", "max_value_power", "part", "parts", "buckets",
    )
    types = {fd.name: fd.type for fd in s.fields}
    assert types["cpu"] == U32 and types["name"] == char_array(16)
    assert all(types[n] == U64 for n in ("a", "b", "count", "p50", "p999", "max"))
    assert all(types[n] == U8 for n in ("grouping_power", "max_value_power", "part", "parts"))
    assert types["buckets"] == REL_BYTES
    buckets = s.fields[-1]
    assert buckets.max_len % h2.SPARSE_ENTRY_SIZE == 0
    # At most MAX_ENTRIES buckets a record (the uprobe transport's text of them fits a page).
    assert buckets.max_len == h2.MAX_ENTRIES * h2.SPARSE_ENTRY_SIZE
    assert s.max_payload <= MAX_PAYLOAD
    assert f.histogram is not None and f.histogram.name == "lat_ns"
    assert [m.name for m in f.scalars] == ["a", "b"]
    assert [m.name for m in f.dist_metrics] == ["a"]


def test_dist_schema_is_long_form() -> None:
    f = fam(counter("a", "ops", "a"), gauge("b", "bytes", "b"), counter("c", "x", "c",
                                                                       dist=False))
    d = f.dist_schema
    assert d is not None
    assert d.name == "rezolus_test_dist"
    assert d.sampler == "test"
    assert d.field_names == ("cpu", "metric", "value", "p50", "p90", "p99", "max")
    types = {fd.name: fd.type for fd in d.fields}
    assert types["metric"] == char_array(METRIC_NAME_MAX + 1) == char_array(24)
    assert all(types[n] == U64 for n in ("value", "p50", "p90", "p99", "max"))
    metric = next(fd for fd in d.fields if fd.name == "metric")
    assert "a, b" in metric.description and "c" not in metric.description.split(": ")[-1]
    assert f.schemas == (f.schema, d)


def test_no_dist_metric_no_dist_schema() -> None:
    f = fam(counter("a", "ops", "a", dist=False), gauge("b", "x", "b", dist=False))
    assert f.dist_schema is None
    assert f.schemas == (f.schema,)
    h = fam(histogram("h", "us", "h"), labels=())
    assert h.dist_schema is None and h.dist_metrics == ()


def test_family_without_labels() -> None:
    f = fam(gauge("online", "cpus", "online"), labels=())
    assert f.schema.field_names == ("online",)
    assert f.dist_schema is not None
    assert f.dist_schema.field_names == ("metric", "value", "p50", "p90", "p99", "max")


def test_histogram_must_be_last_and_alone() -> None:
    with pytest.raises(ValueError, match="at most one histogram, declared last"):
        fam(histogram("h", "us", "h"), counter("a", "x", "a"))
    with pytest.raises(ValueError, match="at most one histogram"):
        fam(histogram("h", "us", "h"), histogram("g", "us", "g"))


def test_metric_name_limit() -> None:
    fam(counter("a" * METRIC_NAME_MAX, "x", "a"))
    with pytest.raises(ValueError, match="longer than 23"):
        fam(counter("a" * (METRIC_NAME_MAX + 1), "x", "a"))


def test_too_long_registration_is_rejected_at_declaration() -> None:
    many = tuple(counter(f"metric_number_{i:03d}", "x", "m", dist=False) for i in range(40))
    with pytest.raises(ValueError, match="registration string"):
        fam(*many)


def test_kinds() -> None:
    assert counter("a", "x", "a").kind is Kind.COUNTER
    assert gauge("a", "x", "a").kind is Kind.GAUGE
    h = histogram("a", "x", "a")
    assert h.kind is Kind.HISTOGRAM and not h.dist


# --- the catalog -------------------------------------------------------------------------


@pytest.mark.parametrize("family", catalog.FAMILIES, ids=lambda f: f.event)
def test_catalog_family_fits_the_kernel(family: Family) -> None:
    for s in family.schemas:
        assert len(s.name_args.encode()) <= MAX_NAME_ARGS, s.name
        assert s.max_payload <= MAX_PAYLOAD, s.name
        assert s.sampler == family.sampler
    for m in family.metrics:
        assert len(m.name) <= METRIC_NAME_MAX, m.name
        assert m.unit and m.description, m.name
    assert (family.dist_schema is not None) == bool(family.dist_metrics)
    assert family.schema.name == family.event
    assert family.schema.field_names[:len(family.labels)] == tuple(
        lb.name for lb in family.labels)


def test_catalog_event_names_unique() -> None:
    names = [s.name for f in catalog.FAMILIES for s in f.schemas]
    assert len(names) == len(set(names))


def test_catalog_status_codes_cover_the_agent_states() -> None:
    assert catalog.STATUS_CODES == {"idle": 0, "active": 1, "unavailable": 2, "disabled": 3,
                                    "failed": 4}


# --- Oversampler -------------------------------------------------------------------------


def dist_by_metric(dist: list[tuple]) -> dict[tuple, tuple]:
    """Return dist records keyed by (labels..., metric name) -> (value, p50, p90, p99, max)."""
    out = {}
    for r in dist:
        n = len(r) - 6
        out[(*r[:n], r[n].decode())] = tuple(r[n + 1:])
    return out


C1 = fam(counter("ops", "ops", "operations"))


def test_counter_rates_from_consecutive_samples() -> None:
    o = Oversampler(C1)
    for t, v in [(0, 0), (1, 10), (2, 30)]:
        o.add(t * S, {(0,): (v,)})
    records, dist = o.publish()
    assert records == [(0, 30)]
    # Rates 10 and 20 per second; n = 2: p50 is the 1st, p90/p99/max the 2nd.
    assert dist == [(0, b"ops", 30, 10, 20, 20, 20)]


def test_counter_rates_are_per_second() -> None:
    o = Oversampler(C1)
    for i, v in enumerate([0, 5, 10, 25]):
        o.add(i * S // 10, {(0,): (v,)})  # every 100ms
    _, dist = o.publish()
    assert dist_by_metric(dist)[(0, "ops")] == (25, 50, 150, 150, 150)


def test_nearest_rank_percentiles() -> None:
    o = Oversampler(C1)
    total = 0
    o.add(0, {(0,): (0,)})
    for i, rate in enumerate([3, 9, 1, 10, 5, 2, 8, 4, 7, 6], start=1):
        total += rate
        o.add(i * S, {(0,): (total,)})
    _, dist = o.publish()
    # Ten rates 1..10: p50 = 5th, p90 = 9th, p99 = ceil(9.9) = 10th, max = 10th.
    assert dist == [(0, b"ops", 55, 5, 9, 10, 10)]


def test_gauge_levels() -> None:
    f = fam(gauge("level", "x", "level"))
    o = Oversampler(f)
    for t, v in [(0, 7), (1, 3), (2, 9)]:
        o.add(t * S, {(0,): (v,)})
    records, dist = o.publish()
    assert records == [(0, 9)]
    # Levels 7, 3, 9 (the first sample counts: a gauge needs no predecessor).
    assert dist == [(0, b"level", 9, 7, 9, 9, 9)]


def test_counter_reset_gives_no_rate_for_that_step() -> None:
    o = Oversampler(C1)
    for t, v in [(0, 0), (1, 10), (2, 5), (3, 15), (4, 35)]:
        o.add(t * S, {(0,): (v,)})
    _, dist = o.publish()
    # Rates 10, (reset), 10, 20.
    assert dist == [(0, b"ops", 35, 10, 20, 20, 20)]


def test_first_sample_of_a_counter_gives_no_rate() -> None:
    o = Oversampler(C1)
    o.add(5 * S, {(0,): (123,)})
    records, dist = o.publish()
    assert records == [(0, 123)]
    assert dist == [(0, b"ops", 123, 0, 0, 0, 0)]


def test_mixed_family_first_sample_has_gauge_level_only() -> None:
    f = fam(counter("ops", "ops", "ops"), gauge("level", "x", "level"))
    o = Oversampler(f)
    o.add(0, {(0,): (100, 4)})
    _, dist = o.publish()
    assert dist_by_metric(dist) == {(0, "ops"): (100, 0, 0, 0, 0),
                                    (0, "level"): (4, 4, 4, 4, 4)}


def test_only_dist_metrics_are_summarised_but_all_are_recorded() -> None:
    f = fam(counter("ops", "ops", "ops"), counter("total", "x", "t", dist=False),
            gauge("level", "x", "level", dist=False))
    o = Oversampler(f)
    o.add(0, {(1,): (0, 10, 3)})
    o.add(S, {(1,): (4, 20, 5)})
    records, dist = o.publish()
    assert records == [(1, 4, 20, 5)]
    assert dist == [(1, b"ops", 4, 4, 4, 4, 4)]


def test_family_without_dist_metrics_publishes_records_only() -> None:
    f = fam(counter("ops", "ops", "ops", dist=False))
    o = Oversampler(f)
    o.add(0, {(0,): (1,)})
    o.add(S, {(0,): (2,)})
    assert o.publish() == ([(0, 2)], [])


def test_labels_are_independent() -> None:
    o = Oversampler(C1)
    o.add(0, {(0,): (0,), (1,): (100,)})
    o.add(S, {(0,): (10,), (1,): (400,)})
    records, dist = o.publish()
    assert sorted(records) == [(0, 10), (1, 400)]
    assert dist_by_metric(dist) == {(0, "ops"): (10, 10, 10, 10, 10),
                                    (1, "ops"): (400, 300, 300, 300, 300)}


def test_vanished_labels_are_dropped() -> None:
    o = Oversampler(C1)
    o.add(0, {(0,): (0,), (1,): (0,)})
    o.add(S, {(0,): (10,)})  # cpu 1 went offline
    records, dist = o.publish()
    assert records == [(0, 10)]
    assert [r[0] for r in dist] == [0]
    # When it comes back, its old total is forgotten: no rate against a stale sample.
    o.add(2 * S, {(0,): (20,), (1,): (1_000,)})
    o.add(3 * S, {(0,): (30,), (1,): (1_005,)})
    records, dist = o.publish()
    assert sorted(records) == [(0, 30), (1, 1_005)]
    assert dist_by_metric(dist)[(1, "ops")] == (1_005, 5, 5, 5, 5)


def test_publish_resets_the_interval_but_keeps_the_previous_sample() -> None:
    o = Oversampler(C1)
    o.add(0, {(0,): (0,)})
    o.add(S, {(0,): (10,)})
    assert o.publish()[1] == [(0, b"ops", 10, 10, 10, 10, 10)]
    o.add(2 * S, {(0,): (40,)})  # the rate against the sample before publish
    assert o.publish()[1] == [(0, b"ops", 40, 30, 30, 30, 30)]


def test_label_order_may_change_between_samples() -> None:
    o = Oversampler(C1)
    o.add(0, {(0,): (0,), (1,): (0,)})
    o.add(S, {(1,): (7,), (0,): (3,)})  # same labels, other order
    _, dist = o.publish()
    assert dist_by_metric(dist) == {(0, "ops"): (3, 3, 3, 3, 3), (1, "ops"): (7, 7, 7, 7, 7)}


def test_label_appearing_mid_interval() -> None:
    f = fam(counter("ops", "ops", "ops"), gauge("level", "x", "level"))
    o = Oversampler(f)
    o.add(0, {(0,): (0, 1)})
    o.add(S, {(0,): (10, 2), (1,): (500, 40)})  # a device was added
    o.add(2 * S, {(0,): (30, 3), (1,): (600, 60)})
    records, dist = o.publish()
    assert sorted(records) == [(0, 30, 3), (1, 600, 60)]
    assert dist_by_metric(dist) == {
        (0, "ops"): (30, 10, 20, 20, 20), (0, "level"): (3, 2, 3, 3, 3),
        # Its first sample gives a level but no rate.
        (1, "ops"): (600, 100, 100, 100, 100), (1, "level"): (60, 40, 60, 60, 60)}


def test_samples_without_dist_keep_only_the_values() -> None:
    o = Oversampler(C1)
    o.add(0, {(0,): (0,)}, dist=False)
    o.add(S, {(0,): (10,)}, dist=False)
    records, dist = o.publish()
    assert records == [(0, 10)]
    assert dist == []  # nobody consumes the _dist event: nothing summarised
    # A consumer enables the _dist event: the next sample is a first sight, no rate yet.
    o.add(2 * S, {(0,): (40,)})
    assert o.publish()[1] == [(0, b"ops", 40, 0, 0, 0, 0)]
    o.add(3 * S, {(0,): (45,)})
    assert o.publish()[1] == [(0, b"ops", 45, 5, 5, 5, 5)]


def test_no_rows() -> None:
    o = Oversampler(C1)
    o.add(0, {})
    o.add(S, {})
    assert o.publish() == ([], [])


def test_dist_records_pack_with_the_dist_schema() -> None:
    f = catalog.CPU_USAGE
    o = Oversampler(f)
    row = (100, 0, 50, 800, 10, 0, 5, 0, 250_000)
    o.add(0, {(3,): row})
    records, dist = o.publish()
    assert f.schema.unpack(f.schema.pack(*records[0])) == dict(
        zip(f.schema.field_names, (3, *row), strict=True))
    assert f.dist_schema is not None
    (d,) = dist
    assert f.dist_schema.unpack(f.dist_schema.pack(*d)) == {
        "cpu": 3, "metric": "busy_ppm", "value": 250_000, "p50": 250_000, "p90": 250_000,
        "p99": 250_000, "max": 250_000}


def reference_dist(family: Family, samples: list[tuple[int, dict]],
                   base: tuple[int, dict] | None) -> list[tuple]:
    """The _dist records of one interval, worked out the slow, obvious way."""
    last = samples[-1][1]
    series = ([base] if base is not None else []) + samples
    out = []
    for key, row in last.items():
        for j, m in enumerate(family.scalars):
            if not m.dist:
                continue
            vals: list[float] = []
            if m.kind is Kind.COUNTER:
                for (t0, r0), (t1, r1) in pairwise(series):
                    if key in r0 and key in r1 and t1 > t0 and r1[key][j] >= r0[key][j]:
                        vals.append((r1[key][j] - r0[key][j]) * (1e9 / (t1 - t0)))
            else:
                vals = [r[key][j] for _t, r in samples if key in r]
            vals.sort()
            qs = [round(vals[max(math.ceil(q * len(vals)) - 1, 0)]) if vals else 0
                  for _s, q in DIST]
            out.append((*key, m.name.encode(), row[j], *(max(q, 0) for q in qs)))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_oversampler_matches_the_reference(seed: int) -> None:
    """Random intervals: counters that stand still, move or reset, gauges that stay or
    change, label sets that come and go, samples that share a time."""
    rng = random.Random(seed)
    f = fam(counter("ops", "ops", "ops"), gauge("level", "x", "level"),
            counter("total", "x", "t", dist=False), counter("errs", "x", "errs"))
    o = Oversampler(f)
    totals = {k: [rng.randrange(1 << 60), 0, 0, rng.randrange(9)] for k in range(4)}
    t = 0
    base = None
    for _interval in range(3):
        samples = []
        for _i in range(rng.randint(1, 11)):
            t += rng.choice((0, 1, 100_000_000, 100_000_000, 99_999_999, 100_000_001))
            rows = {}
            for k, v in totals.items():
                if rng.random() < 0.1:
                    continue  # absent from this sample
                if k == 3 or rng.random() < 0.3:  # label set 3 idles: nothing moves
                    rows[(k,)] = tuple(v)
                    continue
                v[0] += rng.choice((0, 0, 1, 12345, 1 << 40)) if rng.random() > 0.05 else -5
                v[1] = rng.choice((v[1], v[1], rng.randrange(-3, 1 << 50)))
                v[2] += 7
                rows[(k,)] = tuple(v)
            o.add(t, rows)
            samples.append((t, rows))
        records, dist = o.publish()
        if not samples[-1][1]:
            assert (records, dist) == ([], [])
            base = samples[-1]
            continue
        assert records == [(*k, *v) for k, v in samples[-1][1].items()]
        assert dist == reference_dist(f, samples, base)
        base = samples[-1]


def test_dist_quantiles() -> None:
    assert DIST == (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0))


# --- histogram_records -------------------------------------------------------------------

HIST = catalog.AGENT_SAMPLER


def field_index(schema, name: str) -> int:  # type: ignore[no-untyped-def]
    return schema.field_names.index(name)


def test_histogram_record_fields() -> None:
    schema = HIST.schema
    counts = h2.new_counts()
    h2.record(counts, [1, 2, 3, 100])
    (rec,) = histogram_records(schema, ("cpu_usage",), (1, 7, 0), counts)
    got = schema.unpack(schema.pack(*rec))
    assert got == {
        "sampler": "cpu_usage", "status": 1, "refreshes": 7, "errors": 0,
        # Four values: p50 is the 2nd (2); the 4th, 100, reads as its bucket's upper edge.
        "count": 4, "p50": 2, "p90": 103, "p99": 103, "p999": 103, "max": 103,
        "grouping_power": 3, "max_value_power": 64, "part": 0, "parts": 1,
        "buckets": h2.encode_sparse(counts),
    }
    assert [s for s, _ in HIST_QUANTILES] == ["p50", "p90", "p99", "p999", "max"]


def test_empty_histogram_is_one_record_without_buckets() -> None:
    schema = HIST.schema
    (rec,) = histogram_records(schema, ("agent",), (0, 0, 0), h2.new_counts())
    got = schema.unpack(schema.pack(*rec))
    assert (got["count"], got["p50"], got["max"], got["part"], got["parts"]) == (0, 0, 0, 0, 1)
    assert got["buckets"] == b""


@pytest.mark.parametrize("family", [HIST, fam(counter("a", "x", "a"),
                                              histogram("h", "ns", "h"),
                                              labels=(CPU, NAME))],
                         ids=["agent_sampler", "test"])
def test_histogram_records_split_when_every_bucket_is_used(family: Family) -> None:
    schema = family.schema
    counts = np.arange(1, h2.BUCKETS + 1, dtype=np.uint64)
    labels = tuple("x" if lb.type.text else 1 for lb in family.labels)
    scalars = tuple(range(len(family.scalars)))
    recs = histogram_records(schema, labels, scalars, counts)
    n = -(-h2.BUCKETS // h2.MAX_ENTRIES)
    assert len(recs) == n == 5
    part, parts, count = (field_index(schema, n) for n in ("part", "parts", "count"))
    assert [(r[part], r[parts]) for r in recs] == [(i, n) for i in range(n)]
    total = h2.new_counts()
    for r in recs:
        payload = schema.pack(*r)
        assert len(payload) <= MAX_PAYLOAD
        got = schema.unpack(payload)
        # Every part stands alone: labels, scalars and percentiles repeated.
        assert got["count"] == r[count] == int(counts.sum())
        assert got["max"] == 2**64 - 1
        total += h2.decode_sparse(got["buckets"])  # type: ignore[arg-type]
    assert np.array_equal(total, counts)
    assert len(recs[0][-1]) == schema.fields[-1].max_len


def test_histogram_records_split_on_entry_boundaries() -> None:
    schema = HIST.schema
    per_part = schema.fields[-1].max_len // h2.SPARSE_ENTRY_SIZE
    counts = h2.new_counts()
    counts[:per_part] = 1
    assert len(histogram_records(schema, ("a",), (0, 0, 0), counts)) == 1
    counts[per_part] = 1
    recs = histogram_records(schema, ("a",), (0, 0, 0), counts)
    assert [len(r[-1]) // h2.SPARSE_ENTRY_SIZE for r in recs] == [per_part, 1]


@pytest.mark.parametrize("seed", range(20))
def test_sparse_histogram_records_agree_with_h2(seed: int) -> None:
    """The plain-Python records give exactly h2's percentiles and sparse form."""
    rng = np.random.default_rng(seed)
    schema = HIST.schema
    counts = h2.new_counts()
    n = int(rng.integers(0, h2.BUCKETS))
    at = rng.choice(h2.BUCKETS, size=n, replace=False)
    counts[at] = rng.integers(1, 1 << int(rng.integers(1, 40)), size=n, dtype=np.uint64)
    recs = histogram_records(schema, ("a",), (1, 2, 3), counts)
    nz = np.flatnonzero(counts)
    assert recs == sparse_histogram_records(schema, ("a",), (1, 2, 3), nz.tolist(),
                                            counts[nz].tolist())
    qs = h2.percentiles(counts, [q for _s, q in HIST_QUANTILES])
    parts = h2.split_sparse(h2.encode_sparse(counts), schema.fields[-1].max_len)
    head = ("a", 1, 2, 3, int(counts.sum()), *qs, h2.GROUPING_POWER, h2.MAX_VALUE_POWER)
    assert recs == [(*head, i, len(parts), p) for i, p in enumerate(parts)]


def assert_same_records(loop: Oversampler, arrays: Oversampler) -> None:
    """Publish ``loop`` by the per-series loop and ``arrays`` by the NumPy summary (whatever
    their size) and assert the records are the same, types included."""
    from rezolus_ue.metrics import family

    saved = family.VECTOR_SERIES
    try:
        family.VECTOR_SERIES = 10**9
        expected = loop.publish()
        family.VECTOR_SERIES = 0
        got = arrays.publish()
    finally:
        family.VECTOR_SERIES = saved
    assert repr(got) == repr(expected)


def test_the_numpy_summary_gives_the_loops_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Families of many label sets are summarised with NumPy (VECTOR_SERIES): the same
    records as the loop, value for value and type for type, with counters that reset,
    gauges below 0, label sets that come and go, and two samples at one time."""
    import random

    from rezolus_ue.samplers.cpu_softirq import CPU_SOFTIRQ as FAMILY

    taken = []
    arrays_summary = Oversampler._summarise_arrays

    def counted(self: Oversampler, *args: object) -> object:
        out = arrays_summary(self, *args)  # type: ignore[arg-type]
        taken.append(out is not None)
        return out

    monkeypatch.setattr(Oversampler, "_summarise_arrays", counted)
    rng = random.Random(7)
    m = len(FAMILY.scalars)
    keys = [(i,) for i in range(40)]
    state = {k: [rng.randint(0, 10**9) for _ in range(m)] for k in keys}
    loop, arrays = Oversampler(FAMILY), Oversampler(FAMILY)
    t = 10**9
    for interval in range(30):
        for _ in range(rng.choice([1, 2, 10])):
            t += 0 if interval == 7 else rng.choice([99_999_999, 100_000_000])
            rows = {}
            for k in keys:
                if interval == 11 and k == (3,):
                    continue
                v = state[k]
                for j in range(m):
                    x = rng.random()
                    v[j] = (v[j] if x < 0.4 else rng.randint(0, 100) if x < 0.42
                            else -rng.randint(0, 100) if x < 0.43 else v[j] + rng.randint(0, 10**6))
                rows[k] = tuple(v)
            loop.add(t, rows)
            arrays.add(t, rows)
        assert_same_records(loop, arrays)
    assert sum(taken) >= 10  # most intervals took the NumPy path


def test_the_numpy_summary_follows_label_sets_that_change() -> None:
    """The NumPy summary's record heads (labels and metric name), made once per list of
    label sets, follow a list that changes (grows, reorders, shifts): the loop's records."""
    from rezolus_ue.samplers.cpu_softirq import CPU_SOFTIRQ as FAMILY

    m = len(FAMILY.scalars)
    loop, arrays = Oversampler(FAMILY), Oversampler(FAMILY)
    sets = [range(40), range(40), range(50), range(50), range(39, -1, -1),
            range(39, -1, -1), range(5, 45), range(5, 45)]
    t = 10**9
    for interval, cpus in enumerate(sets):
        for step in range(10):
            t += 100_000_000
            k = interval * 10 + step
            rows = {(c,): tuple(c * 1000 + j + k * (c + j) for j in range(m)) for c in cpus}
            loop.add(t, rows)
            arrays.add(t, rows)
        assert_same_records(loop, arrays)
    assert arrays._heads[0] == [(c,) for c in range(5, 45)]  # the arrays path, last keys


def test_tables_give_the_records_of_their_dicts() -> None:
    """Samples given as Tables (a reader's arrays) are summarised from their arrays: the
    records of the same samples given as dicts, value for value and type for type, with
    counters that reset, gauges below 0 (cpu_usage's busy_ppm is a gauge among
    counters), label sets that change, a dict among Tables and two samples at one time."""
    import random

    from rezolus_ue.metrics.family import Table
    from rezolus_ue.samplers.cpu_softirq import CPU_SOFTIRQ
    from rezolus_ue.samplers.cpu_usage import CPU_USAGE

    for fam in (CPU_SOFTIRQ, CPU_USAGE):
        rng = random.Random(11)
        m = len(fam.scalars)
        loop, arrays = Oversampler(fam), Oversampler(fam)
        labels = [(i,) for i in range(40)]
        state = np.array([[rng.randint(0, 10**9) for _ in range(m)] for _ in labels])
        t = 10**9
        took = 0
        for interval in range(24):
            if interval == 9:
                labels = [(i,) for i in range(5, 45)]  # CPUs came and went
            for step in range(rng.choice([1, 2, 10])):
                t += 0 if interval == 7 else rng.choice([99_999_999, 100_000_000])
                x = rng.random()
                state = state + np.array([[rng.choice([0, 0, rng.randint(0, 10**6)])
                                           for _ in range(m)] for _ in labels])
                if x < 0.05:
                    state[3, 1] = rng.randint(0, 100)  # reset
                if x > 0.95:
                    state[4, -1] = -rng.randint(0, 100)
                table = Table(labels, state.copy())
                as_dict = dict(table.rows)
                loop.add(t, as_dict)
                arrays.add(t, as_dict if interval == 13 and step == 0 else table)
            took += isinstance(arrays.last, Table)
            assert_same_records(loop, arrays)
        assert took >= 20


def test_a_table_is_the_mapping_it_stands_for() -> None:
    from rezolus_ue.metrics.family import Table

    t = Table([(1,), (0,)], np.array([[1, 2], [3, 4]]))
    assert t == {(1,): (1, 2), (0,): (3, 4)} and list(t) == [(1,), (0,)] and len(t) == 2
    assert t[(0,)] == (3, 4) and type(t[(0,)][0]) is int
    assert list(t.items()) == [((1,), (1, 2)), ((0,), (3, 4))]
    assert list(t.records()) == [(1, 1, 2), (0, 3, 4)]
    assert list(Table([()], np.array([[5, 6]])).records()) == [(5, 6)]  # no labels
