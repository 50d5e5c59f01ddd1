"""The blockio_requests sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import numpy as np

from ...bpf.loader import BpfObject
from ...metrics import h2
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler
from . import (
    BLOCKIO_ERROR_KINDS,
    BLOCKIO_LATENCY,
    BLOCKIO_OPS,
    BLOCKIO_REQUESTS,
    BLOCKIO_SIZE,
    FAMILIES,
)

NOPS, NERRORS = len(BLOCKIO_OPS), len(BLOCKIO_ERROR_KINDS)


def counter_records(counters: np.ndarray) -> list[tuple]:
    """Return BLOCKIO_REQUESTS records (op, operations, bytes, errors by kind...) from the
    per-CPU counters: one per operation with anything counted."""
    ops = counters["ops"].sum(axis=0, dtype=np.uint64)
    nbytes = counters["bytes"].sum(axis=0, dtype=np.uint64)
    errors = counters["errors"].sum(axis=0, dtype=np.uint64)
    out = []
    for i, op in enumerate(BLOCKIO_OPS):
        if ops[i] or nbytes[i] or errors[i].any():
            out.append((op, int(ops[i]), int(nbytes[i]), *(int(e) for e in errors[i])))
    return out


class BlockioRequests(BpfSampler):
    """Block IO request latency and size histograms, requests, bytes, errors by op (BPF)."""

    name = "blockio_requests"
    families = FAMILIES
    per_cpu_maps = ("counters",)
    #: Each map holds one H2 row per operation (BLOCKIO_OPS x H2 buckets).
    histograms = ((BLOCKIO_LATENCY, "latency"), (BLOCKIO_SIZE, "size"))
    reads = ((BLOCKIO_REQUESTS, "counters"),)

    def setup(self, bpf: BpfObject) -> None:
        self._counters = bpf.array("counters")

    def parse(self, raw: BpfCapture) -> Rows:
        rows: dict = {
            fam: {(op,): (raw.window, h2.nonzero(h2.delta(cur[i], prev[i])[0]))
                  for i, op in enumerate(BLOCKIO_OPS) if cur[i].any()}  # unseen: no record
            for fam, (cur, prev) in raw.hists.items()}
        c = raw.maps.get("counters")
        if c is not None:
            rows[BLOCKIO_REQUESTS] = {(rec[0],): rec[1:] for rec in counter_records(c)}
        return rows

    def close(self) -> None:
        self._counters = None  # type: ignore[assignment]
        super().close()
