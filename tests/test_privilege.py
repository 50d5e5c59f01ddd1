"""Least privilege: parsing capability sets and what the samplers declare (pure), dropping
to those and what each sampler can still do afterwards (host, root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rezolus_ue import config, privilege
from rezolus_ue.linux import capabilities
from rezolus_ue.linux.capabilities import BPF_PROGRAMS, PERF_COUNTERS, Need

STATUS = """Name:\tpython3
CapInh:\t0000000000000000
CapPrm:\t000001ffffffffff
CapEff:\t000001ffffffffff
CapBnd:\t000001ffffffffff
CapAmb:\t0000000000000000
NoNewPrivs:\t0
"""


def test_parse_status_and_members() -> None:
    caps = capabilities.parse_status(STATUS)
    assert caps["CapEff"] == (1 << 41) - 1 and caps["CapInh"] == 0
    assert capabilities.members(1 << 39 | 1 << 38) == {38, 39}
    assert capabilities.cap_name(39) == "CAP_BPF" and capabilities.cap_name(63) == "cap_63"


def test_missing_names_what_is_not_in_effect(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self/status").write_text(STATUS.replace("000001ffffffffff", "0000008000000000",
                                                         2))
    # CapPrm and CapEff now hold CAP_BPF (39) only.
    assert privilege.missing(["CAP_BPF", "CAP_PERFMON"], tmp_path) == ["CAP_PERFMON"]


# --- what each sampler declares, and what the agent keeps ------------------------------


def test_a_need_names_a_known_capability() -> None:
    with pytest.raises(ValueError, match="unknown capability 'CAP_NOPE'"):
        Need("CAP_NOPE", "nothing")


def test_each_sampler_declares_what_its_kind_of_source_needs() -> None:
    """The declarations (read from the packages) agree with the classes: every BPF sampler
    needs what loading programs does, every perf counter sampler what counting per CPU
    does, and a sampler of procfs and sysfs files nothing."""
    from rezolus_ue.samplers import NAMES, REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler
    from rezolus_ue.samplers.perf_counters import PerCpuCounters

    declared = privilege.declared()
    assert list(declared) == list(NAMES)
    assert all(isinstance(n, Need) for needs in declared.values() for n in needs)
    for name, cls in REGISTRY.items():
        if issubclass(cls, BpfSampler):
            assert declared[name] == BPF_PROGRAMS, name
        elif issubclass(cls, PerCpuCounters):
            assert declared[name] == PERF_COUNTERS, name
    for name in ("cpu_usage", "memory", "network", "cgroup", "agent"):
        assert declared[name] == (), name


def test_declarations_are_read_without_importing_a_sampler_class() -> None:
    code = ("import sys; from rezolus_ue import privilege; privilege.declared();"
            " print(sorted(m for m in sys.modules if m.endswith(('.sampler', 'bpf_sampler'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr


def _config(agent: str = "", disabled: tuple[str, ...] = ()) -> config.Config:
    from rezolus_ue.samplers import options

    text = f"[agent]\n{agent}\n" + "".join(f"[samplers.{n}]\nenabled = false\n"
                                             for n in disabled)
    return config.parse(text, options())


def test_the_agent_keeps_what_its_enabled_samplers_need() -> None:
    from rezolus_ue.samplers import NAMES

    every = privilege.declared()
    bpf = tuple(n for n, needs in every.items() if needs == BPF_PROGRAMS)
    perf = tuple(n for n, needs in every.items() if needs == PERF_COUNTERS)
    assert bpf and perf
    kept = privilege.kept(_config())
    assert set(kept["CAP_BPF"]) == set(bpf) and set(kept["CAP_PERFMON"]) == {*bpf, *perf}
    assert kept["CAP_BPF"]["tcp"] == BPF_PROGRAMS[0].why
    assert list(kept) == sorted(kept)
    # Without the BPF samplers: CAP_PERFMON for the perf counters alone, no CAP_BPF.
    assert privilege.kept(_config(disabled=bpf)).get("CAP_PERFMON") == {
        n: PERF_COUNTERS[0].why for n in perf}
    assert "CAP_BPF" not in privilege.kept(_config(disabled=bpf))
    # With no sampler needing any: nothing, unless persist registers on a reload.
    needy = tuple(n for n in NAMES if every[n])
    assert privilege.kept(_config(disabled=needy)) == {}
    assert privilege.kept(_config("persist = true", disabled=needy)) == {
        "CAP_PERFMON": {"agent.persist": privilege.PERSIST.why}}


def test_the_bounding_set_is_every_declaration_and_start_up() -> None:
    every = {n.cap for needs in privilege.declared().values() for n in needs}
    want = every | {n.cap for n in privilege.STARTUP} | {privilege.PERSIST.cap}
    assert set(privilege.bounding_set()) == want
    nums = [capabilities.CAPS[c] for c in privilege.bounding_set()]
    assert nums == sorted(nums)


def test_the_log_line_says_what_is_kept_and_for_whom() -> None:
    needs = privilege.union({"a": BPF_PROGRAMS, "b": PERF_COUNTERS,
                             "c": (Need("CAP_SYS_PTRACE", "read"),)})
    assert privilege.describe(needs) == (
        "CAP_BPF (a), CAP_PERFMON (a, b), CAP_SYS_PTRACE (c)")
    assert privilege.describe({}) == "none"


def test_a_reload_warns_of_a_sampler_needing_what_was_dropped(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from rezolus_ue import agent

    monkeypatch.setattr(privilege, "missing", lambda caps, procfs=None: list(caps))
    with caplog.at_level("WARNING", logger="rezolus_ue"):
        agent._warn_unheld("tcp")
        agent._warn_unheld("cpu_usage")  # needs nothing
    assert [r.getMessage() for r in caplog.records] == [
        "reload: sampler tcp needs CAP_BPF and CAP_PERFMON, which the agent does not hold"
        " (at start-up it keeps only what the samplers enabled then need): restart the"
        " agent"]


def test_security_doc_says_which_sampler_needs_which_capability() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    rows = [ln for ln in doc.splitlines() if ln.startswith("| `CAP_")]
    for name, needs in privilege.declared().items():
        for n in needs:
            assert any(r.startswith(f"| `{n.cap}` | ") and f"`{name}`" in r
                       and r.endswith(f" | {n.why} |") for r in rows), (name, n.cap)


DROP_THEN_USE_BPF = """
import json, os
from rezolus_ue import privilege
from rezolus_ue.linux import capabilities
from rezolus_ue.samplers import Roots, SamplerContext
from rezolus_ue.samplers.scheduler_runqueue.sampler import SchedulerRunqueue
s = SchedulerRunqueue(SamplerContext(Roots(), {"attach": "auto", "collect": "on-demand"}))
s.start()  # as the agent: start as root, then drop, then load on demand
dropped = privilege.drop_to(privilege.union(privilege.declared(["scheduler_runqueue"])))
s.activate()
attached = s.bpf.attached
s.deactivate()
s.close()
print(json.dumps({"caps": capabilities.current(), "dropped": dropped, "attached": attached}))
"""


@pytest.mark.host
def test_after_dropping_the_agent_still_loads_and_attaches_bpf() -> None:
    """CAP_BPF + CAP_PERFMON are enough for on-demand BPF (the claim behind the drop)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (capabilities to drop)")
    from rezolus_ue.bpf import build

    if not build.object_path("scheduler_runqueue").exists():
        pytest.skip("BPF objects not built")
    p = subprocess.run([sys.executable, "-c", DROP_THEN_USE_BPF], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    want = 1 << capabilities.CAPS["CAP_BPF"] | 1 << capabilities.CAPS["CAP_PERFMON"]
    caps = out["caps"]
    assert caps["CapEff"] == caps["CapPrm"] == caps["CapBnd"] == want
    assert caps["CapInh"] == caps.get("CapAmb", 0) == 0
    assert "CAP_SYS_ADMIN" in out["dropped"] and "CAP_BPF" not in out["dropped"]
    assert out["attached"] is True


BECOME_NOBODY_THEN_USE_BPF = DROP_THEN_USE_BPF.replace('"])))\n', '"])), user="nobody")\n')


@pytest.mark.host
def test_as_another_user_the_agent_still_loads_and_attaches_bpf() -> None:
    """`run --user`: a non-root uid with CAP_BPF + CAP_PERFMON loads and attaches on demand."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to become another user)")
    import pwd

    from rezolus_ue.bpf import build

    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user nobody")
    if not build.object_path("scheduler_runqueue").exists():
        pytest.skip("BPF objects not built")
    script = BECOME_NOBODY_THEN_USE_BPF.replace(
        'print(json.dumps({', 'print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), ')
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["uid"] == out["euid"] == nobody
    want = 1 << capabilities.CAPS["CAP_BPF"] | 1 << capabilities.CAPS["CAP_PERFMON"]
    assert out["caps"]["CapEff"] == out["caps"]["CapPrm"] == want
    assert "CAP_SETUID" in out["dropped"]
    assert out["attached"] is True


DROP_AND_LOG = """
import logging, sys
from rezolus_ue import privilege
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
privilege.drop_after_start(privilege.union(privilege.declared(["tcp", "perf_software"])))
"""


@pytest.mark.host
def test_the_agent_says_what_it_kept_and_for_which_samplers() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (capabilities to drop)")
    p = subprocess.run([sys.executable, "-c", DROP_AND_LOG + "print(open('/proc/self/status')"
                        ".read())"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "; kept CAP_BPF (tcp), CAP_PERFMON (tcp, perf_software)\n" in p.stdout, p.stdout
    caps = capabilities.parse_status(p.stdout)
    want = 1 << capabilities.CAPS["CAP_BPF"] | 1 << capabilities.CAPS["CAP_PERFMON"]
    assert caps["CapEff"] == caps["CapPrm"] == want


#: As the agent run by the unit: nobody, keeping ``KEEP``; then read PID's /proc files.
READ_AS_NOBODY = """
import json
from rezolus_ue import privilege
privilege.drop_to(KEEP, user="nobody")
out = {}
for name in ("stat", "status", "io"):
    try:
        out[name] = bool(open(f"/proc/PID/{name}").read())
    except OSError as e:
        out[name] = e.strerror
print(json.dumps(out))
"""
DENIED, HIDDEN = "Permission denied", "No such file or directory"


@pytest.mark.host
@pytest.mark.parametrize(("keep", "hidepid", "want"), [
    ((), False, {"stat": True, "status": True, "io": DENIED}),
    ((), True, {"stat": HIDDEN, "status": HIDDEN, "io": HIDDEN}),
    (("CAP_SYS_PTRACE",), False, {"stat": True, "status": True, "io": DENIED}),
    (("CAP_SYS_PTRACE",), True, {"stat": True, "status": True, "io": DENIED}),
    (("CAP_DAC_READ_SEARCH",), False, {"stat": True, "status": True, "io": DENIED}),
    (("CAP_DAC_READ_SEARCH",), True, {"stat": HIDDEN, "status": HIDDEN, "io": HIDDEN}),
    (("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"), False, {"stat": True, "status": True,
                                                        "io": True}),
    (("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"), True, {"stat": True, "status": True,
                                                       "io": True}),
])
def test_what_reading_another_users_process_takes(keep: tuple[str, ...], hidepid: bool,
                                                  want: dict[str, object]) -> None:
    """The processes sampler's declaration, measured: as ``nobody`` (the unit's user),
    a root process's /proc/<pid>/io (mode 0400, root's) opens only with CAP_DAC_READ_SEARCH
    and reads only with CAP_SYS_PTRACE too; where /proc hides other users' processes (the
    unit's ProtectProc=invisible: hidepid=invisible in a mount namespace here), CAP_SYS_PTRACE
    shows them. The declaration holds both."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to become another user)")
    import pwd
    import shutil

    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    from rezolus_ue.samplers.processes import CAPABILITIES

    assert {n.cap for n in CAPABILITIES} == {"CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"}
    prefix: list[str] = []
    if hidepid:
        unshare = shutil.which("unshare")
        if unshare is None:
            pytest.skip("needs unshare (util-linux)")
        prefix = [unshare, "--mount", "--propagation", "private", "sh", "-c",
                  'mount -t proc -o hidepid=invisible proc /proc && exec "$@"', "sh"]
    target = subprocess.Popen(["sleep", "60"])  # root's, with every capability
    try:
        code = READ_AS_NOBODY.replace("KEEP", repr(keep)).replace("PID", str(target.pid))
        p = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=60)
    finally:
        target.kill()
        target.wait()
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == want
