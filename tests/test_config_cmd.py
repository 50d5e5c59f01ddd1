"""``rezolus-ue config check | show``: validation exit codes and messages, and the effective
config: the user's file kept (comments, layout) with every default added, re-read as the
same configuration."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit
from hypothesis import given, settings
from hypothesis import strategies as st

from rezolus_ue import config as cfg
from rezolus_ue import config_cmd
from rezolus_ue.cli import main
from rezolus_ue.samplers import REGISTRY, options

ROOT = Path(__file__).resolve().parent.parent
OPTS = options()
N_OPTIONS = len(cfg.AGENT_OPTIONS) + sum(len(o) for o in OPTS.values())


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["config", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def _no_system_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read this machine's /etc/rezolus-ue/config.toml."""
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", tmp_path / "absent" / "config.toml")


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- check ------------------------------------------------------------------------------

def test_check_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, '[agent]\npublish_interval = "2s"\n[samplers.cgroup]\nenabled = false\n')
    code, out, err = run(capsys, "check", str(p))
    assert code == 0 and err == ""
    assert out == f"{p}: ok ({len(REGISTRY) - 1} of {len(REGISTRY)} samplers enabled)\n"


def test_check_default_toml_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", str(ROOT / "configs" / "default.toml"))
    assert code == 0 and out.endswith(f"{len(REGISTRY)} of {len(REGISTRY)} samplers enabled)\n")


@pytest.mark.parametrize(("text", "line", "needle"), [
    ('[agent]\n\npublish_interval = "5ms"\n', 3, "out of range"),
    ("[samplers.nope]\n", 1, "unknown sampler 'nope'"),
    ('[agent]\nlog_level = "loud"\n', 2, "'loud' is not allowed"),
    ("[agent\n", 1, "invalid TOML"),
    ('[agent]\nsample_interval = "2s"\n', 2, "must not exceed publish_interval"),
])
def test_check_invalid_file_exits_1_with_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int,
        needle: str) -> None:
    p = write(tmp_path, text)
    code, out, err = run(capsys, "check", str(p))
    assert code == 1 and out == ""
    assert err.startswith(f"{p}:{line}: ") and needle in err
    assert err.count("\n") == 1


def test_check_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "check", str(tmp_path / "nope.toml"))
    assert code == 1 and err == f"{tmp_path / 'nope.toml'}: no such file\n"


def test_check_without_file_checks_the_system_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", write(tmp_path, '[agent]\nbogus = 1\n'))
    code, _, err = run(capsys, "check")
    assert code == 1 and err.startswith(f"{cfg.SYSTEM_CONFIG}:2: ")


