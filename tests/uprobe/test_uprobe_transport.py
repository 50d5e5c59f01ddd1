"""The uprobe transport end to end: the installed CLI with the shipped config (transport
forced to "uprobe"), checked with perf, ftrace and our own consumers (trace-cmd in
tests/kernel/test_doc_examples_user_events.py); idle
without consumers; definitions removed on a clean stop, after kill -9 by the next start
and by `rezolus-ue cleanup`, never touching another tool's uprobe events. Root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from kernel.conftest import wait_for
from waiting import scaled

from rezolus_ue.agent import APP_EVENTS
from rezolus_ue.consume.intervals import EVENT as TICK
from rezolus_ue.linux.uprobe_stub import Stub, stub_path
from rezolus_ue.publisher import event_slot
from rezolus_ue.schema import AGENT, CPU_USAGE, EVENTS, by_name
from tracefs_tools import TracefsError, UprobeDefinition, UprobeEvents

from .conftest import (
    CLI,
    FOREIGN,
    GROUP,
    ROOT,
    Agent,
    field,
    owned,
    remove_foreign,
    shipped_config,
)

pytestmark = pytest.mark.uprobe
HIST = "rezolus_scheduler_runqueue_latency"


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def _lines(text: str, event: str) -> list[str]:
    return [ln for ln in text.splitlines() if f"{event}:" in ln]


def whole_histograms(lines: list[str]) -> list[str]:
    """Return the lines of the histogram records perf saw every part of: an interval with
    more non-zero buckets than one record holds is split into ``parts`` records, written
    back to back, and perf may start or stop between two of them."""
    out: list[str] = []
    group: list[str] = []
    for ln in lines:
        if field(ln, "part") == "0":
            group = []
        group.append(ln)
        if len(group) == int(field(ln, "parts")) and field(group[0], "part") == "0":
            out += group
    return out


def test_every_event_is_defined_with_its_schema_fields_and_removed_on_stop(tfs, agent):
    schemas = by_name((*EVENTS, *APP_EVENTS))
    defined = [n for n in tfs.events(GROUP) if n in schemas]
    assert {s.name for s in APP_EVENTS} <= set(defined)
    assert CPU_USAGE.name in defined and AGENT.name in defined
    for name in defined:
        fmt = tfs.event_format(GROUP, name)
        got = [f.name for f in fmt.fields if not f.name.startswith("common_")]
        want = ["__probe_ip", *(f.name for f in schemas[name].fields)]
        assert got == want, name
    assert sorted(owned(tfs)) == sorted(defined)
    assert agent.stop() == 0
    assert "Traceback" not in agent.output()
    wait_for(lambda: not owned(tfs), timeout=30, what="the agent to delete its events",
             seen=lambda: owned(tfs))
    assert not tfs.events(GROUP) or not set(tfs.events(GROUP)) & set(schemas)


def test_idle_until_a_consumer_then_perf_script_names_every_field(tfs, agent, instance,
                                                                  tmp_path):
    """Nothing is written while nobody listens; perf record of every event then gets
    records of every one the agent defined, each field by name (buckets as text)."""
    tfs.enable(GROUP, AGENT.name, instance=instance)
    first = wait_for(lambda: _lines(tfs.read_trace(instance), AGENT.name), timeout=60,
                     what="a rezolus_agent record in ftrace")
    # The agent's own record is the first thing it wrote: nothing before it.
    assert int(field(first[0], "events_written")) == 0, first[0]
    tfs.disable(GROUP, AGENT.name, instance=instance)
    data = tmp_path / "perf.data"
    rec = _run("perf", "record", "-q", "-e", f"{GROUP}:rezolus_*", "-a", "-o", str(data),
               "--", "sleep", "4")
    assert rec.returncode == 0, rec.stderr
    script = _run("perf", "script", "-i", str(data))
    assert script.returncode == 0, script.stderr[-2000:]
    schemas = by_name()
    defined = [n for n in tfs.events(GROUP) if n in schemas]
    st = json.loads(Path("/run/rezolus-ue/status.json").read_text())
    active = {n for n, s in st["samplers"].items() if s["status"] == "active"}
    # Events of samplers that publish every interval once active (labelled families of
    # things that may not exist here, e.g. drops or block requests, may stay silent).
    steady = [n for n in defined if schemas[n].sampler in active
              and schemas[n].sampler in ("cpu_usage", "memory", "agent", "scheduler_runqueue")]
    missing = [n for n in steady if not _lines(script.stdout, f"{GROUP}:{n}")]
    assert not missing, f"perf saw no records of {missing}"
    for name in defined:
        lines = _lines(script.stdout, f"{GROUP}:{name}")
        if lines:
            absent = [f.name for f in schemas[name].fields if f"{f.name}=" not in lines[-1]]
            assert not absent, f"perf script shows no {absent} in {lines[-1]!r}"
    hist = whole_histograms(_lines(script.stdout, f"{GROUP}:{HIST}"))
    assert hist, "no run-queue latency records"
    counts = [int(c) for ln in hist for c in
              (p.split(":")[1] for p in field(ln, "buckets").strip('"').split())]
    # Each part of a split bucket list repeats the interval's count: count it once.
    assert sum(counts) == sum(int(field(ln, "count")) for ln in hist
                              if field(ln, "part") == "0") > 0
    last = _lines(script.stdout, f"{GROUP}:{AGENT.name}")[-1]
    assert field(last, "sampler_errors") == "0" and field(last, "write_errors") == "0"


def test_ftrace_shows_named_fields_and_perf_cannot_share_it(tfs, agent, instance,
                                                             tmp_path):
    tfs.enable(GROUP, CPU_USAGE.name, instance=instance)
    lines = wait_for(lambda: _lines(tfs.read_trace(instance), CPU_USAGE.name), timeout=60,
                     what="cpu_usage records in ftrace")
    assert all(f"{f.name}=" in lines[0] for f in CPU_USAGE.fields), lines[0]
    # perf cannot take an event ftrace has enabled: a clear error, not a hang.
    perf = _run("perf", "record", "-q", "-e", f"{GROUP}:{CPU_USAGE.name}", "-a", "-o",
                str(tmp_path / "p.data"), "--", "sleep", "1")
    assert perf.returncode != 0, "perf and ftrace at once on a uprobe event"
    tfs.disable(GROUP, CPU_USAGE.name, instance=instance)


def test_ftrace_enable_while_perf_holds_the_event_fails_at_once(tfs, agent, tmp_path):
    perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{GROUP}:{CPU_USAGE.name}", "-a",
                             "-o", str(tmp_path / "p.data"), "--", "sleep", "30"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_for(lambda: tfs.events(GROUP) and perf.poll() is None and
                 "consumer attached" in agent.output(), timeout=60,
                 what="perf to enable the event", seen=agent.output)
        with pytest.raises(TracefsError, match="not both at once"):
            tfs.enable(GROUP, CPU_USAGE.name)
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=scaled(60))


def test_our_consumers_read_the_uprobe_transport(tfs, agent, tmp_path):
    p = _run(str(CLI), "tail", "--format", "json", "-n", "6", CPU_USAGE.name, HIST)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert {r["event"] for r in recs} <= {CPU_USAGE.name, HIST} and len(recs) == 6
    assert all("__probe_ip" not in r for r in recs)
    # A histogram's buckets may be split over parts (records of one interval): together
    # they hold its count.
    groups: list[list[dict]] = []
    for r in recs:
        if r["event"] == HIST:
            if r["part"] == 0 or not groups:
                groups.append([])
            groups[-1].append(r)
    for group in groups:
        if [r["part"] for r in group] == list(range(group[0]["parts"])):  # whole
            assert sum(sum(r["buckets"].values()) for r in group) == group[0]["count"], group
    rec = tmp_path / "rec.rzr"
    p = _run(str(CLI), "record", "--duration", "2s", str(rec), CPU_USAGE.name)
    assert p.returncode == 0, p.stderr
    p = _run(str(CLI), "tail", "--from", str(rec), "--format", "json")
    got = [json.loads(ln) for ln in p.stdout.splitlines()]
    # With the tick records that end each publish interval: a recording keeps them.
    assert got and {r["event"] for r in got} == {CPU_USAGE.name, TICK}, p.stderr[-1000:]


def test_kill9_leaves_definitions_the_next_start_and_cleanup_remove(tfs, tmp_path):
    conf = shipped_config(tmp_path)
    # Another tool's uprobe events: one in our group on another file, one in another
    # group on our stub. Neither is ours to delete.
    other_file = Path(tempfile.mkdtemp()) / "other.so"
    shutil.copyfile(stub_path(), other_file)
    # The second probes the padding after the last slot's `ret`: an address of our stub
    # that is no slot's (the kernel allows one reference counter per probed address).
    stub = Stub()
    others = [UprobeDefinition(GROUP, "someone_elses", str(other_file), 0x1000),
              UprobeDefinition("not_rezolus", "on_our_stub", str(stub.path),
                               stub.function_offset(stub.slots - 1) + 8)]
    assert {(d.group, d.event) for d in others} == set(FOREIGN)
    try:
        with UprobeEvents(tfs.root) as ev:
            for d in others:
                ev.define(d)
        a = Agent("run", "--config", str(conf))
        try:
            a.wait_defined(tfs)
            mine = owned(tfs)
            assert a.stop(signal.SIGKILL) == -signal.SIGKILL
        finally:
            a.close()  # still running if a wait failed: stop it
        assert sorted(owned(tfs)) == sorted(mine), "kill -9 left nothing to clean?"
        dry = _run(str(CLI), "cleanup", "--dry-run")
        assert dry.returncode == 0 and f"would delete {len(mine)} " in dry.stderr, dry.stderr
        assert sorted(owned(tfs)) == sorted(mine)
        # The next start removes what the killed one left, then defines its own.
        b = Agent("run", "--config", str(conf))
        try:
            b.wait_defined(tfs)
            assert "removed" in b.output() and "stale uprobe events" in b.output(), \
                b.output()
            assert b.stop(signal.SIGKILL) == -signal.SIGKILL
        finally:
            b.close()
        clean = _run(str(CLI), "cleanup")
        assert clean.returncode == 0, clean.stderr
        assert f"deleted {len(mine)} {GROUP} event(s)" in clean.stderr, clean.stderr
        assert not owned(tfs)
        with UprobeEvents(tfs.root) as ev:
            left = {(d.group, d.event) for d in ev.list()}
        assert {(d.group, d.event) for d in others} <= left
    finally:
        remove_foreign(tfs)
        shutil.rmtree(other_file.parent)


def test_events_delete_names_cleanup_where_there_are_no_user_events(tfs):
    """`events --delete` deletes user_events; without them (this transport's kernels) it
    says in one line that `cleanup` removes the uprobe events, and is not a traceback."""
    r = _run(str(CLI), "events", "--delete")
    assert "Traceback" not in r.stderr, r.stderr
    if tfs.has_user_events:  # the VM: deletes what it may (1: one is in use), says what
        assert r.returncode in (0, 1) and "deleted " in r.stderr, r.stderr
    else:
        assert r.returncode == 1, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "no user_events" in r.stderr and "rezolus-ue cleanup" in r.stderr, r.stderr


def test_a_restart_under_perf_reuses_the_events_perf_holds(tfs, tmp_path):
    """kill -9 while perf records: the next agent takes over the events perf holds (same
    slot, same definition) and perf keeps receiving records, as with user_events."""
    conf = shipped_config(tmp_path)
    a = Agent("run", "--config", str(conf), "--interval", "200ms")
    data = tmp_path / "perf.data"
    perf = None
    try:
        a.wait_defined(tfs)
        perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{GROUP}:{CPU_USAGE.name}",
                                 "-a", "-o", str(data), "--", "sleep", "600"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        wait_for(lambda: "cpu_usage: consumer attached" in a.output(), timeout=60,
                 what="the agent to see perf", seen=a.output)
        a.stop(signal.SIGKILL)
        b = Agent("run", "--config", str(conf), "--interval", "200ms")
        try:
            b.wait_defined(tfs)
            wait_for(lambda: "using it again" in b.output()
                     and "cpu_usage: consumer attached" in b.output(), timeout=60,
                     what="the new agent to reuse perf's event", seen=b.output)
            pid = b.proc.pid
            os.killpg(perf.pid, signal.SIGINT)
            perf.wait(timeout=scaled(60))
            assert b.stop() == 0
        finally:
            b.close()
    finally:
        if perf is not None and perf.poll() is None:
            os.killpg(perf.pid, signal.SIGINT)
            perf.wait(timeout=scaled(60))
        a.close()
    script = _run("perf", "script", "-i", str(data))
    pids = {int(ln.split()[1]) for ln in _lines(script.stdout, CPU_USAGE.name)}
    assert pid in pids, f"no records from the restarted agent {pid}; pids {pids}"
    wait_for(lambda: not owned(tfs), timeout=30, what="events deleted after perf left",
             seen=lambda: owned(tfs))


def test_the_stub_must_be_roots_alone():
    """A stub anyone but root can change is refused: the file, its directory, or any
    directory above (a sticky /tmp included); the installed one is accepted."""
    from rezolus_ue.errors import PermissionDenied

    Stub()  # the installed stub
    in_tmp = Path(tempfile.mkdtemp())
    # Under the checkout (root's, in CI) for a directory chain that is root's alone.
    mine = Path(tempfile.mkdtemp(dir=ROOT, prefix=".stubtest-"))
    try:
        for d in (in_tmp, mine):
            d.chmod(0o755)
            shutil.copyfile(stub_path(), d / "stub.so")
            (d / "stub.so").chmod(0o644)
        with pytest.raises(PermissionDenied, match="/tmp is writable by someone other"):
            Stub(in_tmp / "stub.so")
        chain = [mine, *mine.parents]
        if all(os.stat(q).st_uid == 0 and not os.stat(q).st_mode & 0o022 for q in chain):
            Stub(mine / "stub.so")
        (mine / "stub.so").chmod(0o664)  # group-writable
        with pytest.raises(PermissionDenied, match=r"stub\.so is writable by someone other"):
            Stub(mine / "stub.so")
    finally:
        shutil.rmtree(in_tmp)
        shutil.rmtree(mine)


def test_the_array_reproducer_in_the_docs():
    """docs/kernels.md's upstream report: its script prints what the page says (perf
    zeros, ftrace the values) and leaves no event behind."""
    from doc_examples import examples, unmatched_claims

    (ex,) = [e for e in examples() if e.source == "docs/kernels.md"
             and e.text == "sudo sh docs/repro/probe-array-zeros.sh"]
    p = subprocess.run(["sh", "docs/repro/probe-array-zeros.sh"], cwd=ROOT,
                       capture_output=True, text=True, timeout=scaled(300))
    assert p.returncode == 0, p.stderr
    assert not unmatched_claims(ex.claims, p.stdout), p.stdout
    assert "arrtest" not in Path("/sys/kernel/tracing/uprobe_events").read_text()


def test_demand_driven_on_the_uprobe_transport(tfs, agent, tmp_path):
    """No consumer: samplers idle and BPF programs detached; perf on one BPF sampler's
    event attaches them and makes it active; perf gone: idle and detached again."""
    from rezolus_ue.agent import read_status

    def state(name: str) -> tuple[str, str]:
        st = (read_status() or {}).get("samplers", {}).get(name, {})
        return st.get("status", "?"), st.get("reason") or ""

    wait_for(lambda: state("scheduler_runqueue")[0] == "idle"
             and state("scheduler_runqueue")[1].startswith("detached")
             and state("cpu_usage")[0] == "idle", timeout=60,
             what="idle samplers with BPF detached", seen=lambda: read_status())
    perf = subprocess.Popen(["perf", "record", "-q", "-e", f"{GROUP}:{HIST}", "-a", "-o",
                             str(tmp_path / "p.data"), "--", "sleep", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        wait_for(lambda: state("scheduler_runqueue")[0] == "active"
                 and state("scheduler_runqueue")[1].startswith("attached"), timeout=120,
                 what="scheduler_runqueue active with its programs attached",
                 seen=lambda: state("scheduler_runqueue"))
        assert state("cpu_usage")[0] == "idle"  # nobody asked for it
    finally:
        os.killpg(perf.pid, signal.SIGINT)
        perf.wait(timeout=scaled(60))
    wait_for(lambda: state("scheduler_runqueue")[0] == "idle"
             and state("scheduler_runqueue")[1].startswith("detached"), timeout=120,
             what="scheduler_runqueue idle and detached after perf left",
             seen=lambda: state("scheduler_runqueue"))


def test_another_probe_on_a_slot_is_named_in_the_sampler_status(tfs, tmp_path):
    """The kernel allows one reference counter per probed address: when another tool
    probes a slot of our stub without one, the sampler of that slot's event says who."""
    from rezolus_ue.agent import read_status

    stub = Stub()
    foreign = UprobeDefinition("not_rezolus", "on_cpu_usage_slot", str(stub.path),
                               stub.function_offset(event_slot(CPU_USAGE.name)))
    with UprobeEvents(tfs.root) as ev:
        ev.define(foreign)
    a = Agent("run", "--config", str(shipped_config(tmp_path)))
    try:
        a.wait_defined(tfs, AGENT.name)
        st = wait_for(lambda: (read_status() or {}).get("samplers", {}).get("cpu_usage"),
                      timeout=60, what="the agent's status")
        assert st["status"] == "unavailable", st
        assert "not_rezolus:on_cpu_usage_slot probes the same address" in st["reason"], st
    finally:
        a.close()
        with UprobeEvents(tfs.root) as ev:
            ev.delete(foreign.group, foreign.event)
