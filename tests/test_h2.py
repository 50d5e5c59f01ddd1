"""Pure tests of the H2 histogram layout: bucket index and bounds, percentiles, deltas and
the sparse wire form.

Expected indices come from the layout's definition (grouping power 3, 496 buckets), worked
by hand per power of two: value ``2**k`` (k >= 4) opens bucket ``(k - 2) * 8``, and
``2**k - 1`` (k >= 5) closes bucket ``(k - 3) * 8 + 7``; values below 16 are their index.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rezolus_ue.metrics import h2
from rezolus_ue.metrics.types import Histogram

U64_MAX = 2**64 - 1


def _edge_cases() -> list[tuple[int, int]]:
    """Return (value, expected bucket index) pairs at the layout's edges."""
    cases = [(0, 0), (1, 1), (7, 7), (8, 8), (15, 15), (16, 16), (17, 16), (18, 17),
             (31, 23), (32, 24), (33, 24), (100, 36)]
    for k in range(4, 64):
        cases.append((2**k, (k - 2) * 8))  # opens the power's first sub-bucket...
        cases.append((2**k + 1, (k - 2) * 8))  # ... which is at least 2 wide
        cases.append((2**k - 1, (k - 3) * 8 + 7))  # closes the previous power's last
    cases.append((U64_MAX, 495))
    cases.append((U64_MAX - 1, 495))
    cases.append((2**63 + 7 * 2**60, 495))  # lower edge of the last bucket
    cases.append((2**63 + 7 * 2**60 - 1, 494))
    return sorted(set(cases))


EDGES = _edge_cases()
EDGE_VALUES = [v for v, _ in EDGES]


def test_layout_constants() -> None:
    assert (h2.GROUPING_POWER, h2.MAX_VALUE_POWER, h2.BUCKETS) == (3, 64, 496)
    assert h2.CUTOFF == 16
    assert h2.MAX_VALUE == U64_MAX
    assert h2.SPARSE_ENTRY_SIZE == struct.calcsize("=HQ") == 10


# --- bucket_index ------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "index"), EDGES, ids=[str(v) for v, _ in EDGES])
def test_bucket_index(value: int, index: int) -> None:
    assert h2.bucket_index(value) == index


@pytest.mark.parametrize("value", [-1, -(2**63), 2**64, 2**64 + 1, 2**100])
def test_bucket_index_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        h2.bucket_index(value)


def test_every_value_below_the_cutoff_has_its_own_bucket() -> None:
    assert [h2.bucket_index(v) for v in range(16)] == list(range(16))


# --- bucket_bounds -----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "index"), EDGES, ids=[str(v) for v, _ in EDGES])
def test_bucket_bounds_hold_the_value(value: int, index: int) -> None:
    lower, upper = h2.bucket_bounds(index)
    assert lower <= value <= upper


@pytest.mark.parametrize(
    ("index", "bounds"),
    [
        (0, (0, 0)),
        (15, (15, 15)),
        (16, (16, 17)),
        (23, (30, 31)),
        (24, (32, 35)),
        (36, (96, 103)),
        (488, (2**63, 2**63 + 2**60 - 1)),
        (495, (2**63 + 7 * 2**60, U64_MAX)),
    ],
)
def test_bucket_bounds_by_hand(index: int, bounds: tuple[int, int]) -> None:
    assert h2.bucket_bounds(index) == bounds


def test_every_bucket_bounds_map_back_to_it() -> None:
    for i in range(h2.BUCKETS):
        lower, upper = h2.bucket_bounds(i)
        assert lower <= upper, i
        assert h2.bucket_index(lower) == i, i
        assert h2.bucket_index(upper) == i, i


def test_buckets_are_contiguous_and_cover_u64() -> None:
    assert h2.bucket_bounds(0)[0] == 0
    assert h2.bucket_bounds(h2.BUCKETS - 1)[1] == U64_MAX
    for i in range(h2.BUCKETS - 1):
        assert h2.bucket_bounds(i)[1] + 1 == h2.bucket_bounds(i + 1)[0], i


