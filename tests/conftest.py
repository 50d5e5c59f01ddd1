"""Test tiers: pure unit tests, ``host`` tests, ``live`` and ``uprobe`` tests on this host's
kernel, and ``kernel`` tests that need user_events itself (or a hook this host lacks).

``kernel`` tests run where a kernel with user_events is:

* on this machine, when its kernel has ``user_events_data`` (and we are root), or when we
  *are* the VM (``REZOLUS_UE_IN_VM=1``);
* else inside one VM booted with virtme-ng from ``REZOLUS_UE_TEST_KERNEL`` (a bzImage),
  started in the background as the run begins, so the host's tiers run beside it: every
  selected kernel test runs in that single boot, its per-test outcomes come back as JSON,
  and each host-side stand-in (run last) reports the VM's outcome (failures with the VM's
  traceback);
* else they skip, saying why.

``live`` and ``uprobe`` tests run on this host only (root, uprobe_events or user_events).
With ``REZOLUS_UE_REQUIRE_KERNEL_TESTS=1`` (set by .ci/run), a skipped kernel, live or
uprobe test fails the session: CI must not go green by quietly not testing the kernel.
The summary ends with each tier's test count and time, and the slowest tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_VM = os.environ.get("REZOLUS_UE_IN_VM") == "1"
KERNEL_IMAGE = os.environ.get("REZOLUS_UE_TEST_KERNEL", "")
REQUIRE_KERNEL = os.environ.get("REZOLUS_UE_REQUIRE_KERNEL_TESTS") == "1"
# A developer's shell may set PYTHONUNBUFFERED; a user's shell and CI's `env -i` do not. The
# tests and every process they start see what users' do: with it set, a child that printed
# without flushing showed its output at once here and never in CI.
os.environ.pop("PYTHONUNBUFFERED", None)
#: A hung VM's deadline, far above a normal run of the tier under software emulation, and
#: above one beside a CPU hog (one host thread emulates the guest: it gets half a CPU).
VM_TIMEOUT_S = int(os.environ.get("REZOLUS_UE_VM_TIMEOUT", "2700"))
#: How long a KVM guest may take to reach its shell before the VM falls back to software
#: emulation: a working KVM boots in a few seconds, a broken one fails or never boots.
KVM_PROBE_S = float(os.environ.get("REZOLUS_UE_KVM_PROBE_S", "8"))
#: The guest's script, report and logs; set it per run to boot two VMs side by side.
VM_DIR = Path(os.environ.get("REZOLUS_UE_VMTEST_DIR") or ROOT / ".vmtest").resolve()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--vm-report", default="", help="(internal) write per-test outcomes here")


def _host_has(tier: str, name: str, lacks: str) -> tuple[bool, str]:
    """Return (True, "") if this process is root and tracefs has file ``name``, else
    (False, why ``tier`` tests cannot run on this host)."""
    if os.geteuid() != 0:
        return False, f"{tier} tests need root"
    try:
        from tracefs_tools import find_tracefs

        root = find_tracefs(mount=True)
    except Exception as e:
        return False, f"no tracefs: {e}"
    if not (root / name).exists():
        return False, f"this kernel has no {lacks}"
    return True, ""


def _host_user_events() -> tuple[bool, str]:
    return _host_has("kernel", "user_events_data", "user_events")


def _host_uprobes() -> tuple[bool, str]:
    return _host_has("uprobe", "uprobe_events", "uprobe events (CONFIG_UPROBE_EVENTS)")


def _host_live() -> tuple[bool, str]:
    """Return whether the agent has a transport on this host (uprobe or user_events)."""
    if _host_uprobes()[0]:
        return True, ""
    return _host_user_events()


def tier(item: pytest.Item) -> str:
    """Return the tier ``item`` runs in, for the timing summary."""
    if isinstance(item, VMProxyItem):
        return "vm"
    for name in ("kernel", "uprobe", "live", "host"):
        if item.get_closest_marker(name):
            return name
    return "unit"


def probe_kvm() -> tuple[bool, str]:
    """Return (True, how long) if a KVM guest reaches its shell within KVM_PROBE_S, else
    (False, why not). Where /dev/kvm exists but guests fail, this costs that deadline at
    most (a failing QEMU exits at once; one spinning in the host kernel is killed)."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "no usable /dev/kvm"
    mark = "rezolus-ue-kvm-ok"
    start = time.monotonic()
    proc = subprocess.Popen(
        [_which("vng") or "vng", "--run", KERNEL_IMAGE, "--force-9p", "--user", "root",
         "--exec", f"echo {mark}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, text=True, env=_venv_env(), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=KVM_PROBE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)
        return False, f"a KVM guest did not reach its shell within {KVM_PROBE_S:.0f} s"
    took = time.monotonic() - start
    if mark in out:
        return True, f"KVM (a guest reached its shell in {took:.1f} s)"
    last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
    return False, f"a KVM guest failed in {took:.1f} s: {last.strip()[:200]}"


def _kernel_mode() -> tuple[str, str]:
    """Return ("local" | "vm" | "skip", reason)."""
    if IN_VM:
        return "local", ""
    ok, why = _host_user_events()
    if ok:
        return "local", ""
    if not KERNEL_IMAGE:
        return "skip", f"{why}; set REZOLUS_UE_TEST_KERNEL to a bzImage to run them in a VM"
    if not Path(KERNEL_IMAGE).is_file():
        return "skip", f"{why}; REZOLUS_UE_TEST_KERNEL={KERNEL_IMAGE} is not a file"
    missing = [t for t in ("vng", "qemu-system-x86_64") if not _which(t)]
    if missing:
        return "skip", f"{why}; VM tier needs {', '.join(missing)} (run scripts/setup.sh --dev)"
    return "vm", why


def _venv_env() -> dict[str, str]:
    """Return this environment with the venv's bin first on PATH: vng runs virtme-run by
    name through /bin/sh, and setup.sh installs both into the venv only."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                   env.get("PATH", os.defpath)])
    return env


def _which(tool: str) -> str | None:
    here = Path(sys.executable).parent / tool
    return str(here) if here.exists() else shutil.which(tool)


class VMResults:
    """Runs the selected kernel tests in one VM boot, on first use."""

    def __init__(self, config: pytest.Config, nodeids: list[str]) -> None:
        self.config = config
        self.nodeids = nodeids
        self.outcomes: dict[str, dict[str, Any]] | None = None
        self.error = ""
        self.log = ""
        self.seconds = 0.0
        self.retried: list[str] = []
        #: "KVM ..." or "software emulation (...)": what the VM ran on, for the summary.
        self.accel = ""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Boot the VM in the background: the host's tiers run while it works."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_all, name="vm", daemon=True)
            self._thread.start()

    def _run_all(self) -> None:
        try:
            self._boot_all()
        except Exception as e:  # a stand-in reports it; the thread must not die silently
            self.error = f"the VM run failed: {e!r}"
            self.outcomes = self.outcomes or {}

    def _boot_all(self) -> None:
        kvm, why = probe_kvm()
        self.accel = why if kvm else f"software emulation ({why})"
        self._run(kvm=kvm)
        missing = [n for n in self.nodeids if n not in (self.outcomes or {})]
        if self.outcomes and missing:
            # The guest died part-way (its console is in .vmtest/vng.log): run what has
            # no result in a fresh boot, once, and say so in the summary.
            done = self.outcomes
            self.retried = missing
            self._run(missing, kvm=kvm)
            self.outcomes = {**done, **(self.outcomes or {})}

    def get(self, nodeid: str) -> dict[str, Any]:
        self.start()
        assert self._thread is not None
        self._thread.join()
        assert self.outcomes is not None
        return self.outcomes.get(nodeid) or {
            "outcome": "failed",
            "longrepr": f"no result from the VM for {nodeid}\n{self.error}\n{self.log[-4000:]}",
        }

    def _run(self, nodeids: list[str] | None = None, *, kvm: bool = False) -> None:
        suffix = "" if nodeids is None else "-rerun"
        nodeids = nodeids or self.nodeids
        VM_DIR.mkdir(parents=True, exist_ok=True)
        report = VM_DIR / "report.json"
        report.unlink(missing_ok=True)
        # Each boot keeps its own log (a rerun must not overwrite the first boot's).
        logf = VM_DIR / f"pytest{suffix}.log"
        # The command travels on the guest kernel's command line (2 KiB at most), so the
        # test list goes in a script on the shared checkout instead.
        script = VM_DIR / "run.sh"
        args = " ".join(shlex.quote(n) for n in nodeids)
        # No plugin autoload: the kernel tests use none, and finding and importing the
        # installed ones (hypothesis's) costs seconds of emulated CPU.
        script.write_text(
            f"cd {shlex.quote(str(ROOT))}\n"
            "export REZOLUS_UE_IN_VM=1 PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1\n"
            + (f"export REZOLUS_UE_TIMEOUT_SCALE={shlex.quote(scale)}\n"
               if (scale := os.environ.get("REZOLUS_UE_TIMEOUT_SCALE")) else "") +
            f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH\n"
            f"{shlex.quote(sys.executable)} -m pytest -p no:cacheprovider -q -rs --durations=0"
            f" --vm-report={shlex.quote(str(report))} {args} > {shlex.quote(str(logf))} 2>&1\n"
        )
        cmd = [
            _which("vng") or "vng", "--run", KERNEL_IMAGE, *(() if kvm else ("--disable-kvm",)),
            "--force-9p", "--user", "root", "--cpus", "2", "--memory", "4G", "--rwdir", str(ROOT),
            # The guest writes its report and log there: outside the checkout it needs a
            # writable share of its own (the guest's /tmp is its own tmpfs).
            *(() if VM_DIR.is_relative_to(ROOT) else ("--rwdir", str(VM_DIR))),
            "--verbose",  # the guest kernel's console lands in vng.log: why a guest died
            # One host thread emulates both guest CPUs: with multi-threaded TCG, the
            # kernel's live code patching (text_poke's int3, on every tracepoint or BPF
            # attach and detach) raced with the other vCPU and panicked the guest
            # ("Oops: int3" in ttwu_do_activate / __schedule) a few times per run.
            *(() if kvm else ("--qemu-opts=-accel tcg,thread=single",)),
            "--exec", f"sh {shlex.quote(str(script))}",
        ]
        start = time.monotonic()
        precompile()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=VM_TIMEOUT_S,
                               cwd=ROOT, stdin=subprocess.DEVNULL, env=_venv_env())
            out = f"exit status {p.returncode}\n{p.stdout}{p.stderr}"
        except subprocess.TimeoutExpired as e:
            out = f"VM timed out after {VM_TIMEOUT_S}s\n{e.stdout or ''}{e.stderr or ''}"
        except OSError as e:
            out = f"cannot start vng: {e}"
        self.seconds += time.monotonic() - start
        (VM_DIR / f"vng{suffix}.log").write_text(out)
        self.log = logf.read_text(errors="replace") if logf.exists() else ""
        try:
            self.outcomes = json.loads(report.read_text())
        except (OSError, ValueError):
            self.outcomes = {}
            self.error = f"the VM produced no report; vng said:\n{out[-4000:]}"


#: The checkout's Python the guest imports: its agents, CLIs, fixtures and tests.
SOURCES = ("rezolus_ue", "tracefs_tools", "tests")


def precompile() -> None:
    """Write the bytecode of SOURCES before the guest starts: the guest writes none
    (PYTHONDONTWRITEBYTECODE), nor does a host whose environment sets it, so every Python
    process in the guest would compile each module it imports anew, under emulation
    seconds per process. Stale or missing files only cost that time: Python checks each
    against its source."""
    import compileall

    for name in SOURCES:
        with contextlib.suppress(OSError):
            compileall.compile_dir(ROOT / name, quiet=2, workers=1)


class VMProxyItem(pytest.Item):
    """Stands in on the host for a kernel test that runs inside the VM."""

    def __init__(self, *, vm: VMResults, original: pytest.Item, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.vm = vm
        self.original_location = original.location
        self.own_markers = list(original.iter_markers())
        #: The test's id inside the VM (an uprobe test's proxy runs beside its host run).
        self.vm_nodeid = original.nodeid

    def runtest(self) -> None:
        res = self.vm.get(self.vm_nodeid)
        if res["outcome"] == "skipped":
            pytest.skip(f"[in VM] {res.get('longrepr', '')}")
        if res["outcome"] != "passed":
            raise VMTestFailure(res.get("longrepr", "failed in the VM"))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, VMTestFailure):
            return f"[in VM] {excinfo.value}"
        return str(excinfo.value)

    def reportinfo(self) -> tuple[str, int | None, str]:
        path, line, name = self.original_location
        return path, line, f"{name} [vm]"


class VMTestFailure(Exception):
    """A kernel test failed inside the VM; the message is its report there."""


_state: dict[str, object] = {"mode": ("", ""), "vm": None, "kernel_skipped": [],
                             "durations": {}, "tiers": {}}


def pytest_configure(config: pytest.Config) -> None:
    _state["mode"] = _kernel_mode()
    if config.getoption("--vm-report"):
        config.pluginmanager.register(_VMReporter(config.getoption("--vm-report")), "vmreport")


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: boot only for what is selected
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    mode, reason = _state["mode"]  # type: ignore[misc]
    for marker, check in (("uprobe", _host_uprobes), ("live", _host_live)):
        chosen = [i for i in items if i.get_closest_marker(marker)]
        ok, why = check() if chosen and not IN_VM else (True, "")
        for item in chosen if not ok else ():
            item.add_marker(pytest.mark.skip(reason=f"{marker} tier: {why}"))
    kernel = [i for i in items if i.get_closest_marker("kernel")]
    if not kernel:
        return
    if mode == "skip":
        for item in kernel:
            item.add_marker(pytest.mark.skip(reason=f"kernel tier: {reason}"))
    elif mode == "vm":
        vm = VMResults(config, [i.nodeid for i in kernel])
        _state["vm"] = vm
        # The stand-ins go last: the host's tests run while the VM works, and the first
        # stand-in waits for the VM's report.
        proxies = [VMProxyItem.from_parent(i.parent, name=i.name, vm=vm, original=i)
                   for i in kernel]
        items[:] = [i for i in items if not i.get_closest_marker("kernel")] + proxies


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    vm: VMResults | None = _state["vm"]  # type: ignore[assignment]
    if vm is not None and not session.config.option.collectonly:
        vm.start()


_TIERED = ("kernel", "uprobe", "live")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if any(t in report.keywords for t in _TIERED) and report.skipped:
        _state["kernel_skipped"].append(report.nodeid)  # type: ignore[union-attr]
    _state["durations"][report.nodeid] = (  # type: ignore[index]
        _state["durations"].get(report.nodeid, 0.0) + report.duration)  # type: ignore[attr-defined]


def pytest_collection_finish(session: pytest.Session) -> None:
    _state["tiers"] = {i.nodeid: i for i in session.items}


Timings = tuple[dict[str, tuple[int, float]], list[tuple[float, str, str]]]


def _timings(vm: VMResults | None) -> Timings:
    """Return each tier's (tests, seconds) and every test's (seconds, tier, id)."""
    items: dict[str, pytest.Item] = _state["tiers"]  # type: ignore[assignment]
    durations: dict[str, float] = _state["durations"]  # type: ignore[assignment]
    rows = []
    for nodeid, took in durations.items():
        item = items.get(nodeid)
        name = tier(item) if item is not None else "unit"
        if name == "vm" and vm is not None and vm.outcomes:
            took = float(vm.outcomes.get(nodeid, {}).get("duration", 0.0))
        rows.append((took, name, nodeid))
    per: dict[str, tuple[int, float]] = {}
    for took, name, _ in rows:
        n, t = per.get(name, (0, 0.0))
        per[name] = (n + 1, t + took)
    return per, sorted(rows, reverse=True)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    vm: VMResults | None = _state["vm"]  # type: ignore[assignment]
    mode, reason = _state["mode"]  # type: ignore[misc]
    tr = terminalreporter
    if vm is not None and vm.outcomes is not None:
        tr.write_sep("-", f"kernel tier: {len(vm.nodeids)} tests in one VM boot"
                          f" ({vm.seconds:.0f}s, log: {VM_DIR / 'pytest.log'})")
        tr.write_line(f"  vm: ran on {vm.accel}")
        tail = [ln for ln in vm.log.splitlines() if ln.strip()][-3:]
        for line in tail:
            tr.write_line(f"  vm: {line}")
        if vm.retried:
            tr.write_line(f"  vm: the guest died before reporting {len(vm.retried)} tests"
                          f" (console: {VM_DIR / 'vng.log'}); they ran again in a new boot")
    elif mode == "local":
        tr.write_line("kernel tier: ran on this kernel")
    if not IN_VM and _state["durations"]:
        per, rows = _timings(vm)
        tr.write_sep("-", "time by tier (the VM's beside the host's)")
        for name in ("unit", "host", "live", "uprobe", "kernel", "vm"):
            if name in per:
                n, t = per[name]
                wall = f", VM wall {vm.seconds:.0f}s" if name == "vm" and vm else ""
                tr.write_line(f"  {name:<7}{n:>6} tests {t:>8.1f}s{wall}")
        tr.write_sep("-", "slowest 15 tests")
        for took, name, nodeid in rows[:15]:
            tr.write_line(f"  {took:>7.1f}s  {name:<7} {nodeid}")
    skipped = _state["kernel_skipped"]
    if REQUIRE_KERNEL and skipped:
        tr.write_sep("!", f"REZOLUS_UE_REQUIRE_KERNEL_TESTS=1 but {len(skipped)} kernel"
                          f" tests were skipped ({reason or 'see above'})", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if REQUIRE_KERNEL and _state["kernel_skipped"] and not IN_VM:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class _VMReporter:
    """Inside the VM: record each test's outcome for the host to report."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.results: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cur = self.results.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0})
        cur["duration"] += report.duration
        if report.failed:
            cur["outcome"] = "failed"
            cur["longrepr"] = cur.get("longrepr", "") + f"[{report.when}] {report.longreprtext}"
        elif report.skipped and cur["outcome"] == "passed":
            cur["outcome"] = "skipped"
            lr = report.longrepr
            cur["longrepr"] = lr[2] if isinstance(lr, tuple) else str(lr)
        if report.when == "teardown":
            # After every test, not only at the end: a guest that dies part-way still
            # leaves the results so far, and the host reruns only the rest.
            self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1))
        os.replace(tmp, self.path)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._write()
