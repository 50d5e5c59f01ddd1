"""Concurrent consumers beside a loaded agent: each receives every record, and each exits
cleanly (no traceback, no "Exception ignored") on SIGINT, SIGTERM or a closed pipe.

These run on this host, on whichever transport the agent's ``transport = "auto"`` takes on
its kernel (uprobe events here, user_events where the kernel has them): the consumers are
the same on both.

Every consumer is a subprocess of the installed CLI, started as a user would. Counts are
compared over a window bounded by two pauses of the agent (SIGSTOP: nothing is written
while it is stopped), each marked by a sentinel ``rezolus_agent`` record that this test
writes itself into the agent's tracepoint, with a pid no process has. So "every record" is
checked exactly, record for record, however slow the machine: no time-based tolerance.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from waiting import running, scaled

from rezolus_ue.agent import read_status
from rezolus_ue.schema import AGENT

from .conftest import Bus, wait_for
from .test_agent_e2e import AgentProcess, without_bpf
from .tmux import tmux_session

pytestmark = pytest.mark.live
#: Generous: beside a CPU hog on an emulated CPU, a consumer's start-up (Python imports,
#: one perf event per event and CPU) has taken minutes. It only bounds a failure.
SLOW = 900.0
#: Publishes of the real agent inside the counted window.
PUBLISHES = 3
#: Sentinel pids: above pid_max's default, so never the agent's.
MARK0, MARK1, MARK2 = 4_000_000, 4_000_001, 4_000_002
#: What a clean exit never prints.
DIRTY = re.compile(r"Traceback|Exception ignored|error|\b[1-9]\d* (records )?lost", re.I)


def _cli() -> str:
    cli = Path(sys.executable).parent / "rezolus-ue"
    if not cli.exists():
        pytest.skip(f"{cli} is not installed (run scripts/setup.sh)")
    return str(cli)


class Consumer:
    """A ``rezolus-ue`` consumer subprocess with stdout and stderr in files."""

    def __init__(self, tmp: Path, name: str, *args: str) -> None:
        self.name = name
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([_cli(), *args], stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL)

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def records(self) -> list[dict]:
        """Return the JSON records printed so far (whole lines only)."""
        text = self.out.read_text(errors="replace")
        return [json.loads(ln) for ln in text[: text.rfind("\n") + 1].splitlines()]

    def alive(self) -> bool:
        return running(self.proc, self.stderr, self.name)

    def stop(self, sig: int) -> int:
        """Send ``sig`` and return the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.name} did not exit on signal {sig}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def assert_clean_exit(c: Consumer, sig: int) -> None:
    rc = c.stop(sig)
    err = c.stderr()
    assert rc == 0, f"{c.name} exited {rc} on {signal.Signals(sig).name}: {err}"
    assert not DIRTY.search(err), f"{c.name} on {signal.Signals(sig).name}:\n{err}"


@pytest.fixture
def loaded_agent(hogged_agent: AgentProcess) -> Iterator[AgentProcess]:
    """The module's loaded agent, running again after each test (one may pause it)."""
    yield hogged_agent
    resume(hogged_agent)


