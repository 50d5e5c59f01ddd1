"""The generated files (docs/events.md, configs/default.toml, the man pages' generated
parts, ...) match their declarations, and generating them gives the same text anywhere."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rezolus_ue import docs
from rezolus_ue.schema import EVENTS, GROUPS

ROOT = Path(__file__).resolve().parent.parent


def test_generated_files_are_fresh() -> None:
    stale = docs.stale()
    assert stale == [], f"stale: {', '.join(stale)}; run `python -m rezolus_ue.docs`"


def test_docs_check_command() -> None:
    p = subprocess.run([sys.executable, "-m", "rezolus_ue.docs", "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""


def test_stale_detects_missing_and_edited_files(tmp_path: Path) -> None:
    assert sorted(docs.stale(tmp_path)) == sorted(docs.GENERATED)
    for rel in docs.GENERATED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert docs.stale(tmp_path) == []
    events_md = tmp_path / "docs" / "events.md"
    events_md.write_text(events_md.read_text() + "\nhand edit\n")
    assert docs.stale(tmp_path) == ["docs/events.md"]


def test_docs_check_from_another_installation(tmp_path: Path) -> None:
    """Nothing generated depends on where the interpreter lives (as help texts that name
    this installation's paths would): --check passes from a copy of it elsewhere."""
    bindir = tmp_path / "elsewhere" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, sys.path)])}
    p = subprocess.run([str(bindir / "python"), "-m", "rezolus_ue.docs", "--check"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_event_reference_names_both_transports_first() -> None:
    head = docs.event_reference().split("\n## ", 1)[0]
    for group in GROUPS.values():
        assert f"`{group}:<name>`" in head, group
        assert f"perf record -e '{group}:rezolus_*' -a" in head, group
    assert "user_events:<name>`, registered" not in head


def test_event_reference_covers_every_field() -> None:
    text = docs.event_reference()
    for e in EVENTS:
        assert f"## `{e.name}`" in text
        assert f"Registered as: `{e.name_args}`" in text
        for f in e.fields:
            assert f"| `{f.name}` | `{f.type.decl}` |" in text


def test_event_reference_offsets_follow_the_common_header() -> None:
    """Offsets count from the record start, as the tracefs format file does (8-byte header)."""
    text = docs.event_reference()
    offset = 8
    for f in EVENTS[0].fields:
        assert f"| `{f.name}` | `{f.type.decl}` | {offset} |" in text
        offset += f.type.size


# --- man/rezolus-ue.toml.5 ----------------------------------------------------------------

def _man5_tags() -> list[str]:
    """Return the .TP tags of the config man page as plain text."""
    lines = docs.config_manpage().splitlines()
    tags = [lines[i + 1] for i, ln in enumerate(lines) if ln == ".TP"]
    return [t.removeprefix(".B ").replace("\\-", "-").replace("\\(dq", '"') for t in tags
            if t.startswith(".B ")]


def test_config_manpage_has_every_option_with_its_default_and_range() -> None:
    import tomlkit

    from rezolus_ue.config import AGENT_OPTIONS, SAMPLER_OPTIONS, TRIGGER_OPTIONS
    from rezolus_ue.samplers import REGISTRY, options

    text = docs.config_manpage()
    tags = _man5_tags()
    want = [f"{o.key} = {tomlkit.item(o.toml_default()).as_string()}"
            for o in (*AGENT_OPTIONS, *SAMPLER_OPTIONS)]
    for name, cls in REGISTRY.items():
        assert f'.SS "[samplers.{name}]"' in text, name
        want += [f"{o.key} = {tomlkit.item(o.toml_default()).as_string()}"
                 for o in cls.options if o.key not in {c.key for c in SAMPLER_OPTIONS}]
    want += [o.key if o.default is None else
             f"{o.key} = {tomlkit.item(o.toml_default()).as_string()}" for o in TRIGGER_OPTIONS]
    assert tags == want
    for name, opts in options().items():
        for o in (*AGENT_OPTIONS, *opts):
            assert docs._roff(f"Accepts {o.allowed()}.") in text, (name, o.key)


def test_config_manpage_renders_cleanly() -> None:
    page = ROOT / "man" / "rezolus-ue.toml.5"
    if not shutil.which("groff"):
        import pytest

        pytest.skip("groff is not installed (apt-get install groff-base)")
    warn = subprocess.run(["groff", "-man", "-ww", "-z", str(page)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert warn.returncode == 0 and warn.stderr == ""
    out = subprocess.run(["groff", "-man", "-Tascii", "-rLL=78n", "-P-cbou", str(page)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and "rezolus-ue.toml" in out.stdout
    assert "publish_interval = \"1s\"" in out.stdout
    wide = [ln for ln in out.stdout.splitlines() if len(ln) > 80]
    assert not wide


# --- man/rezolus-ue.8: the parts generated from the CLI's parser -------------------------

def _toy() -> argparse.ArgumentParser:
    """Return a parser with one of each kind of argument the generator renders."""
    p = argparse.ArgumentParser(prog="toy")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version="1")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    go = sub.add_parser("go", help="go somewhere")
    go.add_argument("target", metavar="FILE", help="where to go, see `toy-go`")
    go.add_argument("extra", nargs="*", metavar="EVENT", help="what to take")
    go.add_argument("-f", "--format", choices=("text", "json"), help="text or json")
    go.add_argument("--delete", nargs="*", metavar="NAME", help="delete NAME, or all")
    go.add_argument("--secret", help=argparse.SUPPRESS)
    src = go.add_mutually_exclusive_group()
    src.add_argument("--ring", metavar="DIR", help="the ring")
    src.add_argument("--from", dest="source", metavar="FILE", help="a recording")
    cfg = sub.add_parser("cfg", help="configure")
    actions = cfg.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", description="Print FILE. Then stop.")
    show.add_argument("file", nargs="?", metavar="FILE", help="the file")
    sub.add_parser("hidden", help=argparse.SUPPRESS)
    return p


def test_synopsis_of_every_kind_of_argument() -> None:
    lines = docs.man_regions(_toy())["synopsis"]
    text = "\n".join(lines)
    assert lines.count(".SY \\%toy") == lines.count(".YS") == 4  # go, cfg show, -h, COMMAND
    assert "[\\fB\\-f\\fR\\~\\fBtext\\fR|\\fBjson\\fR]" in lines
    assert "[\\fB\\-\\-delete\\fR\\~[\\fINAME\\fR\\~...]]" in lines
    assert "[\\fB\\-\\-ring\\fR\\~\\fIDIR\\fR | \\fB\\-\\-from\\fR\\~\\fIFILE\\fR]" in lines
    assert lines.index("\\fIFILE\\fR") < lines.index("[\\fIEVENT\\fR\\~...]")  # positionals last
    assert "\\fBcfg\\fR\n\\fBshow\\fR\n[\\fIFILE\\fR]" in text
    assert "\\fB\\-h\\fR | \\fB\\-\\-version\\fR" in lines
    assert "secret" not in text and "hidden" not in text


def test_option_entries_come_from_the_help() -> None:
    regions = docs.man_regions(_toy())
    assert set(regions) == {"synopsis", "options", "options of go", "options of cfg"}
    go = regions["options of go"]
    assert go[:3] == [".TP", "\\fIFILE\\fR", "Where to go, see \\fBtoy\\-go\\fR."]
    assert "\\fB\\-f\\fR, \\fB\\-\\-format\\fR \\fBtext\\fR|\\fBjson\\fR" in go
    assert "Delete \\fINAME\\fR, or all." in go  # the metavar in italics
    assert go[-3:] == [".TP", "\\fB\\-h\\fR, \\fB\\-\\-help\\fR",
                       "Print help for \\fBgo\\fR and exit."]
    assert not any("secret" in ln for ln in go)
    cfg = regions["options of cfg"]
    assert cfg[:6] == [".TP", "\\fBshow\\fR [\\fIFILE\\fR]", "Print \\fIFILE\\fR.\nThen stop.",
                       ".RS", ".TP", "\\fIFILE\\fR"]
    assert regions["options"][:3] == [".TP", "\\fB\\-\\-debug\\fR", "Show tracebacks."]


def test_regions_are_filled_between_their_markers() -> None:
    text = 'prose\n.\\" BEGIN a: old note\nold\n.\\" END a\nmore prose\n'
    out = docs.fill_regions(text, {"a": ["new"]})
    assert out.startswith("prose\n") and out.endswith("new\n.\\\" END a\nmore prose\n")
    assert "old" not in out
    assert docs.fill_regions(out, {"a": ["new"]}) == out
    with pytest.raises(ValueError, match="no region 'b'"):
        docs.fill_regions(text, {"a": [], "b": []})
    with pytest.raises(ValueError, match="region 'a' is generated no more"):
        docs.fill_regions(text, {})


def test_roff_escapes_what_is_typed() -> None:
    assert docs._roff("use --now, not -x; see /etc/rezolus-ue and rezolus-ue") == (
        "use \\-\\-now, not \\-x; see /etc/rezolus\\-ue and rezolus\\-ue")
    assert docs._roff("a built-in `rezolus-ue run`") == "a built-in \\fBrezolus\\-ue run\\fR"
    assert docs._roff(".starts with a dot") == "\\&.starts with a dot"
