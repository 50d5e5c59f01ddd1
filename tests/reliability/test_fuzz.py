"""Property-based fuzzing of config files and command lines: no traceback, ever, and
every rejection names the file and line, or the argument.

Config files go through the same path as ``rezolus-ue run --config``/``config check``
(read from disk, permissions checked, parsed, validated); command lines through the real
argument parser of every subcommand, with option values drawn from what users type and
what they mistype.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_config import _DOCS

from rezolus_ue import cli, config
from rezolus_ue.errors import ConfigError
from rezolus_ue.samplers import options

OPTS = options()


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=_DOCS)
def test_config_file_rejections_name_file_and_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(text)
    path.chmod(0o644)
    try:
        config.load(path, OPTS)
    except ConfigError as e:
        assert re.match(rf"{re.escape(str(path))}:\d+: ", str(e)), str(e)


def _parser_options() -> dict[str, list[argparse.Action]]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {"": [a for a in parser._actions if a.option_strings]}
    for name, p in sub.choices.items():
        out[name] = [a for a in p._actions if a.option_strings or a.dest != "help"]
    return out


PARSERS = _parser_options()
VALUES = st.sampled_from([
    "1s", "100ms", "0", "-1", "10x", "", " ", "1e9", "abc", "/nonexistent", "/dev/null",
    "rezolus_cpu_usage", "rezolus_*", "user_events:rezolus_cpu_usage", "9745", "99999",
    "127.0.0.1:9745", "[::1]:0", "--", "-", "\x00", "é", "1h", "3600000s", "csv", "json",
])


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    cmd = draw(st.sampled_from(sorted(PARSERS)))
    argv = [cmd] if cmd else []
    for _ in range(draw(st.integers(0, 4))):
        actions = PARSERS[cmd]
        if not actions:
            break
        a = draw(st.sampled_from(actions))
        if a.option_strings:
            argv.append(draw(st.sampled_from(a.option_strings)))
            if a.nargs != 0:
                argv.append(draw(VALUES))
        else:
            argv.append(draw(VALUES))
    if draw(st.booleans()):
        argv.append(draw(st.sampled_from(["--bogus", "-z", "extra"])))
    return argv


@settings(max_examples=300, deadline=None, database=None)
@given(command_lines())
def test_command_line_rejections_name_the_argument(argv: list[str]) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit as e:
            if e.code in (0, None):  # --help, --version
                return
            msg = err.getvalue()
            assert e.code == 2, msg
            assert "Traceback" not in msg
            assert re.search(r"error: (argument \S+|unrecognized arguments|the following"
                             r" arguments are required|invalid choice|argument)", msg), msg


@pytest.mark.parametrize("argv", [["run", "--interval", "fast"], ["run", "-s", "0"],
                                  ["check", "--config", "/nonexistent"]])
def test_bad_values_exit_with_a_message_not_a_traceback(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert "Traceback" not in err and "internal error" not in err
    assert argv[-1] in err or "--interval" in err or "-s" in err
