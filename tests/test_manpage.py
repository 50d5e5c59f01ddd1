"""The man page, man/rezolus-ue.8, documents what the code declares, and renders cleanly.

Its SYNOPSIS and every command's options are generated from ``cli.build_parser()``
(``rezolus_ue.docs``; tests/test_docs.py fails when they are stale): here, that each
command has its generated region, that the generator covers every option and hides the
hidden ones, and that the hand-written prose names no option the CLI lost. Coverage of
the other declarations is checked both ways: every ``[agent]`` and per-sampler option of
``config`` (with its default), every metric family of the catalog (one entry each, naming
its ``_dist`` companion) and so every event of ``schema.EVENTS``, and every exit status.
Commands shown for the kernel's tracing tools name both transports' groups. Rendering
runs ``man`` and ``groff`` when installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import tomlkit

from rezolus_ue import __version__, docs
from rezolus_ue import config as cfg
from rezolus_ue.agent import RUNTIME_DIR
from rezolus_ue.cli import PROG, build_parser
from rezolus_ue.errors import ConfigError, RezolusError
from rezolus_ue.metrics.catalog import FAMILIES
from rezolus_ue.metrics.family import DIST
from rezolus_ue.samplers import REGISTRY
from rezolus_ue.samplers import options as sampler_options
from rezolus_ue.schema import EVENTS, GROUPS

ROOT = Path(__file__).resolve().parent.parent
MANPAGE = ROOT / "man" / "rezolus-ue.8"
#: Columns the page must fit when rendered (``MANWIDTH=80``).
WIDTH = 80

#: Exit statuses main() returns besides the exception classes' codes.
EXIT_INTERNAL, EXIT_INTERRUPTED = 70, 130

SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "CONFIGURATION",
            "EVENTS", "CONSUMING", "REQUIREMENTS", "EXIT STATUS", "SIGNALS", "FILES",
            "EXAMPLES", "SEE ALSO")

_ESCAPES = {r"\-": "-", r"\(aq": "'", r"\(dq": '"', r"\(lq": '"', r"\(rq": '"',
            r"\(em": "--", r"\(bu": "*", r"\e": "\\", r"\%": "", r"\&": "", r"\:": "",
            r"\~": " "}
_FONT_RE = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)")
_ARG_RE = re.compile(r'"((?:[^"]|"")*)"?|(\S+)')
_OPTION_RE = re.compile(r"(?<![\w-])--?[a-z][a-z0-9-]*")
_BREAK_MACROS = (".TP", ".PP", ".P", ".LP", ".IP", ".SS", ".SH", ".RS", ".RE", ".EX")


def plain(roff: str) -> str:
    """Return roff with font changes and common escapes reduced to text (macros stay)."""
    text = _FONT_RE.sub("", roff)
    for esc, char in _ESCAPES.items():
        text = text.replace(esc, char)
    return text


def tag_text(line: str) -> str:
    """Return the text a line prints: a font macro's arguments joined as roff does."""
    if not line.startswith("."):
        return plain(line).strip()
    macro, _, rest = line.partition(" ")
    args = []
    for m in _ARG_RE.finditer(rest):
        quoted, word = m.groups()
        args.append(word if quoted is None else quoted.replace('""', '"'))
    # .B and .I join their arguments with spaces; .BR, .IR, ... alternate fonts, no spaces.
    sep = " " if macro in (".B", ".I", ".SM", ".SB", ".SH", ".SS") else ""
    return plain(sep.join(args)).strip()


def split_by(text: str, macro: str) -> dict[str, str]:
    """Return the bodies of ``text`` under each ``macro`` heading (.SH or .SS), by title."""
    out: dict[str, str] = {}
    title = None
    for line in text.splitlines():
        if line.startswith(macro + " "):
            title = tag_text(line)
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


def tagged_paragraphs(text: str) -> dict[str, str]:
    """Return each .TP tag (the line after .TP, as text) mapped to its paragraph."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.split(" ")[0] == ".TP" and i + 1 < len(lines):
            body = []
            for nxt in lines[i + 2:]:
                if nxt.split(" ")[0] in _BREAK_MACROS:
                    break
                body.append(nxt)
            out[tag_text(lines[i + 1])] = "\n".join(body)
    return out


def mentions(text: str, word: str) -> bool:
    """Return whether ``word`` occurs in roff ``text`` as a whole word or option."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", plain(text)) is not None


