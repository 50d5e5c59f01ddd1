"""The docs' user_events forms and examples about user_events itself, run as a reader
runs them, against the README's agent: kept in the kernel tier, so on this development
host they run in the VM.

test_doc_examples.py runs the rest of the docs on this host's transport, and the forms of
commands naming the uprobe transport's group. These need user_events: the commands in
their ``user_events:`` and ``events/user_events/`` forms (perf, the man page's examples),
the output the README shows in its form (``rezolus-ue check``'s user_events lines, perf's
``user_events:`` records, ftrace's ``cpu=0x1 (1)``), its ``user_events_data`` file modes
(the ``tracing`` group), the ``persist = true`` flag and ``user_events_status``, and a BPF
program that never runs on a user_events tracepoint. trace-cmd is here too, on both
transports (its commands name the event alone): it writes
/proc/sys/kernel/ftrace_enabled before it records, which this host refuses (EPERM, even
for the value it holds).

The commands run as written (this tier's kernel has user_events, and uprobe events).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from uprobe.conftest import Agent, shipped_config
from waiting import scaled

from rezolus_ue.schema import CPU_USAGE
from tracefs_tools import Tracefs

from .conftest import Bus, wait_for
from .test_doc_examples import (
    README_PERF,
    TRACING,
    Shell,
    Step,
    agent_with_dist,
    assert_every_listed_ran,
    ftrace_instance,
    man_page_consuming,
    readme_agent,
    stop,
    stop_readme_agent,
)

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def sh(tmp_path_factory: pytest.TempPathFactory, bus: Bus) -> Shell:
    return Shell(tmp_path_factory.mktemp("docs_ue"), bus)


@pytest.fixture(scope="module")
def agent(sh: Shell, tracefs: Tracefs) -> Iterator[subprocess.Popen[bytes]]:
    """The README's agent, `sudo rezolus-ue run &`, with every event but
    rezolus_cpu_usage held (readme_agent): the perf command subscribes to all of them."""
    yield from readme_agent(sh, hold=True)


def test_user_events_output_as_shown(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """The README's output in the user_events form it shows, as written: `check`, perf's
    records, ftrace's (test_doc_examples.py runs the same on this host's transport)."""
    sh.check_claims("sudo rezolus-ue check", sh.run("sudo rezolus-ue check").stdout)
    key = sh.form(README_PERF)
    assert key == README_PERF, key
    sh.check_claims(key, sh.run(key).stdout)
    ftrace_instance(sh, agent.pid)


def test_man_page_consuming(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """rezolus-ue(8) CONSUMING in its user_events forms (test_doc_examples.py runs the
    uprobe ones)."""
    man_page_consuming(sh)


def test_trace_cmd(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    trace_cmd(sh)


def trace_cmd(sh: Shell) -> None:
    """The README's and rezolus-ue(8)'s trace-cmd commands, as written, checked against
    what the README shows (in the form ``sh``'s transport prints); every field of the
    event is reported by name."""
    ip = r"\([0-9a-f]+\)\s+" if sh.uprobe else ""
    for sudo in ("sudo ", ""):
        sh.run(f"{sudo}trace-cmd record -e rezolus_cpu_usage sleep 5")
        report = sh.run(f"{sudo}trace-cmd report").stdout
        sh.check_claims(f"{sudo}trace-cmd report", report)
        lines = re.findall(rf"rezolus_cpu_usage:\s+{ip}cpu=.*", report)
        assert len(lines) >= 2, report
        assert all(f"{f.name}=" in lines[-1] for f in CPU_USAGE.fields), lines[-1]


def test_bpftrace_sees_no_record(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """README, eBPF: a BPF program on a user_events tracepoint never runs, while perf,
    recording over the whole time the program is attached, gets the agent's records."""
    log = sh.cwd / "perf-bpf.log"
    perf = subprocess.Popen(["perf", "record", "-e", "user_events:rezolus_cpu_usage", "-a",
                             "-o", "bpf.data"], cwd=sh.cwd, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "perf" in _consumers("rezolus_cpu_usage"), timeout=300, step=0.5,
                 what="perf record to enable rezolus_cpu_usage",
                 seen=lambda: _consumers("rezolus_cpu_usage"))
        key = "sudo bpftrace -e 'tracepoint:user_events:rezolus_cpu_usage { @records = count(); }'"
        out = sh.run(key, "sudo bpftrace -e 'tracepoint:user_events:rezolus_cpu_usage"
                          " { @records = count(); } interval:s:5 { exit(); }'").stdout
    finally:
        stop(perf, signal.SIGINT)
    sh.check_claims(key, out)
    assert "@records: 0" in out, out
    script = subprocess.run(["perf", "script", "-i", "bpf.data"], cwd=sh.cwd, text=True,
                            capture_output=True, timeout=scaled(300))
    n = script.stdout.count("user_events:rezolus_cpu_usage:")
    assert n >= 10, f"perf got {n} records while bpftrace ran:\n{script.stdout[-2000:]}"


def _consumers(event: str) -> tuple[str, ...]:
    from tracefs_tools import Tracefs

    ev = Tracefs(TRACING).user_events_status().events.get(event)
    return ev.consumers if ev is not None else ()


def test_tracing_group(sh: Shell) -> None:
    """rezolus-ue(8) REQUIREMENTS: a member of `tracing` can register events after the
    chgrp/chmod commands, or after the remount; the machine's modes are restored after."""
    data = TRACING / "user_events_data"
    saved = [(p, p.stat().st_gid, p.stat().st_mode & 0o7777) for p in (TRACING, data)]
    probe = ("setpriv --reuid=65534 --regid=65534 --groups=$(getent group tracing | cut -d:"
             " -f3) --inh-caps=-all python3 -c \"open('" + str(data) + "', 'wb'); print('ok')\"")
    probe = probe.replace("python3", sys.executable)
    chmods = ["chgrp tracing /sys/kernel/tracing/user_events_data",
              "chmod g+rw /sys/kernel/tracing/user_events_data",
              "chgrp tracing /sys/kernel/tracing", "chmod g+rx /sys/kernel/tracing"]
    restore = "; ".join(f"chgrp {g} {p}; chmod {m:o} {p}" for p, g, m in saved)
    try:
        out = sh.script(chmods, {0: "getent group tracing || groupadd --system tracing",
                                 4: probe}, namespace=True)
        assert out.rstrip().endswith("ok"), out
    finally:
        subprocess.run(["bash", "-c", restore], check=True, timeout=scaled(60))
    try:
        out = sh.script(["mount -o remount,gid=tracing /sys/kernel/tracing"],
                        {0: "getent group tracing || groupadd --system tracing",
                         1: probe + " || true"}, namespace=True)
    finally:
        subprocess.run(["bash", "-c", f"mount -o remount,gid=0 {TRACING}; {restore}"],
                       check=True, timeout=scaled(60))
    # What the remount alone gives (see the man page's wording): recorded here.
    assert ("ok" in out.splitlines()[-1]) == (data.stat().st_mode & 0o060 == 0o060), out


def test_agent_variants(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """rezolus-ue(8) EXAMPLES' agent with a 20ms sample interval and its perf commands in
    their user_events forms, after stopping the README's agent."""
    stop_readme_agent(agent)
    agent_with_dist(sh)


def test_agent_persists(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """rezolus-ue(8)'s agent with a config file and interval, after stopping the README's
    agent; its events persist (persist = true, a user_events flag) until deleted with
    `events --delete`, as SIGNALS says."""
    stop_readme_agent(agent)
    started = ("for i in $(seq 1500); do grep -qE 'publishing [0-9]+ events' agent2.log"
               " && break; sleep 0.2; done")
    term = "kill -TERM %1; wait %1 || true"
    persist = "".join(f"[samplers.{n}]\\nenabled = false\\n" for n in _bpf_samplers())
    steps: list[Step] = [
        ("sudo rezolus-ue run --config /etc/rezolus-ue/config.toml -i 100ms",
         "sudo rezolus-ue run --config /etc/rezolus-ue/config.toml -i 100ms &"),
        "sudo rezolus-ue events --delete"]
    out = sh.script(steps, {
        0: "mkdir -p /etc/rezolus-ue && printf '[agent]\\npersist = true\\n" + persist
           + "' > /etc/rezolus-ue/config.toml; " + GONE + "; exec 3>&1 >agent2.log 2>&1",
        1: f"{started}; {term}; exec >&3 2>&1; cat agent2.log;"
           " grep -q '^rezolus_cpu_usage\\b' /sys/kernel/tracing/user_events_status ||"
           " { echo 'not persisted; user_events_status:'; cat /sys/kernel/tracing/"
           "user_events_status; exit 1; }",
        # Linux 6.4+ lists "name # Used by ..." (tracefs_tools/status.py).
        2: "! grep '^rezolus_' /sys/kernel/tracing/user_events_status"},
        namespace=True)
    assert "publishing" in out, out


#: Glue: the README agent's (non-persistent) events are gone before a persistent agent
#: registers the same names: while a reference remains, the kernel hands the new agent the
#: old event, flags and all. On timeout it prints who still holds one.
GONE = ("for i in $(seq 600); do grep -q '^rezolus_' /sys/kernel/tracing/user_events_status"
        " || break; sleep 0.1; done; if grep '^rezolus_' /sys/kernel/tracing/user_events_status;"
        " then echo 'still registered after 60 s; enabled:';"
        " grep -l 1 $(find /sys/kernel/tracing -path '*rezolus_*/enable') ; exit 1; fi")


def _bpf_samplers() -> list[str]:
    from rezolus_ue.samplers import REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    return [n for n, c in REGISTRY.items() if issubclass(c, BpfSampler)]


def test_trace_cmd_on_uprobe_events(sh: Shell, agent: subprocess.Popen[bytes], bus: Bus,
                                    tmp_path: Path) -> None:
    """Last but one: the README's and rezolus-ue(8)'s trace-cmd commands, as written,
    against an agent on the uprobe transport (the shipped config with transport =
    "uprobe", as tests/uprobe runs it), after the README's agent has stopped: they name
    the event alone, so they work on both transports. The uprobe transport's one trace-cmd
    test (this host refuses trace-cmd's write to ftrace_enabled): trace-cmd records and
    reports its named fields."""
    stop_readme_agent(agent)
    up = Shell(sh.cwd, bus, transport="uprobe")
    a = Agent("run", "--config", str(shipped_config(tmp_path)))
    try:
        a.wait_defined(Tracefs(TRACING))
        trace_cmd(up)
    finally:
        a.close()


def test_every_listed_command_ran(bus: Bus) -> None:
    """Last: every command the table gives to a test of this module that ran was run by
    it (test_doc_examples.py checks its own share, on this host)."""
    assert_every_listed_ran(Path(__file__).name, bus.transport)
