"""The agent end to end on this host's kernel: real perf, real ftrace.

Each test starts `python -m rezolus_ue run` as a subprocess, exactly as a user would, and
reads its records through whichever transport ``transport = "auto"`` takes here (uprobe
events without user_events): the ``bus`` fixture names its group and who listens.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import unit, words
from waiting import running, scaled, wait_output

from rezolus_ue.agent import read_status
from rezolus_ue.consume.readiness import unfed
from rezolus_ue.schema import AGENT, CPU_USAGE

from .conftest import Bus, wait_for

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[2]


class AgentProcess:
    """A running `rezolus-ue run` with its stderr captured to a file."""

    def __init__(self, *args: str, prefix: tuple[str, ...] = (),
                 command: tuple[str, ...] | None = None) -> None:
        """Run ``rezolus-ue run ARGS`` (under ``prefix``, e.g. setpriv and its options).

        ``command``: the CLI to run with ARGS as they are (e.g. the installed
        ``.venv/bin/rezolus-ue``); default ``python -m rezolus_ue run``.
        """
        self.log = tempfile.NamedTemporaryFile("w+", prefix="agent-", suffix=".log")  # noqa: SIM115
        argv = [*command, *args] if command else [sys.executable, "-m", "rezolus_ue", "run",
                                                  *args]
        self.proc = subprocess.Popen(
            [*prefix, *argv],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def wait_registered(self, bus: Bus) -> None:
        """Wait for the agent's cpu_usage and agent events on ``bus``."""
        def ready() -> bool:
            running(self.proc, self.output, "agent")
            return {CPU_USAGE.name, AGENT.name} <= bus.registered()

        # Generous: under TCG on a busy host, start-up (every BPF object is loaded once to
        # verify it) has taken over a minute.
        wait_for(ready, timeout=240, step=0.2, what=f"the agent's events on {bus}",
                 log=self.output)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_output(self, text: str, timeout: float = 240) -> None:
        """Wait for ``text`` in the agent's output, failing with the output seen, or at
        once if the agent exits.

        As generous as `wait_registered`: the events appear as each sampler starts, and the
        rest of start-up (the other samplers, the privilege drop) has taken over a minute
        under TCG on a loaded CI host."""
        wait_output(self.proc, self.output, re.escape(text), name="agent", timeout=timeout,
                    step=0.2)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def without_bpf(tmp: Path, extra: str = "") -> Path:
    """Write a config with every BPF sampler disabled: these tests are about the procfs
    samplers and the publishing path (tests/kernel/test_bpf_demand.py covers BPF), and
    `perf record -e 'rezolus_ue:rezolus_*'` would otherwise load every BPF object, which
    takes minutes on an emulated CPU."""
    from rezolus_ue.samplers import REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    conf = tmp / "no-bpf.toml"
    conf.write_text(extra + "".join(f"[samplers.{n}]\nenabled = false\n"
                                    for n, c in REGISTRY.items() if issubclass(c, BpfSampler)))
    return conf


@pytest.fixture
def agent(bus: Bus, tmp_path: Path) -> Iterator[AgentProcess]:
    a = AgentProcess("--config", str(without_bpf(tmp_path)), "--interval", "200ms")
    try:
        a.wait_registered(bus)
        yield a
    finally:
        a.stop()
        a.log.close()


def _field(line: str, name: str) -> int:
    # ftrace prints user_events integers as "name=0x1f (31)", uprobe ones and perf script
    # as "name=31".
    m = re.search(rf"\b{name}=(?:0x[0-9a-f]+ \()?(\d+)", line)
    assert m, f"no {name} in {line!r}"
    return int(m.group(1))


def _lines(text: str, event: str) -> list[str]:
    return [ln for ln in text.splitlines() if f"{event}:" in ln]


UNIT = ROOT / "packaging/systemd/rezolus-ue.service"


def proc_status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(ln.split(":\t", 1) for ln in text.splitlines() if ":\t" in ln)


