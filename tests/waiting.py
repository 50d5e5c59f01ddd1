"""Waiting for a condition, and saying on timeout what was awaited and what was seen.

A wait with a bare ``lambda`` used to fail with "waiting for <lambda>; last seen: False",
which tells nothing. On timeout, a lambda's own source now names what was awaited, and
the operands of its comparison are evaluated once more to say what was seen, as pytest
does for an ``assert``: ``'running as nobody' in a.output()`` reports ``a.output()``.

Import it as ``from waiting import wait_for`` (``tests/`` is on sys.path, see helpers.py).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import FunctionType

#: Every deadline is multiplied by this: the VM's emulated CPU runs code several times
#: slower than the host, and more so on a shared CI machine (a 12 s wait took over 60 s
#: there once). A deadline only ends a hung test, so a generous one costs nothing when the
#: test passes. ``REZOLUS_UE_TIMEOUT_SCALE`` overrides it (e.g. beside a CPU hog).
TIMEOUT_SCALE = float(os.environ.get("REZOLUS_UE_TIMEOUT_SCALE")
                      or (3 if os.environ.get("REZOLUS_UE_IN_VM") == "1" else 1))


def scaled(seconds: float) -> float:
    """Return a deadline that is not a wait_for's (a process's exit, a socket, a join)
    scaled as wait_for scales its own."""
    return seconds * TIMEOUT_SCALE


#: How much of one value a report shows (its head and tail).
SHOW_CHARS = 2000


def wait_for(cond: Callable[[], object], timeout: float = 10.0, step: float = 0.02, *,
             what: str = "", seen: Callable[[], object] | None = None,
             log: Callable[[], str] | None = None) -> object:
    """Return cond()'s first truthy value, polling; on timeout raise AssertionError saying
    what was awaited (``what``, else cond's source) and what was seen last (``seen()``,
    else cond's last value and its operands).

    ``log``: a process's log, shown whole on timeout (in place of the last value when
    there is no ``seen``). What was seen is cut to SHOW_CHARS; a log is not, since the line
    that says why a process did not get there may be anywhere in it.

    Deadlines are far above what a normal run needs (and scaled by TIMEOUT_SCALE): they end
    a hung test, they do not measure speed (the VM's CPU is emulated, and CI machines are
    shared).
    """
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            report = [] if log is not None and seen is None else [
                f"last seen: {_seen(cond, v, seen)}"]
            if log is not None:
                report.append(f"its log:\n{_log(log)}")
            raise AssertionError(f"timed out after {timeout:g}s waiting for"
                                 f" {what or describe(cond)}; {'; '.join(report)}")
        time.sleep(step)


def _seen(cond: Callable[[], object], last: object, seen: Callable[[], object] | None) -> str:
    if seen is not None:
        try:
            return shorten(repr(seen()))
        except Exception as e:  # the report must not hide the timeout
            return f"<seen() raised {e!r}>"
    parts = [shorten(repr(last))]
    parts += [f"{expr} = {value}" for expr, value in explain(cond)]
    return "; ".join(parts)


def _log(log: Callable[[], str]) -> str:
    try:
        return log()
    except Exception as e:  # the report must not hide the timeout
        return f"<log() raised {e!r}>"


def shorten(text: str) -> str:
    """Return ``text``, or its head and tail when it is longer than SHOW_CHARS."""
    if len(text) <= SHOW_CHARS:
        return text
    half = SHOW_CHARS // 2
    return f"{text[:half]} ... {text[-half:]}"


def describe(cond: Callable[[], object]) -> str:
    """Return the condition as written: a lambda's body, else the function's name."""
    node = _lambda_node(cond)
    if node is not None:
        return ast.unparse(node.body)
    return getattr(cond, "__qualname__", None) or repr(cond)


def explain(cond: Callable[[], object]) -> list[tuple[str, str]]:
    """Evaluate again the operands of a lambda's comparison (or of each part of an
    ``and``/``or``/``not``), returning (source, value) pairs; empty for anything else.

    Only on timeout, once: an operand that reads a file or a pipe reads it once more.
    """
    node = _lambda_node(cond)
    if node is None or not isinstance(cond, FunctionType):
        return []
    env = dict(cond.__globals__)
    code = cond.__code__
    env.update(zip(code.co_freevars, (c.cell_contents for c in cond.__closure__ or ()),
                   strict=True))
    names = [a.arg for a in node.args.args]
    env.update(zip(names[len(names) - len(cond.__defaults__ or ()):], cond.__defaults__ or (),
                   strict=True))
    out = []
    for operand in _operands(node.body):
        src = ast.unparse(operand)
        try:
            value = eval(compile(ast.Expression(operand), "<wait_for>", "eval"), env)
            out.append((src, shorten(repr(value))))
        except Exception as e:
            out.append((src, f"<raised {e!r}>"))
    return out


def _operands(node: ast.expr) -> list[ast.expr]:
    """The sub-expressions worth showing: a comparison's sides, a boolean's parts."""
    if isinstance(node, ast.Compare):
        return [n for n in (node.left, *node.comparators) if not isinstance(n, ast.Constant)]
    if isinstance(node, ast.BoolOp):
        return [o for v in node.values for o in (_operands(v) or [v])]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _operands(node.operand) or [node.operand]
    return []


def _lambda_node(cond: Callable[[], object]) -> ast.Lambda | None:
    """Find the lambda's node in its file's syntax tree (None where it cannot be found)."""
    code = getattr(cond, "__code__", None)
    if code is None or code.co_name != "<lambda>":
        return None
    tree = _parse(code.co_filename)
    if tree is None:
        return None
    found = [n for n in ast.walk(tree)
             if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno]
    if len(found) > 1:  # several lambdas on one line: the one whose code is cond's
        starts = {col for _, _, col, _ in code.co_positions() if col is not None}
        found = [n for n in found if n.body.col_offset in starts] or found
    return found[0] if found else None


@functools.cache
def _parse(filename: str) -> ast.Module | None:
    try:
        return ast.parse(Path(filename).read_text(), filename)
    except (OSError, SyntaxError, ValueError):
        return None


def running(proc: subprocess.Popen, output: Callable[[], str], name: str = "process") -> bool:
    """Return True while ``proc`` runs; once it has exited, raise AssertionError with its
    exit status and ``output()`` (its log). A wait on a process that died fails at once,
    saying why, instead of running out its deadline."""
    if proc.poll() is not None:
        raise AssertionError(f"{name} exited {proc.returncode}:\n{output()}")
    return True


def wait_output(proc: subprocess.Popen, output: Callable[[], str], pattern: str, *,
                name: str = "process", timeout: float = 300.0, step: float = 0.5) -> str:
    """Return ``output()`` (a process's log) once the regex ``pattern`` is in it; fail at
    once if ``proc`` exits first, and on timeout with the log seen last.

    The pattern is looked for before the process's exit, so a line the process printed
    just before exiting still counts. The default deadline is for starting a Python CLI on
    the VM's emulated CPUs beside a CPU hog, which has taken minutes.
    """
    def found() -> str | None:
        text = output()
        if re.search(pattern, text):
            return text
        running(proc, lambda: text, name)
        return None

    return str(wait_for(found, timeout, step, what=f"{pattern!r} in the {name}'s output",
                        log=output))