def test_check_without_any_file_says_the_defaults_apply(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As `run` does without --config and without the system file: not an error."""
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", tmp_path / "absent.toml")
    code, out, err = run(capsys, "check")
    assert code == 0 and err == ""
    assert out.startswith(f"{tmp_path / 'absent.toml'} does not exist: `rezolus-ue run` uses"
                          " the built-in defaults (")


def test_check_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
                     ) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('[agent]\npublish_interval = "x"\n'))
    code, _, err = run(capsys, "check", "-")
    assert code == 1 and err.startswith("<stdin>:2: [agent] publish_interval")


def test_check_refuses_a_writable_file_when_privileged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cfg, "running_privileged", lambda: True)
    p = write(tmp_path, "[agent]\n")
    p.chmod(0o666)
    code, _, err = run(capsys, "check", str(p))
    assert code == 1
    assert err == (f"refusing {p}: mode 0666 is writable by its group and others;"
                   f" chmod go-w {p}\n")


def test_check_as_a_user_runs_it(tmp_path: Path) -> None:
    """The real command line: no traceback, the exit status and one line."""
    p = write(tmp_path, '[agent]\npublish_interval = "fast"\n')
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-m", "rezolus_ue", "config", "check", str(p)],
                       capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{p}:2: ")


def test_config_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        main(["config"])
    assert ei.value.code == 2
    assert "rezolus-ue config: error:" in capsys.readouterr().err


# --- show -------------------------------------------------------------------------------

def shown(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = run(capsys, "show", *args)
    assert code == 0, err
    return out


def test_show_defaults_without_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    out = shown(capsys)
    assert f"built-in defaults ({cfg.SYSTEM_CONFIG} does not exist)" in out
    assert cfg.parse(out, OPTS) == cfg.defaults(OPTS)
    assert out.count(f"# {config_cmd.DEFAULT_MARK}\n") == N_OPTIONS


def test_show_reads_the_system_config_when_present(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, '[agent]\nlog_level = "debug"\n')
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", p)
    out = shown(capsys)
    assert f"configuration: {p}." in out
    assert cfg.parse(out, OPTS).agent["log_level"] == "debug"


USER_FILE = """\
# Our fleet's settings.
[agent]
publish_interval = "2s"   # slower: cheaper

# The agent's own metrics are scraped elsewhere.
[samplers.agent]
enabled = false
"""


def test_show_keeps_the_file_and_adds_every_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, USER_FILE)
    out = shown(capsys, str(p))
    body = out.split("\n", 2)[2]
    # The user's text comes through as written, comments and layout included...
    for line in USER_FILE.splitlines():
        assert line in body.splitlines(), line
    assert body.index("# Our fleet's settings.") < body.index('publish_interval = "2s"')
    # ...and the result is the same configuration, with every option spelled out.
    assert cfg.parse(out, OPTS) == cfg.parse(USER_FILE, OPTS)
    doc = tomlkit.parse(out).unwrap()
    assert set(doc["agent"]) == {o.key for o in cfg.AGENT_OPTIONS}
    for name, opts in OPTS.items():
        assert set(doc["samplers"][name]) == {o.key for o in opts}, name
    user_keys = 2
    assert out.count(f"# {config_cmd.DEFAULT_MARK}\n") == N_OPTIONS - user_keys


def test_show_marks_a_derived_sample_interval(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, '[agent]\npublish_interval = "50ms"\n')
    out = shown(capsys, str(p))
    assert re.search(r'^sample_interval = "50ms" # default "100ms" capped at publish_interval$',
                     out, re.M), out
    assert cfg.parse(out, OPTS).sample_interval_ns == 50_000_000


@pytest.mark.parametrize("text", [
    'agent.publish_interval = "2s"\n',
    'agent = { publish_interval = "2s" }\n',
    "[samplers]\ncgroup.enabled = false\n",
    "samplers = { cgroup = { enabled = false } }\n",
    '[samplers.cgroup]\ninclude = ["/system.slice/*"]\n[agent]\nlog_level = "error"\n',
    "",
    "# only a comment\n",
])
def test_show_round_trips_every_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       text: str) -> None:
    p = write(tmp_path, text)
    out = shown(capsys, str(p))
    assert cfg.parse(out, OPTS) == cfg.parse(text, OPTS)
    assert cfg.parse(out, OPTS).samplers.keys() == OPTS.keys()


def test_show_output_checks_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = shown(capsys, str(write(tmp_path, USER_FILE)))
    monkeypatch.setattr(sys, "stdin", io.StringIO(out))
    code, checked, _ = run(capsys, "check", "-")
    assert code == 0 and checked.startswith("<stdin>: ok")


def test_show_invalid_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    p = write(tmp_path, "[agent]\nnope = 1\n")
    code, out, err = run(capsys, "show", str(p))
    assert code == 1 and out == "" and err.startswith(f"{p}:2: unknown key 'nope'")


def _value(opt: cfg.Option) -> st.SearchStrategy[object]:
    if opt.kind == "duration":
        return st.sampled_from(["10ms", "100ms", "1s", "2s", "1m"])
    if opt.kind == "bool":
        return st.booleans()
    if opt.kind == "choice":
        return st.sampled_from(opt.choices)
    if opt.kind == "int":
        return st.integers(opt.bounds.lo, opt.bounds.hi)
    if opt.kind == "strings":
        return st.lists(st.sampled_from(["a*", "/x", "lo"]), max_size=2)
    return st.sampled_from(["", "/proc", "/sys"])


def _tables() -> st.SearchStrategy[dict[str, dict[str, object]]]:
    sections = {"agent": cfg.AGENT_OPTIONS,
                **{f"samplers.{n}": opts for n, opts in OPTS.items()}}

    def table(opts: tuple[cfg.Option, ...]) -> st.SearchStrategy[dict[str, object]]:
        return st.fixed_dictionaries({}, optional={o.key: _value(o) for o in opts})

    return st.fixed_dictionaries({}, optional={k: table(v) for k, v in sections.items()})


@settings(max_examples=60, deadline=None, database=None)
@given(_tables())
def test_show_is_the_same_configuration(tables: dict[str, dict[str, object]]) -> None:
    text = "".join(f"[{name}]\n" + "".join(f"{k} = {tomlkit.item(v).as_string()}\n"
                                          for k, v in values.items())
                   for name, values in tables.items())
    try:
        want = cfg.parse(text, OPTS)
    except cfg.ConfigError:
        return  # e.g. sample_interval > publish_interval: show refuses it as check does
    got = config_cmd.effective(text, want, OPTS)
    assert cfg.parse(got, OPTS) == want
