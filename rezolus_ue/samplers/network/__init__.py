"""Per network interface traffic: bytes, packets, errors and drops, received and transmitted.

Sources (option ``source``; ``auto`` takes the first that works):

* rtnetlink, on ``NETLINK_ROUTE`` sockets kept open from ``start()`` to ``close()``:
  per sample one ``RTM_GETSTATS`` dump asking only for ``IFLA_STATS_LINK_64`` (``struct
  rtnl_link_stats64``, Linux >= 4.7), ~200 bytes per link. Names come from an
  ``RTM_GETLINK`` dump (``IFLA_IFNAME``, the first attribute of each link), repeated only
  when a second socket subscribed to ``RTNLGRP_LINK`` reports a link added, removed or
  renamed (or a link index shows up unnamed). Before Linux 4.7 (``RTM_GETSTATS`` refused)
  every sample is a full ``RTM_GETLINK`` dump read for ``IFLA_STATS64`` (Linux >= 2.6.35),
  else ``IFLA_STATS`` (32-bit counters that wrap; the oversampler takes a wrap for a
  reset); ``detail`` says so. All three structs start with the eight counters published.
* sysfs: ``/sys/class/net/<if>/statistics/{rx,tx}_{bytes,packets,errors,dropped}``
  (Linux >= 2.6.0), kept open per interface; the interface list is re-read at most once a
  second, not per sample. Used where netlink is refused (no ``AF_NETLINK`` in a sandbox or
  seccomp policy: ``detail`` says so) and whenever the sysfs root is not ``/sys`` (a
  fixture tree), since netlink always describes the running kernel.

Messages are decoded here with ``struct``, not pyroute2: on the reference host (Linux
6.18, 4 links) pyroute2 0.9.7 takes 1.2-2.2 ms per ``IPRoute.get_links()`` or
``link('dump')`` and ~0.5 ms for its leanest ``stats('dump', filter_mask=1)``, and importing
it costs ~250 ms and ~23 MB; a full RTM_GETLINK dump decoded here takes 40-70 us (most of
it walking the ~38 attributes of each link), the RTM_GETSTATS dump 7-11 us. The tests
decode the same bytes with pyroute2 and compare.

Interfaces are those of the agent's network namespace, as ``ip link`` lists them; names
are at most 15 bytes (IFNAMSIZ - 1), so they fit the char[16] label.
Events: ``rezolus_network_interface`` (+ ``_dist``: per-second rates between samples).
Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...config import Option
from ...encoding import char_array
from ...metrics.family import Family, Label, counter

INTERFACE = Label("interface", char_array(16), "network interface name")

NETWORK = Family(
    "rezolus_network_interface", __name__,
    "Per network interface traffic (netlink 64-bit link stats; /sys/class/net fallback).",
    (INTERFACE,),
    (
        counter("rx_bytes", "bytes", "bytes received"),
        counter("tx_bytes", "bytes", "bytes transmitted"),
        counter("rx_packets", "packets", "packets received"),
        counter("tx_packets", "packets", "packets transmitted"),
        counter("rx_errors", "packets", "receive errors"),
        counter("tx_errors", "packets", "transmit errors"),
        counter("rx_dropped", "packets", "received packets dropped"),
        counter("tx_dropped", "packets", "transmitted packets dropped"),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (NETWORK,)

#: This sampler's options (beyond the common ones): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    Option("interfaces", "strings", [],
           "Interfaces to report, as shell globs (case-sensitive), e.g. [\"eth*\","
           " \"en*\"]; empty reports every interface."),
    Option("exclude", "strings", [],
           "Interfaces not to report (globs), applied after `interfaces`, e.g."
           " [\"lo\", \"veth*\"]. Empty by default, so loopback is reported too."),
    Option("source", "choice", "auto",
           "Where the counters come from: \"netlink\" (an rtnetlink RTM_GETSTATS dump"
           " per sample, 64-bit counters), \"sysfs\" (/sys/class/net/*/statistics, kept"
           " open) or \"auto\": netlink, else sysfs where netlink is refused or the sysfs"
           " root is not /sys.",
           choices=("auto", "netlink", "sysfs")),
)
