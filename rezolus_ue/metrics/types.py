"""Runtime metric values: Counter, Gauge and Histogram (H2 buckets in a NumPy array)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import h2


class Counter:
    """A cumulative count that only grows."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def add(self, n: int = 1) -> None:
        """Add ``n`` (>= 0)."""
        if n < 0:
            raise ValueError("a counter only grows")
        self.value += n


class Gauge:
    """A level that may go up and down."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def set(self, value: int) -> None:
        """Set the current level."""
        self.value = value


class Histogram:
    """Cumulative H2 bucket counts; never reset. ``interval()`` gives the delta since the
    previous call, with reset detection for sources that may restart."""

    __slots__ = ("_prev", "counts")

    def __init__(self) -> None:
        self.counts = h2.new_counts()
        self._prev: np.ndarray | None = None

    def record(self, value: int) -> None:
        """Add one value."""
        self.counts[h2.bucket_index(value)] += np.uint64(1)

    def record_many(self, values: Sequence[int] | np.ndarray) -> None:
        """Add many values at once."""
        h2.record(self.counts, values)

    def interval(self) -> tuple[np.ndarray, bool]:
        """Return (counts added since the last call, reset detected) and start anew."""
        d, reset = h2.delta(self.counts, self._prev)
        self._prev = self.counts.copy()
        return d, reset

    def percentiles(self, qs: Sequence[float]) -> list[int]:
        """Return cumulative percentiles (upper bucket edges)."""
        return h2.percentiles(self.counts, qs)
