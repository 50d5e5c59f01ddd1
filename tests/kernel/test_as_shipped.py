"""The product as users get it: the installed CLI, the shipped default config, the
privileges users run it with, checked by real perf and by our own consumers at once.

Users run the agent two ways, and each is tested here, on each transport: user_events
(kernel tier: the one end-to-end run of that transport, in the VM on kernels without it)
and uprobe (``transport = "uprobe"``; the uprobe tier, on this host):

* ``sudo rezolus-ue run``: root, which drops to what its samplers need after start-up;
* the systemd unit: its ``ExecStart=`` (``run --user ...``) under its
  ``CapabilityBoundingSet=``, ``NoNewPrivileges=yes``, nothing inheritable or ambient.
  virtme-ng's init is not systemd, so setpriv(1) reproduces the unit from the unit file
  itself (one source for the set), as ``nobody`` (the unit's own user is made by
  install-service).

While the agent runs, ``perf record -e 'GROUP:rezolus_*' -a`` (which enables every
event, so every BPF sampler attaches), ``rezolus-ue tail``, ``rezolus-ue exporter`` and
``rezolus-ue top`` (in tmux) all consume at once, the last three with ``--costly``:
without it they subscribe to the cheap events only, and this test checks every event.
Once every available sampler is active and tail has seen three more publish intervals
(and the exporter serves every family: it may start receiving later, a process of its
own), each consumer must have seen every event of every available sampler, the agent must
report no sampler or write error, every sampler it reports unavailable must say
which kernel feature is missing, and in perf's order each tick record (``intervals``)
must follow exactly the records it says its tick wrote.

The consumers run as root whichever way the agent runs: what the unit changes is the
agent's privileges, which perf and tail prove (every event published after the drop), so
the exporter and top read the sudo run's agent only. They read what tail reads (one
subscription and decoder, whatever the transport), so they do on the uprobe transport
only: in the kernel tier's emulated CPUs they cost over a minute of the tier's budget,
where tail and perf prove what user_events changes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import unit, words
from test_bpf_blockio_requests import direct_io, loop_device
from uprobe.conftest import shipped_config
from waiting import running, scaled, wait_output

from rezolus_ue import privilege
from rezolus_ue.agent import read_status
from rezolus_ue.consume.intervals import EVENT as TICK
from rezolus_ue.linux import capabilities
from rezolus_ue.samplers import REGISTRY
from rezolus_ue.schema import AGENT, CPU_USAGE
from tracefs_tools import Tracefs, find_tracefs

from .conftest import threads_of, wait_for
from .test_agent_e2e import UNIT, AgentProcess, proc_status
from .test_blockio_requests import GOOD_OFFSET, null_blk

ROOT = Path(__file__).resolve().parents[2]
#: What scripts/setup.sh installs: the CLI users run.
CLI = Path(sys.executable).parent / "rezolus-ue"
#: The shipped default configuration (generated from the samplers' declarations).
CONFIG = ROOT / "configs" / "default.toml"
#: Publish intervals every consumer must see after every available sampler is active.
INTERVALS = 3
#: A UDP port nobody listens on in the VM (the discard port).
CLOSED_PORT = 9
#: A DISK row of top for a device without IO: zero ops, rates and bytes, no latency.
IDLE_DISK = re.compile(r"\s*\S+(?:\s+0){6}\s+-\s+-\s+0\s+0\.0%\s*$")
#: Every reader beside perf and tail: the sudo run's on the uprobe transport.
READERS = frozenset({"exporter", "top"})
#: Words by which an unavailable sampler's reason names what this kernel lacks.
MISSING = re.compile(r"CONFIG_|needs|no |not |missing|lacks|unsupported|without", re.I)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Consumers:
    """perf record and tail, with the exporter and top as asked, started together against
    the running agent."""

    def __init__(self, tmp: Path, group: str, readers: frozenset[str] = READERS) -> None:
        self.tmp = tmp
        self.group = group
        #: Which of tail, exporter and top run beside perf (see the module's docstring).
        self.readers = readers
        self.perf_data = tmp / "perf.data"
        self.tail_out = tmp / "tail.jsonl"
        self.port = _free_port()
        self.tmux = shutil.which("tmux") if "top" in readers else None
        self.session = f"rezolus_shipped_{os.getpid()}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def _start(self, name: str, argv: list[str], stdout: Path | None = None) -> None:
        log = self.tmp / f"{name}.err"
        self.logs[name] = log
        # Each in a process group of its own, as a shell job is: Ctrl-C signals the group
        # (perf's workload too, whose signal perf then re-raises).
        self.procs[name] = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True,
            stdout=open(stdout or os.devnull, "w"),  # noqa: SIM115 - closed with the process
            stderr=open(log, "w"))  # noqa: SIM115

    def start(self) -> None:
        perf = shutil.which("perf")
        assert perf, "perf is not installed: scripts/setup.sh installs it"
        assert self.tmux or "top" not in self.readers, (
            "tmux is not installed: scripts/setup.sh --dev installs it")
        self._start("perf", [perf, "record", "-q", "-e", f"{self.group}:rezolus_*", "-a",
                             "-o", str(self.perf_data), "--", "sleep", "100000"])
        self._start("tail", [str(CLI), "tail", "--costly", "--format", "json"],
                    stdout=self.tail_out)
        if "exporter" in self.readers:
            self._start("exporter", [str(CLI), "exporter", "--costly", "--listen",
                                     f"127.0.0.1:{self.port}"])
        if self.tmux is not None:
            self.tm("new-session", "-d", "-s", self.session, "-x", "200", "-y", "70",
                    f"cd {ROOT} && {CLI} top --costly")

    def tm(self, *args: str) -> subprocess.CompletedProcess:
        assert self.tmux is not None
        return subprocess.run([self.tmux, *args], capture_output=True, text=True,
                              timeout=scaled(60), env={**os.environ, "TERM": "xterm-256color"})

    def screen(self) -> str:
        return self.tm("capture-pane", "-p", "-t", self.session).stdout

    def running(self, name: str) -> bool:
        """True while consumer ``name`` runs; fail at once, with its log, once it exited."""
        return running(self.procs[name], lambda: self.errors(name), name)

    def scrape(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=scaled(60)) as r:
            return r.read().decode()

    def tail_records(self) -> list[dict]:
        out = []
        for line in self.tail_out.read_text().splitlines():
            with contextlib.suppress(ValueError):  # the line being written
                out.append(json.loads(line))
        return out

    def errors(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def stop(self) -> dict[str, int]:
        """Stop each as a user would (Ctrl-C; q for top); return their exit statuses."""
        codes = {}
        if self.tmux is not None:
            self.tm("send-keys", "-t", self.session, "q")
            try:
                wait_for(lambda: self.tm("has-session", "-t", self.session).returncode,
                         timeout=60, step=0.2)
            finally:
                self.tm("kill-session", "-t", self.session)
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
        for name, p in self.procs.items():
            try:
                codes[name] = p.wait(timeout=scaled(120))
            except subprocess.TimeoutExpired:
                p.kill()
                codes[name] = p.wait()
        return codes


@contextlib.contextmanager
def block_io() -> Iterator[None]:
    """O_DIRECT reads and writes on a scratch device all through the block, and a dropped
    packet now and then: the VM's root is 9p and its network idle, so without them the
    block request and drop families (labelled by operation or reason, published for those
    seen) would have nothing to say."""
    with contextlib.ExitStack() as stack:
        dev = stack.enter_context(null_blk()) or stack.enter_context(loop_device())
        stop = threading.Event()

        def load() -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                while not stop.is_set():
                    direct_io(dev, 4, write=True, offset=GOOD_OFFSET)
                    direct_io(dev, 4, write=False, offset=GOOD_OFFSET)
                    # A datagram to a port nobody listens on: a packet drop (kfree_skb,
                    # NO_SOCKET), so rezolus_network_drops has a reason to publish.
                    udp.sendto(b"x", ("127.0.0.1", CLOSED_PORT))
                    stop.wait(0.2)

        t = threading.Thread(target=load, name="block-io", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(timeout=scaled(60))


def _blank_cells(screen: str) -> list[str]:
    """Return top's cells without a value: a lost series, except the latency of a disk
    that did no IO (ops 0: no request completed, so no latency to show)."""
    return [cell for ln in screen.splitlines() for cell in ln.split("│")
            if re.search(r"\s-(?:\s|$)", cell) and not IDLE_DISK.match(cell)]


def _top_settled(screen: str) -> str | None:
    """Return top's screen once it shows errors 0, a rate (two frames) and every value."""
    if "errors 0" in screen and re.search(r"ev/s \d", screen) and not _blank_cells(screen):
        return screen
    return None


