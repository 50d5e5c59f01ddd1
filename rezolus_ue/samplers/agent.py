"""The agent's own cost and health.

Sources: ``os.times()`` (CPU time), ``/proc/self/statm`` (RSS), the publisher's write
counters and the sampler states kept by the agent.
Events: ``rezolus_agent`` (one record per interval).
"""

from __future__ import annotations

import os

from ..procfs import KeptOpen
from ..schema import AGENT
from .base import Sampler


class AgentSelf(Sampler):
    """The agent's CPU time, RSS, records written, EBADF races and sampler errors."""

    name = "agent"
    events = (AGENT,)

    def start(self) -> None:
        self._statm = KeptOpen(self.ctx.roots.procfs / "self" / "statm")
        self._page = os.sysconf("SC_PAGE_SIZE")

    def collect(self) -> None:
        s = self.ctx.agent_stats()
        t = os.times()
        rss = int(self._statm.read().split()[1]) * self._page
        self.handles[AGENT.name].write(AGENT.pack(
            os.getpid(), s["uptime_ns"], int(t.user * 1e9), int(t.system * 1e9), rss,
            s["events_written"], s["ebadf_races"], s["write_errors"], s["sampler_errors"],
            s["samplers_active"], s["samplers_unavailable"],
        ))

    def close(self) -> None:
        self._statm.close()
