"""The tcp sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from ...bpf.loader import BpfObject
from ..bpf_sampler import BpfSampler
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

    def setup(self, bpf: BpfObject) -> None:
        self._counters = bpf.array("counters")

    def publish(self) -> None:
        self.publish_histograms(self.window())
        c = self._counters
        self.emit(TCP_RETRANSMIT.schema,
                  [(int(c["retransmits"].sum()), int(c["retransmit_errors"].sum()))])

    def close(self) -> None:
        self._counters = None  # type: ignore[assignment]
        super().close()
