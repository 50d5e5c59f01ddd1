"""1000 consumer attach/detach cycles, perf and ftrace mixed, while the agent runs: no
crash, and the agent's open fds and RSS stay flat. On this host, through whichever
transport the kernel gives the agent (``bus``: uprobe events here, user_events elsewhere).

"perf" here is perf_event_open on the tracepoint on every CPU (what ``perf record -a``
does, through our binding, so a cycle costs milliseconds, not a perf start-up), "ftrace"
is enabling the event in a tracefs instance. Every 250th cycle takes a BPF sampler's
event, so its programs are loaded, attached and unloaded too. On the uprobe transport the
kernel's own attach and detach of a uprobe take most of a cycle (tens of milliseconds).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from kernel.conftest import Bus

from rezolus_ue.linux.perf_ring import TracepointSubscription
from rezolus_ue.samplers.agent import AGENT
from rezolus_ue.samplers.cpu_usage import CPU_USAGE
from rezolus_ue.samplers.memory import MEMORY
from rezolus_ue.samplers.scheduler import SCHEDULER
from rezolus_ue.samplers.scheduler_runqueue import SCHEDULER_RUNQUEUE_LATENCY

from .agentproc import ForkedAgent, config_with, ours_in_kernel, program_names
from .conftest import wait_for

pytestmark = pytest.mark.live
CYCLES = 1000
WARMUP = 100


def test_consumer_churn_keeps_the_agent_flat(bus: Bus, bus_instance: str, tmp_path: Path,
                                             ) -> None:
    conf = config_with(tmp_path, "cpu_usage", "memory", "scheduler", "agent",
                       "scheduler_runqueue", publish_interval='"20ms"',
                       sample_interval='"10ms"')
    log = tmp_path / "agent.log"
    a = ForkedAgent(conf, log)
    procfs_events = [CPU_USAGE.event, CPU_USAGE.dist_schema.name, MEMORY.event,
                     SCHEDULER.event, AGENT.event]
    try:
        wait_for(lambda: set(procfs_events) <= bus.registered() or not a.alive(), timeout=60)
        assert a.alive(), a.output()
        rng = random.Random(42)
        figures = {}
        for cycle in range(CYCLES):
            if cycle == WARMUP:
                figures["start"] = (a.fds(), a.rss_kib())
            # 4 cycles (the first before the warm-up ends): BPF loading is the slow part
            bpf = cycle % 250 == 50
            event = SCHEDULER_RUNQUEUE_LATENCY.event if bpf else rng.choice(procfs_events)
            # One consumer at a time: the uprobe transport refuses perf and ftrace together.
            if cycle % 2:
                tp_id = bus.tfs.event_id(bus.group, event)
                with TracepointSubscription(tp_id):
                    time.sleep(rng.uniform(0, 0.005) + (0.3 if bpf else 0))
            else:
                bus.enable(event, instance=bus_instance)
                time.sleep(rng.uniform(0, 0.005) + (0.3 if bpf else 0))
                bus.disable(event, instance=bus_instance)
            assert a.alive(), f"cycle {cycle}: agent died: {a.output()[-2000:]}"
        # Let the agent notice the last detach and unload (one interval, with slack).
        wait_for(lambda: ours_in_kernel(program_names()) == ([], []), timeout=30)
        time.sleep(0.5)
        figures["end"] = (a.fds(), a.rss_kib())
        (fd0, rss0), (fd1, rss1) = figures["start"], figures["end"]
        print(f"{CYCLES} consumer cycles: agent fds {fd0} -> {fd1}, RSS {rss0} -> {rss1} KiB"
              f" ({rss1 - rss0:+d} KiB after {WARMUP} warm-up cycles)")
        assert fd1 <= fd0, "fds grew"
        # Each BPF activation runs in a new thread (glibc may give it a malloc arena): the
        # bound is for leaks that grow with cycles, not for that one-off.
        assert rss1 - rss0 < 2048, "RSS grew by 2 MiB or more"
        assert a.stop() == 0
        out = a.output()
        assert "Traceback" not in out and "failed" not in out, out[-3000:]
    finally:
        if a.alive():
            a.kill9()
