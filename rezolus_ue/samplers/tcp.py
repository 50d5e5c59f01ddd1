"""TCP packet latency, smoothed RTT, RTT jitter, connect latency and retransmits, measured
by BPF on tracepoints only (Rezolus's tcp_packet_latency, tcp_receive,
tcp_connect_latency and tcp_retransmit samplers).

BPF: ``bpf/tcp.bpf.c`` (shared struct: ``bpf/tcp.h``). Hooks, each as tp_btf, raw_tp or
classic tracepoint (the best the kernel supports; option ``attach`` forces one):
``tcp:tcp_probe`` (every segment received on an established socket: srtt and mdev
samples, and the arrival time of the oldest unread data segment per socket),
``tcp:tcp_rcv_space_adjust`` (the application read: packet latency),
``tcp:tcp_destroy_sock``, ``sock:inet_sock_set_state`` (SYN_SENT -> ESTABLISHED, keyed by
socket: connect latency), ``tcp:tcp_retransmit_skb``.

Rezolus measures srtt/jitter with a kprobe on ``tcp_rcv_established``, whose first act is
to fire ``tcp_probe`` with the same socket, so the tracepoint gives the same samples
without function hooks. TCP bytes and calls by direction need function hooks
(``tcp_sendmsg``, ``tcp_cleanup_rbuf``): they are the separate ``tcp_traffic`` sampler, so
this one runs on any kernel with BTF, kprobes and BPF trampolines or not.

Events: ``rezolus_tcp_packet_latency``, ``rezolus_tcp_srtt``, ``rezolus_tcp_jitter``,
``rezolus_tcp_connect_latency``: H2 histograms of the interval in ns, each with
``attached_ns``; ``rezolus_tcp_retransmit``: retransmitted (and, where the kernel traces
them, failed) segments, totals since the programs were first loaded.

Measured cost (Linux 6.18, 2 vCPUs shared with other work, load ~9; kernel.bpf_stats_enabled
run_time_ns / run_cnt over five 8 MiB loopback transfers), per event: tcp_probe 240-300
ns (two histogram updates, a hash lookup), tcp_rcv_space_adjust 250-350 ns,
inet_sock_set_state 450-600 ns and tcp_destroy_sock 400-530 ns (LRU hash updates and
deletes), tcp_retransmit_skb ~1 us (3 samples, cold); the attach kinds are within the
noise of each other. One publish (four histograms, one counter record): ~55 us (median).
"""

from __future__ import annotations

import numpy as np

from ..bpf.loader import BpfObject
from ..metrics.catalog import (
    TCP_CONNECT_LATENCY,
    TCP_JITTER,
    TCP_PACKET_LATENCY,
    TCP_RETRANSMIT,
    TCP_SRTT,
)
from .bpf_sampler import BpfSampler

#: struct tcp_counters (bpf/tcp.h): one cache line per CPU.
COUNTERS_DTYPE = np.dtype({
    "names": ["retransmits", "retransmit_errors"],
    "formats": ["=u8", "=u8"],
    "offsets": [0, 8],
    "itemsize": 64,
})
#: C struct name -> its mirror here (tests check both against the object's BTF).
SHARED_STRUCTS = {"tcp_counters": COUNTERS_DTYPE}


class Tcp(BpfSampler):
    """TCP packet latency, srtt, jitter, connect latency and retransmits (BPF tracepoints)."""

    name = "tcp"
    families = (TCP_PACKET_LATENCY, TCP_SRTT, TCP_JITTER, TCP_CONNECT_LATENCY,
                TCP_RETRANSMIT)
    bpf_object = "tcp"
    per_cpu_maps = ("counters",)
    histograms = (
        (TCP_PACKET_LATENCY, "pktlat"),
        (TCP_SRTT, "srtt"),
        (TCP_JITTER, "jitter"),
        (TCP_CONNECT_LATENCY, "connlat"),
    )
    keep_maps = ("pktlat", "srtt", "jitter", "connlat", "counters")

    def setup(self, bpf: BpfObject) -> None:
        self._counters = bpf.array("counters", COUNTERS_DTYPE)

    def publish(self, t_ns: int) -> None:
        self.publish_histograms(self.window())
        h = self.handles.get(TCP_RETRANSMIT.schema.name)
        if h is not None and h.word.value:
            c = self._counters
            h.write(TCP_RETRANSMIT.schema.pack(int(c["retransmits"].sum()),
                                               int(c["retransmit_errors"].sum())))

    def close(self) -> None:
        self._counters = None  # type: ignore[assignment]
        super().close()