@cache
def page() -> str:
    """Return the roff source without comment lines."""
    lines = MANPAGE.read_text().splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith(('.\\"', "'\\\""))) + "\n"


@cache
def sections() -> dict[str, str]:
    return split_by(page(), ".SH")


@cache
def prose() -> str:
    """Return the roff source written by hand: without the generated regions."""
    return docs._REGION.sub("", MANPAGE.read_text())


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Return the parser's subcommands by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Return the parser's option actions (not positionals, not the subcommand action)."""
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def toml_value(value: object) -> str:
    return tomlkit.item(value).as_string()


# --- structure ---------------------------------------------------------------------------

def test_sections_in_order() -> None:
    titles = list(sections())
    assert [t for t in titles if t in SECTIONS] == list(SECTIONS), titles


def test_title_names_the_current_version() -> None:
    th = next(ln for ln in page().splitlines() if ln.startswith(".TH "))
    fields = shlex.split(th)
    assert fields[1:3] == [PROG.upper(), "8"], th
    assert fields[4] == f"{PROG} {__version__}", f"update the .TH line of {MANPAGE.name}"


# --- command line ------------------------------------------------------------------------

def test_commands_section_has_one_subsection_per_subcommand() -> None:
    documented = set(split_by(sections()["COMMANDS"], ".SS"))
    assert documented == set(subcommands(build_parser()))


def test_each_command_has_its_generated_region() -> None:
    """The SYNOPSIS, OPTIONS and each command's subsection hold the region the parser
    writes, in the page's order."""
    raw = MANPAGE.read_text()
    keys = re.findall(r'^\.\\" BEGIN ([^:\n]+):', raw, re.M)
    assert keys == list(docs.man_regions(build_parser()))
    top = split_by(raw, ".SH")
    assert '.\\" BEGIN synopsis:' in top["SYNOPSIS"]
    assert '.\\" BEGIN options:' in top["OPTIONS"]
    for name, body in split_by(top["COMMANDS"], ".SS").items():
        assert f'.\\" BEGIN options of {name}:' in body, name


def _documents(parser: argparse.ArgumentParser, body: str, synopsis: str) -> None:
    """Assert that ``body`` has a .TP entry per option of ``parser`` (every option
    string and the metavar in its tag) and that ``synopsis`` shows each option."""
    tags = tagged_paragraphs(body)
    for action in options(parser):
        tag = next((t for t in tags if any(mentions(t, o) for o in action.option_strings)),
                   None)
        assert tag is not None, f"{parser.prog} {action.option_strings}: no .TP entry"
        for opt in action.option_strings:
            assert mentions(tag, opt), f"{parser.prog}: {opt} missing from '{tag}'"
        if action.metavar:
            assert mentions(tag, str(action.metavar)), f"{parser.prog}: metavar of '{tag}'"
        assert any(mentions(synopsis, o) for o in action.option_strings), (
            f"{parser.prog} {action.option_strings} missing from SYNOPSIS")


@pytest.mark.parametrize("command", sorted(subcommands(build_parser())))
def test_subcommand_options_are_documented(command: str) -> None:
    sub = subcommands(build_parser())[command]
    synopsis = sections()["SYNOPSIS"]
    assert mentions(synopsis, command), f"{command} missing from SYNOPSIS"
    _documents(sub, split_by(sections()["COMMANDS"], ".SS")[command], synopsis)


def test_global_options_are_documented() -> None:
    _documents(build_parser(), sections()["OPTIONS"], sections()["SYNOPSIS"])


def test_nested_actions_are_documented() -> None:
    """``config check`` and ``config show``: a .TP entry each, and in the SYNOPSIS."""
    parser = subcommands(build_parser())["config"]
    actions = subcommands(parser)
    assert set(actions) == {"check", "show"}
    tags = tagged_paragraphs(split_by(sections()["COMMANDS"], ".SS")["config"])
    synopsis = " ".join(plain(sections()["SYNOPSIS"]).split())
    for name, sub in actions.items():
        tag = next((t for t in tags if t.split()[0] == name), None)
        assert tag is not None, f"config {name}: no .TP entry"
        positional = [a for a in sub._actions if not a.option_strings]
        assert all(mentions(tag, str(a.metavar)) for a in positional), tag
        assert mentions(synopsis, f"config {name}"), f"config {name} missing from SYNOPSIS"


def _parsers() -> list[argparse.ArgumentParser]:
    """Return the program's parser, its commands' and their actions'."""
    out = [build_parser()]
    for p in out:
        out += subcommands(p).values()
    return out


