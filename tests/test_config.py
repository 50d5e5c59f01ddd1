"""Pure tests of configuration: durations, defaults, overrides and one-line rejections."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rezolus_ue import config
from rezolus_ue.errors import ConfigError
from rezolus_ue.samplers import REGISTRY, options

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TOML = ROOT / "configs" / "default.toml"
OPTS = options()
WHERE = Path("/etc/rezolus-ue/test.toml")
AGENT_KEYS = [o.key for o in config.AGENT_OPTIONS]

# --- durations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("100ms", 100_000_000),
        ("1s", 1_000_000_000),
        ("1.5s", 1_500_000_000),
        ("2m", 120_000_000_000),
        ("1h", 3_600_000_000_000),
        ("500us", 500_000),
        ("500µs", 500_000),
        ("250ns", 250),
        ("0.25ms", 250_000),
        ("0s", 0),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert config.parse_duration(text) == ns


@pytest.mark.parametrize(
    "text", ["", "1", "1x", "ms", "-1s", "1 sec", "1.s", ".5s", "1e3ms", "1s2", "1S", "s1"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration") as ei:
        config.parse_duration(text)
    assert config.DURATION_HELP in str(ei.value)


def test_parse_duration_huge_number_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        config.parse_duration("9" * 400 + "s")


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0ns"),
        (1, "1ns"),
        (1_500, "1500ns"),
        (500_000, "500us"),
        (10_000_000, "10ms"),
        (1_500_000_000, "1500ms"),
        (1_000_000_000, "1s"),
        (90_000_000_000, "90s"),
        (120_000_000_000, "2m"),
        (3_600_000_000_000, "1h"),
        (7_200_000_000_000, "2h"),
    ],
)
def test_format_duration(ns: int, text: str) -> None:
    assert config.format_duration(ns) == text


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=10**15))
def test_format_duration_round_trips(ns: int) -> None:
    assert config.parse_duration(config.format_duration(ns)) == ns


# --- parse: defaults and overrides -----------------------------------------------------


def test_empty_document_is_the_defaults() -> None:
    got = config.parse("", OPTS)
    want = config.defaults(OPTS)
    assert (got.agent, got.samplers) == (want.agent, want.samplers)


def test_defaults() -> None:
    d = config.defaults(OPTS)
    assert d.path is None
    assert d.publish_interval_ns == 1_000_000_000
    assert d.sample_interval_ns == 100_000_000
    assert dict(d.agent) == {
        "publish_interval": 1_000_000_000, "sample_interval": 100_000_000, "tracefs": "",
        "procfs": "/proc", "sysfs": "/sys", "transport": "auto", "persist": False,
        "multi_format": False, "log_level": "info", "drop_capabilities": True,
    }
    assert set(d.samplers) == set(REGISTRY)
    assert all(d.sampler_enabled(name) for name in REGISTRY)


def test_overrides_keep_the_other_defaults() -> None:
    text = """\
# a comment
[agent]
publish_interval = "250ms"
sample_interval = "50ms"
persist = true
log_level = "debug"
tracefs = "/mnt/tracing"