def test_relative_width_is_at_most_an_eighth_above_the_cutoff() -> None:
    for i in range(h2.BUCKETS):
        lower, upper = h2.bucket_bounds(i)
        if lower < 16:
            assert lower == upper
        else:
            assert (upper - lower + 1) * 8 <= lower, i


def test_edge_arrays_match_bucket_bounds() -> None:
    assert h2.LOWER.dtype == h2.UPPER.dtype == np.uint64
    assert [(int(lo), int(hi)) for lo, hi in zip(h2.LOWER, h2.UPPER, strict=True)] == [
        h2.bucket_bounds(i) for i in range(h2.BUCKETS)]


@pytest.mark.parametrize("index", [-1, 496, 1000])
def test_bucket_bounds_out_of_range(index: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        h2.bucket_bounds(index)


# --- bucket_indices (vectorised) ---------------------------------------------------------


def test_bucket_indices_matches_scalar_on_edges() -> None:
    got = h2.bucket_indices(np.array(EDGE_VALUES, dtype=np.uint64))
    assert got.tolist() == [i for _, i in EDGES]
    # A plain list of Python ints (including ones above 2**63) works too.
    assert h2.bucket_indices(EDGE_VALUES).tolist() == [i for _, i in EDGES]


def test_bucket_indices_matches_scalar_on_random_u64() -> None:
    rng = np.random.default_rng(20261122)
    uniform = rng.integers(0, 2**64, size=5_000, dtype=np.uint64, endpoint=False)
    # Uniform u64 lands almost only in the top powers: also spread over every bit length.
    shifts = rng.integers(0, 64, size=5_000, dtype=np.uint64)
    spread = rng.integers(0, 2**64, size=5_000, dtype=np.uint64, endpoint=False) >> shifts
    values = np.concatenate([uniform, spread])
    assert len(values) == 10_000
    got = h2.bucket_indices(values)
    assert got.tolist() == [h2.bucket_index(int(v)) for v in values]


def test_bucket_indices_empty() -> None:
    assert h2.bucket_indices([]).tolist() == []


def test_record_adds_to_counts() -> None:
    counts = h2.new_counts()
    assert counts.shape == (496,) and counts.dtype == np.uint64 and not counts.any()
    h2.record(counts, [0, 16, 17, 17, U64_MAX])
    assert {int(i): int(counts[i]) for i in np.flatnonzero(counts)} == {0: 1, 16: 3, 495: 1}


# --- percentiles -------------------------------------------------------------------------

QS = [0.0, 0.5, 0.9, 0.99, 0.999, 1.0]


def counts_of(values: list[int]) -> np.ndarray:
    counts = h2.new_counts()
    for v in values:
        counts[h2.bucket_index(v)] += np.uint64(1)
    return counts


def test_percentiles_of_empty_histogram_are_zero() -> None:
    assert h2.percentiles(h2.new_counts(), QS) == [0] * len(QS)


@pytest.mark.parametrize(("value", "upper"), [(0, 0), (5, 5), (16, 17), (100, 103),
                                              (2**63, 2**63 + 2**60 - 1),
                                              (U64_MAX, U64_MAX)])
def test_percentiles_of_a_single_value(value: int, upper: int) -> None:
    assert h2.percentiles(counts_of([value]), QS) == [upper] * len(QS)


def test_percentiles_are_exact_below_the_cutoff() -> None:
    counts = counts_of(list(range(1, 11)))  # 1..10 once each
    # Nearest rank: ceil(q * 10)-th value, at least the first.
    assert h2.percentiles(counts, [0.0, 0.1, 0.5, 0.55, 0.9, 0.91, 1.0]) == [
        1, 1, 5, 6, 9, 10, 10]


def test_percentiles_report_the_upper_edge_of_the_bucket() -> None:
    # 96..103 is one bucket: every value in it reads as 103.
    counts = counts_of([96, 97, 100, 3])
    assert h2.percentiles(counts, [0.25, 0.5, 1.0]) == [3, 103, 103]


def test_percentile_one_is_the_upper_edge_of_the_highest_bucket() -> None:
    counts = counts_of([1, 2, 1000, 5])
    lower, upper = h2.bucket_bounds(h2.bucket_index(1000))
    assert lower <= 1000 < upper
    assert h2.percentiles(counts, [1.0]) == [upper]


def test_percentiles_are_monotonic_in_q() -> None:
    rng = np.random.default_rng(7)
    counts = h2.new_counts()
    h2.record(counts, rng.integers(0, 10**9, size=1000, dtype=np.uint64))
    qs = [i / 200 for i in range(201)]
    got = h2.percentiles(counts, qs)
    assert got == sorted(got)
    assert got[-1] == h2.bucket_bounds(int(np.flatnonzero(counts).max()))[1]


@pytest.mark.parametrize("q", [-0.01, 1.01, 2.0, float("nan")])
def test_percentiles_reject_bad_q(q: float) -> None:
    with pytest.raises(ValueError, match="quantile"):
        h2.percentiles(counts_of([1, 2, 3]), [0.5, q])


# --- delta -------------------------------------------------------------------------------


def test_delta_without_previous_is_everything() -> None:
    cur = counts_of([1, 2, 2])
    d, reset = h2.delta(cur, None)
    assert not reset
    assert np.array_equal(d, cur)
    d[1] = 99  # a copy, not a view of the cumulative counts
    assert cur[1] == 1


def test_delta_is_the_difference() -> None:
    prev = counts_of([1, 2])
    cur = counts_of([1, 2, 2, 500, 500])
    d, reset = h2.delta(cur, prev)
    assert not reset
    assert np.array_equal(d, counts_of([2, 500, 500]))
    assert d.dtype == np.uint64


def test_delta_unchanged_is_zero() -> None:
    cur = counts_of([3, 4])
    d, reset = h2.delta(cur, cur.copy())
    assert not reset and not d.any()


def test_delta_detects_a_reset() -> None:
    prev = counts_of([1, 2, 2, 2])
    cur = counts_of([2, 7, 7])  # bucket 2 went down: the source restarted
    d, reset = h2.delta(cur, prev)
    assert reset
    assert np.array_equal(d, cur)


def test_histogram_interval_uses_delta() -> None:
    h = Histogram()
    h.record(5)
    h.record_many([5, 100])
    d, reset = h.interval()
    assert not reset and int(d.sum()) == 3
    h.record(7)
    d, reset = h.interval()
    assert not reset and {int(i): int(d[i]) for i in np.flatnonzero(d)} == {7: 1}
    d, _ = h.interval()
    assert not d.any()
    assert h.percentiles([1.0]) == [103]  # cumulative: nothing was reset


def test_histogram_interval_sparse_and_cumulative_counts_agree() -> None:
    h = Histogram()
    for v in (5, 5, 100, 0, U64_MAX):
        h.record(v)
    idx, cnt = h.interval_sparse()
    assert (idx, cnt) == ([0, 5, h2.bucket_index(100), 495], [1, 2, 1, 1])
    assert h.interval_sparse() == ([], [])
    h.record(7)
    counts = h.counts  # read mid-interval: the pending value goes into the array...
    assert int(counts.sum()) == 6 and counts[5] == 2 and counts[7] == 1
    h.record(7)
    assert h.interval_sparse() == ([7], [2])  # ... and still counts for this interval
    d, reset = h.interval()
    assert not reset and not d.any()
    h.record_many([1, 1, 300])
    d, _ = h.interval()
    assert {int(i): int(d[i]) for i in np.flatnonzero(d)} == {1: 2, h2.bucket_index(300): 1}
    assert int(h.counts.sum()) == 10


def test_histogram_nobody_takes_intervals_stays_bounded() -> None:
    """The agent records every refresh's cost; with no consumer nobody takes the intervals:
    the pending values are folded into the array, not kept."""
    h = Histogram()
    for i in range(3 * Histogram.FLUSH_AT + 5):
        h.record(i % 1000)
    assert len(h._pending) < Histogram.FLUSH_AT
    idx, cnt = h.interval_sparse()
    assert sum(cnt) == 3 * Histogram.FLUSH_AT + 5
    expected = h2.new_counts()
    h2.record(expected, [i % 1000 for i in range(3 * Histogram.FLUSH_AT + 5)])
    assert np.array_equal(h.counts, expected)
    assert idx == np.flatnonzero(expected).tolist()


# --- sparse wire form --------------------------------------------------------------------


def test_encode_sparse_wire_layout() -> None:
    counts = h2.new_counts()
    counts[0], counts[5], counts[495] = 3, 1, U64_MAX
    data = h2.encode_sparse(counts)
    assert data == (struct.pack("=HQ", 0, 3) + struct.pack("=HQ", 5, 1)
                    + struct.pack("=HQ", 495, U64_MAX))


def test_encode_sparse_of_empty_is_empty() -> None:
    assert h2.encode_sparse(h2.new_counts()) == b""
    assert not h2.decode_sparse(b"").any()


def test_sparse_round_trip() -> None:
    rng = np.random.default_rng(3)
    counts = h2.new_counts()
    idx = rng.choice(h2.BUCKETS, size=60, replace=False)
    counts[idx] = rng.integers(1, 2**64, size=60, dtype=np.uint64, endpoint=False)
    data = h2.encode_sparse(counts)
    assert len(data) == 60 * h2.SPARSE_ENTRY_SIZE
    back = h2.decode_sparse(data)
    assert back.dtype == np.uint64
    assert np.array_equal(back, counts)


def test_sparse_round_trip_all_buckets() -> None:
    counts = np.arange(1, h2.BUCKETS + 1, dtype=np.uint64)
    assert np.array_equal(h2.decode_sparse(h2.encode_sparse(counts)), counts)


@pytest.mark.parametrize("n", [1, 9, 11, 25])
def test_decode_sparse_rejects_bad_length(n: int) -> None:
    with pytest.raises(ValueError, match="not a multiple"):
        h2.decode_sparse(bytes(n))


@pytest.mark.parametrize("index", [496, 1000, 0xFFFF])
def test_decode_sparse_rejects_out_of_range_index(index: int) -> None:
    data = struct.pack("=HQ", 1, 1) + struct.pack("=HQ", index, 1)
    with pytest.raises(ValueError, match="out of range"):
        h2.decode_sparse(data)


@pytest.mark.parametrize(("entries", "max_bytes", "sizes"), [
    (25, 95, [9, 9, 7]),  # 95 bytes hold 9 whole entries, never 9.5
    (25, 100, [10, 10, 5]),
    (25, 250, [25]),
    (25, 4000, [25]),
    (3, 5, [1, 1, 1]),  # smaller than one entry: still one entry per part
    (0, 100, [0]),
])
def test_split_sparse_cuts_on_entry_boundaries(entries: int, max_bytes: int,
                                              sizes: list[int]) -> None:
    counts = h2.new_counts()
    counts[:entries] = np.arange(1, entries + 1, dtype=np.uint64)
    data = h2.encode_sparse(counts)
    parts = h2.split_sparse(data, max_bytes)
    assert [len(p) // h2.SPARSE_ENTRY_SIZE for p in parts] == sizes
    assert all(len(p) % h2.SPARSE_ENTRY_SIZE == 0 for p in parts)
    assert b"".join(parts) == data
    total = sum((h2.decode_sparse(p) for p in parts), start=h2.new_counts())
    assert np.array_equal(total, counts)
