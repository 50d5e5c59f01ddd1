"""`rezolus-ue check` judges each sampler with the privileges the agent will run with.

Pure parts in-process (a sampler's result line, the child process's reporting); on the
host as root, the real command: started as root, dropped to what the agent keeps (and to
``nobody`` with ``--user``), every BPF sampler must still load and attach exactly as with
full root privileges, for each attach kind; not as root, check says so on its first
sampler-related line.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rezolus_ue import check
from rezolus_ue.check import Result
from rezolus_ue.errors import RezolusError, SamplerUnavailable

ROOT = Path(__file__).resolve().parent.parent


class FakeSampler:
    """A started non-BPF sampler whose verify() raises ``error`` (if any)."""

    def __init__(self, detail: str = "", error: Exception | None = None) -> None:
        self.detail = detail
        self.error = error
        self.closed = False

    def verify(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(("sampler", "want"), [
    (FakeSampler(), Result("sampler x", "pass", "available")),
    (FakeSampler("PSI irq unavailable"), Result("sampler x", "warn",
                                                "degraded: PSI irq unavailable")),
    (FakeSampler(error=SamplerUnavailable("x", "no such file")),
     Result("sampler x", "warn", "unavailable: no such file")),
    (FakeSampler(error=RezolusError("rejected; last lines of its log:\n  a\n  b")),
     Result("sampler x", "warn", "unavailable: rejected; last lines of its log: | a | b")),
])
def test_a_sampler_passes_only_when_it_works_undegraded(sampler: FakeSampler,
                                                        want: Result) -> None:
    assert check._after_drop("x", sampler) == want  # type: ignore[arg-type]
    assert sampler.closed


def test_the_child_reports_its_results_or_how_it_failed() -> None:
    ok = [Result("a", "pass", "fine"), Result("b", "warn", "hm", required=True)]
    assert check._in_child(lambda: ok) == ok

    def fails() -> list[Result]:
        raise RezolusError("--user x: no such user")

    (r,) = check._in_child(fails)
    assert r.status == "fail" and r.detail.endswith("--user x: no such user"), r

    def dies() -> list[Result]:
        os.kill(os.getpid(), signal.SIGKILL)
        return []

    (r,) = check._in_child(dies)
    assert r.status == "fail" and "killed by SIGKILL" in r.detail, r


# --- host, as root ------------------------------------------------------------------


def _bpf_samplers() -> list[str]:
    from rezolus_ue.samplers import REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    return [n for n, c in REGISTRY.items() if issubclass(c, BpfSampler)]


def run_check(tmp_path: Path, *args: str, agent: str = "", attach: str = "auto",
              prefix: tuple[str, ...] = ()) -> tuple[dict[str, str], str]:
    """Run ``rezolus-ue check ARGS`` with every BPF sampler's ``attach`` set; return
    {item: its line} and the whole output."""
    conf = tmp_path / f"check-{attach}.toml"
    conf.write_text(f"[agent]\n{agent}\n" + "".join(
        f'[samplers.{n}]\nattach = "{attach}"\n' for n in _bpf_samplers()))
    env = {**os.environ, "COLUMNS": "1000", "NO_COLOR": "1"}
    p = subprocess.run([*prefix, sys.executable, "-m", "rezolus_ue", "check", "--config",
                        str(conf), *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    assert "Traceback" not in out and "internal error" not in out, out
    lines = {}
    for line in p.stdout.splitlines():
        m = re.match(r"(PASS|WARN|FAIL)  ([^:]+): ", line)
        if m:
            assert m.group(2) not in lines, f"two lines for {m.group(2)}: {out}"
            lines[m.group(2)] = line
    return lines, out


def _root_with_bpf() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (BPF, capabilities to drop)")
    from rezolus_ue.bpf import build

    missing = [n for n in ("scheduler_runqueue", "blockio_requests", "tcp")
               if not build.object_path(n).exists()]
    if missing or not build.VMLINUX_BTF.exists():
        pytest.skip("needs the BPF objects built and kernel BTF")


@pytest.mark.host
@pytest.mark.parametrize("attach", ["auto", "tracepoint"])
def test_dropping_to_the_agents_privileges_loses_no_bpf_sampler(tmp_path: Path,
                                                                 attach: str) -> None:
    """Each BPF sampler that loads and attaches with every capability still does, the same
    way, after check drops to what the samplers need as root and as ``nobody``; "tracepoint"
    is the kind that read tracefs at attach time (nobody cannot)."""
    _root_with_bpf()
    full, out = run_check(tmp_path, agent="drop_capabilities = false", attach=attach)
    assert "drop_capabilities is off" in full["privileges"], out
    passing = {n: full[f"sampler {n}"] for n in _bpf_samplers()
               if full[f"sampler {n}"].startswith("PASS")}
    assert {"scheduler_runqueue", "blockio_requests", "tcp"} <= set(passing), out
    if attach == "tracepoint":
        assert "loads and attaches as tracepoint" in passing["scheduler_runqueue"]
    for args, who in (((), "as root"), (("--user", "nobody"), "as nobody")):
        dropped, out = run_check(tmp_path, *args, attach=attach)
        assert dropped["privileges"].startswith("PASS") and who in dropped["privileges"], out
        m = re.search(r" with only ([\w, ]+), as `run", dropped["privileges"])
        assert m and {"CAP_BPF", "CAP_PERFMON"} <= set(m.group(1).split(", ")), out
        for name, line in passing.items():
            assert dropped[f"sampler {name}"] == line, out


@pytest.mark.host
def test_not_as_root_check_says_whose_privileges_it_used(tmp_path: Path) -> None:
    _root_with_bpf()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv (util-linux)")
    nobody = ("--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--inh-caps=-all")
    readable = Path(tempfile.mkdtemp())  # pytest's tmp_path is under a 0700 directory
    readable.chmod(0o755)
    try:
        lines, out = run_check(readable, prefix=(setpriv, *nobody))
    finally:
        shutil.rmtree(readable)
    assert lines["privileges"].startswith("WARN  privileges: not root"), out
    line = lines["sampler scheduler_runqueue"]
    assert line.startswith("WARN") and "lacks CAP_BPF and CAP_PERFMON" in line, line
    assert lines["sampler cpu_usage"].startswith("PASS"), out


# --- what a hidepid proc mount hides --------------------------------------------------


@pytest.mark.parametrize(("options", "sees", "status", "says"), [
    ("rw,nosuid,nodev,noexec,relatime", True, "pass", "every process visible"),
    ("rw,relatime,hidepid=invisible", True, "pass", "not even listed; the agent keeps"
     " CAP_SYS_PTRACE, which sees past it"),
    ("rw,relatime,hidepid=2", False, "warn", "hidepid=invisible: other users' processes are"
     " not even listed; the agent will not hold CAP_SYS_PTRACE"),
    ("rw,relatime,gid=4,hidepid=1", False, "warn", "listed but their files cannot be read,"
     " except to members of group 4"),
    ("rw,relatime,hidepid=ptraceable", None, "pass", "no enabled sampler reads other"
     " processes"),
    ("rw,relatime,hidepid=0", False, "pass", "every process visible"),
    ("rw,relatime,subset=pid", True, "warn", "no capability sees past it"),
])
def test_procfs_line_says_what_hidepid_hides(options: str, sees: bool | None, status: str,
                                            says: str) -> None:
    mounts = (f"sysfs /sys sysfs rw 0 0\nproc /proc proc rw,relatime 0 0\n"
              f"proc /proc proc {options} 0 0\n")  # the last mount at a point is in effect
    r = check.procfs_visibility(mounts, "/proc", sees)
    assert (r.name, r.status) == ("procfs", status) and says in r.detail, r
    assert check.procfs_visibility(mounts, "/elsewhere", sees).status == "warn"


@pytest.mark.host
def test_procfs_line_reads_a_real_hidepid_mount(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting proc needs root")
    point = tmp_path / "proc"
    point.mkdir()
    if subprocess.run(["mount", "-t", "proc", "-o", "hidepid=invisible", "proc", str(point)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount proc here")
    try:
        mounts = Path("/proc/self/mounts").read_text()
        r = check.procfs_visibility(mounts, str(point), False)
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert r.status == "warn" and "hidepid=invisible" in r.detail, r