def test_hidden_options_stay_hidden() -> None:
    hidden = {o for p in _parsers() for a in p._actions if a.help == argparse.SUPPRESS
              for o in a.option_strings}
    assert hidden, "no hidden option left: this test checks nothing"
    assert not [o for o in hidden if mentions(page(), o)]


#: An option named on its own by a font macro of the prose: ``.B \-\-costly``.
_PROSE_OPTION = re.compile(r'^\.(?:B|BR|BI|RB|IR)\s+"?((?:\\-){1,2}[a-z][\w\\-]*)', re.M)


def test_prose_names_only_existing_options() -> None:
    """The hand-written prose (CONSUMING aside: it is about other tools) names no option
    that no command has any more."""
    known = {o for p in _parsers() for a in options(p) for o in a.option_strings}
    body = "".join(b for t, b in split_by(prose(), ".SH").items() if t != "CONSUMING")
    named = {plain(o) for o in _PROSE_OPTION.findall(body)}
    assert named, "no option found in the prose: update _PROSE_OPTION"
    assert not named - known


def test_config_page_is_referenced() -> None:
    see = plain(sections()["SEE ALSO"])
    assert re.search(r"^\.BR rezolus-ue\.toml \(5\)", see, re.M)
    assert (ROOT / "man" / "rezolus-ue.toml.5").exists()


# --- configuration -----------------------------------------------------------------------

def _config_subsection(prefix: str) -> str:
    subs = split_by(sections()["CONFIGURATION"], ".SS")
    return next(body for title, body in subs.items() if title.startswith(prefix))


def test_agent_options_with_defaults() -> None:
    tags = set(tagged_paragraphs(_config_subsection("[agent]")))
    assert tags == {f"{o.key} = {toml_value(o.toml_default())}" for o in cfg.AGENT_OPTIONS}


def test_every_agent_option_key_appears() -> None:
    for opt in cfg.AGENT_OPTIONS:
        assert mentions(page(), opt.key), opt.key


def _option_tag(o: cfg.Option) -> str:
    return f"{o.key} = {toml_value(o.toml_default())}"


def test_sampler_options_with_defaults() -> None:
    body = _config_subsection("[samplers.")
    tags = set(tagged_paragraphs(body))
    assert tags == {_option_tag(o) for o in cfg.SAMPLER_OPTIONS}
    for name in REGISTRY:
        assert mentions(body, name), f"sampler {name} not named"


def _sampler_subsections() -> dict[str, str]:
    """Return the bodies of the "[samplers.NAME] options" subsections, by sampler name."""
    out = {}
    for title, body in split_by(sections()["CONFIGURATION"], ".SS").items():
        m = re.fullmatch(r"\[samplers\.(\w+)\] options", title)
        if m and m.group(1) != "name":  # not the common "[samplers.name] options"
            out[m.group(1)] = body
    return out


def test_sampler_specific_options_with_defaults() -> None:
    """Each sampler's own options (beyond the common ones) in a subsection of its own."""
    subs = _sampler_subsections()
    common = {o.key for o in cfg.SAMPLER_OPTIONS}
    want = {name: {_option_tag(o) for o in opts if o.key not in common}
            for name, opts in sampler_options().items()}
    want = {name: tags for name, tags in want.items() if tags}
    assert set(subs) - set(REGISTRY) == set(), "options documented for unregistered samplers"
    assert {name: set(tagged_paragraphs(body)) for name, body in subs.items()} == want


def test_every_catalog_sampler_is_named() -> None:
    body = _config_subsection("[samplers.")
    for name in {f.sampler for f in FAMILIES}:
        assert mentions(body, name), f"sampler {name} not named"


def test_sample_interval_is_explained() -> None:
    desc = sections()["DESCRIPTION"]
    for word in ("_dist", "sample_interval", "publish_interval"):
        assert mentions(desc, word), word
    tags = tagged_paragraphs(_config_subsection("[agent]"))
    sample = next(body for tag, body in tags.items() if tag.startswith("sample_interval"))
    assert mentions(sample, "publish_interval") and mentions(sample, "--sample-interval")


def test_config_lookup_is_documented() -> None:
    body = sections()["CONFIGURATION"]
    assert str(cfg.SYSTEM_CONFIG) in plain(body)
    assert mentions(body, "--config")
    assert str(cfg.SYSTEM_CONFIG) in tagged_paragraphs(sections()["FILES"])


