"""Network bytes and packets received and transmitted, and drops by reason, measured by
BPF (Rezolus's network_traffic sampler, plus drops).

BPF: ``bpf/network_traffic.bpf.c`` (shared structs: ``bpf/network_traffic.h``). Hooks,
each as tp_btf, raw_tp or classic tracepoint (the best the kernel supports; option
``attach`` forces one): ``net:netif_receive_skb`` (rx), ``net:net_dev_start_xmit`` (tx),
``skb:kfree_skb`` (drops; by ``enum skb_drop_reason`` where the kernel passes one, 5.17+,
probed with CO-RE, else all in the ``OTHER`` slot). Every interface together: a packet
crossing several devices (veth, bridge, lo) counts on each; per-interface kernel counters
are the procfs/netlink ``network`` sampler's.

Events: ``rezolus_network_traffic`` (rx/tx bytes and packets, drops: totals since the
programs were first loaded, counted while attached), ``rezolus_network_drops`` (one record
per drop reason with drops; names from the kfree_skb tracepoint's format, so they are this
kernel's).

Counters are per CPU, one cache line each (``traffic``) and 256 reason slots each
(``drops``), in ``BPF_F_MMAPABLE`` arrays kept across unloads; ``publish`` sums them over
CPUs from the mmapped views (no syscall).

Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...encoding import char_array
from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, Label, counter

DROP_REASON = Label("reason", char_array(32), "why the kernel dropped the packets: enum"
                    " skb_drop_reason without its SKB_DROP_REASON_ prefix (e.g. NO_SOCKET,"
                    " as in kfree_skb's format), or OTHER: a kernel without drop reasons"
                    " (before 5.17) or one outside the table")

NETWORK_TRAFFIC = Family(
    "rezolus_network_traffic", __name__,
    "Network traffic of every interface together, counted by BPF on net:netif_receive_skb,"
    " net:net_dev_start_xmit and skb:kfree_skb while a consumer is attached (totals since"
    " the agent loaded the programs). A packet crossing several devices (veth, bridge, lo)"
    " counts on each; the per-interface kernel counters are in rezolus_network_interface.",
    (),
    (
        counter("rx_bytes", "bytes", "bytes received (skb->len, without the L2 header)",
                dist=False),
        counter("tx_bytes", "bytes", "bytes handed to drivers (skb->len, with the L2 header)",
                dist=False),
        counter("rx_packets", "packets", "packets received (a GRO super-packet counts once)",
                dist=False),
        counter("tx_packets", "packets", "packets handed to drivers (a GSO super-packet"
                " counts once)", dist=False),
        counter("drops", "packets", "packets dropped (kfree_skb), any reason", dist=False),
    ),
    cost=COSTLY,
)

NETWORK_DROPS = Family(
    "rezolus_network_drops", __name__,
    "Dropped packets by reason, counted by BPF on skb:kfree_skb while a consumer is attached"
    " (totals since the agent loaded the programs; reasons with drops only).",
    (DROP_REASON,),
    (counter("drops", "packets", "packets dropped for this reason", dist=False),),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (NETWORK_TRAFFIC, NETWORK_DROPS,)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