@pytest.fixture(scope="module")
def hogged_agent(bus: Bus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """The agent (procfs samplers, 1 s publishes) beside a CPU hog on every CPU: one for
    the module (its start-up is a large part of a test's time)."""
    tmp_path = tmp_path_factory.mktemp("loaded")
    hog_bin = shutil.which("stress-ng")
    if hog_bin is None:
        pytest.skip("stress-ng is not installed (scripts/setup.sh --dev installs it)")
    hog = subprocess.Popen([hog_bin, "--cpu", str(os.cpu_count() or 1), "--quiet"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent = AgentProcess("--config", str(without_bpf(tmp_path)), "--interval", "1s")
    try:
        agent.wait_registered(bus)
        # status.json is written once start() registered every sampler's events.
        wait_for(lambda: (read_status() or {}).get("pid") == agent.proc.pid, timeout=SLOW,
                 step=0.5)
        yield agent
    finally:
        resume(agent)
        agent.stop()
        agent.log.close()
        hog.terminate()
        hog.wait()


def pause(agent: AgentProcess) -> None:
    """Stop the agent and return once it is stopped: it writes nothing until resumed."""
    os.kill(agent.proc.pid, signal.SIGSTOP)
    stat = Path(f"/proc/{agent.proc.pid}/stat")
    wait_for(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T", timeout=SLOW)


def resume(agent: AgentProcess) -> None:
    if agent.proc.poll() is None:
        os.kill(agent.proc.pid, signal.SIGCONT)


class Sentinel:
    """Writes ``rezolus_agent`` records of its own into the agent's tracepoint (same name
    and format), so every consumer reads them in the agent's stream."""

    def __init__(self, bus: Bus) -> None:
        self._writer = bus.writer(AGENT)

    def write(self, mark: int) -> bool:
        """Write a record with pid ``mark``; return False while no consumer listens."""
        values = [mark if n == "pid" else 0 for n in AGENT.field_names]
        return self._writer.enabled and self._writer.write(AGENT.pack(*values))

    def close(self) -> None:
        self._writer.close()


def marked(records: list[dict], mark: int) -> list[dict]:
    return [r for r in records if r["event"] == AGENT.name and r["pid"] == mark]


def window(records: list[dict]) -> Counter:
    """Count records of each event after sentinel MARK1, up to and including MARK2."""
    (t1,) = [r["time_ns"] for r in marked(records, MARK1)]
    (t2,) = [r["time_ns"] for r in marked(records, MARK2)]
    return Counter(r["event"] for r in records if t1 < r["time_ns"] <= t2)


def agent_records_after(c: Consumer, mark: int, agent_pid: int) -> int:
    recs = c.records()
    start = marked(recs, mark)
    if not start:
        return 0
    return sum(1 for r in recs if r["event"] == AGENT.name and r["pid"] == agent_pid
               and r["time_ns"] > start[0]["time_ns"])


def run_window(agent: AgentProcess, sentinel: Sentinel, tails: list[Consumer],
               seen: Callable[[int], bool] = lambda _m: True,
               on_paused: Callable[[], None] = lambda: None,
               showed: Callable[[], str] = lambda: "") -> None:
    """With the agent paused (before the consumers started), greet until every consumer
    reads the marks, mark, let the agent publish PUBLISHES times, pause, mark again.

    Each mark is written while the agent is stopped, and read by every consumer (the
    tails' output, and ``seen``) before the test goes on. Greeting repeats until each
    consumer read one: a consumer opens its per-CPU events one by one, and only once all
    are open does a mark reach it from whichever CPU writes it. The consumers start with the
    agent paused so that no backlog of their start-up (minutes under load) is in
    their rings when the window opens: the window's few publishes must fit there, however
    far a starved consumer falls behind inside it. ``showed`` says, on a timeout, what the
    consumers behind ``seen`` last showed.
    """
    def all_saw(mark: int) -> bool:
        # ``seen`` first, at every poll: a consumer that shows its latest values only while
        # they are fresh (the exporter drops a paused agent's series after --stale
        # intervals) must be asked as soon as it can have the mark, not once the tails do.
        others = seen(mark)
        return all(c.alive() and marked(c.records(), mark) for c in tails) and others

    def greeted() -> bool:  # consumers that start late subscribe to later greetings
        sentinel.write(MARK0)
        return all_saw(MARK0)

    def await_mark(mark: int) -> None:
        try:
            wait_for(lambda: all_saw(mark), timeout=SLOW, step=0.5)
        except AssertionError as e:
            got = [(c.name, len(c.records()), bool(marked(c.records(), mark))) for c in tails]
            raise AssertionError(f"{e}: mark {mark} not seen; tails (lines, saw it): {got};"
                                 f" the others saw it: {seen(mark)} {showed()}") from None

    wait_for(greeted, timeout=SLOW, step=2.0)
    for mark in (MARK1, MARK2):
        assert sentinel.write(mark)
        await_mark(mark)
        if mark == MARK1:
            on_paused()
            resume(agent)
            wait_for(lambda: agent_records_after(tails[0], MARK1, agent.proc.pid)
                     >= PUBLISHES, timeout=SLOW, step=0.5)
            pause(agent)


def test_consumers_exit_quietly_while_waiting_for_the_agent(bus: Bus,
                                                           tmp_path: Path) -> None:
    """No agent: tail, record and exporter wait for it; SIGINT or SIGTERM ends each with
    its one waiting line and nothing else. First in the module: the loaded agent the
    later tests share (module-scoped) must not have started yet."""
    wait_for(lambda: not bus.ours(), timeout=120, step=0.5, seen=bus.ours,
             what=f"no rezolus_* event on {bus} (no agent running)")
    port = _free_port()
    runs = [(Consumer(tmp_path, "tail", "tail"), signal.SIGINT),
            (Consumer(tmp_path, "record", "record", str(tmp_path / "r.rzr")), signal.SIGTERM),
            (Consumer(tmp_path, "exporter", "exporter", "--listen", f"127.0.0.1:{port}"),
             signal.SIGINT)]
    try:
        for c, sig in runs:
            wait_for(lambda c=c: c.alive() and "no agent is running" in c.stderr(),
                     timeout=SLOW, step=0.5)
            rc = c.stop(sig)
            err = c.stderr()
            assert rc in (0, 130), f"{c.name}: {rc} {err}"
            assert not DIRTY.search(err), f"{c.name}:\n{err}"
    finally:
        for c, _sig in runs:
            c.kill()


def test_two_tails_started_together_under_load_each_get_every_record(
        bus: Bus, loaded_agent: AgentProcess, tmp_path: Path) -> None:
    """Two `tail` started at once beside a loaded agent both print every record.

    Seen on the loaded 2-CPU VM before: once the first printed 278 records and the second
    none. Both were subscribed; each was CPU-starved inside its first poll, decoding the
    backlog its serial set-up (one perf event and one ring per event and CPU) had let
    build up, and re-scanning every wanted event each poll once a scan took over 2 s.
    """
    pause(loaded_agent)
    tails = [Consumer(tmp_path, f"tail{i}", "tail", "--format", "json") for i in (1, 2)]
    sentinel = Sentinel(bus)
    try:
        run_window(loaded_agent, sentinel, tails)
        a, b = (window(c.records()) for c in tails)
        assert a == b, f"the tails differ: {a - b} / {b - a}"
        assert a[AGENT.name] > PUBLISHES, a  # the agent's own, and the closing mark
        assert set(a) <= set(bus.ours())
        assert_clean_exit(tails[0], signal.SIGINT)
        assert_clean_exit(tails[1], signal.SIGTERM)
    finally:
        sentinel.close()
        for c in tails:
            c.kill()


class Perf:
    """``perf record -a`` of every rezolus event, enabled on request and acknowledged."""

    def __init__(self, tmp: Path, group: str) -> None:
        self.group = group
        perf = shutil.which("perf")
        if perf is None:
            pytest.skip("perf is not installed (Debian: linux-perf)")
        self.data, ctl, ack = tmp / "perf.data", tmp / "perf.ctl", tmp / "perf.ack"
        os.mkfifo(ctl)
        os.mkfifo(ack)
        self.log = tmp / "perf.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [perf, "record", "-q", "-e", f"{group}:rezolus_*", "-a",
                 "-o", str(self.data), "-D", "-1",
                 "--control", f"fifo:{ctl},{ack}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # O_RDWR: opening a FIFO so never blocks, whether perf has it open yet or not.
        self._ctl = os.open(ctl, os.O_RDWR)
        self._ack = os.open(ack, os.O_RDWR)

    def enable(self) -> None:
        os.write(self._ctl, b"enable\n")
        ready, _, _ = select.select([self._ack], [], [], SLOW)
        assert ready and os.read(self._ack, 16).startswith(b"ack"), self.log.read_text()

    def counts(self) -> Counter:
        """Stop recording; return the records of each event."""
        self.proc.send_signal(signal.SIGINT)
        # perf record re-raises the SIGINT that stopped it once it has written its file.
        rc = self.proc.wait(timeout=SLOW)
        assert rc in (0, -signal.SIGINT), f"perf record exited {rc}: {self.log.read_text()}"
        os.close(self._ctl)
        os.close(self._ack)
        script = subprocess.run([shutil.which("perf") or "perf", "script", "-i",
                                 str(self.data), "-F", "event"],
                                capture_output=True, text=True, timeout=SLOW)
        assert script.returncode == 0, script.stderr
        assert "lost" not in self.log.read_text().lower(), self.log.read_text()
        return Counter(re.findall(rf"{self.group}:(rezolus_\w+)", script.stdout))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> tuple[Counter, int | None, int | None]:
    """Return the exporter's records by event, its rezolus_agent_pid and the records the
    kernel dropped before it read them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=scaled(60)) as r:
        text = r.read().decode()
    counts = Counter({m[0]: int(float(m[1])) for m in re.findall(
        r'^rezolus_exporter_event_records_total\{event="([^"]+)"\} (\S+)$', text, re.M)})
    pid = re.search(r"^rezolus_agent_pid (\S+)$", text, re.M)
    lost = re.search(r"^rezolus_exporter_lost_records_total (\S+)$", text, re.M)
    return (counts, int(float(pid.group(1))) if pid else None,
            int(float(lost.group(1))) if lost else None)


def test_four_consumers_beside_perf_each_receive_every_record(
        bus: Bus, loaded_agent: AgentProcess, tmp_path: Path) -> None:
    """Two `tail`, a `record` and an `exporter` beside `perf record -a`, on a loaded
    machine: for each, the records of each event in the window equal perf's, exactly."""
    port = _free_port()
    rec_file = tmp_path / "run.rzr"
    pause(loaded_agent)
    tails = [Consumer(tmp_path, f"tail{i}", "tail", "--format", "json") for i in (1, 2)]
    recorder = Consumer(tmp_path, "record", "record", str(rec_file))
    # --stale 1000: the exporter serves a mark's pid until the agent publishes again, not
    # for 3 publish intervals of its clock after it read the mark (the default staleness):
    # under CI's load no scrape of the test came within them, and it waited 45 min
    # for a mark the exporter had already dropped. What is checked here is the count.
    exporter = Consumer(tmp_path, "exporter", "exporter", "--listen", f"127.0.0.1:{port}",
                        "--stale", "1000")
    consumers = [*tails, recorder, exporter]
    sentinel = Sentinel(bus)
    perf = Perf(tmp_path, bus.group)
    base: dict[int, Counter] = {}
    served: dict[str, object] = {}

    def exporter_saw(mark: int) -> bool:
        if mark in base:  # seen once: what it served then is the count at the mark
            return True
        exporter.alive()
        try:
            began = time.monotonic()
            counts, pid, lost = scrape(port)
        except OSError as e:
            served["scrape"] = f"failed: {e}"
            return False
        served.update(scrape=f"served in {time.monotonic() - began:.1f}s",
                      rezolus_agent_pid=pid, records=sum(counts.values()), lost=lost)
        if pid == mark:
            base[mark] = counts
        return pid == mark

    try:
        run_window(loaded_agent, sentinel, tails,
                   lambda m: "recording to" in recorder.stderr() and exporter_saw(m),
                   perf.enable,
                   lambda: f"(record's stderr: {recorder.stderr()[-300:]!r};"
                           f" the exporter's last scrape: {served})")
        want = perf.counts()
        assert want[AGENT.name] > PUBLISHES, want
        for c in tails:
            got = window(c.records())
            assert got == want, f"{c.name}: missing {want - got}, extra {got - want}"
        got = base[MARK2] - base[MARK1]
        assert got == want, f"exporter: missing {want - got}, extra {got - want}"
        for c, sig in zip(consumers, (signal.SIGINT, signal.SIGTERM, signal.SIGINT,
                                      signal.SIGTERM), strict=True):
            if c is not recorder:
                assert_clean_exit(c, sig)
        rc = recorder.stop(signal.SIGINT)
        assert rc == 0 and not DIRTY.search(recorder.stderr()), recorder.stderr()
        replay = subprocess.run([_cli(), "tail", "--from", str(rec_file), "--format", "json"],
                                capture_output=True, text=True, timeout=SLOW)
        assert replay.returncode == 0, replay.stderr
        got = window([json.loads(ln) for ln in replay.stdout.splitlines()])
        assert got == want, f"record: missing {want - got}, extra {got - want}"
    finally:
        perf.kill()
        sentinel.close()
        for c in consumers:
            c.kill()


def test_tail_exits_quietly_on_a_closed_pipe_and_repeated_ctrl_c(
        loaded_agent: AgentProcess, tmp_path: Path) -> None:
    """`tail | head -1`, and Ctrl-C pressed again and again while tail closes."""
    head = subprocess.Popen([_cli(), "tail", "--format", "json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert head.stdout is not None
        first = head.stdout.readline()  # blocks until the first record
        json.loads(first)
        head.stdout.close()  # as head(1) does after one line
        _, err = head.communicate(timeout=SLOW)
        assert head.returncode == 0, err
        assert err == b"", err.decode()
    finally:
        if head.poll() is None:
            head.kill()
    tail = Consumer(tmp_path, "tail", "tail")
    try:
        wait_for(lambda: tail.alive() and tail.out.stat().st_size > 0, timeout=SLOW,
                 step=0.5)
        for _ in range(5):
            if tail.proc.poll() is None:
                tail.proc.send_signal(signal.SIGINT)
            time.sleep(0.05)
        assert_clean_exit(tail, signal.SIGINT)
    finally:
        tail.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_top_exits_quietly_on_a_signal(loaded_agent: AgentProcess, sig: int) -> None:
    """The full-screen view in a terminal (tmux), stopped by Ctrl-C or SIGTERM: the
    terminal is restored and nothing but the shell's own line follows."""
    with tmux_session(f"{_cli()} top --interval 1s; echo EXIT=$?; sleep 3600", 100, 30) as tm:
        wait_for(lambda: "Mem" in tm.screen(), timeout=SLOW, step=0.5)
        shell = tm.run("display-message", "-p", "-t", tm.session,
                       "#{pane_pid}").stdout.strip()
        (top,) = subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True,
                                timeout=scaled(60)).stdout.split()
        os.kill(int(top), sig)
        wait_for(lambda: "EXIT=" in tm.screen(), timeout=SLOW, step=0.5)
        text = tm.screen()
        assert "EXIT=0" in text, text
        assert "Traceback" not in text and "Exception ignored" not in text, text
