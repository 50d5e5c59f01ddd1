"""Every BPF sampler under the privileges the agent keeps.

The agent starts as root, then keeps only what its samplers need (as root's uid, or as
``nobody`` the way the systemd unit runs it: reproduced with setpriv as in
test_agent_e2e.py). A consumer then enables every BPF sampler's events at once: each must
load and attach (none may turn unavailable), and meanwhile the samplers already publishing
must keep their once-a-second cadence. ``check`` must say PASS for each, after dropping the
same way, for every attach kind.

These run on this host's kernel, the agent publishing through whichever transport
``transport = "auto"`` takes (uprobe events without user_events; the ``bus`` fixture). A
sampler whose hooks this kernel lacks (tcp_traffic hooks functions: fentry or kprobes,
and the development host has neither) must say so here, and is proven to load after the
drop, in each of its kinds, by the one ``kernel`` test, in the VM.
"""

from __future__ import annotations

import itertools
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import unit, words
from test_check import _bpf_samplers, run_check
from waiting import scaled

from rezolus_ue.agent import read_status
from rezolus_ue.bpf.loader import Features
from rezolus_ue.samplers import REGISTRY
from rezolus_ue.samplers.tcp_traffic.sampler import missing_hooks
from rezolus_ue.schema import CPU_USAGE

from .conftest import Bus, wait_for
from .test_agent_e2e import ROOT, UNIT, AgentProcess

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


def hookless(attach: str = "auto") -> dict[str, str]:
    """Return {BPF sampler: why} for those this kernel gives no hook of the kind ``attach``
    asks: tcp_traffic's functions need fentry (BPF trampolines) or kprobes."""
    why = missing_hooks(Features(), attach)
    return {"tcp_traffic": why} if why else {}