def _settled(agent: AgentProcess) -> dict | None:
    """Return the agent's status once every sampler that can run is active and loaded."""
    running(agent.proc, agent.output, "agent")
    st = read_status()
    if not st or st.get("pid") != agent.proc.pid:
        return None
    samplers = st["samplers"]
    # An active BPF sampler whose programs are still loading says "loading: ..."
    # (BpfSampler.detail); an unavailable one may say "loading x.bpf.o: why".
    busy = {n: s for n, s in samplers.items()
            if s["status"] not in ("active", "unavailable", "disabled")
            or (s["status"] == "active" and (s.get("reason") or "").startswith("loading:"))}
    return None if busy else st


def _expected(samplers: dict[str, dict]) -> set[str]:
    """Return the events the agent's status says it publishes: every event of each active
    sampler, but a family the sampler runs without (it says so: "rezolus_scheduler_cpu
    unavailable: no /proc/schedstat ...") and its _dist."""
    return {e.name for n, s in samplers.items() if s["status"] == "active"
            for e in REGISTRY[n].events()
            if f"{e.name.removesuffix('_dist')} unavailable" not in (s.get("reason") or "")}


def _unexported(metrics: str, families: set[str]) -> list[str]:
    """Return the families of which the exposition has no series."""
    return sorted(e for e in families if not re.search(rf"(?m)^{e}_\w+", metrics))


