"""The tests' wait: its timeout report says what was awaited and what was seen."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import TIMEOUT_SCALE, describe, explain, wait_for, wait_output


class Agent:
    def __init__(self, text: str) -> None:
        self.text = text

    def output(self) -> str:
        return self.text


def report(cond, **kw) -> str:
    with pytest.raises(AssertionError) as e:
        wait_for(cond, timeout=0.01 / TIMEOUT_SCALE, step=0.001, **kw)
    return str(e.value)


def test_a_lambda_names_its_condition_and_shows_its_operands() -> None:
    a = Agent("dropped 38 capabilities after start-up; kept CAP_BPF")
    msg = report(lambda: "running as nobody" in a.output())
    assert "waiting for 'running as nobody' in a.output();" in msg, msg
    assert "a.output() = 'dropped 38 capabilities after start-up; kept CAP_BPF'" in msg, msg
    assert re.match(r"timed out after [\d.e-]+s ", msg), msg


def test_and_or_not_and_default_arguments_are_explained() -> None:
    seen = {"status": "idle"}
    n = 3
    msg = report(lambda n=n: seen["status"] == "active" and not n)
    assert "seen['status'] = 'idle'" in msg and "n = 3" in msg, msg


def test_the_right_lambda_of_several_on_one_line() -> None:
    first, second = (lambda: 1 > 2), (lambda: [] == [0])
    assert describe(first) == "1 > 2"
    assert describe(second) == "[] == [0]"


def test_functions_are_named_and_seen_overrides() -> None:
    def nothing_yet() -> None:
        return None

    msg = report(nothing_yet)
    assert "waiting for test_functions_are_named_and_seen_overrides.<locals>.nothing_yet;" \
        in msg, msg
    assert explain(nothing_yet) == []
    msg = report(nothing_yet, what="the agent", seen=lambda: 1 / 0)
    assert "waiting for the agent; last seen: <seen() raised ZeroDivisionError" in msg, msg


def test_an_operand_that_raises_is_reported_not_raised() -> None:
    box: dict[str, int] = {}
    got = dict(explain(lambda: box.get("k", 0) > 0 or box["missing"]))
    assert got == {"box.get('k', 0)": "0", "box['missing']": "<raised KeyError('missing')>"}


def test_long_values_keep_head_and_tail() -> None:
    a = Agent("head" + "x" * 10_000 + "tail")
    msg = report(lambda: "never" in a.output())
    assert "'headx" in msg and "xtail'" in msg and " ... " in msg and len(msg) < 3000


def test_returns_the_first_truthy_value() -> None:
    calls = iter([0, [], [1]])
    assert wait_for(lambda: next(calls), timeout=5, step=0) == [1]


def _logged(tmp_path: Path, script: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, log


def test_wait_output_returns_the_log_once_the_pattern_is_in_it(tmp_path: Path) -> None:
    proc, log = _logged(tmp_path, "import time; print('serving on 9745', flush=True);"
                                  " time.sleep(60)")
    try:
        text = wait_output(proc, log.read_text, r"serving on \d+", timeout=60, step=0.01)
        assert text == "serving on 9745\n"
    finally:
        proc.kill()
        proc.wait()


def test_wait_output_fails_at_once_with_the_log_when_the_process_exits(tmp_path: Path) -> None:
    proc, log = _logged(tmp_path, "import sys; print('no such port'); sys.exit(3)")
    with pytest.raises(AssertionError) as e:  # long before its deadline: it exited
        wait_output(proc, log.read_text, "serving", name="exporter", timeout=3600, step=0.01)
    assert str(e.value) == "exporter exited 3:\nno such port\n"


def test_wait_output_counts_a_line_printed_just_before_the_exit(tmp_path: Path) -> None:
    proc, log = _logged(tmp_path, "print('publishing 51 events')")
    proc.wait()
    assert wait_output(proc, log.read_text, r"publishing \d+ events", timeout=5)


def test_a_log_is_shown_whole_on_timeout(tmp_path: Path) -> None:
    proc, log = _logged(tmp_path, "import time; print('x' * 5000 + ' BPF refused', flush=True);"
                                  " time.sleep(60)")
    try:
        wait_for(lambda: log.stat().st_size > 5000, timeout=60, step=0.01)
        with pytest.raises(AssertionError) as e:
            wait_output(proc, log.read_text, "serving", name="exporter",
                        timeout=0.01 / TIMEOUT_SCALE, step=0.001)
    finally:
        proc.kill()
        proc.wait()
    msg = str(e.value)
    assert msg.startswith("timed out after ") and "waiting for 'serving' in the exporter's" \
        f" output; its log:\n{'x' * 5000} BPF refused\n" in msg, msg
    assert "last seen" not in msg, msg
    msg = report(lambda: False, seen=lambda: "state", log=lambda: 1 / 0)
    assert msg.endswith("; last seen: 'state'; its log:\n<log() raised ZeroDivisionError("
                        "'division by zero')>"), msg