# --- events and exit status --------------------------------------------------------------

def test_events_section_has_one_entry_per_family() -> None:
    paras = tagged_paragraphs(sections()["EVENTS"])
    assert set(paras) == {f.event for f in FAMILIES}
    for f in FAMILIES:
        body = paras[f.event]
        assert mentions(body, f.sampler), f"{f.event}: sampler {f.sampler}"
        if f.dist_schema is None:
            assert not mentions(body, f.event + "_dist"), f"{f.event} has no _dist event"
        else:
            assert mentions(body, f.dist_schema.name), f"{f.event}: {f.dist_schema.name}"


def test_events_section_names_every_event() -> None:
    body = sections()["EVENTS"]
    missing = [e.name for e in EVENTS if not mentions(body, e.name)]
    assert not missing
    assert "docs/events.md" in body
    assert "/format" in body


def test_events_section_explains_the_dist_fields() -> None:
    body = sections()["EVENTS"]
    for field in ("metric", "value", *(suffix for suffix, _ in DIST)):
        assert mentions(body, field), field


def test_tracing_commands_name_both_transports() -> None:
    """Whatever names our tracepoints by group (``user_events:rezolus_*``, a tracefs path,
    a bpftrace probe) is shown for the other transport's group too; the rest, such as
    ftrace's ``set_event``, works as written on both."""
    lines = [tag_text(ln) for ln in page().splitlines()]
    text = "\n".join(lines)
    named = 0
    for group in GROUPS.values():
        for ln in lines:
            pattern = rf"[^\s(),;]*\b{group}(?::rezolus_|:name|/)[^\s(),;]*"
            for token in re.findall(pattern, ln):
                named += 1
                for other in set(GROUPS.values()) - {group}:
                    assert token.replace(group, other) in text, (token, other)
    assert named


def test_runtime_files_are_documented() -> None:
    files = tagged_paragraphs(sections()["FILES"])
    for name in ("agent.lock", "status.json"):
        assert str(RUNTIME_DIR / name) in files or any(
            t.endswith("/" + name) for t in files), name
    assert "REZOLUS_UE_RUNTIME_DIR" in tagged_paragraphs(sections()["ENVIRONMENT"])


def test_exit_statuses() -> None:
    codes = {int(t) for t in tagged_paragraphs(sections()["EXIT STATUS"])}
    assert codes == {0, RezolusError.exit_code, ConfigError.exit_code, EXIT_INTERNAL,
                     EXIT_INTERRUPTED}


def test_see_also() -> None:
    see = plain(sections()["SEE ALSO"])
    for ref in ("perf-record", "perf-script", "trace-cmd"):
        assert re.search(rf"^\.BR {ref} \(1\)", see, re.M), ref
    assert "Documentation/trace/user_events.rst" in see


# --- rendering ---------------------------------------------------------------------------

def _render_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAN_KEEP_FORMATTING", "MANOPT", "MANPAGER", "PAGER", "MANROFFOPT")}
    env["MANWIDTH"] = str(WIDTH)
    return env


def _render() -> subprocess.CompletedProcess[str]:
    if shutil.which("man"):
        cmd = ["man", "-l", "-P", "cat", str(MANPAGE)]
    elif shutil.which("groff"):
        # What man does, minus the pager: plain ASCII text, no overstriking.
        cmd = ["groff", "-man", "-Tascii", f"-rLL={WIDTH - 2}n", "-P-cbou", str(MANPAGE)]
    else:
        pytest.skip("neither man nor groff is installed (apt-get install man-db groff-base)")
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                          env=_render_env(), timeout=60, check=False)


def test_renders() -> None:
    out = _render()
    assert out.returncode == 0, out.stderr
    assert PROG in out.stdout
    assert "SYNOPSIS" in out.stdout
    for title in SECTIONS:
        assert re.search(rf"^{title}$", out.stdout, re.M), f"{title} not rendered"
    wide = [ln for ln in out.stdout.splitlines() if len(ln) > WIDTH]
    assert not wide, f"lines wider than {WIDTH} columns: {wide}"


@pytest.mark.parametrize("device", ["", "-Tutf8", "-Tascii"])
def test_groff_warnings(device: str) -> None:
    if not shutil.which("groff"):
        pytest.skip("groff is not installed (apt-get install groff-base)")
    cmd = ["groff", "-man", "-ww", "-z", *([device] if device else []), str(MANPAGE)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_render_env(), timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