def _exporter_report(c: Consumers, families: set[str]) -> str:
    metrics = c.scrape()
    return (f"it serves nothing of {_unexported(metrics, families)}; its own series:\n"
            + "\n".join(ln for ln in metrics.splitlines() if ln.startswith("rezolus_exporter"))
            + f"\nits log:\n{c.errors('exporter')}")


def _agent_records(c: Consumers) -> int:
    return sum(1 for r in c.tail_records() if r.get("event") == AGENT.name)


def _perf_lines(text: str) -> dict[str, list[str]]:
    by_event: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.search(r"(?:user_events|rezolus_ue):(rezolus_\w+):", line)
        if m:
            by_event.setdefault(m.group(1), []).append(line)
    return by_event


#: Counts the processes whose stat or io this process cannot read.
_UNREADABLE = """
import os
bad = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            for f in ("stat", "io"):
                with open(f"/proc/{p}/{f}", "rb") as fh:
                    fh.read()
        except (PermissionError, ProcessLookupError, FileNotFoundError) as e:
            bad += isinstance(e, PermissionError)
print(bad)
"""


def _unreadable_with(caps: object) -> int:
    """Return how many processes' /proc files ``nobody`` holding only ``caps`` (names)
    cannot read, as the agent runs after its drop."""
    names = ",".join("+" + c.lower().removeprefix("cap_") for c in caps)  # type: ignore[attr-defined]
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv is missing (Debian: util-linux)"
    out = subprocess.run([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                          f"--inh-caps={names}", f"--ambient-caps={names}", sys.executable,
                          "-c", _UNREADABLE], capture_output=True, text=True, check=True,
                         timeout=scaled(120))
    return int(out.stdout)


def _field(line: str, name: str) -> int:
    m = re.search(rf"\b{name}=(\d+)", line)
    assert m, f"no {name} in {line!r}"
    return int(m.group(1))


