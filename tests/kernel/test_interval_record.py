"""The agent's tick record as perf sees it: the installed CLI with the shipped config
(``test_as_shipped.shipped_agent``), read by ``perf record`` and ``perf script``.

In perf's order (time order over every CPU), each ``rezolus_interval`` record follows every
record of its tick, and its ``records`` field counts them: the records between two tick
records are exactly the records the second one says its tick wrote. Only cheap events are
enabled (no BPF sampler attaches) and perf is the one consumer, so the agent writes just
what perf reads.
"""

from __future__ import annotations

import itertools
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from waiting import scaled

from rezolus_ue.consume.intervals import EVENT
from rezolus_ue.consume.subscription import Subscription
from rezolus_ue.schema import AGENT, CPU_USAGE

from .conftest import Bus, wait_for
from .test_as_shipped import _field, _perf_lines, shipped_agent  # noqa: F401 - a fixture

#: Tick records to read; the first two are left out (perf enables its events one CPU at a
#: time, so the first tick it sees may be partial).
TICKS = 6


@pytest.mark.parametrize("shipped_agent", [
    pytest.param(("sudo", "uprobe"), marks=pytest.mark.uprobe, id="uprobe"),
    pytest.param(("sudo", "user_events"), marks=pytest.mark.kernel, id="user_events"),
], indirect=True)
def test_the_tick_record_follows_its_ticks_records_and_counts_them(
        shipped_agent, bus: Bus, tmp_path: Path):  # noqa: F811
    _how, _agent, group = shipped_agent
    perf = shutil.which("perf")
    assert perf, "perf is not installed: scripts/setup.sh installs it"
    events = [a for n in (CPU_USAGE.name, AGENT.name, EVENT) for a in ("-e", f"{group}:{n}")]
    data = tmp_path / "perf.data"
    # To a file, read once perf has stopped: perf record streams a quiet pipe only when
    # its buffers fill, which a few records a second never do.
    rec = subprocess.Popen([perf, "record", "-q", *events, "-a", "-o", str(data)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: rec.poll() is None and all(bus.consumers(n) for n in
                                                    (CPU_USAGE.name, AGENT.name, EVENT)),
                 timeout=60, step=0.2, what="perf to enable its three events",
                 seen=lambda: rec.poll())
        # Our own reader counts the ticks perf records meanwhile; it changes nothing the
        # agent writes (one write per record, whoever reads it).
        with Subscription([EVENT], wait=False, tracefs=bus.tfs) as sub:
            seen: list[int] = []
            wait_for(lambda: len(seen.__iadd__([r.fields["seq"] for r in sub.poll(200)
                                                if r.event == EVENT])) > TICKS + 1,
                     timeout=120, step=0, what=f"{TICKS + 2} {EVENT} records",
                     seen=lambda: seen)
    finally:
        rec.send_signal(signal.SIGINT)
        _out, err = rec.communicate(timeout=scaled(60))
    assert rec.returncode in (0, -signal.SIGINT), err  # perf re-raises the SIGINT
    script = subprocess.run([perf, "script", "-i", str(data)], capture_output=True,
                            text=True, timeout=scaled(120))
    assert script.returncode == 0, script.stderr
    lines = script.stdout.splitlines()
    ours = [ln for ln in lines if _perf_lines(ln)]
    ticks = [i for i, ln in enumerate(ours) if f":{EVENT}:" in ln]
    assert len(ticks) >= TICKS, ours[-5:]
    seqs = [_field(ours[i], "seq") for i in ticks]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    for prev, i in itertools.pairwise(ticks[1:]):
        between = ours[prev + 1 : i]
        assert between, f"no record in the tick ended by {ours[i]!r}"
        assert _field(ours[i], "records") == len(between), (ours[i], between)
        events_seen = set(_perf_lines("\n".join(between)))
        assert events_seen == {CPU_USAGE.name, AGENT.name}, events_seen
