"""eBPF consumers on the uprobe transport (docs/kernels.md, "eBPF consumers"), against the
installed CLI with the shipped default config on the uprobe transport:

* the docs' bpftrace recipe as written: it prints plausible records while a consumer has
  the event enabled, and leaves no program, uprobe event or enabled counter behind;
* the generated program prints the values `tail` prints, scalars and text alike;
* every event's program loads and attaches;
* a uprobe naming the event's reference counter, opened as libbpf opens one, is a
  consumer: the agent publishes for it alone, beside the event's own consumers.

bpftrace comes with `scripts/setup.sh --dev`; without it the bpftrace tests skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import doc_examples as d
import pytest
from uprobe.conftest import CLI, Agent, shipped_config
from waiting import scaled

from rezolus_ue.ebpf_recipe import bpftrace_program, slot
from rezolus_ue.linux.perf_event import PerfEvent, PerfEventAttr
from rezolus_ue.linux.uprobe_stub import stub_path
from rezolus_ue.publisher import owned_uprobes
from rezolus_ue.schema import CPU_USAGE, EVENTS, by_name
from tracefs_tools import UprobeEvents

from .conftest import Bus, wait_for

pytestmark = pytest.mark.live
BPFTRACE = shutil.which("bpftrace")
needs_bpftrace = pytest.mark.skipif(
    BPFTRACE is None, reason="bpftrace is not installed (scripts/setup.sh --dev installs it)")
#: The docs' recipe, in the order a reader types it.
GENERATE = "sudo rezolus-ue events --bpftrace rezolus_cpu_usage > cpu_usage.bt"
CONSUME = "sudo rezolus-ue tail rezolus_cpu_usage > /dev/null &"
RUN = "sudo bpftrace cpu_usage.bt"
STOP = "kill %1"
#: The kernel's name for the programs bpftrace loads for our probes (15 characters).
PROG_NAME = "rezolus_ue_tap_"
RECORD = re.compile(r"(rezolus_\w+): (.*)")


@pytest.fixture(scope="module")
def agent(bus: Bus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    if not bus.tfs.has_uprobe_events:
        pytest.skip("this kernel has no uprobe events (CONFIG_UPROBE_EVENTS)")
    a = Agent("run", "--config", str(shipped_config(tmp_path_factory.mktemp("ebpf"))),
              "--interval", "200ms")
    try:
        a.wait_defined(bus.tfs)
        yield a
    finally:
        a.close()


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    """The environment the docs' commands run in: we are root, and ``sudo`` runs its
    arguments (the installed CLI first on PATH)."""
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    return {**os.environ, "PATH": os.pathsep.join([str(bin_dir), str(CLI.parent),
                                                   os.environ.get("PATH", os.defpath)])}


class Terminal:
    """A command whose output goes to a pseudo-terminal, as when a reader types it:
    bpftrace writes each line at once there, and buffers them into a pipe or a file."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        with contextlib.suppress(OSError):  # EIO once the command has exited
            while chunk := os.read(fd, 65536):
                self._chunks.append(chunk)
        os.close(fd)

    def output(self) -> str:
        return b"".join(self._chunks).decode(errors="replace").replace("\r\n", "\n")

    def interrupt(self) -> int:
        """Stop it as Ctrl-C does; return its exit status."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            status = self.proc.wait(timeout=scaled(60))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise
        self._reader.join(timeout=scaled(10))
        return status


def records(text: str) -> list[tuple[str, dict[str, str]]]:
    """Return (event, fields) of each record line bpftrace printed."""
    out = []
    for ln in text.splitlines():
        m = RECORD.fullmatch(ln.strip())
        if m:
            out.append((m[1], dict(re.findall(r"(\w+)=(\S*)", m[2]))))
    return out


def our_programs() -> set[int]:
    """Return the ids of the loaded BPF programs that probe our stub's taps."""
    from rezolus_ue.bpf.libbpf import loaded_programs

    return {i for i, name in loaded_programs().items() if name == PROG_NAME}


def uprobe_lines(bus: Bus) -> list[str]:
    return (bus.tfs.root / "uprobe_events").read_text().splitlines()


def online_cpus() -> set[int]:
    """Return the CPUs /proc/stat has a line for: the ones rezolus_cpu_usage reports."""
    return {int(m[1]) for m in re.finditer(r"^cpu(\d+) ", Path("/proc/stat").read_text(), re.M)}


