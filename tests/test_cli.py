"""The command line as a user runs it: ``python -m rezolus_ue`` in a subprocess.

Errors must be one line on stderr (plus argparse's 'Try' line) and a non-zero exit, never a
traceback. The ``host`` tests need a kernel *without* user_events (like most CI runners).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TOML = ROOT / "configs" / "default.toml"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "rezolus_ue", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def assert_no_traceback(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr + p.stdout
    assert "internal error" not in p.stderr


def test_help() -> None:
    p = cli("--help")
    assert p.returncode == 0
    for cmd in ("run", "events", "check"):
        assert re.search(rf"^\s+{cmd}\s", p.stdout, re.M), cmd
    assert p.stderr == ""


def test_run_help() -> None:
    p = cli("run", "--help")
    assert p.returncode == 0
    for opt in ("--interval", "--sample-interval", "--config", "-i", "-s", "-c"):
        assert re.search(rf"(?<![\w-]){opt}\b", p.stdout), opt
    assert "publish_interval" in p.stdout and "sample_interval" in p.stdout


def test_run_and_check_do_not_import_the_consumers() -> None:
    """The agent's start does not pay for the exporter's HTTP server or top's UI (nor for
    rich, which only ``check`` and the consumers draw with)."""
    code = ("import sys\nfrom rezolus_ue import cli\n"
            "def loaded(*prefixes):\n"
            "    return sorted(m for m in sys.modules if m.startswith(prefixes))\n"
            "cli.main(['run', '--config', '/nonexistent'])\n"
            "print(loaded('rezolus_ue.consume', 'http.server', 'rich'))\n"
            "cli.main(['check', '--config', '/nonexistent'])\n"
            "print(loaded('rezolus_ue.consume', 'http.server'))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.stdout.splitlines() == ["[]", "[]"], p.stdout + p.stderr
    assert p.stderr.count("no such file") == 2  # both ran, and stopped at the config


def test_no_subcommand_prints_help_and_exits_2() -> None:
    p = cli()
    assert p.returncode == 2
    assert p.stdout.startswith("usage: rezolus-ue")
    assert "run" in p.stdout and "check" in p.stdout


@pytest.mark.parametrize("option", ["--interval", "-i", "--sample-interval", "-s"])
@pytest.mark.parametrize(("value", "needle"), [
    ("1x", "invalid duration '1x'"),
    ("1ms", "'1ms' is out of range"),
    ("2h", "'2h' is out of range"),
])
def test_run_bad_interval(option: str, value: str, needle: str) -> None:
    p = cli("run", option, value)
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 2, p.stderr
    assert lines[0].startswith("rezolus-ue run: error:")
    assert needle in lines[0]
    assert lines[1] == "Try 'rezolus-ue run --help'."
    assert_no_traceback(p)


@pytest.mark.parametrize("option", ["--interval", "--sample-interval"])
def test_run_huge_interval_is_a_usage_error(option: str) -> None:
    p = cli("run", option, "9" * 400 + "s")
    assert p.returncode == 2
    assert_no_traceback(p)


@pytest.mark.parametrize("args", [
    ("--sample-interval", "2s"),  # over the default publish interval of 1s
    ("-i", "100ms", "-s", "200ms"),
])
def test_run_sample_interval_over_publish_interval(args: tuple[str, ...]) -> None:
    p = cli("run", *args)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "rezolus-ue: error: --sample-interval must not exceed the publish interval"]
    assert_no_traceback(p)


def test_run_sample_interval_over_configured_publish_interval(tmp_path: Path) -> None:
    cfg = tmp_path / "fast.toml"
    cfg.write_text('[agent]\npublish_interval = "200ms"\nsample_interval = "100ms"\n')
    p = cli("run", "--config", str(cfg), "-s", "500ms")
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "rezolus-ue: error: --sample-interval must not exceed the publish interval"]


def test_unknown_subcommand() -> None:
    p = cli("frobnicate")
    assert p.returncode == 2
    assert p.stderr.splitlines()[0].startswith("rezolus-ue: error:")
    assert_no_traceback(p)


def test_run_missing_config() -> None:
    p = cli("run", "--config", "/nonexistent.toml")
    assert p.returncode == 2
    assert p.stderr.splitlines() == ["rezolus-ue: error: /nonexistent.toml: no such file"]
    assert p.stdout == ""


def test_run_bad_config(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('# test\n[agent]\npublish_interval = "fast"\n')
    p = cli("run", "--config", str(cfg))
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"rezolus-ue: error: {cfg}:3: [agent] publish_interval")
    assert_no_traceback(p)


def test_run_config_sample_interval_over_publish_interval(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[agent]\npublish_interval = "1s"\n\nsample_interval = "2s"\n')
    p = cli("run", "--config", str(cfg))
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        f"rezolus-ue: error: {cfg}:4: [agent] sample_interval must not exceed"
        " publish_interval (2s > 1s)"]


def test_run_old_interval_key_is_rejected(tmp_path: Path) -> None:
    cfg = tmp_path / "old.toml"
    cfg.write_text('[agent]\ninterval = "1s"\n')
    p = cli("run", "--config", str(cfg))
    assert p.returncode == 2
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"rezolus-ue: error: {cfg}:2: unknown key 'interval' in [agent];")
    assert "publish_interval" in line


def test_check_missing_config() -> None:
    p = cli("check", "--config", "/nonexistent.toml")
    assert p.returncode == 2
    assert p.stderr.splitlines() == ["rezolus-ue: error: /nonexistent.toml: no such file"]
    assert_no_traceback(p)


# --- on a host kernel without user_events ----------------------------------------------


@pytest.fixture(scope="module")
def no_user_events() -> Path:
    """Return the tracefs root of a kernel without user_events, or skip."""
    if os.geteuid() != 0:
        pytest.skip("needs root (tracefs is root-only)")
    from tracefs_tools import find_tracefs

    try:
        root = find_tracefs(mount=True)
    except Exception as e:
        pytest.skip(f"no tracefs: {e}")
    if (root / "user_events_data").exists():
        pytest.skip(f"{root}/user_events_data exists: this kernel has user_events")
    return root


@pytest.mark.host
def test_run_forced_to_user_events_without_it(no_user_events: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[agent]\ntransport = "user_events"\n')
    p = cli("run", "--config", str(cfg))
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("rezolus-ue: error: user_events is not available:")
    assert "CONFIG_USER_EVENTS" in lines[0]
    assert 'transport = "uprobe"' in lines[0]  # the way out
    assert_no_traceback(p)


@pytest.mark.host
def test_check_without_user_events(no_user_events: Path) -> None:
    """Root test: the host kernel has no user_events; check names the uprobe transport."""
    p = cli("check")
    out = p.stdout
    for name in ("tracefs", "transport", "user_events", "uprobe_events", "bpf", "btf",
                 "perf software events", "kprobes"):
        assert re.search(rf"^(PASS|WARN|FAIL)\s+{name}: \S", out, re.M), name
    assert re.search(r"^PASS\s+transport: uprobe \(this kernel has no user_events", out, re.M)
    assert re.search(r"^WARN\s+user_events: .*CONFIG_USER_EVENTS.*the uprobe transport is"
                     r" used instead", out, re.M)
    assert re.search(r"^PASS\s+uprobe_events: .* is writable; stub ", out, re.M), out
    assert_no_traceback(p)


@pytest.mark.host
def test_events_without_user_events(no_user_events: Path) -> None:
    p = cli("events")
    assert p.returncode == 0
    assert "rezolus_cpu_usage" in p.stdout
    assert "rezolus_agent" in p.stdout
    assert "transport uprobe" in p.stdout
    assert "perf record -e 'rezolus_ue:rezolus_*'" in p.stdout
    assert_no_traceback(p)


@pytest.mark.host
def test_events_commands(no_user_events: Path) -> None:
    p = cli("events", "--commands")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert "perf record -e rezolus_ue:rezolus_cpu_usage -a -- sleep 5 && perf script" in lines
    assert ("trace-cmd record -e rezolus_ue:rezolus_cpu_usage sleep 5 && trace-cmd report"
            in lines)
    assert all(ln.startswith(("perf ", "mkdir -p ", "trace-cmd ")) for ln in lines)
    # ftrace through an instance of our own, never the global buffer
    assert all("/instances/rezolus/" in ln for ln in lines if ln.startswith("mkdir"))
