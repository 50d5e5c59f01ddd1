"""TCP payload bytes and calls by direction, as applications see them, measured by BPF on
kernel functions (Rezolus's tcp_traffic sampler).

BPF: ``bpf/tcp_traffic.bpf.c`` (shared struct: ``bpf/tcp_traffic.h``). No tracepoint
carries these, so the hooks are functions: ``tcp_sendmsg`` (its return value: bytes a send
accepted) and ``tcp_cleanup_rbuf`` (``copied``: bytes a read copied), as fexit/fentry (BPF
trampolines, which need dynamic ftrace) or else kretprobe/kprobe (``CONFIG_KPROBES``);
option ``attach`` forces ``"fentry"`` or ``"kprobe"``. A kernel with neither makes the
sampler unavailable, saying so (the development host: no kprobes, ftrace's function list
unreadable); the tracepoint-based TCP metrics are the ``tcp`` sampler's and run there.
Functions have no stable ABI: a kernel that renamed or inlined one makes the sampler
unavailable, naming the function. A kretprobe tracks a bounded number of calls in flight
(the kernel's default: max(10, 2 per CPU)): sends blocked beyond that are not counted.

Events: ``rezolus_tcp_traffic``: rx/tx bytes and calls (Rezolus's tcp_bytes and
tcp_packets by direction), totals since the programs were first loaded, counted while
attached; per CPU cache-line counters summed from an mmapped array.

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, counter

TCP_TRAFFIC = Family(
    "rezolus_tcp_traffic", __name__,
    "TCP payload by direction as applications see it, counted by BPF on the kernel"
    " functions tcp_sendmsg (return) and tcp_cleanup_rbuf (fentry/fexit, else kprobes)"
    " while a consumer is attached (totals since the agent loaded the programs).",
    (),
    (
        counter("rx_bytes", "bytes", "bytes copied to applications by reads", dist=False),
        counter("tx_bytes", "bytes", "bytes accepted from applications by sends",
                dist=False),
        counter("rx_packets", "calls", "reads that copied data (Rezolus's tcp_packets"
                " receive)", dist=False),
        counter("tx_packets", "calls", "sends that accepted data (Rezolus's tcp_packets"
                " transmit)", dist=False),
    ),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (TCP_TRAFFIC,)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
