"""Decoded tracepoint records, as every consumer (top, tail, record, exporter) sees them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..metrics import h2


@dataclass(frozen=True, slots=True)
class Record:
    """One record of one rezolus-ue event.

    ``time_ns`` is CLOCK_MONOTONIC (the perf sample time), ``cpu`` the CPU it was written
    on, ``pid`` the writer (the agent). ``fields`` are the event's payload fields by name:
    integers, ``str`` for char arrays and ``__rel_loc char[]``, ``bytes`` for
    ``__rel_loc u8[]`` (a histogram's ``buckets``: see ``histogram()``).
    """

    event: str
    time_ns: int
    cpu: int
    pid: int
    fields: dict[str, object] = field(default_factory=dict)

    def histogram(self) -> np.ndarray | None:
        """Return the record's bucket counts (H2 layout), or None if it has none."""
        data = self.fields.get("buckets")
        return h2.decode_sparse(data) if isinstance(data, bytes | bytearray) else None

    def to_json(self) -> dict[str, object]:
        """Return a JSON-serialisable dict (buckets as {index: count}); the writing CPU and
        pid are ``common_cpu`` and ``common_pid``."""
        # common_* as in ftrace: events have fields named cpu or pid of their own.
        out: dict[str, object] = {"event": self.event, "time_ns": self.time_ns,
                                  "common_cpu": self.cpu, "common_pid": self.pid}
        for k, v in self.fields.items():
            if k == "buckets" and isinstance(v, bytes | bytearray):
                counts = h2.decode_sparse(v)
                nz = np.flatnonzero(counts)
                out[k] = {int(i): int(counts[i]) for i in nz}
            elif isinstance(v, bytes | bytearray):
                out[k] = v.hex()
            else:
                out[k] = v
        return out