def test_writes_nothing_until_a_consumer_enables_run_as_the_unit_runs_it(
        bus: Bus, bus_instance: str) -> None:
    """The write counter stays 0 until a consumer enables an event, then rises; and all of
    it under the systemd unit's privileges.

    Tests do not run under systemd, so those are reproduced with setpriv(1): the bounding
    set is the unit's ``CapabilityBoundingSet=``, nothing inheritable or ambient, and
    no_new_privs (``NoNewPrivileges=yes``); the command is the unit's ``ExecStart=``
    (``run --user``) as ``nobody`` (the unit's own user is made by install-service). The
    agent must register its events as root's uid, become the user with exactly what its
    enabled samplers need in effect and permitted, still write, and unregister
    (user_events) or delete (uprobe events) them on SIGTERM.
    """
    import pwd

    from rezolus_ue import privilege
    from rezolus_ue.linux import capabilities

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv is not installed (Debian: util-linux)")
    nobody = pwd.getpwnam("nobody")
    settings = unit(UNIT)
    bounding = words(settings, "CapabilityBoundingSet")
    exec_start = words(settings, "ExecStart")
    assert exec_start[1:3] == ["run", "--user"], exec_start
    caps = ",".join("+" + c.removeprefix("CAP_").lower() for c in bounding)
    prefix = (setpriv, f"--bounding-set=-all,{caps}", "--inh-caps=-all",
              "--ambient-caps=-all", "--no-new-privs", "--")
    conf = without_bpf(Path(tempfile.mkdtemp()))
    a = AgentProcess("--user", "nobody", "--config", str(conf), "--interval", "100ms",
                     prefix=prefix)
    try:
        a.wait_registered(bus)

        # After the whole switch (setuid, then capset: in between CapEff is empty).
        a.wait_output("running as nobody")
        st = proc_status(a.proc.pid)
        assert st["Uid"].split() == [str(nobody.pw_uid)] * 4, st
        from rezolus_ue.cli import load_config

        keep = privilege.kept(load_config(conf))
        want = sum(1 << capabilities.CAPS[c] for c in keep)
        held = capabilities.parse_status(Path(f"/proc/{a.proc.pid}/status").read_text())
        assert held["CapEff"] == held["CapPrm"] == want, st
        assert held["CapInh"] == held.get("CapAmb", 0) == 0, st
        assert held["CapBnd"] == sum(1 << capabilities.CAPS[c] for c in bounding), st
        assert st["NoNewPrivs"].strip() == "1"
        assert set(st["Gid"].split()) == {str(nobody.pw_gid)}, st
        from rezolus_ue.agent import RUNTIME_DIR

        assert RUNTIME_DIR.stat().st_uid == nobody.pw_uid  # handed over (CAP_CHOWN)
        # Ten intervals with no consumer: the agent must not have written anything.
        time.sleep(1.0)
        bus.enable(AGENT.name, instance=bus_instance)
        first = wait_for(lambda: _lines(bus.tfs.read_trace(bus_instance), AGENT.name),
                         timeout=30)
        assert _field(first[0], "events_written") == 0
        assert _field(first[0], "ebadf_races") == 0
        bus.enable(CPU_USAGE.name, instance=bus_instance)
        wait_for(lambda: any(_field(ln, "events_written") > 0
                             for ln in _lines(bus.tfs.read_trace(bus_instance), AGENT.name)),
                 timeout=30)
        bus.disable(CPU_USAGE.name, instance=bus_instance)
        bus.disable(AGENT.name, instance=bus_instance)
        assert a.stop() == 0
        out = a.output()
        assert "Traceback" not in out
        # What it kept, and for which samplers.
        assert f"; kept {privilege.describe(keep)}; running as nobody" in out, out
        assert re.search(r"stopped: [1-9]\d* records written", out), out
        # Gone on SIGTERM: the kernel deletes user_events nobody references; the agent
        # deletes its uprobe events through the descriptor it opened as root.
        wait_for(lambda: CPU_USAGE.name not in bus.registered(), timeout=10)
        # The next root agent takes the runtime directory back (and can write its status
        # after its own drop, with no CAP_DAC_OVERRIDE).
        b = AgentProcess("--config", str(without_bpf(Path(tempfile.mkdtemp()))),
                         "--interval", "100ms")
        try:
            b.wait_registered(bus)
            wait_for(lambda: RUNTIME_DIR.stat().st_uid == 0 and (read_status() or {})
                     .get("pid") == b.proc.pid, timeout=60)
        finally:
            assert b.stop() == 0
            b.log.close()
    finally:
        a.stop()
        a.log.close()


