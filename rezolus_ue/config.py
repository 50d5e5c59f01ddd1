"""Configuration: the declared options, their defaults, and validation of TOML files.

The option tables below are the one declaration of every setting: ``configs/default.toml``
and the documentation are generated from them (``python -m rezolus_ue.docs``), and a test
fails when either is stale. Files are read with tomlkit; every rejection is one line naming
the file, the line and what is allowed.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, ClassVar

import tomlkit
import tomlkit.exceptions

from .errors import ConfigError, os_error_reason

#: Where `rezolus-ue run` looks when no --config is given; built-in defaults otherwise.
SYSTEM_CONFIG = Path("/etc/rezolus-ue/config.toml")

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h)\s*$")
DURATION_HELP = "a number with a unit: ns, us, ms, s, m or h (e.g. 100ms, 1s)"
#: A config file larger than this is refused before it is read: the default one, every
#: option commented, is 20 KiB (and /dev/zero would otherwise be read until memory ends).
MAX_CONFIG_BYTES = 1 << 20


def _cut(text: str, width: int = 160) -> str:
    """Return a parser's message on one line of at most ``width`` characters (it may
    quote a whole 100 KB key)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def path_arg(text: str) -> Path:
    """Return a command-line path; raise ArgumentTypeError if no file can have it (argparse
    then names the option), rather than failing later inside an OS call."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{shown(text)}: a path must be non-empty and"
                                         " cannot contain a NUL character")
    return Path(text)


def duration_arg(text: str) -> int:
    """Return a command-line duration (more than 0) in ns; raise ArgumentTypeError if not."""
    try:
        ns = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if ns <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return ns


def shown(value: object, width: int = 60) -> str:
    """Return ``repr(value)``, cut to ``width`` characters: errors stay one short line."""
    return _cut(repr(value), width)


def parse_duration(text: str) -> int:
    """Return a duration such as ``"100ms"`` in nanoseconds; raise ValueError if malformed."""
    m = _DURATION_RE.match(text)
    if not m:
        raise ValueError(f"invalid duration {shown(text)}: use {DURATION_HELP}")
    value, unit = m.groups()
    # Decimal: exact for "1.1s", and no float overflow for absurdly long numbers.
    ns = int(Decimal(value) * _UNITS_NS[unit])
    if ns >= 1 << 63:
        raise ValueError(f"duration {shown(text)} is too large")
    return ns


def format_duration(ns: int) -> str:
    """Return the shortest exact text for a duration in nanoseconds."""
    for unit in ("h", "m", "s", "ms", "us"):
        scale = _UNITS_NS[unit]
        if ns and ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns"


@dataclass(frozen=True)
class Bounds:
    """The range of a numeric option, held in its kind's base unit (a count, nanoseconds)
    and written in the kind's own units: a count's range cannot be a duration's."""

    lo: int
    hi: int
    #: The Option kind these bounds are for.
    kind: ClassVar[str]
    #: What a value is, in messages.
    noun: ClassVar[str]
    #: An example value, in messages (none for a count: the range is one).
    example: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not self.lo <= self.hi:
            raise ValueError(f"{type(self).__name__}: {self.text(self.lo)} is above"
                             f" {self.text(self.hi)}")

    def text(self, n: int) -> str:
        """Return ``n`` as a config file writes it."""
        return str(n)

    def parse(self, value: object) -> int:
        """Return a config value in the base unit; raise ValueError if not of this kind."""
        raise NotImplementedError

    def span(self) -> str:
        """Return the range in the kind's units: "10ms to 1h"."""
        return f"{self.text(self.lo)} to {self.text(self.hi)}"

    def allowed(self) -> str:
        """Return a description of the values accepted."""
        eg = f" (e.g. {self.example})" if self.example else ""
        return f"{self.noun} from {self.span()}{eg}"

    def convert(self, value: object) -> int:
        """Return a config value in the base unit, checked against the range."""
        n = self.parse(value)
        if not self.lo <= n <= self.hi:
            raise ValueError(f"{shown(value)} is out of range: expected {self.allowed()}")
        return n


