"""``rezolus-ue install-service`` and the systemd units in packaging/.

Installs into a temporary root (systemd is not PID 1 here, so nothing is started); checks
what lands where, with which modes, that the units keep their hardening and pass
``systemd-analyze verify`` and ``security``, and that each capability they keep is
justified in docs/security.md.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import unit, words

from rezolus_ue import config as cfg
from rezolus_ue import service_cmd
from rezolus_ue.agent import RUNTIME_DIR
from rezolus_ue.cli import main
from rezolus_ue.samplers import options

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "packaging" / "systemd"
PROGRAM = "/opt/rezolus-ue/.venv/bin/rezolus-ue"
CONF = cfg.SYSTEM_CONFIG.relative_to("/")


def install(capsys: pytest.CaptureFixture[str], root: Path, *extra: str,
            program: str = PROGRAM, create_user: bool = False) -> tuple[int, str, str]:
    """Run install-service into ``root``; unless ``create_user``, with --no-create-user and
    the user already in root's /etc/passwd (systemd-sysusers is tested on its own)."""
    if not create_user:
        (root / "etc").mkdir(parents=True, exist_ok=True)
        passwd = root / "etc/passwd"
        if not passwd.exists():
            passwd.write_text(f"{service_cmd.USER}:x:999:999::/:/usr/sbin/nologin\n")
            passwd.chmod(0o644)
        extra = ("--no-create-user", *extra)
    code = main(["install-service", "--root", str(root), "--program", program, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


AGENT = unit(UNITS / service_cmd.AGENT_UNIT)
EXPORTER = unit(UNITS / service_cmd.EXPORTER_UNIT)


# --- the units as shipped ----------------------------------------------------------------

@pytest.mark.parametrize("settings", [AGENT, EXPORTER], ids=["agent", "exporter"])
def test_units_are_hardened(settings: dict[str, list[str]]) -> None:
    for key, want in [("ProtectSystem", "strict"), ("NoNewPrivileges", "yes"),
                      ("ProtectHome", "yes"), ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                      ("ProtectKernelModules", "yes"), ("ProtectControlGroups", "yes"),
                      ("RestrictSUIDSGID", "yes"), ("MemoryDenyWriteExecute", "yes"),
                      ("SystemCallArchitectures", "native"), ("AmbientCapabilities", "")]:
        assert settings[key] == [want], key
    assert settings["ExecStart"][0].startswith(service_cmd.TEMPLATE_PROGRAM + " ")
    # tracefs must be mounted before: the units cannot mount it (no CAP_SYS_ADMIN).
    assert "sys-kernel-tracing.mount" in words(settings, "After")
    assert "sys-kernel-tracing.mount" in words(settings, "Wants")
    assert settings["RestartPreventExitStatus"] == ["2"]


def test_agent_keeps_only_what_its_samplers_and_start_up_declare() -> None:
    # Start-up's are dropped after it (become the user, hand it /run/rezolus-ue), and the
    # samplers' but for the enabled ones' (tests/kernel/test_agent_e2e.py runs it so).
    from rezolus_ue.privilege import STARTUP, bounding_set

    bounding = words(AGENT, "CapabilityBoundingSet")
    assert sorted(bounding) == sorted(bounding_set())
    assert {n.cap for n in STARTUP} < set(bounding)
    assert words(AGENT, "SystemCallFilter") == ["@system-service", "bpf", "perf_event_open"]
    assert words(AGENT, "RestrictAddressFamilies") == ["AF_UNIX", "AF_NETLINK"]
    assert AGENT["ExecStart"] == [f"{service_cmd.TEMPLATE_PROGRAM} run --user {service_cmd.USER}"]
    assert AGENT["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_agent_writes_only_its_runtime_dir_and_user_events_data() -> None:
    assert AGENT["RuntimeDirectory"] == [RUNTIME_DIR.name] and RUNTIME_DIR.parent == Path("/run")
    assert words(AGENT, "ReadWritePaths") == ["-/sys/kernel/tracing/user_events_data",
                                              "-/sys/kernel/tracing/uprobe_events"]
    # ProtectKernelTunables=yes would pin tracefs read-only; its protection is spelled out.
    assert AGENT["ProtectKernelTunables"] == ["no"]
    assert {"/sys", "/proc/sys", "/proc/sysrq-trigger"} <= set(words(AGENT, "ReadOnlyPaths"))
    assert "-/proc/kcore" in words(AGENT, "InaccessiblePaths")


def test_exporter_keeps_only_perfmon_and_writes_nothing() -> None:
    assert words(EXPORTER, "CapabilityBoundingSet") == ["CAP_PERFMON"]
    assert words(EXPORTER, "SystemCallFilter") == ["@system-service", "perf_event_open"]
    assert EXPORTER["ProtectKernelTunables"] == ["yes"]
    assert "ReadWritePaths" not in EXPORTER and "RuntimeDirectory" not in EXPORTER
    assert EXPORTER["LimitMEMLOCK"] == ["infinity"]
    assert "rezolus-ue.service" in words(EXPORTER, "After")
    assert EXPORTER["ExecStart"] == [f"{service_cmd.TEMPLATE_PROGRAM} exporter $EXPORTER_ARGS"]


def test_every_kept_capability_and_protection_choice_is_documented() -> None:
    doc = (ROOT / "docs" / "security.md").read_text()
    for cap in {*words(AGENT, "CapabilityBoundingSet"), *words(EXPORTER,
                                                              "CapabilityBoundingSet")}:
        assert f"`{cap}`" in doc, cap
    for word in ("ProtectKernelTunables", "LimitMEMLOCK", "LimitNOFILE", "ReadWritePaths",
                 "CAP_SYS_ADMIN", "CAP_DAC_OVERRIDE", "CAP_SYS_RESOURCE", "CAP_IPC_LOCK",
                 "CAP_DAC_READ_SEARCH", "tracing"):
        assert word in doc, word


# --- install-service ---------------------------------------------------------------------

def test_install_into_a_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = install(capsys, tmp_path)
    assert code == 0, err
    for name in (service_cmd.AGENT_UNIT, service_cmd.EXPORTER_UNIT):
        dest = tmp_path / "etc/systemd/system" / name
        assert f"installed {dest}" in out
        text = dest.read_text()
        assert text == (UNITS / name).read_text()  # the template already names PROGRAM
        assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    conf = tmp_path / CONF
    assert stat.S_IMODE(conf.stat().st_mode) == 0o644
    assert cfg.parse(conf.read_text(), options()) == cfg.defaults(options())
    assert "Generated by" not in conf.read_text()
    assert "systemctl reload rezolus-ue" in conf.read_text()
    assert (tmp_path / "usr/local/share/man/man8/rezolus-ue.8").read_text() == (
        ROOT / "man" / "rezolus-ue.8").read_text()
    assert (tmp_path / "usr/local/share/man/man5/rezolus-ue.toml.5").exists()
    assert 'EXPORTER_ARGS=""' in (tmp_path / "etc/default/rezolus-ue-exporter").read_text()
    assert out.endswith("next, as root:\n  systemctl daemon-reload\n"
                        "  systemctl enable --now rezolus-ue.service"
                        " rezolus-ue-exporter.service\n  systemctl status rezolus-ue.service\n")


def test_install_rewrites_exec_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    code, _, err = install(capsys, tmp_path, program="/usr/local/bin/rezolus-ue")
    assert code == 0, err
    agent = unit(tmp_path / "etc/systemd/system" / service_cmd.AGENT_UNIT)
    assert agent["ExecStart"] == [f"/usr/local/bin/rezolus-ue run --user {service_cmd.USER}"]
    exporter = unit(tmp_path / "etc/systemd/system" / service_cmd.EXPORTER_UNIT)
    assert exporter["ExecStart"] == ["/usr/local/bin/rezolus-ue exporter $EXPORTER_ARGS"]


def test_nothing_installed_is_writable_by_others_whatever_the_umask(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = os.umask(0)
    try:
        code, _, err = install(capsys, tmp_path,
                               create_user=shutil.which("systemd-sysusers") is not None)
    finally:
        os.umask(old)
    assert code == 0, err
    for p in tmp_path.rglob("*"):
        assert not p.stat().st_mode & 0o022, f"{p} is {stat.S_IMODE(p.stat().st_mode):04o}"


def test_reinstall_keeps_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install(capsys, tmp_path)
    conf = tmp_path / CONF
    conf.write_text('[agent]\npublish_interval = "5s"\n')
    code, out, _ = install(capsys, tmp_path)
    assert code == 0
    assert conf.read_text() == '[agent]\npublish_interval = "5s"\n'
    assert f"kept {conf}" in out
    assert "unchanged" in out and "installed" not in out and "warning" not in out


def test_reinstall_warns_about_a_writable_or_invalid_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / CONF
    conf.parent.mkdir(parents=True)
    conf.write_text("[agent]\nbogus = 1\n")
    conf.chmod(0o666)
    code, out, _ = install(capsys, tmp_path)
    assert code == 0
    assert f"warning: {conf} has mode 0666, writable by others" in out
    assert f"warning: {conf}:2: unknown key 'bogus'" in out
    assert stat.S_IMODE(conf.stat().st_mode) == 0o666  # the admin's file is not touched


def test_no_exporter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = install(capsys, tmp_path, "--no-exporter")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "etc/systemd/system").iterdir()) == [
        service_cmd.AGENT_UNIT]
    assert not (tmp_path / "etc/default").exists()
    assert "  systemctl enable --now rezolus-ue.service\n" in out


@pytest.mark.parametrize(("args", "program", "needle"), [
    (["--now"], PROGRAM, "--now starts the services of this system"),
    ([], "rezolus-ue", "--program must be an absolute path"),
    ([], "/home/me/rezolus-ue/.venv/bin/rezolus-ue", "(ProtectHome=yes)"),
    ([], "/root/.venv/bin/rezolus-ue", "install rezolus-ue under /opt"),
    ([], "/tmp/rezolus-ue/.venv/bin/rezolus-ue", "(PrivateTmp=yes)"),
    (["--no-exporter"], "/var/tmp/x/rezolus-ue", "rezolus-ue.service hides (PrivateTmp=yes)"),
])
def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                  program: str, needle: str) -> None:
    code, out, err = install(capsys, tmp_path, *args, program=program)
    assert code in (1, 2) and out == ""
    assert needle in err and err.count("\n") == 1
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["passwd"]  # install()'s


def test_default_program_is_this_installation() -> None:
    prog = service_cmd.default_program()
    assert prog == str(Path(sys.executable).with_name("rezolus-ue").absolute())
    assert os.access(prog, os.X_OK)


@pytest.mark.parametrize("name", [service_cmd.AGENT_UNIT, service_cmd.EXPORTER_UNIT])
def test_hidden_paths_of_the_shipped_units(name: str) -> None:
    text = (UNITS / name).read_text()
    for path in ("/home/a/x", "/root", "/run/user/0/x", "/tmp/x", "/var/tmp/x/y"):
        assert service_cmd.hidden_by(Path(path), text), path
    for path in ("/opt/rezolus-ue", "/homeless/x", "/tmpfoo/x", "/var/lib/x", "/usr/bin/x"):
        assert service_cmd.hidden_by(Path(path), text) is None, path


@pytest.mark.parametrize(("text", "hidden"), [
    ("[Service]\nProtectHome=yes\n", {"/home", "/root", "/run/user"}),
    ("ProtectHome=true\nPrivateTmp=on\n", {"/home", "/root", "/run/user", "/tmp", "/var/tmp"}),
    ("ProtectHome=read-only\nPrivateTmp=no\n", set()),
    ("PrivateTmp=yes\nPrivateTmp=no\n", set()),  # the last assignment counts
    ("# PrivateTmp=yes\nInaccessiblePaths=-/srv/a /srv/b\n", {"/srv/a", "/srv/b"}),
    ("InaccessiblePaths=/srv/a\nInaccessiblePaths=\nTemporaryFileSystem=/var:ro\n",
     {"/var"}),
])
def test_hidden_paths_follow_the_units_settings(text: str, hidden: set[str]) -> None:
    assert set(map(str, service_cmd.hidden_paths(text))) == hidden


def test_no_create_user_needs_the_user(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["install-service", "--root", str(tmp_path), "--program", PROGRAM,
                 "--no-create-user"])
    err = capsys.readouterr().err
    assert code != 0 and f"user {service_cmd.USER} does not exist" in err
    assert "useradd --system" in err and "Traceback" not in err


def test_user_lookup_for_this_system_goes_through_nss() -> None:
    """For ``/`` the user may come from NSS (e.g. LDAP), not only /etc/passwd: root
    always exists, a made-up name never."""
    assert service_cmd._user_exists(Path("/"), "root")
    assert not service_cmd._user_exists(Path("/"), "no-such-user-rezolus-ue-test")


@pytest.mark.skipif(not shutil.which("systemd-sysusers"), reason="no systemd-sysusers")
def test_create_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = install(capsys, tmp_path, create_user=True)
    assert code == 0, err
    passwd = (tmp_path / "etc/passwd").read_text()
    group = (tmp_path / "etc/group").read_text()
    assert re.search(r"^rezolus-ue:x:\d+:\d+:[^:]*:/:/usr/sbin/nologin$", passwd, re.M)
    assert re.search(r"^tracing:x:\d+:rezolus-ue$", group, re.M)
    assert "user rezolus-ue and group tracing present" in out
    assert (tmp_path / "etc/sysusers.d/rezolus-ue.conf").exists()


# --- systemd's own checks -----------------------------------------------------------------

def _analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    return tool


def test_systemd_analyze_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = _analyze()
    code, _, err = install(capsys, tmp_path, program=service_cmd.default_program())
    assert code == 0, err
    units = sorted(str(p) for p in (tmp_path / "etc/systemd/system").iterdir())
    p = subprocess.run([tool, "verify", "--man=no", *units], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0 and p.stderr == "", p.stderr


# The agent's 2.7: CAP_DAC_READ_SEARCH (0.2) and CAP_SYS_PTRACE (0.3) read every
# process's /proc/<pid> (the processes sampler; docs/security.md).
@pytest.mark.parametrize(("name", "most"), [(service_cmd.AGENT_UNIT, 2.7),
                                            (service_cmd.EXPORTER_UNIT, 2.3)])
def test_systemd_analyze_security(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  name: str, most: float) -> None:
    """systemd's exposure score (0 = locked down, 10 = unprotected; 'OK' is below 4.9)."""
    tool = _analyze()
    install(capsys, tmp_path, program=service_cmd.default_program())
    p = subprocess.run([tool, "security", "--offline=true", "--no-pager",
                        str(tmp_path / "etc/systemd/system" / name)],
                       capture_output=True, text=True, timeout=120, check=False)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", p.stdout)
    assert m, p.stdout + p.stderr
    assert float(m.group(1)) <= most, p.stdout
    assert re.search(r"✓ CapabilityBoundingSet=~CAP_SYS_ADMIN", p.stdout)