def test_perf_record_and_script_show_cpu_usage(bus: Bus, agent: AgentProcess,
                                               tmp_path: Path) -> None:
    perf = shutil.which("perf")
    if perf is None:
        pytest.skip("perf is not installed (Debian: linux-perf)")
    data = tmp_path / "perf.data"
    rec = subprocess.run(
        [perf, "record", "-q", "-e", f"{bus.group}:rezolus_*", "-a", "-o", str(data),
         "--", "sleep", "3"],
        capture_output=True, text=True, timeout=scaled(180),
    )
    assert rec.returncode == 0, rec.stderr
    script = subprocess.run([perf, "script", "-i", str(data)], capture_output=True, text=True,
                            timeout=scaled(120))
    assert script.returncode == 0, script.stderr
    usage = _lines(script.stdout, f"{bus.group}:{CPU_USAGE.name}")
    assert usage, script.stdout[-2000:]
    by_cpu: dict[int, list[dict[str, int]]] = defaultdict(list)
    for line in usage:
        by_cpu[_field(line, "cpu")].append(
            {f.name: _field(line, f.name) for f in CPU_USAGE.fields})
    assert sorted(by_cpu) == list(range(os.cpu_count() or 1))
    for rows in by_cpu.values():
        assert len(rows) >= 2
        total = [sum(v for k, v in r.items() if k.endswith("_ns")) for r in rows]
        assert total == sorted(total) and total[-1] > total[0]  # cumulative, advancing
        assert all(0 <= r["busy_ppm"] <= 1_000_000 for r in rows)
    # Every event the agent registered was recorded (perf enabled them all at once), but
    # those its status says this kernel cannot feed (no /proc/schedstat, say).
    missing = {e for e in bus.ours() if not _lines(script.stdout, f"{bus.group}:{e}")}
    assert missing == set(unfed(read_status())), f"no records of {sorted(missing)}"
    # Percentiles are ordered in every distribution and histogram record.
    for line in script.stdout.splitlines():
        if "_dist:" in line or "rezolus_agent_sampler:" in line:
            qs = [_field(line, q) for q in ("p50", "p90", "p99", "max")]
            assert qs == sorted(qs), line
    # perf's consumer has left: nothing enabled any more.
    assert not bus.consumers(CPU_USAGE.name)


def test_ftrace_shows_cpu_usage_fields(bus: Bus, agent: AgentProcess,
                                       bus_instance: str) -> None:
    bus.enable(CPU_USAGE.name, instance=bus_instance)
    lines = wait_for(lambda: _lines(bus.tfs.read_trace(bus_instance), CPU_USAGE.name),
                     timeout=30)
    for f in CPU_USAGE.fields:
        assert f"{f.name}=" in lines[0]
    bus.disable(CPU_USAGE.name, instance=bus_instance)


def test_sighup_reloads_and_a_bad_config_keeps_the_old_one(bus: Bus, tmp_path: Path) -> None:
    from rezolus_ue.samplers.memory import MEMORY

    conf = tmp_path / "rezolus-ue.toml"
    conf.write_text(without_bpf(tmp_path, "[samplers.memory]\nenabled = true\n").read_text())
    a = AgentProcess("--config", str(conf), "--interval", "200ms")
    try:
        a.wait_registered(bus)
        assert MEMORY.event in bus.registered()
        conf.write_text(without_bpf(tmp_path, "[samplers.memory]\nenabled = false\n")
                        .read_text())
        a.proc.send_signal(signal.SIGHUP)
        # A removed sampler's event may stay (user_events keeps one its registrant's fd
        # references until the agent exits): the agent's own status says it stopped.
        try:
            wait_for(lambda: (read_status() or {}).get("samplers", {}).get("memory", {})
                     .get("status") == "disabled", timeout=60)
        except AssertionError as e:
            raise AssertionError(f"{e}; status: {read_status()}; agent output:\n"
                                 f"{a.output()}") from None
        # The reload writes the status, then logs what it changed.
        a.wait_output("memory removed (disabled)")
        assert CPU_USAGE.name in bus.registered(), "unchanged sampler lost"
        conf.write_text("[samplers.memory]\nenabled = maybe\n")  # line 2: the error
        a.proc.send_signal(signal.SIGHUP)
        a.wait_output("reload rejected")
        assert f"{conf}:2" in a.output()
        assert a.proc.poll() is None, "a bad config stopped the agent"
        assert CPU_USAGE.name in bus.registered()
        assert a.stop() == 0
        assert "Traceback" not in a.output()
    finally:
        a.stop()
        a.log.close()