@dataclass(frozen=True)
class IntRange(Bounds):
    """The range of an "int" option: a count, written as an integer."""

    kind = "int"
    noun = "an integer"

    def parse(self, value: object) -> int:
        """Return ``value`` if it is an integer (a bool is not)."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"expected {self.allowed()}")
        return int(value)


@dataclass(frozen=True, init=False)
class DurationRange(Bounds):
    """The range of a "duration" option, declared as the config writes durations
    (``DurationRange("10ms", "1h")``) and held in nanoseconds."""

    kind = "duration"
    noun = "a duration string"
    example = '"1s"'

    def __init__(self, lo: str, hi: str) -> None:
        object.__setattr__(self, "lo", parse_duration(lo))
        object.__setattr__(self, "hi", parse_duration(hi))
        self.__post_init__()

    def text(self, n: int) -> str:
        """Return ``n`` nanoseconds as a duration string."""
        return format_duration(n)

    def parse(self, value: object) -> int:
        """Return a duration string in nanoseconds."""
        if not isinstance(value, str):
            raise ValueError(f"expected {self.allowed()}")
        return parse_duration(value)


#: The numeric kinds and the bounds each must be declared with.
BOUNDS: dict[str, type[Bounds]] = {b.kind: b for b in (IntRange, DurationRange)}


@dataclass(frozen=True)
class Option:
    """One setting: its key, kind, default and the help text shown in docs and errors.

    A numeric kind ("int", "duration") is declared with bounds of its own type, and every
    default must be acceptable: a mistake in either fails at import, not in a user's run.
    """

    key: str
    kind: str  # "duration" | "bool" | "path" | "choice" | "int" | "strings" | "string" | "number"
    default: object
    help: str
    choices: tuple[str, ...] = ()
    #: The range of a numeric kind, in that kind's units (BOUNDS).
    bounds: Bounds | None = None

    def __post_init__(self) -> None:
        # Keep declarations immutable (and hashable) even when written with a list default.
        if isinstance(self.default, list):
            object.__setattr__(self, "default", tuple(self.default))
        want = BOUNDS.get(self.kind)
        if want is None and self.bounds is not None:
            raise TypeError(f"option {self.key}: kind {self.kind!r} has no bounds")
        if want is not None and type(self.bounds) is not want:
            raise TypeError(f"option {self.key}: kind {self.kind!r} needs"
                            f" bounds={want.__name__}(...), not {self.bounds!r}")
        try:
            if self.default is not None:  # None: a rule's key that has no default
                self.convert(self.default)
        except ValueError as e:
            raise ValueError(f"option {self.key}: default {self.default!r}: {e}") from None

    def allowed(self) -> str:
        """Return a description of the values this option accepts."""
        if self.bounds is not None:
            return self.bounds.allowed()
        if self.kind == "bool":
            return "true or false"
        if self.kind == "path":
            return "a path string (\"\" for the default)"
        if self.kind == "strings":
            return "a list of strings, e.g. [\"a\", \"b*\"]"
        if self.kind == "string":
            return "a string"
        if self.kind == "number":
            return "a number"
        return "one of " + ", ".join(f'"{c}"' for c in self.choices)

    def convert(self, value: object) -> object:
        """Return the checked Python value; raise ValueError naming what is allowed."""
        if self.bounds is not None:
            return self.bounds.convert(value)
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"expected {self.allowed()}")
            return bool(value)
        if self.kind == "path":
            if not isinstance(value, str):
                raise ValueError(f"expected {self.allowed()}")
            if "\0" in value or len(value.encode("utf-8", "surrogatepass")) >= 4096:
                # Either would pass here and fail only when `run` opens it.
                raise ValueError("a path cannot contain a NUL character or exceed 4095"
                                 " bytes")
            return str(value)
        if self.kind == "strings":
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"expected {self.allowed()}")
            return tuple(value)
        if self.kind == "string":
            if not isinstance(value, str):
                raise ValueError(f"expected {self.allowed()}")
            return str(value)
        if self.kind == "number":
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"expected {self.allowed()}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{shown(value)} is not allowed: expected {self.allowed()}")
            return str(value)
        raise AssertionError(self.kind)

    def toml_default(self) -> object:
        """Return the default as it is written in a TOML file."""
        return list(self.default) if isinstance(self.default, tuple) else self.default


AGENT_OPTIONS: tuple[Option, ...] = (
    Option("publish_interval", "duration", "1s",
           "How often each sampler publishes its records (one record per label set per"
           " event per interval).",
           bounds=DurationRange("10ms", "1h")),
    Option("sample_interval", "duration", "100ms",
           "How often oversampled sources are read while a consumer has a *_dist event"
           " enabled; the _dist records give p50/p90/p99/max of those samples over each"
           " publish interval. At most publish_interval.",
           bounds=DurationRange("10ms", "1h")),
    Option("tracefs", "path", "",
           "tracefs mount point; empty means discover it (/sys/kernel/tracing, then"
           " /proc/mounts), mounting it when running as root."),
    Option("procfs", "path", "/proc", "Root of procfs, for reading another tree in tests."),
    Option("sysfs", "path", "/sys", "Root of sysfs, for reading another tree in tests."),
    Option("transport", "choice", "auto",
           "How events become tracepoints: \"user_events\" (user_events:<name>, Linux 6.4+"
           " with CONFIG_USER_EVENTS), \"uprobe\" (uprobe events rezolus_ue:<name>, on any"
           " kernel with CONFIG_UPROBE_EVENTS), or \"auto\": user_events where the kernel"
           " has it, else uprobe.", choices=("auto", "user_events", "uprobe")),
    Option("persist", "bool", False,
           "Register events with USER_EVENT_REG_PERSIST (Linux >= 6.7, CAP_PERFMON) so they"
           " stay defined while the agent restarts; ignored with a warning where unsupported."),
    Option("multi_format", "bool", False,
           "Register with USER_EVENT_REG_MULTI_FORMAT (Linux >= 6.10): tracepoints become"
           " user_events_multi:<name>.<id>, so agents of different versions can coexist."),
    Option("log_level", "choice", "info", "How much the agent logs to stderr.",
           choices=("debug", "info", "warning", "error")),
    Option("drop_capabilities", "bool", True,
           "After start-up keep only the capabilities the enabled samplers need (e.g."
           " CAP_BPF and CAP_PERFMON for BPF programs, which load on demand;"
           " docs/security.md), dropping every other from every set, the bounding set"
           " included. A sampler a reload enables later has only those."),
)

#: Options every sampler section has; samplers may add their own (Sampler.options).
SAMPLER_OPTIONS: tuple[Option, ...] = (
    Option("enabled", "bool", True,
           "Run this sampler. Even when enabled it reads nothing while no consumer has one"
           " of its events enabled."),
)

#: The keys of a ``[[trigger]]`` rule: the flight recorder (``record --ring``) writes a
#: window of its ring to a file of its own when the rule's condition holds.
TRIGGER_OPTIONS: tuple[Option, ...] = (
    Option("name", "string", "",
           "Names the rule in the log and in the dump's file name (letters, digits, '.',"
           " '_' and '-'); default: <event>.<metric>."),
    Option("event", "string", "",
           "The event to watch (required): one of `rezolus-ue events`, or its _dist event."),
    Option("metric", "string", "",
           "The metric to watch (required): a counter is compared as its rate per second,"
           " a gauge as its value; a histogram, or any metric of a _dist event, by the"
           " percentile below."),
    Option("percentile", "choice", "",
           "Which percentile of a histogram or _dist metric to compare (required for"
           " them, refused for others).", choices=("", "p50", "p90", "p99", "p999", "max")),
    Option("over", "choice", "max",
           "How the event's series (one per CPU, device, cgroup...) combine into the one"
           " value compared each publish interval.", choices=("max", "min", "sum", "mean")),
    Option("above", "number", None,
           "Hold when the value is above this (one of above and below is required)."),
    Option("below", "number", None, "Hold when the value is below this."),
    Option("for", "int", 1, "Fire once the condition held this many publish intervals in"
           " a row.", bounds=IntRange(1, 3600)),
    Option("before", "duration", "1m",
           "Dump this much before the first interval in which the condition held.",
           bounds=DurationRange("0s", "1h")),
    Option("after", "duration", "30s",
           "And this much after the last: the dump is written once that has passed"
           " without the condition holding again, and until then the rule does not fire"
           " again (a condition that holds on is written after holding an hour).",
           bounds=DurationRange("0s", "1h")),
)
#: The rule the shipped config shows, commented out.
TRIGGER_EXAMPLE: dict[str, object] = {
    "name": "cpu-busy", "event": "rezolus_cpu_usage", "metric": "busy_ppm", "over": "min",
    "above": 900_000, "for": 3, "before": "1m", "after": "30s"}
_TRIGGER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class Config:
    """The effective configuration: defaults overlaid with a file and the command line."""

    path: Path | None = None
    agent: Mapping[str, object] = field(default_factory=dict)
    samplers: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    #: ``[[trigger]]`` rules: every key of TRIGGER_OPTIONS (name filled in), checked for
    #: type and range; ``recording.triggers`` checks their events and metrics.
    triggers: tuple[Mapping[str, object], ...] = ()

    @property
    def publish_interval_ns(self) -> int:
        """Return the publish interval in nanoseconds."""
        return int(self.agent["publish_interval"])  # type: ignore[call-overload]

    @property
    def sample_interval_ns(self) -> int:
        """Return the sample interval in nanoseconds."""
        return int(self.agent["sample_interval"])  # type: ignore[call-overload]

    def sampler_enabled(self, name: str) -> bool:
        """Return whether sampler ``name`` is enabled."""
        return bool(self.samplers[name]["enabled"])


def sampler_options(names_to_extra: Mapping[str, tuple[Option, ...]]) -> dict[
        str, tuple[Option, ...]]:
    """Return every sampler's full option table (common options first)."""
    return {n: SAMPLER_OPTIONS + extra for n, extra in names_to_extra.items()}


