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
    previous call, with reset detection for sources that may restart.

    ``record`` only appends to a list (it sits on hot paths); values are bucketed in one
    vectorised step when the counts are read.
    """

    __slots__ = ("_counts", "_pending", "_prev")

    def __init__(self) -> None:
        self._counts = h2.new_counts()
        self._pending: list[int] = []
        self._prev: np.ndarray | None = None

    @property
    def counts(self) -> np.ndarray:
        """Return the cumulative bucket counts."""
        if self._pending:
            h2.record(self._counts, self._pending)
            self._pending = []
        return self._counts

    def record(self, value: int) -> None:
        """Add one value (0 .. 2**64-1)."""
        if not 0 <= value <= h2.MAX_VALUE:
            raise ValueError(f"{value} is outside 0..2**64-1")
        self._pending.append(value)

    def record_many(self, values: Sequence[int] | np.ndarray) -> None:
        """Add many values at once."""
        h2.record(self.counts, values)

    def interval(self) -> tuple[np.ndarray, bool]:
        """Return (counts added since the last call, reset detected) and start anew."""
        d, reset = h2.delta(self.counts, self._prev)
        self._prev = self._counts.copy()
        return d, reset

    def percentiles(self, qs: Sequence[float]) -> list[int]:
        """Return cumulative percentiles (upper bucket edges)."""
        return h2.percentiles(self.counts, qs)
