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

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, counter, histogram
from ...metrics.labels import ATTACHED

TCP_PACKET_LATENCY = Family(
    "rezolus_tcp_packet_latency", __name__,
    "TCP packet latency: from a data segment's arrival (tcp:tcp_probe) until the"
    " application read from the socket (tcp:tcp_rcv_space_adjust); the oldest unread"
    " segment per socket is timed (BPF).",
    (),
    (ATTACHED, histogram("latency_ns", "ns", "time from a segment's arrival to its read")),
    cost=COSTLY,
)

TCP_SRTT = Family(
    "rezolus_tcp_srtt", __name__,
    "TCP smoothed round-trip time, sampled from the socket on every received segment of an"
    " established connection (BPF on tcp:tcp_probe).",
    (),
    (ATTACHED, histogram("srtt_ns", "ns", "the socket's smoothed RTT (srtt_us / 8)")),
    cost=COSTLY,
)

TCP_JITTER = Family(
    "rezolus_tcp_jitter", __name__,
    "TCP RTT jitter: the socket's RTT mean deviation, sampled on every received segment of"
    " an established connection (BPF on tcp:tcp_probe).",
    (),
    (ATTACHED, histogram("jitter_ns", "ns", "the socket's RTT mean deviation (mdev_us / 4)")),
    cost=COSTLY,
)

TCP_CONNECT_LATENCY = Family(
    "rezolus_tcp_connect_latency", __name__,
    "TCP connect latency of active opens: SYN_SENT until ESTABLISHED (BPF on"
    " sock:inet_sock_set_state, keyed by socket).",
    (),
    (ATTACHED, histogram("latency_ns", "ns", "time from SYN sent to connection established")),
    cost=COSTLY,
)

TCP_RETRANSMIT = Family(
    "rezolus_tcp_retransmit", __name__,
    "TCP retransmissions, counted by BPF on tcp:tcp_retransmit_skb while a consumer is"
    " attached (totals since the agent loaded the programs).",
    (),
    (
        counter("retransmits", "segments", "segments retransmitted", dist=False),
        counter("retransmit_errors", "segments", "retransmissions that failed (kernels whose"
                " tracepoint reports them, e.g. 6.18; always 0 on older ones)", dist=False),
    ),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (
    TCP_PACKET_LATENCY, TCP_SRTT, TCP_JITTER, TCP_CONNECT_LATENCY, TCP_RETRANSMIT,
)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