def defaults(samplers: Mapping[str, tuple[Option, ...]]) -> Config:
    """Return the built-in default configuration."""
    agent = {o.key: o.convert(o.default) for o in AGENT_OPTIONS}
    return Config(None, agent, {n: {o.key: o.convert(o.default) for o in opts}
                                for n, opts in samplers.items()})


def load_or_default(path: str | Path | None,
                    samplers: Mapping[str, tuple[Option, ...]]) -> Config:
    """Return the config from ``path``, else the system file if present, else defaults."""
    if path is None and SYSTEM_CONFIG.exists():
        path = SYSTEM_CONFIG
    return load(path, samplers) if path else defaults(samplers)


def load(path: str | Path, samplers: Mapping[str, tuple[Option, ...]]) -> Config:
    """Return the configuration in ``path``; raise ConfigError naming file and line."""
    p = Path(path)
    return parse(read_text(p), samplers, p)


def read_text(p: Path) -> str:
    """Return the text of config file ``p`` (a pipe works too), checked as ``run`` checks
    it (permissions when privileged, size, UTF-8); raise a one-line ConfigError."""
    try:
        with open(p, "rb") as f:
            check_permissions(p, os.fstat(f.fileno()))  # the file read, not a later one
            return read_bounded(f, p)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, expected a TOML file") from None
    except PermissionError:
        raise ConfigError(f"{p}: permission denied") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a text file (expected UTF-8 TOML)") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        name = shown(str(p)) if isinstance(e, ValueError) else p
        raise ConfigError(f"{name}: {os_error_reason(e)}") from None