def vm_hwm_kb(pid: int) -> int:
    """Return the peak resident set size of ``pid`` (VmHWM) in kB."""
    m = re.search(r"^VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m
    return int(m.group(1))


@pytest.mark.live
@pytest.mark.parametrize("as_unit", [False, True], ids=["root", "unit"])
def test_bpf_samplers_load_after_the_drop_while_the_others_keep_their_cadence(
        bus: Bus, bus_instance: str, as_unit: bool) -> None:
    args = ("--interval", f"{INTERVAL_S:g}s") + (("--user", "nobody") if as_unit else ())
    a = AgentProcess(*args, prefix=as_the_unit() if as_unit else ())
    cannot = hookless()
    names = [n for n in _bpf_samplers() if n not in cannot]
    enabled: list[str] = []
    try:
        a.wait_registered(bus)
        a.wait_output("; kept CAP_BPF (")
        status = wait_for(read_status, timeout=60)
        idle = [n for n in names if status["samplers"][n]["status"] == "idle"]
        assert idle == names, f"BPF samplers not ready at start: {status}"
        said = {n: (status["samplers"][n]["status"], status["samplers"][n]["reason"])
                for n in cannot}
        assert said == {n: ("unavailable", why) for n, why in cannot.items()}, status
        bus.enable(CPU_USAGE.name, instance=bus_instance)
        wait_for(lambda: len(tick_starts(bus.tfs.read_trace(bus_instance))) >= 3, timeout=60)
        before_kb = vm_hwm_kb(a.proc.pid)
        registered = bus.registered()
        enabled = [e.name for n in names for e in REGISTRY[n].events() if e.name in registered]
        for event in enabled:  # all at once
            bus.enable(event, instance=bus_instance)

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
        n = len(tick_starts(bus.tfs.read_trace(bus_instance)))
        wait_for(lambda: len(tick_starts(bus.tfs.read_trace(bus_instance))) >= n + 3,
                 timeout=60)
        starts = tick_starts(bus.tfs.read_trace(bus_instance))
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
            bus.disable(event, instance=bus_instance)
        a.stop()
        out = a.output()
        a.log.close()
    assert "Traceback" not in out, out
    if as_unit:
        assert "running as nobody" in out, out


#: (attach, user) as check is run: each attach kind, as root and as another user.
CHECK_RUNS = [("auto", None), ("tracepoint", "nobody"), ("kprobe", "nobody")]


def attached_as(name: str, attach: str) -> str:
    """Return the kind check must say ``name`` attaches as under ``attach`` (where the
    kernel has it): the function hooks (tcp_traffic) take fentry unless kprobes are asked;
    the others take tp_btf unless tracepoints are."""
    if name == "tcp_traffic":
        return "kprobe" if attach == "kprobe" else "fentry"
    return "tracepoint" if attach == "tracepoint" else "tp_btf"


def assert_passed_after_the_drop(lines: dict[str, str], out: str, names: list[str],
                                 attach: str, user: str | None) -> None:
    """Assert check dropped (to ``user``), then loaded and attached each of ``names`` as
    ``attach`` asks, but those whose hooks this kernel lacks, which must say why."""
    assert lines["privileges"].startswith("PASS"), out
    assert (f"as {user}" if user else "as root") in lines["privileges"], out
    cannot = hookless(attach)
    for name in names:
        line = lines[f"sampler {name}"]
        if name in cannot:
            assert line == f"WARN  sampler {name}: unavailable: {cannot[name]}", out
            continue
        assert line.startswith("PASS"), out
        kinds = re.search(r"loads and attaches as (\S+)", line)
        assert kinds, line
        assert kinds.group(1) == attached_as(name, attach), line
    # Where schedstats is off, attaching sched_stat_runtime makes the kernel log a warning
    # once: check says it is harmless.
    schedstats = Path("/proc/sys/kernel/sched_schedstats")
    if "cgroup_scheduler" in names and schedstats.exists() \
            and schedstats.read_text().strip() == "0":
        assert "schedstats=enable" in lines["sampler cgroup_scheduler"]
        assert "harmless" in lines["sampler cgroup_scheduler"]


@pytest.mark.live
@pytest.mark.parametrize(("attach", "user"), CHECK_RUNS)
def test_check_passes_every_bpf_sampler_after_the_drop(tmp_path: Path, attach: str,
                                                        user: str | None) -> None:
    """check starts every sampler as root, drops (to ``user``), then loads and attaches
    each BPF sampler: all pass here, attached as asked where the hook has that kind
    ("kprobe": tcp_traffic only; "tracepoint": all but tcp_traffic, whose hooks are
    functions), but those whose hooks this kernel lacks, which say why."""
    if user is not None:
        pwd.getpwnam(user)
    lines, out = run_check(tmp_path, *(("--user", user) if user else ()), attach=attach)
    assert_passed_after_the_drop(lines, out, _bpf_samplers(), attach, user)


#: What only the VM's kernel shows: tcp_traffic's function hooks (fentry, kprobes), and
#: cgroup_scheduler's note where schedstats is built in but off (the host has no
#: CONFIG_SCHEDSTATS).
VM_ONLY = ["cgroup_scheduler", "tcp_traffic"]


def check_only(tmp_path: Path, names: list[str], attach: str,
               *args: str) -> tuple[dict[str, str], str]:
    """Run ``rezolus-ue check ARGS`` with only the samplers ``names`` enabled, their
    ``attach`` set; return {item: its line} and the whole output. The others' loads,
    proven on the host, would take minutes on the VM's emulated CPU."""
    conf = tmp_path / f"check-{attach}.toml"
    conf.write_text("".join(f'[samplers.{n}]\nattach = "{attach}"\n' for n in names)
                    + "".join(f"[samplers.{n}]\nenabled = false\n"
                              for n in REGISTRY if n not in names))
    env = {**os.environ, "COLUMNS": "1000", "NO_COLOR": "1"}
    p = subprocess.run([sys.executable, "-m", "rezolus_ue", "check", "--config", str(conf),
                        *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=scaled(600), stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    assert "Traceback" not in out and "internal error" not in out, out
    return {m.group(2): m.group(0) for m in re.finditer(r"^(PASS|WARN|FAIL)  ([^:]+): .*$",
                                                        p.stdout, re.M)}, out


@pytest.mark.kernel
@pytest.mark.parametrize(("attach", "user"), CHECK_RUNS)
def test_check_passes_the_function_hooks_after_the_drop(tmp_path: Path, attach: str,
                                                        user: str | None) -> None:
    """The host's check test, on the VM's kernel, for what the host cannot show
    (VM_ONLY): tcp_traffic loads and attaches after the drop (to ``user``) as fentry or
    kprobe, and cgroup_scheduler says schedstats being off is harmless."""
    assert not hookless(attach), "this kernel lacks fentry or kprobes"
    if user is not None:
        pwd.getpwnam(user)
    lines, out = check_only(tmp_path, VM_ONLY, attach, *(("--user", user) if user else ()))
    assert_passed_after_the_drop(lines, out, VM_ONLY, attach, user)
