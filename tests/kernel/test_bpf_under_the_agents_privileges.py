"""Every BPF sampler under the privileges the agent keeps, on the VM's kernel (6.12).

The agent starts as root, then keeps only CAP_BPF and CAP_PERFMON (as root's uid, or as
``nobody`` the way the systemd unit runs it: reproduced with setpriv as in
test_agent_e2e.py). A consumer then enables every BPF sampler's events at once: each must
load and attach (none may turn unavailable), and meanwhile the samplers already publishing
must keep their once-a-second cadence. ``check`` must say PASS for each, after dropping the
same way, for every attach kind.
"""

from __future__ import annotations

import itertools
import pwd
import re
import shutil
import time
from pathlib import Path

import pytest
from helpers import unit, words
from test_check import _bpf_samplers, run_check

from rezolus_ue.agent import read_status
from rezolus_ue.samplers import REGISTRY
from rezolus_ue.schema import CPU_USAGE

from .conftest import wait_for
from .test_agent_e2e import UNIT, AgentProcess

pytestmark = pytest.mark.kernel
G = "user_events"
INTERVAL_S = 1.0
#: How far a publish tick may start from one interval after the previous one.
CADENCE_TOLERANCE = 0.10


def as_the_unit() -> tuple[str, ...]:
    """Return the setpriv prefix that reproduces the unit's privileges (skip without it)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv is not installed (Debian: util-linux)")
    caps = ",".join("+" + c.removeprefix("CAP_").lower()
                    for c in words(unit(UNIT), "CapabilityBoundingSet"))
    return (setpriv, f"--bounding-set=-all,{caps}", "--inh-caps=-all", "--ambient-caps=-all",
            "--no-new-privs", "--")


def tick_starts(trace: str) -> list[float]:
    """Return the time of the first rezolus_cpu_usage record of each publish tick (its
    sampler publishes first; one record per CPU, written back to back)."""
    starts: list[float] = []
    last = -1.0
    for m in re.finditer(rf"\s(\d+\.\d+): {CPU_USAGE.name}:", trace):
        t = float(m.group(1))
        if t - last > INTERVAL_S / 2:
            starts.append(t)
        last = t
    return starts


def vm_hwm_kb(pid: int) -> int:
    """Return the peak resident set size of ``pid`` (VmHWM) in kB."""
    m = re.search(r"^VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m
    return int(m.group(1))


@pytest.mark.parametrize("as_unit", [False, True], ids=["root", "unit"])
def test_bpf_samplers_load_after_the_drop_while_the_others_keep_their_cadence(
        tracefs, instance, as_unit: bool) -> None:
    args = ("--interval", f"{INTERVAL_S:g}s") + (("--user", "nobody") if as_unit else ())
    a = AgentProcess(*args, prefix=as_the_unit() if as_unit else ())
    names = _bpf_samplers()
    enabled: list[str] = []
    try:
        a.wait_registered(tracefs)
        a.wait_output("kept CAP_BPF, CAP_PERFMON")
        status = wait_for(read_status, timeout=60)
        idle = [n for n in names if status["samplers"][n]["status"] == "idle"]
        assert idle == names, f"BPF samplers not ready at start: {status}"
        tracefs.enable(G, CPU_USAGE.name, instance=instance)
        wait_for(lambda: len(tick_starts(tracefs.read_trace(instance))) >= 3, timeout=60)
        before_kb = vm_hwm_kb(a.proc.pid)
        registered = tracefs.user_events_status().events
        enabled = [e.name for n in names for e in REGISTRY[n].events() if e.name in registered]
        for event in enabled:  # all at once
            tracefs.enable(G, event, instance=instance)

        def settled() -> dict | None:
            st = (read_status() or {}).get("samplers", {})
            done = all(st.get(n, {}).get("status") == "unavailable"
                       or st.get(n, {}).get("reason", "").startswith("attached")
                       for n in names)
            return st if done else None

        t0 = time.monotonic()
        st = wait_for(settled, timeout=600, step=0.25)
        loaded_s = time.monotonic() - t0
        after_kb = vm_hwm_kb(a.proc.pid)
        unavailable = {n: st[n]["reason"] for n in names if st[n]["status"] != "active"}
        assert not unavailable, f"after the drop: {unavailable}\n{a.output()}"
        n = len(tick_starts(tracefs.read_trace(instance)))
        wait_for(lambda: len(tick_starts(tracefs.read_trace(instance))) >= n + 3, timeout=60)
        starts = tick_starts(tracefs.read_trace(instance))
        gaps = [round(b - a_, 3) for a_, b in itertools.pairwise(starts)]
        late = [g for g in gaps if abs(g - INTERVAL_S) > CADENCE_TOLERANCE * INTERVAL_S]
        assert not late, f"publish ticks {gaps} s apart while {len(names)} BPF samplers loaded"
        # Three ticks on: what attaches after activation (the syscall sampler's timing
        # windows attach sys_enter twice a second) has worked under the drop too.
        errors = {n: v.get("last_error") for n, v in (read_status() or {}).get(
            "samplers", {}).items() if n in names and v.get("errors")}
        assert not errors, f"BPF samplers failing after the drop: {errors}\n{a.output()}"
        print(f"{len(names)} BPF samplers loaded and attached in {loaded_s:.1f} s; ticks"
              f" {min(gaps)}-{max(gaps)} s apart; VmHWM {before_kb} -> {after_kb} kB")
    finally:
        for event in enabled:
            tracefs.disable(G, event, instance=instance)
        a.stop()
        out = a.output()
        a.log.close()
    assert "Traceback" not in out, out
    if as_unit:
        assert "running as nobody" in out, out


@pytest.mark.parametrize(("attach", "user"), [("auto", None), ("tracepoint", "nobody"),
                                              ("kprobe", "nobody")])
def test_check_passes_every_bpf_sampler_after_the_drop(tmp_path: Path, attach: str,
                                                        user: str | None) -> None:
    """check starts every sampler as root, drops (to ``user``), then loads and attaches
    each BPF sampler: all pass here, attached as asked where the hook has that kind
    ("kprobe": tcp_traffic only; "tracepoint": all but tcp_traffic, whose hooks are
    functions)."""
    if user is not None:
        pwd.getpwnam(user)
    lines, out = run_check(tmp_path, *(("--user", user) if user else ()), attach=attach)
    assert lines["privileges"].startswith("PASS"), out
    assert (f"as {user}" if user else "as root") in lines["privileges"], out
    for name in _bpf_samplers():
        line = lines[f"sampler {name}"]
        assert line.startswith("PASS"), out
        kinds = re.search(r"loads and attaches as (\S+)", line)
        assert kinds, line
        functions = name == "tcp_traffic"
        want = {"auto": "fentry" if functions else "tp_btf",
                "tracepoint": "fentry" if functions else "tracepoint",
                "kprobe": "kprobe" if functions else "tp_btf"}[attach]
        assert kinds.group(1) == want, line
    schedstats = Path("/proc/sys/kernel/sched_schedstats")
    if schedstats.exists() and schedstats.read_text().strip() == "0":
        assert "schedstats=enable" in lines["sampler cgroup_scheduler"]
        assert "harmless" in lines["sampler cgroup_scheduler"]
