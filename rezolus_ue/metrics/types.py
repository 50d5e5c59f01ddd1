"""The agent's own runtime histogram (H2 buckets in a NumPy array)."""

from __future__ import annotations

from collections import Counter as _Tally
from collections.abc import Sequence

import numpy as np

from . import h2

_MAX_VALUE = h2.MAX_VALUE
_FLUSH_AT = 4096
#: Bucket of each value below _SMALL (the agent's refresh costs in us mostly are).
_SMALL = 1 << 13
_SMALL_BUCKET: list[int] = h2.bucket_indices(np.arange(_SMALL)).tolist()


class Histogram:
    """Cumulative H2 bucket counts; never reset. ``interval()`` (or ``interval_sparse()``)
    gives what was recorded since the previous call.

    ``record`` only appends to a list (it sits on the agent's per-tick path). The interval's
    values are bucketed in plain Python when the interval is taken (about ten values per
    second per sampler: cheaper than any NumPy call), and kept sparse; the dense cumulative
    array is only built when ``counts`` is read. The list is folded into the array every
    ``FLUSH_AT`` values, so an interval nobody takes cannot grow without bound.
    """

    __slots__ = ("_acc", "_carry", "_counts", "_pending")

    #: Pending values folded into the array at once when no interval was taken.
    FLUSH_AT = _FLUSH_AT

    def __init__(self) -> None:
        #: Cumulative counts, except those still in _pending and _acc.
        self._counts = h2.new_counts()
        #: Values recorded since they were last bucketed.
        self._pending: list[int] = []
        #: bucket -> count of values bucketed by interval_sparse, not yet in _counts.
        self._acc: _Tally[int] = _Tally()
        #: bucket -> count of this interval's values already folded into _counts.
        self._carry: dict[int, int] = {}

    def _flush(self) -> None:
        """Fold the pending values into the array, remembering them for the interval."""
        if not self._pending:
            return
        idx = h2.bucket_indices(self._pending)
        np.add.at(self._counts, idx, np.uint64(1))
        carry = self._carry
        for i, c in zip(*np.unique(idx, return_counts=True), strict=True):
            carry[int(i)] = carry.get(int(i), 0) + int(c)
        self._pending = []

    @property
    def counts(self) -> np.ndarray:
        """Return the cumulative bucket counts."""
        self._flush()
        if self._acc:
            for i, c in self._acc.items():
                self._counts[i] += np.uint64(c)
            self._acc = _Tally()
        return self._counts

    def record(self, value: int) -> None:
        """Add one value (0 .. 2**64-1)."""
        if not 0 <= value <= _MAX_VALUE:
            raise ValueError(f"{value} is outside 0..2**64-1")
        pending = self._pending
        pending.append(int(value))  # a NumPy integer has no bit_length
        if len(pending) >= _FLUSH_AT:
            self._flush()

    def record_many(self, values: Sequence[int] | np.ndarray) -> None:
        """Add many values at once."""
        self._flush()
        self._pending = [int(v) for v in np.asarray(values, dtype=np.uint64)]
        self._flush()

    def interval_sparse(self) -> tuple[list[int], list[int]]:
        """Return (bucket indices ascending, their counts) of the values recorded since the
        last interval, and start a new one."""
        got, self._carry = self._carry, {}
        pending, self._pending = self._pending, []
        if pending:
            if max(pending) < _SMALL:  # the usual: a table lookup each, in C
                buckets = list(map(_SMALL_BUCKET.__getitem__, pending))
            else:
                buckets = list(map(h2.bucket_index, pending))
            counted = _Tally(buckets)
            if got:
                counted.update(got)
            got = counted
            self._acc.update(buckets)
        idx = sorted(got)
        return idx, list(map(got.__getitem__, idx))

    def interval(self) -> tuple[np.ndarray, bool]:
        """Return (counts added since the last call, reset detected: never, a Histogram
        only grows) and start anew."""
        idx, cnt = self.interval_sparse()
        d = h2.new_counts()
        d[idx] = cnt
        return d, False

    def percentiles(self, qs: Sequence[float]) -> list[int]:
        """Return cumulative percentiles (upper bucket edges)."""
        return h2.percentiles(self.counts, qs)

