"""Labels and fields several samplers' families share."""

from __future__ import annotations

from ..encoding import REL_STR, U32
from .family import Label, gauge

CPU = Label("cpu", U32, "CPU number")
CGROUP = Label("cgroup", REL_STR, "cgroup v2 path below the cgroup root", max_len=256)

#: The first field of every BPF histogram family.
ATTACHED = gauge("attached_ns", "ns", "time the BPF programs were attached during the"
                  " interval this record covers: the publish interval, or less on the"
                  " first record after a consumer arrived (they attach only then)",
                  dist=False)
