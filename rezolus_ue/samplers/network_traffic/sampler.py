"""The network_traffic sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import re

import numpy as np

from tracefs_tools import Tracefs, TracefsError, find_tracefs

from ...bpf.loader import BpfObject
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler
from . import FAMILIES, NETWORK_DROPS, NETWORK_TRAFFIC

#: NETWORK_DROP_REASONS (bpf/network_traffic.h): reason slots per CPU.
DROP_REASONS = 256
#: Slot 0's name: the kernel gave no reason, or one outside the slots.
OTHER = "OTHER"


_SYMBOLIC = re.compile(r"__print_symbolic\(REC->reason,(.*)\)", re.S)
_PAIR = re.compile(r"\{\s*(\d+)\s*,\s*\"(\w+)\"\s*\}")


def drop_reason_names(print_fmt: str) -> list[str]:
    """Return the name of each reason slot, from kfree_skb's ``print fmt`` line.

    The kernel prints reasons with ``__print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" },
    ...)``; slots it does not name are ``REASON_<n>``, slot 0 is ``OTHER``.
    """
    names = [f"REASON_{i}" for i in range(DROP_REASONS)]
    m = _SYMBOLIC.search(print_fmt)
    for num, name in _PAIR.findall(m.group(1) if m else ""):
        if 0 < int(num) < DROP_REASONS:
            names[int(num)] = name
    names[0] = OTHER
    return names


def kernel_drop_reason_names() -> list[str]:
    """Return this kernel's reason slot names (numbered ones if tracefs is unreadable)."""
    try:
        fmt = Tracefs(find_tracefs(mount=False)).event_format("skb", "kfree_skb")
    except (TracefsError, OSError):  # the counts stand without names
        return drop_reason_names("")
    return drop_reason_names(fmt.print_fmt)


class NetworkTraffic(BpfSampler):
    """Network rx/tx bytes and packets, and drops by reason, of all interfaces (BPF)."""

    name = "network_traffic"
    families = FAMILIES
    per_cpu_maps = ("traffic", "drops")
    #: The traffic record carries the drops' total too.
    reads = ((NETWORK_TRAFFIC, "traffic"), (NETWORK_TRAFFIC, "drops"),
             (NETWORK_DROPS, "drops"))

    def setup(self, bpf: BpfObject) -> None:
        self._traffic = bpf.array("traffic")
        self._drops = bpf.array("drops")
        self._reasons = kernel_drop_reason_names()

    def parse(self, raw: BpfCapture) -> Rows:
        drops = raw.maps.get("drops")
        if drops is None:
            return {}
        by_reason = drops["drops"].sum(axis=0)
        rows: dict = {}
        tr = raw.maps.get("traffic")
        if tr is not None:
            sums = {f: int(tr[f].sum()) for f in tr.dtype.names or ()}
            rows[NETWORK_TRAFFIC] = {(): (
                sums["rx_bytes"], sums["tx_bytes"], sums["rx_packets"], sums["tx_packets"],
                int(by_reason.sum()))}
        if NETWORK_DROPS in raw.wanted:
            rows[NETWORK_DROPS] = {(self._reasons[slot],): (int(by_reason[slot]),)
                                   for slot in np.flatnonzero(by_reason).tolist()}
        return rows

    def close(self) -> None:
        self._traffic = self._drops = None  # type: ignore[assignment]
        super().close()