@pytest.fixture(params=[
    pytest.param(("sudo", "user_events"), marks=pytest.mark.kernel, id="sudo"),
    pytest.param(("unit", "user_events"), marks=pytest.mark.kernel, id="unit"),
    pytest.param(("sudo", "uprobe"), marks=pytest.mark.uprobe, id="sudo-uprobe"),
    pytest.param(("unit", "uprobe"), marks=pytest.mark.uprobe, id="unit-uprobe"),
])
def shipped_agent(request, tmp_path) -> Iterator[tuple[str, AgentProcess, str]]:
    """The installed CLI with the shipped config (on the uprobe transport: with transport
    = "uprobe"), run as root (default drop) or as the systemd unit runs it."""
    how, transport = request.param
    group = "user_events" if transport == "user_events" else "rezolus_ue"
    tfs = Tracefs(find_tracefs(mount=True))
    prefix: tuple[str, ...] = ()
    config = CONFIG if transport == "user_events" else shipped_config(tmp_path)
    args = ["--config", str(config)]
    if how == "unit":
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv is missing (Debian: util-linux)"
        settings = unit(UNIT)
        exec_start = words(settings, "ExecStart")
        assert exec_start[1:3] == ["run", "--user"], exec_start
        bounding = words(settings, "CapabilityBoundingSet")
        caps = ",".join("+" + c.removeprefix("CAP_").lower() for c in bounding)
        prefix = (setpriv, f"--bounding-set=-all,{caps}", "--inh-caps=-all",
                  "--ambient-caps=-all", "--no-new-privs", "--")
        args = [*exec_start[1:3], "nobody", *exec_start[4:], *args]
    else:
        args = ["run", *args]
    a = AgentProcess(*args, prefix=prefix, command=(str(CLI),))
    try:
        def started() -> bool:
            # "publishing N events" follows every sampler's start and the privilege drop:
            # under emulation on a busy machine that takes minutes (each BPF sampler parses
            # the kernel's BTF at start), so the wait is for the line, not for a time.
            return running(a.proc, a.output, "agent") and "publishing " in a.output() and all(
                tfs.event_exists(group, n) for n in (CPU_USAGE.name, AGENT.name))
        wait_for(started, timeout=600, step=0.2, what=f"the agent to start publishing its"
                 f" {group} events", seen=lambda: (a.output(), threads_of(a.proc.pid)))
        yield how, a, group
    finally:
        a.stop()
        a.log.close()


