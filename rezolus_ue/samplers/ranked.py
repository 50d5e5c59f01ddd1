"""Walk, rank, keep the top N, reopen what changed: what the samplers of a bounded set of
many things (cgroups, processes) share.

Each walk reads one figure of every candidate, ``rank`` picks the N with the largest, and
``Kept`` holds the files of the picked ones open until a walk drops them: a candidate
kept from one walk to the next is not opened again, a new one is opened, and one no
longer picked is closed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from operator import neg
from typing import Generic, Protocol, TypeVar

from ..errors import RezolusError


class Closable(Protocol):
    """What ``Kept`` holds: something with files to close."""

    def close(self) -> None: ...


K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Closable)


def growth(now: Mapping[K, int], before: Mapping[K, int]) -> dict[K, int]:
    """Return each key's growth since ``before``: all of its value for a key new since
    then, or below its value then (a new holder of the same key)."""
    get = before.get
    out = {}
    for k, v in now.items():
        d = v - get(k, 0)
        out[k] = d if d >= 0 else v
    return out


def rank(keys: Iterable[K], values: Iterable[int], n: int, skip: Collection[K] = (),
         positive: bool = False) -> list[K]:
    """Return the ``n`` of ``keys`` with the largest ``values`` (in the same order),
    largest first, ties by key; keys in ``skip`` (and, if ``positive``, values of 0 or
    less) are passed by."""
    if n <= 0:
        return []
    # One C-level pass (thousands of candidates, a few kept): the n + len(skip) best hold
    # the n best not skipped.
    best = heapq.nsmallest(n + len(skip), zip(map(neg, values), keys, strict=True))
    return [k for v, k in best if k not in skip and (v < 0 or not positive)][:n]


class Kept(Generic[K, V]):
    """The open files (``V``) of the keys picked at the last walk."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """Return the files kept for ``key``, or None."""
        return self._kept.get(key)

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    def __getitem__(self, key: K) -> V:
        return self._kept[key]

    def items(self) -> Iterator[tuple[K, V]]:
        """Yield (key, files) in the order of the last ``keep``."""
        return iter(list(self._kept.items()))

    def keep(self, keys: Collection[K], open_: Callable[[K], V],
             refresh: Callable[[V], None] | None = None) -> int:
        """Hold files for exactly ``keys``, in their order: reuse those kept (``refresh``
        first: e.g. open a file that appeared since), ``open_`` the others, close the rest.

        A key whose ``open_`` (or ``refresh``) raises FileNotFoundError is gone and left
        out; one raising another OSError or a RezolusError (e.g. out of fds: EMFILE), or
        repeated in ``keys``, is left out and counted. Return that count. ``open_`` closes
        what it opened before it raises.
        """
        old, new = self._kept, {}
        self._kept = new
        failed = 0
        try:
            for k in keys:
                if k in new:
                    failed += 1
                    continue
                v = old.pop(k, None)
                try:
                    if v is None:
                        v = open_(k)
                    elif refresh is not None:
                        refresh(v)
                except FileNotFoundError:
                    if v is not None:
                        v.close()
                    continue
                except (OSError, RezolusError):
                    if v is not None:
                        v.close()
                    failed += 1
                    continue
                new[k] = v
        finally:
            for v in old.values():
                v.close()
        return failed

    def drop(self, key: K) -> None:
        """Close and forget the files of ``key`` (gone since the walk), if kept."""
        v = self._kept.pop(key, None)
        if v is not None:
            v.close()

    def close(self) -> None:
        """Close every kept file."""
        kept, self._kept = self._kept, {}
        for v in kept.values():
            v.close()
