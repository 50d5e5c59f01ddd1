"""TCP and UDP protocol counters of the agent's network namespace.

Sources, both kept open:

* ``/proc/net/snmp``: pairs of lines, a header naming the columns and a line of values,
  for ``Tcp:`` (ActiveOpens PassiveOpens InSegs OutSegs RetransSegs InErrs OutRsts) and
  ``Udp:`` (InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors);
* ``/proc/net/netstat``: the same layout, ``TcpExt:`` (ListenOverflows ListenDrops
  TCPTimeouts).

Columns are found by their header names, never by position: kernels add columns (Tcp and
Udp InCsumErrors in Linux 3.10, Udp IgnoredMulti and MemErrors later, TcpExt often). The
Tcp and Udp columns read here are RFC 1213 MIB-II, in every kernel, except Udp
RcvbufErrors and SndbufErrors, added in Linux 2.6.19; TcpExt ListenOverflows, ListenDrops
and TCPTimeouts are already in 2.6 kernels. A name a kernel lacks (or a missing
/proc/net/netstat, as in some sandboxes) reads 0, and ``detail`` lists what is missing.

The Tcp and TcpExt counters cover TCP over IPv4 and IPv6 (one MIB); the Udp counters are
IPv4 only (IPv6 UDP is counted in /proc/net/snmp6 as Udp6*).
Events: ``rezolus_tcp`` and ``rezolus_udp`` (+ ``_dist``: per-second rates between samples).
Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...metrics.family import Family, counter

TCP = Family(
    "rezolus_tcp", __name__,
    "TCP protocol counters (/proc/net/snmp, /proc/net/netstat).",
    (),
    (
        counter("active_opens", "connections", "connections opened (connect)"),
        counter("passive_opens", "connections", "connections accepted"),
        counter("in_segs", "segments", "segments received"),
        counter("out_segs", "segments", "segments sent"),
        counter("retrans_segs", "segments", "segments retransmitted"),
        counter("in_errs", "segments", "segments received in error"),
        counter("out_rsts", "segments", "resets sent"),
        counter("listen_overflows", "connections", "accept queue overflows"),
        counter("listen_drops", "connections", "SYNs dropped at listen sockets"),
        counter("timeouts", "events", "retransmission timeouts (TCPTimeouts)"),
    ),
)

UDP = Family(
    "rezolus_udp", __name__,
    "UDP protocol counters over IPv4 (/proc/net/snmp; IPv6 UDP is not included).",
    (),
    (
        counter("in_datagrams", "datagrams", "datagrams delivered"),
        counter("out_datagrams", "datagrams", "datagrams sent"),
        counter("in_errors", "datagrams", "datagrams received in error"),
        counter("no_ports", "datagrams", "datagrams to a port with no listener"),
        counter("rcvbuf_errors", "datagrams", "datagrams dropped: receive buffer full"),
        counter("sndbuf_errors", "datagrams", "datagrams dropped: send buffer full"),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (TCP, UDP,)