[samplers.cpu_usage]
enabled = false
"""
    c = config.parse(text, OPTS, WHERE)
    assert c.path == WHERE
    assert c.publish_interval_ns == 250_000_000
    assert c.sample_interval_ns == 50_000_000
    assert c.agent["persist"] is True
    assert c.agent["log_level"] == "debug"
    assert c.agent["tracefs"] == "/mnt/tracing"
    assert c.agent["procfs"] == "/proc"
    assert c.agent["multi_format"] is False
    assert not c.sampler_enabled("cpu_usage")
    assert c.sampler_enabled("agent")


def test_samplers_super_table_and_inline_table() -> None:
    c = config.parse('[samplers]\ncpu_usage = { enabled = false }\n', OPTS)
    assert not c.sampler_enabled("cpu_usage")


def test_parse_does_not_mutate_defaults() -> None:
    config.parse("[samplers.agent]\nenabled = false\n", OPTS)
    assert config.defaults(OPTS).sampler_enabled("agent")


def test_crlf_line_endings() -> None:
    c = config.parse('[agent]\r\npublish_interval = "2s"\r\n', OPTS)
    assert c.publish_interval_ns == 2_000_000_000


@pytest.mark.parametrize(("text", "publish", "sample"), [
    ('[agent]\nsample_interval = "1s"\n', 1_000_000_000, 1_000_000_000),  # equal is fine
    ('[agent]\npublish_interval = "10s"\n', 10_000_000_000, 100_000_000),
    ('[agent]\npublish_interval = "100ms"\n', 100_000_000, 100_000_000),
    ('[agent]\nsample_interval = "10ms"\npublish_interval = "10ms"\n', 10_000_000, 10_000_000),
])
def test_publish_and_sample_intervals(text: str, publish: int, sample: int) -> None:
    c = config.parse(text, OPTS)
    assert (c.publish_interval_ns, c.sample_interval_ns) == (publish, sample)


def test_fast_publish_interval_lowers_the_default_sample_interval() -> None:
    c = config.parse('[agent]\npublish_interval = "50ms"\n', OPTS)
    assert c.sample_interval_ns == c.publish_interval_ns == 50_000_000


# --- option kinds ----------------------------------------------------------------------

INT_OPT = config.Option("max_things", "int", 64, "How many things.",
                        bounds=config.IntRange(1, 1000))
#: Declared with a list default, as a TOML file writes it (kept as a tuple).
STRINGS_OPT = config.Option("include", "strings", ["*"], "Globs to include.")
TEST_SAMPLERS = {**OPTS, "test": (*config.SAMPLER_OPTIONS, INT_OPT, STRINGS_OPT)}


@pytest.mark.parametrize(("value", "want"), [(1, 1), (64, 64), (1000, 1000)])
def test_int_option_accepts(value: int, want: int) -> None:
    assert INT_OPT.convert(value) == want


@pytest.mark.parametrize(("value", "needle"), [
    (0, "0 is out of range: expected an integer from 1 to 1000"),
    (1001, "1001 is out of range"),
    (True, "expected an integer from 1 to 1000"),  # a bool is not an int here
    ("5", "expected an integer"),
    (5.0, "expected an integer"),
])
def test_int_option_rejects(value: object, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        INT_OPT.convert(value)


@pytest.mark.parametrize(("value", "want"), [([], ()), (["a"], ("a",)),
                                             (["a", "b*"], ("a", "b*"))])
def test_strings_option_accepts(value: list[str], want: tuple[str, ...]) -> None:
    assert STRINGS_OPT.convert(value) == want


@pytest.mark.parametrize("value", ["a", ["a", 1], [["a"]], 3, None])
def test_strings_option_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape('a list of strings, e.g. ["a", "b*"]')):
        STRINGS_OPT.convert(value)


def test_defaults_of_int_and_strings_options() -> None:
    assert STRINGS_OPT.default == ("*",)  # immutable, so the Option stays hashable
    assert hash(STRINGS_OPT) == hash(STRINGS_OPT)
    assert STRINGS_OPT.toml_default() == ["*"]
    assert INT_OPT.toml_default() == 64
    assert config.defaults(TEST_SAMPLERS).samplers["test"] == {
        "enabled": True, "max_things": 64, "include": ("*",)}


def test_strings_option_with_a_tuple_default() -> None:
    opt = config.Option("exclude", "strings", ("a*", "b"), "Globs to exclude.")
    assert opt.toml_default() == ["a*", "b"]
    samplers = {"test": (*config.SAMPLER_OPTIONS, opt)}
    assert config.defaults(samplers).samplers["test"]["exclude"] == ("a*", "b")


def test_sampler_specific_options_parse() -> None:
    c = config.parse('[samplers.test]\nmax_things = 5\ninclude = ["a", "b*"]\n', TEST_SAMPLERS)
    assert c.samplers["test"] == {"enabled": True, "max_things": 5, "include": ("a", "b*")}


@pytest.mark.parametrize(("text", "line", "needle"), [
    ('[samplers.test]\n\nmax_things = 0\n', 3, "[samplers.test] max_things: 0 is out of range"),
    ('[samplers.test]\ninclude = "a"\n', 2, "[samplers.test] include: expected a list"),
    ('[samplers.test]\nmax_thing = 1\n', 2, "allowed: enabled, max_things, include"),
])
def test_sampler_specific_option_rejections(text: str, line: int, needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        config.parse(text, TEST_SAMPLERS, WHERE)
    assert str(ei.value).startswith(f"{WHERE}:{line}: ")
    assert needle in str(ei.value)


def test_render_default_writes_every_kind() -> None:
    text = config.render_default({"test": TEST_SAMPLERS["test"]}, {"test": "A test sampler."})
    doc = tomllib.loads(text)
    assert doc["samplers"]["test"] == {"enabled": True, "max_things": 64, "include": ["*"]}
    assert config.parse(text, TEST_SAMPLERS).samplers["test"]["include"] == ("*",)
    # A numeric option's comment says its range, in the kind's units.
    assert "# How many things. Range: 1 to 1000.\nmax_things = 64" in text
    agent = config.render_default({}, {})
    assert "Range: 10ms to 1h.\npublish_interval = \"1s\"" in agent


# --- option declarations: each kind its own bounds, checked at import ---------------------

@pytest.mark.parametrize(("kind", "default", "bounds", "needle"), [
    ("int", 5, config.DurationRange("1ms", "1s"), "kind 'int' needs bounds=IntRange(...)"),
    ("duration", "1s", config.IntRange(1, 5), "kind 'duration' needs bounds=DurationRange"),
    ("int", 5, None, "kind 'int' needs bounds=IntRange(...), not None"),
    ("duration", "1s", None, "kind 'duration' needs bounds=DurationRange(...), not None"),
    ("bool", True, config.IntRange(0, 1), "kind 'bool' has no bounds"),
    ("strings", (), config.IntRange(0, 1), "kind 'strings' has no bounds"),
])
def test_bounds_must_be_of_the_options_kind(kind: str, default: object, bounds: object,
                                           needle: str) -> None:
    with pytest.raises(TypeError, match=re.escape(f"option x: {needle}")):
        config.Option("x", kind, default, "X.", bounds=bounds)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "default", "bounds", "needle"), [
    ("int", 0, config.IntRange(1, 5),
     "option x: default 0: 0 is out of range: expected an integer from 1 to 5"),
    ("int", "3", config.IntRange(1, 5), "default '3': expected an integer from 1 to 5"),
    ("duration", "5ms", config.DurationRange("10ms", "1h"),
     "default '5ms': '5ms' is out of range: expected a duration string from 10ms to 1h"),
    ("duration", 1_000_000_000, config.DurationRange("10ms", "1h"),
     "default 1000000000: expected a duration string"),
])
def test_a_default_outside_its_bounds_is_refused_at_declaration(
        kind: str, default: object, bounds: config.Bounds, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        config.Option("x", kind, default, "X.", bounds=bounds)


def test_a_choice_default_must_be_a_choice() -> None:
    with pytest.raises(ValueError, match=re.escape("default 'c': 'c' is not allowed")):
        config.Option("x", "choice", "c", "X.", choices=("a", "b"))


@pytest.mark.parametrize(("make", "needle"), [
    (lambda: config.IntRange(5, 1), "IntRange: 5 is above 1"),
    (lambda: config.DurationRange("1h", "1s"), "DurationRange: 1h is above 1s"),
    (lambda: config.DurationRange("1", "1s"), "invalid duration '1'"),
])
def test_bounds_are_checked_when_declared(make, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=re.escape(needle)):
        make()


def test_durations_are_bounded_and_said_in_duration_units() -> None:
    b = config.DurationRange("10ms", "1h")
    assert (b.lo, b.hi) == (10_000_000, 3_600_000_000_000)
    assert b.convert("1h") == b.hi and b.convert("10ms") == b.lo
    with pytest.raises(ValueError, match=re.escape(
            "'61m' is out of range: expected a duration string from 10ms to 1h (e.g. \"1s\")")):
        b.convert("61m")
    assert config.IntRange(0, 1000).allowed() == "an integer from 0 to 1000"


def test_every_declared_numeric_option_is_bounded_by_its_kind() -> None:
    every = [*config.AGENT_OPTIONS, *(o for opts in OPTS.values() for o in opts)]
    numeric = [o for o in every if o.kind in config.BOUNDS]
    assert {o.kind for o in numeric} == {"int", "duration"}
    assert all(type(o.bounds) is config.BOUNDS[o.kind] for o in numeric)
    assert all(o.bounds is None for o in every if o.kind not in config.BOUNDS)


# --- parse: rejections -----------------------------------------------------------------

REJECTIONS = [
    # (id, text, line, substrings of the message)
    ("unknown-top-level-key", '# my config\nintervall = "1s"\n', 2,
     ["unknown table or key 'intervall'", "[agent]", "[samplers.<name>]"]),
    ("unknown-top-level-table", '\n\n[agnet]\npublish_interval = "1s"\n', 3,
     ["unknown table or key 'agnet'"]),
    ("unknown-agent-key", '[agent]\npublish_interval = "1s"\n\nfrequency = "1s"\n', 4,
     ["unknown key 'frequency' in [agent]", "allowed: " + ", ".join(AGENT_KEYS)]),
    ("unknown-sampler-key", '[samplers.cpu_usage]\nenabled = true\nenable = true\n', 3,
     ["unknown key 'enable' in [samplers.cpu_usage]", "allowed: enabled"]),
    ("unknown-sampler", '[agent]\n\n[samplers.cpu_usage]\nenabled = true\n'
     '[samplers.disk]\nenabled = true\n', 5,
     ["unknown sampler 'disk'", "known: " + ", ".join(sorted(REGISTRY))]),
    ("renamed-interval", '[agent]\n\ninterval = "1s"\n', 3,
     ["unknown key 'interval' in [agent]", "publish_interval", "sample_interval"]),
    ("sample-over-publish", '[agent]\nsample_interval = "2s"\npublish_interval = "1s"\n', 2,
     ["[agent] sample_interval must not exceed publish_interval (2s > 1s)"]),
    ("sample-over-default-publish",
     '[agent]\npersist = false\nsample_interval = "1500ms"\n', 3,
     ["sample_interval must not exceed publish_interval (1500ms > 1s)"]),
    ("sample-interval-too-small", '[agent]\nsample_interval = "5ms"\n', 2,
     ["[agent] sample_interval: '5ms' is out of range", "from 10ms to 1h"]),
    ("bad-duration", '[agent]\n# comment\npublish_interval = "1x"\n', 3,
     ["[agent] publish_interval", "invalid duration '1x'", config.DURATION_HELP]),
    ("duration-too-small", '\n[agent]\npublish_interval = "1ms"\n', 3,
     ["'1ms' is out of range", "from 10ms to 1h"]),
    ("duration-too-large", '[agent]\npersist = false\npublish_interval = "2h"\n', 3,
     ["'2h' is out of range", "from 10ms to 1h"]),
    ("duration-not-a-string", '[agent]\npublish_interval = 5\n', 2,
     ["[agent] publish_interval: expected a duration string"]),
    ("bool-not-a-bool", '[samplers.agent]\n\nenabled = "yes"\n', 3,
     ["[samplers.agent] enabled: expected true or false"]),
    ("bool-as-int", '[agent]\npersist = 1\n', 2, ["[agent] persist", "true or false"]),
    ("path-not-a-string", '[agent]\nprocfs = 3\n', 2, ["[agent] procfs", "a path string"]),
    ("choice-not-allowed", '[agent]\npublish_interval = "1s"\nlog_level = "loud"\n', 3,
     ["[agent] log_level: 'loud' is not allowed",
      'one of "debug", "info", "warning", "error"']),
    ("choice-wrong-case", '[agent]\nlog_level = "INFO"\n', 2, ["'INFO' is not allowed"]),
    ("invalid-toml", '[agent]\npublish_interval = "1s"\npersist = tru\n', 3,
     ["invalid TOML"]),
    ("invalid-toml-header", '\n\n[agent\n', 3, ["invalid TOML"]),
    ("invalid-toml-string", '[agent]\n\n\npublish_interval = "1s\n', 4, ["invalid TOML"]),
    ("samplers-in-agent", '[agent]\n\n# x\nsamplers = 3\n', 4,
     ["unknown key 'samplers' in [agent]"]),
    ("samplers-scalar", '# x\nsamplers = 3\n', 2,
     ["'samplers' must be a table of [samplers.<name>] sections"]),
    ("agent-scalar", '\nagent = "fast"\n', 2, ["'agent' must be a table, e.g. [agent]"]),
    ("sampler-scalar", '[samplers]\n\ncpu_usage = 3\n', 3,
     ["'samplers.cpu_usage' must be a table, e.g. [samplers.cpu_usage]"]),
]


@pytest.mark.parametrize(("text", "line", "needles"),
                         [pytest.param(*r[1:], id=r[0]) for r in REJECTIONS])
def test_rejection_is_one_line_with_file_and_line(text: str, line: int,
                                                  needles: list[str]) -> None:
    with pytest.raises(ConfigError) as ei:
        config.parse(text, OPTS, WHERE)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(f"{WHERE}:{line}: "), msg
    for needle in needles:
        assert needle in msg
    assert ei.value.exit_code == 2


def test_rejection_without_a_path_names_config() -> None:
    with pytest.raises(ConfigError, match=r"^<config>:2: "):
        config.parse('[agent]\npublish_interval = "1x"\n', OPTS)


def test_duplicate_key_reports_its_line() -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(WHERE))}:3: "):
        config.parse('[agent]\npublish_interval = "1s"\npublish_interval = "2s"\n', OPTS,
                     WHERE)


@pytest.mark.parametrize(
    "text",
    ['# c\nagent.publish_interval = "1x"\n', '# c\nagent = { publish_interval = "1x" }\n'],
    ids=["dotted", "inline"],
)
def test_dotted_and_inline_keys_report_their_line(text: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(WHERE))}:2: "):
        config.parse(text, OPTS, WHERE)


@pytest.mark.parametrize(
    "text", ['"a\\nb" = 1\n', '[samplers."a\\nb"]\n', '[agent]\n"a\\nb" = 1\n'],
    ids=["top", "sampler", "agent"],
)
def test_rejection_of_odd_key_is_one_line(text: str) -> None:
    with pytest.raises(ConfigError) as ei:
        config.parse(text, OPTS, WHERE)
    assert "\n" not in str(ei.value)


# --- files -----------------------------------------------------------------------------


def test_default_toml_is_the_defaults() -> None:
    c = config.load(DEFAULT_TOML, OPTS)
    want = config.defaults(OPTS)
    assert c.path == DEFAULT_TOML
    assert (c.agent, c.samplers) == (want.agent, want.samplers)


def test_every_sampler_has_a_default_toml_section() -> None:
    doc = tomllib.loads(DEFAULT_TOML.read_text())
    assert set(doc) == {"agent", "samplers"}
    assert set(doc["agent"]) == set(AGENT_KEYS)
    for name in REGISTRY:
        assert name in doc["samplers"], f"configs/default.toml lacks [samplers.{name}]"
        assert set(doc["samplers"][name]) == {o.key for o in OPTS[name]}
    assert set(doc["samplers"]) == set(REGISTRY)


def test_load_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(p))}: no such file$"):
        config.load(p, OPTS)


def test_load_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path))}: .*directory"):
        config.load(tmp_path, OPTS)


def test_load_binary_file(tmp_path: Path) -> None:
    p = tmp_path / "bin.toml"
    p.write_bytes(b"\xff\xfe\x00[agent]")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(p))}: not a text file"):
        config.load(p, OPTS)


def test_load_names_the_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('[agent]\n\npublish_interval = "fast"\n')
    with pytest.raises(ConfigError,
                       match=rf"^{re.escape(str(p))}:3: \[agent\] publish_interval"):
        config.load(p, OPTS)


# --- permissions: a privileged agent refuses a file others could change ----------------


@pytest.mark.parametrize(("mode", "who"), [(0o666, "its group and others"),
                                           (0o646, "others"), (0o664, "its group"),
                                           (0o622, "its group and others")])
def test_privileged_load_refuses_a_writable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 mode: int, who: str) -> None:
    monkeypatch.setattr(config, "running_privileged", lambda: True)
    p = tmp_path / "rezolus-ue.toml"
    p.write_text("[agent]\n")
    p.chmod(mode)
    with pytest.raises(ConfigError) as ei:
        config.load(p, OPTS)
    assert str(ei.value) == (f"refusing {p}: mode {mode:04o} is writable by {who};"
                             f" chmod go-w {p}")


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o444, 0o640])
def test_privileged_load_accepts_a_file_only_its_owner_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int) -> None:
    monkeypatch.setattr(config, "running_privileged", lambda: True)
    p = tmp_path / "ok.toml"
    p.write_text('[agent]\npublish_interval = "2s"\n')
    p.chmod(mode)
    assert config.load(p, OPTS).publish_interval_ns == 2_000_000_000


def test_privileged_load_refuses_another_users_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "running_privileged", lambda: True)
    monkeypatch.setattr(config.os, "geteuid", lambda: 0)
    p = tmp_path / "theirs.toml"
    p.write_text("[agent]\n")
    st = p.stat()
    fake = os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 1000, st.st_gid,
                           st.st_size, 0, 0, 0))
    with pytest.raises(ConfigError, match=rf"^refusing {re.escape(str(p))}: owned by uid 1000"):
        config.check_permissions(p, fake)


def test_unprivileged_load_accepts_a_writable_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever can write the file is already as powerful as an unprivileged agent."""
    monkeypatch.setattr(config, "running_privileged", lambda: False)
    p = tmp_path / "shared.toml"
    p.write_text("[agent]\n")
    p.chmod(0o666)
    assert config.load(p, OPTS).path == p