def test_every_event_reaches_every_consumer_under_the_shipped_privileges(shipped_agent):
    how, agent, group = shipped_agent
    # After the whole drop (setuid, then capset): exactly what its samplers need.
    assert "dropped" in agent.output(), agent.output()
    from rezolus_ue.cli import load_config

    want = sum(1 << capabilities.CAPS[c] for c in privilege.kept(load_config(CONFIG)))
    held = capabilities.parse_status(Path(f"/proc/{agent.proc.pid}/status").read_text())
    assert held["CapEff"] == held["CapPrm"] == want, (how, held)
    if how == "unit":
        assert proc_status(agent.proc.pid)["NoNewPrivs"].strip() == "1"

    readers = READERS if how == "sudo" and group != "user_events" else frozenset()
    c = Consumers(Path(tempfile.mkdtemp(prefix="shipped-")), group, readers)
    c.start()
    top_screen = None
    try:
        st = wait_for(lambda: _settled(agent), timeout=600, step=0.5,
                      what="every available sampler to be active with its BPF loaded",
                      seen=lambda: read_status())
        expected = _expected(st["samplers"])
        # The tick record frames the others: perf shows it, our readers consume it.
        families = {e for e in expected if not e.endswith("_dist") and e != TICK}
        with block_io():
            base = _agent_records(c)
            wait_for(lambda: c.running("tail") and _agent_records(c) >= base + INTERVALS + 1,
                     timeout=300,
                     what=f"{INTERVALS} more publish intervals seen by tail",
                     seen=lambda: _agent_records(c) - base)
            # The exporter is a process of its own, started beside three others: on
            # emulated CPUs beside a CPU hog it once had read nothing yet when tail had
            # seen its intervals; once it refused the first scrape (not listening yet, or
            # gone: its log says which). It must come to listen, then to serve every
            # family, not at a given time.
            if "exporter" in readers:
                wait_output(c.procs["exporter"], lambda: c.errors("exporter"),
                            "serving Prometheus metrics on", name="exporter")
                wait_for(lambda: c.running("exporter")
                         and not _unexported(c.scrape(), families),
                         timeout=300, step=0.5,
                         what="the exporter to serve every family",
                         seen=lambda: _exporter_report(c, families))
        # top's own intervals: rates need two of its frames (ev/s has a value), and it may
        # start long after the others (the VM's emulated CPUs, every consumer at once).
        if "top" in readers:
            top_screen = wait_for(lambda: _top_settled(c.screen()), timeout=300, step=0.5,
                                  what="top to show errors 0 and a value in every row",
                                  seen=c.screen)
    finally:
        codes = c.stop()
    assert agent.stop() == 0
    out = agent.output()
    assert "Traceback" not in out, out

    samplers = st["samplers"]
    unavailable = {n: s.get("reason", "") for n, s in samplers.items()
                   if s["status"] == "unavailable"}
    for name, reason in unavailable.items():
        assert MISSING.search(reason or ""), f"{name} unavailable without naming why: {reason!r}"

    # perf: every event of every available sampler, decoded with named fields.
    script = subprocess.run(["perf", "script", "-i", str(c.perf_data)], capture_output=True,
                            text=True, timeout=scaled(600))
    assert script.returncode == 0, script.stderr[-2000:]
    by_event = _perf_lines(script.stdout)
    missing = sorted(expected - set(by_event))
    assert not missing, f"perf saw no records of {missing} ({how}, {group}); status: {samplers}"
    from rezolus_ue.schema import by_name

    schemas = by_name()
    for event in expected:
        line = by_event[event][-1]
        absent = [f.name for f in schemas[event].fields if f"{f.name}=" not in line]
        assert not absent, f"perf script shows no {absent} in {line!r}"
    # Each tick record ends its tick. In perf's order (time, over every CPU) the records
    # since the previous tick record are exactly the ones it says its tick wrote, and the
    # ticks are numbered without a gap. The first is left out: perf enables its events
    # one CPU at a time, so the first tick it sees may be partial.
    ours = [ln for ln in script.stdout.splitlines() if _perf_lines(ln)]
    ticks = [i for i, ln in enumerate(ours) if f":{TICK}:" in ln]
    assert len(ticks) > INTERVALS, ours[-5:]
    seqs = [_field(ours[i], "seq") for i in ticks]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    for prev, i in itertools.pairwise(ticks[1:]):
        assert _field(ours[i], "records") == i - prev - 1, (ours[i], ours[prev + 1 : i][-3:])
    last = by_event[AGENT.name][-1]
    assert _field(last, "sampler_errors") == 0, (last, out)
    assert _field(last, "write_errors") == 0, (last, out)
    # Past the drop (and the unit's bounding set) the processes sampler reads every
    # /proc/<pid> a process holding only the kept capabilities can: none where the agent
    # runs in the host's user namespace, the init of an enclosing one in a container.
    if "rezolus_processes" in by_event:
        summary = by_event["rezolus_processes"][-1]
        kept = privilege.kept(load_config(CONFIG))
        assert _field(summary, "unreadable") <= _unreadable_with(kept), (how, summary)

    # Our consumers saw the same events.
    tail_events = {r["event"] for r in c.tail_records()}
    missed = sorted(expected - tail_events)
    assert not missed, f"tail missed {missed}"
    if top_screen is not None:
        assert "errors 0" in top_screen, top_screen
        assert not _blank_cells(top_screen), f"top rows without a value:\n{top_screen}"
    for name, code in codes.items():
        assert code in (0, 130, -signal.SIGINT), f"{name} exited {code}: {c.errors(name)}"
        assert "Traceback" not in c.errors(name) and "Exception ignored" not in c.errors(
            name), f"{name} printed:\n{c.errors(name)}"
