"""The docs' commands, run as a reader runs them, against a running agent.

Each command is looked up in ``doc_examples.EXERCISED`` (tests/doc_examples.py), run with
bash in a scratch directory, and its output checked against what the docs show after it
(``doc_examples.unmatched_claims``) and against what the prose around it says. A command
the test cannot run as written (it runs until interrupted, it needs a terminal) runs as the
entry's ``as_run`` says. The agent is started as the README starts it.

These run on this host through whichever transport ``transport = "auto"`` takes on its
kernel (the ``bus`` fixture). A command that names a group is shown in both forms
(``doc_examples.transport_of``); each test runs the form of this transport as written
(``Shell.form``), and the other form runs where its transport is:
test_doc_examples_user_events.py runs the user_events forms in the kernel tier, with the
examples about user_events itself and trace-cmd (this host refuses its write to
ftrace_enabled). A command that names no group works on both; what the docs show it
print is in user_events' form, checked here in the form this transport prints
(``Shell.claims``).

We are root: ``sudo`` is a script that runs its arguments, first on PATH, then this
checkout's .venv/bin (where setup.sh's /usr/local/bin/rezolus-ue link points in the clone
CI tests), so ``sudo rezolus-ue`` runs this checkout's CLI.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import doc_examples as d
import pytest
from waiting import scaled, wait_output

from rezolus_ue.agent import read_status
from rezolus_ue.consume.intervals import EVENT as TICK
from rezolus_ue.consume.recording.files import read_records
from rezolus_ue.schema import CPU_USAGE, EVENTS, GROUPS

from .conftest import Bus, wait_for

pytestmark = pytest.mark.live
ROOT = d.ROOT
TRACING = Path("/sys/kernel/tracing")
#: (module file::test, key) of every documented command run in this process, for the
#: last test of each module that runs them.
RAN: set[tuple[str, str]] = set()
#: A command with the table's substitution: (key, what is run instead).
Step = str | tuple[str, str]
#: The field the kernel adds before an uprobe event's own, as perf prints it: "(7f5c...) ".
PROBE_IP = r"\([0-9a-f]+\) "


class Shell:
    """Runs documented commands in ``cwd`` and remembers their output."""

    def __init__(self, cwd: Path, bus: Bus, transport: str | None = None) -> None:
        self.cwd = cwd
        #: The transport of the agent the commands run against (default: ``bus``'s).
        self.transport = transport or bus.transport
        self.group = GROUPS[self.transport]
        bin_dir = cwd / ".bin"
        bin_dir.mkdir(exist_ok=True)
        sudo = bin_dir / "sudo"
        sudo.write_text('#!/bin/sh\nexec "$@"\n')
        sudo.chmod(0o755)
        self.env = {**os.environ, "TERM": "xterm-256color",
                    "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent),
                                             os.environ.get("PATH", os.defpath)])}

    @property
    def uprobe(self) -> bool:
        return self.transport == "uprobe"

    def form(self, key: str) -> str:
        """Return the documented form of ``key`` for this transport: ``key`` itself if it
        names no group (or this one's), else its twin naming this transport's group."""
        twin = d.in_transport(key, self.transport)
        assert twin in d.EXERCISED, (
            f"the docs show {key!r} but not {twin!r}, its form for {self.transport}")
        return twin

    def command(self, key: str, as_run: str | None) -> str:
        """Return what to run for ``key``: the text as written, or its declared substitute.
        A form naming the other transport's group cannot run here (``form`` picks)."""
        how = d.EXERCISED[key]
        assert isinstance(how, d.Ran), key
        assert bool(as_run) == bool(how.as_run), (
            f"{key!r}: run as written unless the table declares a substitute")
        assert d.transport_of(key) in (None, self.transport), (
            f"{key!r} names another transport's group than {self.transport}'s")
        path, _, test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].partition("::")
        RAN.add((f"{Path(path).name}::{test}", key))
        return as_run or key

    def claims(self, e: d.Example) -> tuple[str, ...]:
        """Return the output lines ``e``'s docs show, in the form this transport prints.

        A command naming a group is shown with its own transport's output. One that names
        none is shown with user_events' output; on uprobe events (docs/kernels.md) the
        group is ``rezolus_ue``, in what perf, ftrace and trace-cmd print (our consumers
        print the same on both) the kernel's ``__probe_ip`` field comes first, ftrace
        prints integers in decimal only, and its context-flags column (``.....``) holds
        every flag set on this kernel: that column is elided.
        """
        if not self.uprobe or d.transport_of(e.key) == "uprobe":
            return e.claims
        tracer = any(tool in e.key for tool in ("perf script", "trace_pipe",
                                                "trace-cmd report"))
        out = []
        for c in e.claims:
            if e.key == "sudo rezolus-ue check" and "user_events" in c:
                continue  # docs/kernels.md shows an uprobe kernel's lines, added below
            c = d.in_transport(c, self.transport)
            if tracer:
                c = re.sub(r"\b(rezolus_\w+:\s+)(?=\w+=)", r"\1(...) ", c)
                c = re.sub(r"=0x[0-9a-f.]+ \(([^)]*)\)", r"=\1", c)
                c = re.sub(r"(\[\d+\]\s+)\.{5}(?=\s)", r"\1...", c)
            out.append(c)
        if e.key == "sudo rezolus-ue check":
            out += _text_block("docs/kernels.md", e.key)
        return tuple(out)

    def check_claims(self, key: str, output: str, source: str | None = None) -> None:
        """Assert ``output`` has a line for every line the docs show after ``key``."""
        for e in d.examples():
            if e.key == key and (source is None or e.source == source):
                bad = d.unmatched_claims(self.claims(e), output)
                assert not bad, (f"{e.source}:{e.line}: {key!r} printed no line like {bad}"
                                 f" ({self.transport}):\n{output[-3000:]}")

    def run(self, key: str, as_run: str | None = None, *, timeout: float = 300,
            ok: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``key`` (or ``as_run``) with bash; assert it exits 0 unless not ``ok``."""
        p = _run(["bash", "-c", self.command(key, as_run)], cwd=cwd or self.cwd,
                 env=self.env, timeout=timeout)
        if ok:
            assert p.returncode == 0, f"{key!r} exited {p.returncode}:\n{p.stdout}{p.stderr}"
        return p

    def script(self, steps: list[Step], glue: dict[int, str] | None = None, *,
               timeout: float = 600, namespace: bool = False) -> str:
        """Run ``steps`` in one bash script (they share a shell: ``cd``, ``&``), with
        ``glue[i]`` (waits, checks) before the i-th; return the output. ``namespace``: in a
        private mount namespace with tmpfs on /var/lib and a writable overlay on /etc, so
        commands may write there without touching the machine."""
        keys = [self.command(*s) if isinstance(s, tuple) else self.command(s, None)
                for s in steps]
        lines = ["set -e"]
        if namespace:
            # The overlay's upper layer on a tmpfs of its own: it cannot be an overlayfs
            # (the VM's /tmp is one).
            etc = self.cwd / ".etc"
            lines += [f"mkdir -p {etc} && mount -t tmpfs tmpfs {etc}",
                      f"mkdir {etc}/up {etc}/work",
                      f"mount -t overlay overlay -o lowerdir=/etc,upperdir={etc}/up,"
                      f"workdir={etc}/work /etc",
                      "mount -t tmpfs tmpfs /var/lib"]
        for i, k in enumerate(keys):
            if glue and i in glue:
                lines.append(glue[i])
            lines.append(k)
        if glue and len(keys) in glue:
            lines.append(glue[len(keys)])
        argv = ["bash", "-c", "\n".join(lines)]
        if namespace:
            argv = ["unshare", "--mount", "--propagation", "private", *argv]
        p = _run(argv, cwd=self.cwd, env=self.env, timeout=timeout)
        out = p.stdout + p.stderr
        assert p.returncode == 0, f"script exited {p.returncode}:\n{out}"
        return out

    def background(self, key: str, log: Path) -> subprocess.Popen[bytes]:
        """Start ``key`` (written with a trailing ``&`` or not) as its own process group."""
        cmd = self.command(key, None)
        with log.open("wb") as f:
            return subprocess.Popen(["bash", "-c", "exec " + cmd.removesuffix("&").strip()],
                                    cwd=self.cwd, env=self.env, stdout=f,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)


def _text_block(source: str, command: str) -> tuple[str, ...]:
    """Return the lines a ```text block of ``source`` shows after ``$ command``."""
    m = re.search(rf"```text\n\$ {re.escape(command)}\n(.*?)```", (ROOT / source).read_text(),
                  re.S)
    assert m, f"{source} shows no `{command}` in a text block"
    return tuple(ln for ln in m.group(1).splitlines() if ln.strip())


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with its output going to files, as in a terminal, not pipes: given a
    FIFO as stdout, `perf record` (without -o) writes its data there instead of perf.data.
    Output is decoded leniently: perf script prints histogram bucket bytes raw."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.run(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                           **kw)  # type: ignore[call-overload]
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            argv, p.returncode, out.read().decode(errors="replace"),
            err.read().decode(errors="replace"))


def stop(p: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if p.poll() is None:
        os.killpg(p.pid, sig)
    try:
        return p.wait(timeout=scaled(60))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise


def reader(log: Path) -> Callable[[], str]:
    """A reader of a background command's log, for waiting.wait_output."""
    return lambda: log.read_text(errors="replace")


AGENT_STARTED = r"publishing \d+ events"
#: The consumer the agent fixture holds; closed before a test stops the agent (a held
#: perf event keeps the agent's events alive after it exits).
HELD: dict[str, object] = {}


def readme_agent(sh: Shell, *, hold: bool) -> Iterator[subprocess.Popen[bytes]]:
    """Run the README's agent, `sudo rezolus-ue run &`, every sampler at its default, for
    a module. ``hold``: with one consumer of every event but rezolus_cpu_usage held, so
    that the BPF samplers attach once, not again for each documented command that
    subscribes to everything (its rings are never read: what it misses is its own loss).
    rezolus_cpu_usage is left out for ftrace: the kernel refuses ftrace an uprobe event
    perf has enabled."""
    log = sh.cwd / "agent.log"
    proc = sh.background("sudo rezolus-ue run &", log)
    listener = None
    try:
        wait_output(proc, reader(log), AGENT_STARTED, name="agent")
        if hold:
            from rezolus_ue.consume.subscription import Subscription

            listener = HELD["listener"] = Subscription(
                [e.name for e in EVENTS if e.name != CPU_USAGE.name], wait=False,
                ring_pages=1)
            wait_for(lambda: _settled(proc.pid), timeout=600, step=0.5,
                     what="every available sampler to attach for the held consumer",
                     seen=read_status)
        yield proc
    finally:
        if listener is not None:
            listener.close()
        if proc.poll() is None:
            assert stop(proc) == 0, log.read_text()


def _settled(pid: int) -> bool:
    """Return True once the agent ``pid`` has every sampler active or unavailable."""
    st = read_status()
    if not st or st.get("pid") != pid:
        return False
    return all(s["status"] in ("unavailable", "disabled") or (
        s["status"] == "active" and not (s.get("reason") or "").startswith("loading:"))
        for s in st["samplers"].values())


def assert_every_listed_ran(module: str, transport: str) -> None:
    """Assert that every command the table gives to a test of ``module`` (a file of
    tests/kernel) that ran in this process was run by it; deselected tests are not
    counted, nor forms naming another transport than ``transport`` (the agent's here).
    Each module checks its own share: they run in different tiers."""
    tests = {t for t, _ in RAN}
    mine = {key: how.test.rpartition("/")[2] for key, how in d.EXERCISED.items()
            if isinstance(how, d.Ran) and how.test.startswith(f"tests/kernel/{module}::")
            and d.transport_of(key) in (None, transport)}
    missed = [f"{test}: {key!r}" for key, test in mine.items()
              if test in tests and (test, key) not in RAN]
    assert not missed, "listed in tests/doc_examples.py but not run:\n" + "\n".join(missed)


@pytest.fixture(scope="module")
def sh(tmp_path_factory: pytest.TempPathFactory, bus: Bus) -> Shell:
    return Shell(tmp_path_factory.mktemp("docs"), bus)


@pytest.fixture(scope="module")
def agent(sh: Shell) -> Iterator[subprocess.Popen[bytes]]:
    """The README's agent, with every event but rezolus_cpu_usage held (readme_agent)."""
    yield from readme_agent(sh, hold=True)


#: The README's perf example, in its user_events form (``Shell.form`` picks the one to run).
README_PERF = "sudo perf record -e 'user_events:rezolus_*' -a -- sleep 3 && sudo perf script"


def test_readme_tour(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    # The README's first set-up command: CI ran scripts/setup.sh (scripts/test.sh does),
    # and the agent fixture started `rezolus-ue run`, as the table declares.
    sh.command("./scripts/setup.sh && rezolus-ue run", "rezolus-ue run")
    sh.check_claims("sudo rezolus-ue run &", (sh.cwd / "agent.log").read_text())
    sh.check_claims("sudo rezolus-ue check", sh.run("sudo rezolus-ue check").stdout)
    events = sh.run("sudo rezolus-ue events").stdout
    assert "rezolus_cpu_usage" in events and f"pid {agent.pid}" in events, events
    assert "instances" in events, "events suggests the global ftrace buffer"

    key = sh.form(README_PERF)
    out = sh.run(key).stdout
    sh.check_claims(key, out)
    # The README: the process in perf's records is the agent, by its command name; the
    # number is the writing thread's id, the agent's pid for its main thread.
    procs = {tuple(ln.split()[:2]) for ln in out.splitlines() if f"{sh.group}:" in ln}
    assert {c for c, _ in procs} == {"rezolus-ue"}, procs
    assert ("rezolus-ue", str(agent.pid)) in procs, procs

    out = sh.run("sudo rezolus-ue tail rezolus_cpu_usage",
                 "sudo rezolus-ue tail rezolus_cpu_usage --count 4").stdout
    sh.check_claims("sudo rezolus-ue tail rezolus_cpu_usage", out)

    key = ("sudo rezolus-ue tail 'rezolus_memory*' --format json"
           " | jq 'select(.event == \"rezolus_memory\") | .available_bytes'")
    how = d.EXERCISED[key]
    assert isinstance(how, d.Ran)
    out = sh.run(key, how.as_run).stdout
    sh.check_claims(key, out)
    assert [v.isdigit() for v in out.split()] == [True, True], out

    (sh.cwd / "bad.toml").write_text('[agent]\n# 5ms is too short\npublish_interval = "5ms"\n')
    p = sh.run("sudo rezolus-ue run -c bad.toml", ok=False)
    assert p.returncode == 2
    sh.check_claims("sudo rezolus-ue run -c bad.toml", p.stderr)


def test_ftrace_instance(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    ftrace_instance(sh, agent.pid)


def as_cached_by_name(out: str, agent_pid: int) -> str:
    """Return ftrace's lines ``out`` with the agent's task named as once ftrace has cached
    its name. ftrace names a task from a pid-keyed cache: ``<...>`` until it has seen the
    task (the README says so), or the name of an earlier process that had the same pid
    once pids have wrapped. Every line must still come from one of the agent's threads."""
    threads = {int(t.name) for t in Path(f"/proc/{agent_pid}/task").iterdir()}

    def name(m: re.Match[str]) -> str:
        assert int(m[2]) in threads, f"a line from pid {m[2]}, not the agent's {agent_pid}:\n{out}"
        return f"{m[1]}rezolus-ue-{m[2]}"

    return re.sub(r"^(\s*)\S+-(\d+)(?=\s+\[\d+\])", name, out, flags=re.M)


def ftrace_instance(sh: Shell, agent_pid: int) -> None:
    """The README's ftrace instance block, as written (on either transport: set_event
    takes the event's name alone), checked against what it shows."""
    enable = "echo rezolus_cpu_usage | sudo tee /sys/kernel/tracing/instances/mine/set_event"
    rmdir = "sudo rmdir /sys/kernel/tracing/instances/mine"
    sh.run("sudo mkdir /sys/kernel/tracing/instances/mine")
    removed = False
    try:
        sh.check_claims(enable, sh.run(enable).stdout)
        # What set_event enabled: the event in this transport's group.
        switch = TRACING / "instances/mine/events" / sh.group / "rezolus_cpu_usage/enable"
        assert switch.read_text().strip() == "1", switch
        key = "sudo cat /sys/kernel/tracing/instances/mine/trace_pipe"
        out = sh.run(key, f"timeout 60 {key} | head -n 2").stdout
        sh.check_claims(key, as_cached_by_name(out, agent_pid))
        assert len(out.splitlines()) == 2, out
        sh.run(rmdir)
        removed = True
    finally:
        if not removed:
            subprocess.run(["rmdir", str(TRACING / "instances/mine")], check=False)
    assert not (TRACING / "instances/mine").exists()


def test_top_in_tmux(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is missing (scripts/setup.sh --dev installs it)"
    sess = f"docs_top_{os.getpid()}"

    def tm(*args: str) -> str:
        return subprocess.run([tmux, *args], capture_output=True, text=True, env=sh.env,
                              timeout=scaled(30)).stdout

    sh.command("sudo rezolus-ue top", "the same, in tmux, then q")
    tm("new-session", "-d", "-s", sess, "-x", "120", "-y", "40", "-c", str(sh.cwd),
       "sudo rezolus-ue top")
    try:
        wait_for(lambda: f"agent {agent.pid}" in (s := tm("capture-pane", "-p", "-t", sess))
                 and "Mem" in s, timeout=240, step=0.5)
        tm("send-keys", "-t", sess, "q")
        wait_for(lambda: sess not in tm("list-sessions"), timeout=60, step=0.5)
    finally:
        tm("kill-session", "-t", sess)
    sh.run("sudo rezolus-ue top --once > top.txt")
    frame = (sh.cwd / "top.txt").read_text()
    assert "CPU" in frame and "Mem" in frame and f"agent {agent.pid}" in frame, frame


def _python_block(first: str) -> str:
    (e,) = {e.text: e for e in d.examples() if e.key == f"python: {first}"}.values()
    return e.text


def test_recording(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """docs/recording.md and the README: record, read back, convert, query."""
    rec = sh.cwd / "rec"
    rec.mkdir()
    sh.run("sudo rezolus-ue record run.rzr --duration 10m",
           "sudo rezolus-ue record run.rzr --duration 10s", cwd=rec)
    out = sh.run("rezolus-ue tail --from run.rzr", cwd=rec).stdout
    assert re.search(r"rezolus_cpu_usage: cpu=\d+ user_ns=\d+", out), out[:2000]
    sh.run("rezolus-ue dump --from run.rzr run.parquet", cwd=rec)
    assert (rec / "run.parquet").is_file()

    for first in ("from rezolus_ue.consume.recording import read_meta, read_records",
                  "from rezolus_ue.consume.recording import to_pandas", "import duckdb"):
        key = f"python: {first}"
        sh.command(key, None)
        p = subprocess.run([sys.executable, "-c", _python_block(first)], cwd=rec,
                           capture_output=True, text=True, timeout=scaled(300))
        assert p.returncode == 0 and p.stdout.strip(), f"{key}:\n{p.stdout}{p.stderr}"
    # read_records prints wall time, the cpu field, user_ns: one line per CPU and record.
    p = subprocess.run([sys.executable, "-c", _python_block(
        "from rezolus_ue.consume.recording import read_meta, read_records")], cwd=rec,
        capture_output=True, text=True, timeout=scaled(300))
    cpus = {int(ln.split()[1]) for ln in p.stdout.splitlines()}
    assert cpus == set(range(os.cpu_count() or 1)), p.stdout

    import duckdb

    key = 'sql: SELECT max("cpu_usage/id=0/state=user") - min("cpu_usage/id=0/state=user") AS user_ns'  # noqa: E501
    sh.command(key, None)
    (sql,) = [e.text for e in d.examples() if e.key == key]
    cwd = os.getcwd()
    os.chdir(rec)
    try:
        for stmt in (s for s in sql.split(";") if s.strip()):
            assert duckdb.sql(stmt).fetchall(), stmt
    finally:
        os.chdir(cwd)

    other = sh.cwd / "rec2"
    other.mkdir()
    sh.run("sudo rezolus-ue record cpu.rzr 'rezolus_cpu*'",
           "sudo rezolus-ue record cpu.rzr 'rezolus_cpu*' --duration 5s", cwd=other)
    assert {r.event for r in read_records(other / "cpu.rzr")} >= {"rezolus_cpu_usage"}
    # With the tick records that end each publish interval (``intervals``).
    assert all(r.event.startswith("rezolus_cpu") or r.event == TICK
               for r in read_records(other / "cpu.rzr"))
    sh.run("sudo rezolus-ue record run.parquet",
           "sudo rezolus-ue record run.parquet --duration 5s", cwd=other)
    assert {r.event for r in read_records(other / "run.parquet")} >= {"rezolus_cpu_usage"}


def test_flight_recorder(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """docs/recording.md's flight recorder block, as written (its directory is on a
    tmpfs in a private mount namespace, so /var/lib is left alone)."""
    ring = "/var/lib/rezolus-ue/ring"
    keys = ["sudo rezolus-ue record --ring /var/lib/rezolus-ue/ring --max-size 1G --max-age 1h",
            "sudo rezolus-ue dump incident.rzr",
            "sudo rezolus-ue dump --last 5m last5.rzr",
            "sudo rezolus-ue dump incident.parquet",
            "sudo kill -USR1 $(cat /var/lib/rezolus-ue/ring/recorder.pid)"]
    steps: list[Step] = [(keys[0], keys[0] + " &"), *keys[1:]]
    out = sh.script(steps, {
        1: f"for i in $(seq 600); do ls {ring}/seg-*.rzr* >/dev/null 2>&1 && [ -s"
           f" {ring}/recorder.pid ] && break; sleep 0.2; done; sleep 3",
        5: f"for i in $(seq 600); do ls {ring}/dumps/dump-*.rzr >/dev/null 2>&1 && break;"
           f" sleep 0.2; done; cp {ring}/dumps/dump-*.rzr usr1.rzr; kill -INT %1; wait",
    }, namespace=True)
    for name in ("incident.rzr", "last5.rzr", "usr1.rzr", "incident.parquet"):
        path = sh.cwd / name
        assert path.is_file(), f"{name} missing:\n{out}"
        assert any(r.event == "rezolus_cpu_usage" for r in read_records(path)), name


def test_exporter(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    curl = "curl -s http://127.0.0.1:9745/metrics | grep -A3 'TYPE rezolus_cpu_usage_user'"
    for key in ("sudo rezolus-ue exporter &", "sudo rezolus-ue exporter --listen 0.0.0.0:9745"):
        log = sh.cwd / "exporter.log"
        proc = sh.background(key, log)
        try:
            text = wait_output(proc, reader(log), "serving Prometheus metrics",
                               name="exporter")
            if key.endswith("&"):
                sh.check_claims(key, text)

            def scraped() -> str | None:
                out = sh.run(curl, ok=False).stdout
                return out if not d.unmatched_claims(_claims(curl), out) else None

            try:
                wait_for(scraped, timeout=180, step=1)
            except AssertionError:
                sh.check_claims(curl, sh.run(curl, ok=False).stdout)
            # Its `/` page names the group it follows: this transport's.
            with urllib.request.urlopen("http://127.0.0.1:9745/", timeout=60) as r:
                page = r.read().decode()
            assert f"{sh.group}:rezolus_*" in page and sh.transport in page, page
        finally:
            assert stop(proc) == 0, log.read_text()


def _claims(key: str) -> tuple[str, ...]:
    return next(e.claims for e in d.examples() if e.key == key and e.claims)


#: rezolus-ue(8)'s perf commands, in their user_events form (``Shell.form`` picks).
MAN_PERF = "perf record -e 'user_events:rezolus_*' -a -- sleep 3 && perf script"
MAN_PERF_DIST = "sudo perf record -e user_events:rezolus_cpu_usage_dist -a -- sleep 10"
MAN_PERF_ALL = "sudo perf record -e 'user_events:rezolus_*' -a -- sleep 3"


def test_man_page_consuming(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    man_page_consuming(sh)


def man_page_consuming(sh: Shell) -> None:
    """rezolus-ue(8) CONSUMING: the format file, perf, then ftrace's global buffer and an
    instance, each block as written in one shell (set_event names the event alone, so
    the blocks are the same on both transports)."""
    fmt = sh.run("cat /sys/kernel/tracing/events/*/rezolus_cpu_usage/format").stdout
    assert "field:u32 cpu;" in fmt and "field:u64 user_ns;" in fmt, fmt
    out = sh.run(sh.form(MAN_PERF)).stdout
    assert f"{sh.group}:rezolus_cpu_usage:" in out
    # ftrace prints user_events integers as "cpu=0x1 (1)", uprobe ones as "cpu=1", after
    # the probe's address.
    record = (r"rezolus_cpu_usage: \(0x[0-9a-f]+\) cpu=\d+ " if sh.uprobe
              else r"rezolus_cpu_usage: cpu=0x")
    # The trace_pipe read until interrupted is bounded (the table's substitution).
    blocks: list[list[Step]] = [
        ["cd /sys/kernel/tracing", "echo rezolus_cpu_usage >> set_event",
         ("cat trace_pipe", "timeout 60 cat trace_pipe | head -n 2"),
         "echo '!rezolus_cpu_usage' >> set_event"],
        ["cd /sys/kernel/tracing", "mkdir instances/rezolus",
         "echo rezolus_cpu_usage > instances/rezolus/set_event",
         ("cat instances/rezolus/trace_pipe",
          "timeout 60 cat instances/rezolus/trace_pipe | head -n 2"),
         "rmdir instances/rezolus"]]
    for steps in blocks:
        out = sh.script(steps)
        assert len(re.findall(record, out)) == 2, out
    assert not (TRACING / "instances/rezolus").exists()
    enable = TRACING / "events" / sh.group / "rezolus_cpu_usage/enable"
    assert enable.read_text().strip() == "0", "the man page's ftrace block left it enabled"


def stop_readme_agent(agent: subprocess.Popen[bytes]) -> None:
    """Stop the README's agent and its held consumer (once: later calls do nothing)."""
    listener = HELD.pop("listener", None)
    if listener is not None:
        listener.close()  # type: ignore[attr-defined]
    assert stop(agent) == 0


def test_agent_variants(sh: Shell, agent: subprocess.Popen[bytes]) -> None:
    """Last: the man page's and docs/security.md's other ways to run the agent, each
    after stopping the README's agent (the persistent one is in
    test_doc_examples_user_events.py: persist is a user_events flag)."""
    stop_readme_agent(agent)
    # docs/security.md: a config file others can write is refused.
    out = sh.script(["sudo rezolus-ue run"], {
        0: "mkdir -p /etc/rezolus-ue && echo '[agent]' > /etc/rezolus-ue/config.toml"
           " && chmod 0666 /etc/rezolus-ue/config.toml; set +e",
        1: "echo status=$?"}, namespace=True)
    assert "status=2" in out or "status=1" in out, out
    sh.check_claims("sudo rezolus-ue run", out, "docs/security.md")
    agent_with_dist(sh)


def agent_with_dist(sh: Shell) -> None:
    """rezolus-ue(8) EXAMPLES: a 20ms sample interval, the _dist records with perf, then
    every event for three seconds (no other agent runs)."""
    started = ("for i in $(seq 1500); do grep -qE 'publishing [0-9]+ events' agent2.log"
               " && break; sleep 0.2; done")
    term = "kill -TERM %1; wait %1 || true"
    out = sh.script(
        [("sudo rezolus-ue run -s 20ms", "sudo rezolus-ue run -s 20ms &"),
         sh.form(MAN_PERF_DIST), "sudo perf script", "sudo rezolus-ue events",
         sh.form(MAN_PERF_ALL), "sudo perf script"],
        {0: "exec 3>&1 >agent2.log 2>&1", 1: f"{started}; exec >&3",
         6: f"{term}"})
    ip = PROBE_IP if sh.uprobe else ""
    assert re.search(rf"{sh.group}:rezolus_cpu_usage_dist: {ip}cpu=", out), out[-3000:]
    assert re.search(rf"{sh.group}:rezolus_agent: {ip}pid=", out), out[-3000:]
    assert "rezolus-ue: publishing" in (sh.cwd / "agent2.log").read_text()


def test_every_listed_command_ran(bus: Bus) -> None:
    """Last: every command the table gives to a test of this module that ran was run by
    it (test_doc_examples_user_events.py checks its own share, in its tier)."""
    assert_every_listed_ran(Path(__file__).name, bus.transport)