def test_the_check_follows_the_file_read_not_a_symlink(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "running_privileged", lambda: True)
    target = tmp_path / "real.toml"
    target.write_text("[agent]\n")
    target.chmod(0o666)
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="mode 0666"):
        config.load(link, OPTS)


def test_running_privileged_as_root_or_with_capabilities() -> None:
    caps = int(next(ln for ln in Path("/proc/self/status").read_text().splitlines()
                    if ln.startswith("CapEff:")).split()[1], 16)
    assert config.running_privileged() == (os.geteuid() == 0 or caps != 0)


# --- property: nothing but ConfigError escapes -----------------------------------------

_HEADERS = ["[agent]", "[samplers]", "[samplers.cpu_usage]", "[samplers.agent]",
            "[samplers.nope]", "[[agent]]", "[agent.sub]", "[samplers.cpu_usage.x]", "[x]",
            "[ agent ]", "[samplers.'cpu_usage']", "[[samplers.agent]]"]
_KEYS = [*AGENT_KEYS, "enabled", "agent", "samplers", "cpu_usage", "x", '"a b"',
         "agent.publish_interval", "agent.sample_interval", "interval",
         "samplers.agent.enabled", "a-b"]
_DURATIONS = st.builds(lambda n, u: f'"{n}{u}"', st.integers(0, 10**7),
                       st.sampled_from(["ns", "us", "ms", "s", "m", "h", "x", "", " s"]))
