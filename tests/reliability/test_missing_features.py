"""Missing kernel features, one at a time: what works keeps working, the rest is reported
with its reason. Each condition is real, not simulated: a kernel without user_events (this
host's), kernel BTF hidden by a tmpfs over /sys/kernel/btf in a private mount namespace,
tracefs unmounted in one, no hardware PMU (this host's, and the VM's), and a BPF object the
verifier rejects (bpf/tests/broken.bpf.c installed in place of a sampler's object).
The agent's start path and `check`'s are the same (Sampler.start);
test_missing_features_agent.py runs the agent itself under these conditions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import scaled

from rezolus_ue.bpf import build
from rezolus_ue.errors import RezolusError

pytestmark = pytest.mark.host
ROOT = Path(__file__).resolve().parents[2]


def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces, BPF)")
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) (util-linux)")


def _rezolus(*args: str, setup: str = "", env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rezolus_ue ARGS`` after shell ``setup``, in a private mount
    namespace (nothing mounted there leaks out)."""
    cmd = " ".join([sys.executable, "-m", "rezolus_ue", *args])
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f"set -e; {setup}\nexec {cmd}"],
                          capture_output=True, text=True, timeout=scaled(300), cwd=ROOT,
                          env={**os.environ, **(env or {})})


def _lines(out: str) -> dict[str, str]:
    """Return check's output as {probe name: whole line}."""
    got = {}
    for line in out.splitlines():
        status, _, rest = line.partition("  ")
        name, _, _detail = rest.partition(": ")
        if status in ("PASS", "WARN", "FAIL"):
            got[name] = line
    return got


def _bpf_samplers() -> list[str]:
    from rezolus_ue.samplers import REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    return [n for n, c in REGISTRY.items() if issubclass(c, BpfSampler)]


def test_no_user_events_is_one_clear_error(tmp_path: Path) -> None:
    """With user_events asked for (auto takes the uprobe transport here)."""
    if Path("/sys/kernel/tracing/user_events_data").exists():
        pytest.skip("this kernel has user_events")
    conf = tmp_path / "ue.toml"
    conf.write_text('[agent]\ntransport = "user_events"\n')
    p = subprocess.run([sys.executable, "-m", "rezolus_ue", "run", "--config", str(conf)],
                       capture_output=True, text=True, timeout=scaled(120), cwd=ROOT)
    assert p.returncode != 0
    assert "CONFIG_USER_EVENTS" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_no_btf_makes_bpf_samplers_unavailable_and_the_rest_available() -> None:
    _root()
    if not build.VMLINUX_BTF.exists():
        pytest.skip("kernel BTF already missing here")
    p = _rezolus("check", setup="mount -t tmpfs none /sys/kernel/btf")
    lines = _lines(p.stdout)
    assert lines["btf"].startswith("FAIL") and "CONFIG_DEBUG_INFO_BTF" in lines["btf"]
    for name in _bpf_samplers():
        line = lines[f"sampler {name}"]
        # (a sampler that needs kprobes may already be unavailable for that reason)
        assert line.startswith("WARN") and "unavailable" in line, line
        assert "BTF" in line or "kprobes" in line, line
    assert lines["sampler cpu_usage"].startswith("PASS")
    assert ": unavailable:" not in lines["sampler memory"], lines["sampler memory"]
    assert "Traceback" not in p.stderr


def test_tracefs_unmounted_is_mounted_again() -> None:
    _root()
    setup = ("for m in /sys/kernel/tracing /sys/kernel/debug/tracing /sys/kernel/debug; do"
             " umount -l $m 2>/dev/null || true; done;"
             " ! grep -q ' tracefs ' /proc/self/mounts")
    p = _rezolus("check", setup=setup)
    lines = _lines(p.stdout)
    assert lines["tracefs"].startswith("PASS"), p.stdout + p.stderr
    assert "mounted at" in lines["tracefs"]
    assert "Traceback" not in p.stderr


def test_no_hardware_pmu_leaves_software_counters() -> None:
    _root()
    from rezolus_ue.linux.perf_event import PERF_COUNT_HW_CPU_CYCLES, PerfEvent

    try:
        PerfEvent.hardware(PERF_COUNT_HW_CPU_CYCLES, cpu=0).close()
        pytest.skip("this machine has a hardware PMU")
    except RezolusError:
        pass
    p = subprocess.run([sys.executable, "-m", "rezolus_ue", "check"], capture_output=True,
                       text=True, timeout=scaled(300), cwd=ROOT)
    lines = _lines(p.stdout)
    assert lines["sampler perf_hardware"].startswith("WARN"), lines["sampler perf_hardware"]
    assert lines["sampler perf_software"].startswith("PASS")


def test_verifier_rejection_disables_only_that_sampler(tmp_path: Path) -> None:
    _root()
    # The real scheduler_runqueue source plus one program the verifier must reject (a hash map
    # value used without its NULL check), on a tracepoint of its own so the loader keeps it.
    src = tmp_path / "src" / "scheduler_runqueue.bpf.c"
    src.parent.mkdir()
    src.write_text(f'#include "{build.SOURCE_DIR}/scheduler_runqueue.bpf.c"\n' + """
SEC("raw_tp/sched_process_exit")
int rq_bad_exit(void *ctx)
{
	__u32 key = 1;
	struct task_times *t = bpf_map_lookup_elem(&tasks, &key);

	t->offcpu_ns += 1;
	return 0;
}
""")
    try:
        objects = build.build()
        build.build_one(src, tmp_path / "scheduler_runqueue.bpf.o")
    except RezolusError as e:
        pytest.skip(f"cannot build the BPF objects: {e}")
    for o in objects:
        if o.name != "scheduler_runqueue.bpf.o":
            shutil.copy(o, tmp_path / o.name)
    p = _rezolus("check", env={"REZOLUS_UE_BPF_OBJECTS": str(tmp_path)})
    lines = _lines(p.stdout)
    line = lines["sampler scheduler_runqueue"]
    assert line.startswith("WARN") and "verifier" in line and "rq_bad_exit" in line, line
    others = [n for n in _bpf_samplers() if n != "scheduler_runqueue"]
    for name in others:
        assert "verifier" not in lines[f"sampler {name}"], lines[f"sampler {name}"]
    assert lines["sampler cpu_usage"].startswith("PASS")
    assert "Traceback" not in p.stderr