def read_bounded(f: IO[Any], name: object) -> str:
    """Return the text of config file ``f`` (binary, or text like stdin); raise
    ConfigError if it is larger than MAX_CONFIG_BYTES, UnicodeDecodeError if not UTF-8."""
    data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name}: larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config"
                          " file")
    return data if isinstance(data, str) else data.decode()


def running_privileged() -> bool:
    """Return True when running as root or with any capability in effect."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status") as f:
            eff = next((ln for ln in f if ln.startswith("CapEff:")), "CapEff: 0")
        return int(eff.split(":")[1], 16) != 0
    except (OSError, ValueError):
        return False


def check_permissions(path: Path, st: os.stat_result, privileged: bool | None = None) -> None:
    """Refuse a config another user could have changed, when running privileged.

    A privileged agent follows its config (which samplers, which paths): a file writable
    by its group or others, or owned by another user, would hand those choices to them.
    """
    if not (running_privileged() if privileged is None else privileged):
        return
    mode = stat.S_IMODE(st.st_mode)
    who = [w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
           if mode & bit]
    if who:
        raise ConfigError(f"refusing {path}: mode {mode:04o} is writable by"
                          f" {' and '.join(who)}; chmod go-w {path}")
    if st.st_uid not in (0, os.geteuid()):
        raise ConfigError(f"refusing {path}: owned by uid {st.st_uid}, who could change it;"
                          f" chown root {path}")


def parse(text: str, samplers: Mapping[str, tuple[Option, ...]],
          path: Path | None = None) -> Config:
    """Return the configuration in TOML ``text`` (``path`` only names it in errors)."""
    where = str(path) if path else "<config>"
    try:
        doc = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as e:
        msg = str(e).split(" at line ")[0]
        raise ConfigError(f"{where}:{e.line}: invalid TOML: {_cut(msg)}") from None
    except tomlkit.exceptions.TOMLKitError as e:  # e.g. a key defined twice
        # tomlkit keeps no position for these; the standard parser's message has one.
        line = 1
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as te:
            m = re.search(r"at line (\d+)", str(te))
            line = int(m.group(1)) if m else 1
        raise ConfigError(f"{where}:{line}: invalid TOML: {_cut(str(e))}") from None
    lines = _KeyLines(text)

    def fail(table: tuple[str, ...], key: str | None, msg: str) -> ConfigError:
        return ConfigError(f"{where}:{lines.find(table, key)}: {msg}")

    base = defaults(samplers)
    unknown = [k for k in doc if k not in ("agent", "samplers", "trigger")]
    if unknown:
        raise fail((), unknown[0], f"unknown table or key {shown(unknown[0])}; allowed:"
                   " [agent], [samplers.<name>], [[trigger]]")
    agent = dict(base.agent)
    given = _section(doc.get("agent", {}), AGENT_OPTIONS, ("agent",), fail)
    agent.update(given)
    if "sample_interval" not in given:
        # A faster publish interval drags the default sample interval along.
        agent["sample_interval"] = min(agent["sample_interval"],  # type: ignore[type-var]
                                       agent["publish_interval"])
    if agent["sample_interval"] > agent["publish_interval"]:  # type: ignore[operator]
        raise fail(("agent",), "sample_interval",
                   "[agent] sample_interval must not exceed publish_interval ("
                   f"{format_duration(agent['sample_interval'])} >"  # type: ignore[arg-type]
                   f" {format_duration(agent['publish_interval'])})")  # type: ignore[arg-type]
    sections = doc.get("samplers", {})
    if not isinstance(sections, dict):
        raise fail((), "samplers", "'samplers' must be a table of [samplers.<name>] sections")
    out = {n: dict(v) for n, v in base.samplers.items()}
    for name, section in sections.items():
        if name not in samplers:
            raise fail(("samplers",), name,
                       f"unknown sampler {shown(name)}; known: {', '.join(sorted(samplers))}")
        out[name].update(_section(section, samplers[name], ("samplers", name), fail))
    return Config(path, agent, out, _triggers(doc.get("trigger", []), fail))


def _triggers(rules: object, fail) -> tuple[dict[str, object], ...]:  # type: ignore[no-untyped-def]
    """Return the ``[[trigger]]`` rules with their defaults, each error naming the rule."""
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise fail((), "trigger", "'trigger' must be an array of tables: [[trigger]]")
    out: list[dict[str, object]] = []
    for n, rule in enumerate(rules):
        table = ("trigger", f"#{n}")
        name = rule.get("name") or f"{rule.get('event', '')}.{rule.get('metric', '')}"
        what = f"[[trigger]] {shown(name, 40)}"
        got: dict[str, object] = {o.key: None if o.default is None else o.convert(o.default)
                                  for o in TRIGGER_OPTIONS}
        got.update(_convert(rule, TRIGGER_OPTIONS, table, what, fail))
        for key in ("event", "metric"):
            if not got[key]:
                raise fail(table, None, f"{what}: {key} is required")
        if (got["above"] is None) == (got["below"] is None):
            raise fail(table, None, f"{what}: give one of above and below")
        got["name"] = got["name"] or f"{got['event']}.{got['metric']}"
        if not _TRIGGER_NAME.fullmatch(str(got["name"])):
            raise fail(table, "name", f"{what} name: use 1 to 64 letters, digits, '.', '_'"
                       " or '-' (it names the dump's file)")
        out.append(got)
    return tuple(out)


def _section(section: object, options: tuple[Option, ...], table: tuple[str, ...],
             fail) -> dict[str, object]:  # type: ignore[no-untyped-def]
    name = ".".join(table)
    if not isinstance(section, dict):
        raise fail(table[:-1], table[-1], f"{shown(name)} must be a table, e.g. [{name}]")
    return _convert(section, options, table, f"[{name}]", fail)


def _convert(section: dict, options: tuple[Option, ...], table: tuple[str, ...], what: str,
             fail) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Return ``section``'s values converted by their options; an unknown key or a bad
    value is ``fail``'s one-line error, ``what`` naming the section."""
    known = {o.key: o for o in options}
    out: dict[str, object] = {}
    for key, value in section.items():
        opt = known.get(key)
        if opt is None:
            raise fail(table, key, f"unknown key {shown(key)} in {what}; allowed: "
                       + ", ".join(known))
        try:
            out[key] = opt.convert(value)
        except ValueError as e:
            raise fail(table, key, f"{what} {key}: {e}") from None
    return out


