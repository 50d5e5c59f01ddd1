"""The tcp sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from ...bpf.loader import BpfObject
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler, whole_histograms
from . import (
    FAMILIES,
    TCP_CONNECT_LATENCY,
    TCP_JITTER,
    TCP_PACKET_LATENCY,
    TCP_RETRANSMIT,
    TCP_SRTT,
)


class Tcp(BpfSampler):
    """TCP packet latency, srtt, jitter, connect latency and retransmits (BPF tracepoints)."""

    name = "tcp"
    families = FAMILIES
    per_cpu_maps = ("counters",)
    histograms = (
        (TCP_PACKET_LATENCY, "pktlat"),
        (TCP_SRTT, "srtt"),
        (TCP_JITTER, "jitter"),
        (TCP_CONNECT_LATENCY, "connlat"),
    )
    reads = ((TCP_RETRANSMIT, "counters"),)

    def setup(self, bpf: BpfObject) -> None:
        self._counters = bpf.array("counters")

    def parse(self, raw: BpfCapture) -> Rows:
        rows: dict = whole_histograms(raw)
        c = raw.maps.get("counters")
        if c is not None:
            rows[TCP_RETRANSMIT] = {
                (): (int(c["retransmits"].sum()), int(c["retransmit_errors"].sum()))}
        return rows

    def close(self) -> None:
        self._counters = None  # type: ignore[assignment]
        super().close()