_SCALARS = st.sampled_from([
    "true", "false", "0", "-1", "5", "1.5", "inf", "nan", '""', '"info"', '"debug"',
    '"/proc"', "1979-05-27", "1979-05-27T07:32:00Z", "07:32:00", "[]", "[1, 2]", '["a"]',
    "{}", "{ enabled = true }", '{ publish_interval = "1s" }', '{ sample_interval = "2s" }',
    "'''x'''", '"""a\nb"""', "0x1F",
])
_VALUES = st.one_of(_SCALARS, _DURATIONS,
                    st.text(max_size=12).map(lambda s: '"' + s + '"'))
_LINES = st.one_of(
    st.sampled_from(_HEADERS),
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(_KEYS), _VALUES),
    st.just("# comment"),
    st.just(""),
    st.text(max_size=20),
)
_DOCS = st.one_of(st.text(max_size=200), st.lists(_LINES, max_size=12).map("\n".join))


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_DOCS)
def test_parse_returns_config_or_raises_config_error(text: str) -> None:
    try:
        c = config.parse(text, OPTS)
    except ConfigError as e:
        assert str(e).startswith("<config>")
    else:
        assert isinstance(c, config.Config)
        assert set(c.samplers) == set(REGISTRY)
        publish = next(o for o in config.AGENT_OPTIONS if o.key == "publish_interval")
        assert publish.bounds.lo <= c.publish_interval_ns <= publish.bounds.hi
        assert c.sample_interval_ns <= c.publish_interval_ns