#: Characters of a bare or quoted key as _KeyLines reads it (no escapes: a line hint).
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-\"' .")


def _split_key(text: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in text.split("."))


def _header_of(line: str) -> str | None:
    """Return the name in a ``[table]`` or ``[[array]]`` header line, if it is one."""
    s = line.lstrip()
    if not s.startswith("["):
        return None
    name, close, _rest = s.lstrip("[").partition("]")
    return name.strip() or None if close else None


def _key_of(line: str) -> str | None:
    """Return the key of a ``key = value`` line, if it is one.

    String operations, not a regular expression: each line is read once, so the whole
    file is read in linear time (a pattern with nested optional spaces backtracked
    cubically on a line of spaces: 39 s for 3,000 of them)."""
    key, eq, _value = line.partition("=")
    key = key.strip()
    return key if eq and key and all(c in _KEY_CHARS for c in key) else None


class _KeyLines:
    """Find the line a key or table was written on (tomlkit keeps no positions).

    Understands headers, plain and dotted keys (``agent.publish_interval = ...``); a key
    inside an inline table (``agent = { publish_interval = ... }``) is found through its
    parent key's line.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        arrays: dict[tuple[str, ...], int] = {}  # [[name]] headers seen: "#0", "#1"...
        for n, line in enumerate(text.splitlines(), 1):
            header = _header_of(line)
            if header is not None:
                table = _split_key(header)
                if line.lstrip().startswith("[["):
                    arrays[table] = arrays.get(table, -1) + 1
                    table += (f"#{arrays[table]}",)
                for i in range(1, len(table) + 1):
                    self.lines.setdefault(table[:i], n)
                continue
            key = _key_of(line)
            if key is not None:
                full = table + _split_key(key)
                for i in range(len(table) + 1, len(full) + 1):
                    self.lines.setdefault(full[:i], n)

    def find(self, table: tuple[str, ...], key: str | None) -> int:
        path = table + ((key,) if key is not None else ())
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return 1


def render_default(samplers: Mapping[str, tuple[Option, ...]], docs: Mapping[str, str]) -> str:
    """Return the text of ``configs/default.toml``: every option, commented, at its default."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment("rezolus-ue configuration: every option at its default value."))
    doc.add(tomlkit.comment("Generated by `python -m rezolus_ue.docs`; edit rezolus_ue/config.py."))
    doc.add(tomlkit.nl())
    doc.add("agent", _table(AGENT_OPTIONS))
    samp = tomlkit.table(is_super_table=True)
    for name, opts in samplers.items():
        t = _table(opts)
        t.comment(docs.get(name, ""))
        samp.add(name, t)
    doc.add("samplers", samp)
    return tomlkit.dumps(doc) + _trigger_example()


def _trigger_example() -> str:
    """Return the commented ``[[trigger]]`` example that ends the shipped config."""
    lines = ["", "# Flight recorder triggers (`rezolus-ue record --ring DIR --config FILE`): each",
             "# [[trigger]] rule writes a window of the ring to DIR/dumps/ when its condition",
             "# holds (docs/recording.md). None is set by default; for example:", "#",
             "# [[trigger]]"]
    for o in TRIGGER_OPTIONS:
        if o.key in TRIGGER_EXAMPLE:
            lines += ["# " + ln for ln in _wrap(o.help, 86)]
            lines.append(f"# {o.key} = {tomlkit.item(TRIGGER_EXAMPLE[o.key]).as_string()}")
    return "\n".join(lines) + "\n"


def _table(options: tuple[Option, ...]) -> tomlkit.items.Table:
    t = tomlkit.table()
    for o in options:
        span = f" Range: {o.bounds.span()}." if o.bounds else ""
        for line in _wrap(o.help + span):
            t.add(tomlkit.comment(line))
        t.add(o.key, o.toml_default())
    return t


def _wrap(text: str, width: int = 88) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return [*lines, cur] if cur else lines