def _docs_recipe() -> dict[str, d.Example]:
    found = {e.key: e for e in d.examples() if e.source == "docs/kernels.md"}
    missing = [k for k in (GENERATE, CONSUME, RUN, STOP) if k not in found]
    assert not missing, f"docs/kernels.md no longer shows {missing}"
    return found


@needs_bpftrace
def test_the_docs_recipe(bus: Bus, agent: Agent, tmp_path: Path,
                         shell_env: dict[str, str]) -> None:
    docs = _docs_recipe()
    before = uprobe_lines(bus)
    assert not bus.consumers(CPU_USAGE.name), "rezolus_cpu_usage is enabled before the test"
    p = subprocess.run(["bash", "-c", GENERATE], cwd=tmp_path, env=shell_env,
                       capture_output=True, text=True, timeout=scaled(120))
    assert p.returncode == 0, p.stderr
    program = (tmp_path / "cpu_usage.bt").read_text()
    assert f"uprobe:{stub_path().resolve()}:rezolus_ue_tap_{slot(CPU_USAGE)}" in program

    # `&`, then `kill %1`: the test's shell is not interactive, so it starts the command as
    # a process of its own and sends it what `kill %1` sends.
    tail = subprocess.Popen(["bash", "-c", "exec " + CONSUME.removesuffix("&").strip()],
                            cwd=tmp_path, env=shell_env, stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    bpf: Terminal | None = None
    cpus = online_cpus()
    try:
        wait_for(lambda: bus.consumers(CPU_USAGE.name), timeout=120, step=0.1,
                 what="tail to enable rezolus_cpu_usage")
        bpf = Terminal(["bash", "-c", "exec " + RUN], tmp_path, shell_env)

        def per_cpu() -> dict[int, int]:
            n: dict[int, int] = defaultdict(int)
            for _event, f in records(bpf.output()):
                n[int(f["cpu"])] += 1
            return n

        wait_for(lambda: set(per_cpu()) >= cpus and min(per_cpu().values()) >= 3,
                 timeout=120, step=0.2, what="three records of every CPU from bpftrace",
                 seen=bpf.output)
        assert our_programs(), "bpftrace runs, yet no program probes a tap"
        assert bpf.interrupt() == 0, bpf.output()
    finally:
        if bpf is not None:
            bpf.interrupt()
        if tail.poll() is None:
            os.killpg(tail.pid, signal.SIGTERM)
        tail.wait(timeout=scaled(60))
    out = bpf.output()
    bad = d.unmatched_claims(docs[RUN].claims, out)
    assert not bad, f"{RUN!r} printed no line like {bad}:\n{out[-3000:]}"

    last: dict[int, int] = {}
    for event, f in records(out):
        assert event == CPU_USAGE.name and list(f) == list(CPU_USAGE.field_names), f
        cpu, user_ns = int(f["cpu"]), int(f["user_ns"])
        assert cpu in cpus, f
        assert user_ns >= last.get(cpu, 0), (cpu, user_ns, last)  # cumulative per CPU
        last[cpu] = user_ns
        assert 0 <= int(f["busy_ppm"]) <= 1_000_000, f
    # Left behind: no program, no uprobe event, no consumer keeping the agent publishing.
    assert not our_programs()
    assert uprobe_lines(bus) == before
    wait_for(lambda: not bus.consumers(CPU_USAGE.name), timeout=60, step=0.1,
             what="rezolus_cpu_usage's counter back to 0 once tail stopped")


@needs_bpftrace
def test_the_program_prints_what_tail_prints(bus: Bus, agent: Agent, tmp_path: Path,
                                             shell_env: dict[str, str]) -> None:
    """Every record bpftrace printed is one `tail` printed too, field for field: the
    offsets and types are right. A histogram's buckets are left out: bpftrace cuts text at
    BPFTRACE_STRLEN, and tail decodes them."""
    names = ["rezolus_cpu_usage", "rezolus_memory", "rezolus_agent_sampler"]
    (tmp_path / "three.bt").write_text(subprocess.run(
        [str(CLI), "events", "--bpftrace", *names], env=shell_env, check=True,
        capture_output=True, text=True, timeout=scaled(120)).stdout)
    log = tmp_path / "tail.json"
    with log.open("w") as f:
        tail = subprocess.Popen([str(CLI), "tail", "--format", "json", *names],
                                env=shell_env, stdout=f, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    bpf: Terminal | None = None
    try:
        wait_for(lambda: all(bus.consumers(n) for n in names), timeout=120, step=0.1,
                 what=f"tail to enable {names}")
        bpf = Terminal([BPFTRACE or "bpftrace", "three.bt"], tmp_path, shell_env)
        wait_for(lambda: {e for e, _ in records(bpf.output())} == set(names)
                 and len(records(bpf.output())) >= 20, timeout=120, step=0.2,
                 what=f"records of {names} from bpftrace", seen=bpf.output)
        assert bpf.interrupt() == 0, bpf.output()
        printed = records(bpf.output())

        schemas = by_name()

        def from_tail() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
            seen = set()
            for ln in log.read_text().splitlines():
                rec = json.loads(ln)
                fields = schemas[rec["event"]].field_names
                seen.add((rec["event"], tuple((k, str(rec[k])) for k in fields
                                              if k != "buckets")))
            return seen

        def missing() -> list[tuple[str, dict[str, str]]]:
            have = from_tail()
            return [(e, f) for e, f in printed if (e, tuple(
                (k, v) for k, v in f.items() if k != "buckets")) not in have]

        wait_for(lambda: not missing(), timeout=60, step=0.2,
                 what="tail to have printed every record bpftrace printed", seen=missing)
    finally:
        if bpf is not None:
            bpf.interrupt()
        if tail.poll() is None:
            os.killpg(tail.pid, signal.SIGINT)
        tail.wait(timeout=scaled(60))
    assert not our_programs()


@needs_bpftrace
def test_every_events_program_loads(bus: Bus, tmp_path: Path) -> None:
    """bpftrace compiles, loads and attaches the program of every event (it runs BEGIN
    once every probe is attached)."""
    prog = tmp_path / "all.bt"
    prog.write_text(bpftrace_program(EVENTS, stub_path().resolve()) + "\nBEGIN { exit(); }\n")
    p = subprocess.run([BPFTRACE or "bpftrace", str(prog)], capture_output=True, text=True,
                       timeout=scaled(600))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"Attaching {len(EVENTS) + 1} probes" in p.stdout, p.stdout + p.stderr
    assert not our_programs()


def _uprobe_pmu() -> tuple[int, int]:
    """Return the perf ``uprobe`` PMU's type and the shift of ``ref_ctr_offset`` in its
    config (what libbpf's bpf_program__attach_uprobe_opts opens with ref_ctr_offset)."""
    pmu = Path("/sys/bus/event_source/devices/uprobe")
    fmt = (pmu / "format" / "ref_ctr_offset").read_text().strip()
    m = re.fullmatch(r"config:(\d+)-63", fmt)
    assert m, fmt
    return int((pmu / "type").read_text()), int(m[1])


def test_a_uprobe_with_the_events_counter_is_a_consumer(bus: Bus, agent: Agent) -> None:
    """docs/kernels.md, "Without bpftrace": a uprobe on the event's function offset with
    its reference counter (both from the event's definition) joins the event's own uprobe:
    it raises the counter, so the agent publishes for it alone, and perf-based consumers
    of the event work beside it."""
    with UprobeEvents(bus.tfs.root) as ev:
        (defn,) = [x for x in owned_uprobes(ev, stub_path().resolve())
                   if x.event == CPU_USAGE.name]
    assert defn.offset == bus.stub.function_offset(slot(CPU_USAGE))
    assert defn.ref_ctr_offset == bus.stub.counter_offset(slot(CPU_USAGE))
    assert not bus.consumers(CPU_USAGE.name), "rezolus_cpu_usage is enabled before the test"
    pmu_type, shift = _uprobe_pmu()
    path = ctypes.create_string_buffer(defn.path.encode())
    events = []
    try:
        for cpu in sorted(online_cpus()):
            attr = PerfEventAttr(type=pmu_type, config=defn.ref_ctr_offset << shift,
                                 config1=ctypes.addressof(path), config2=defn.offset)
            events.append(PerfEvent.open(attr, -1, cpu))
            events[-1].enable()
        wait_for(lambda: bus.consumers(CPU_USAGE.name), timeout=30, step=0.1,
                 what="the counter raised by the uprobe alone")
        wait_for(lambda: sum(e.read_counter().value for e in events) >= 2, timeout=60,
                 step=0.1, what="the agent to call the slot for the uprobe alone")
        p = subprocess.run([str(CLI), "tail", CPU_USAGE.name, "--count", "2"],
                           capture_output=True, text=True, timeout=scaled(120))
        assert p.returncode == 0 and p.stdout.count(f"{CPU_USAGE.name}: cpu=") == 2, (
            p.stdout + p.stderr)
    finally:
        for e in events:
            e.close()
    wait_for(lambda: not bus.consumers(CPU_USAGE.name), timeout=60, step=0.1,
             what="the counter back to 0 once the uprobe is closed")
