"""The generated files (docs/events.md, configs/default.toml) match their declarations."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from rezolus_ue import docs
from rezolus_ue.schema import EVENTS

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

    from rezolus_ue.config import AGENT_OPTIONS, SAMPLER_OPTIONS
    from rezolus_ue.samplers import REGISTRY, options

    text = docs.config_manpage()
    tags = _man5_tags()
    want = [f"{o.key} = {tomlkit.item(o.toml_default()).as_string()}"
            for o in (*AGENT_OPTIONS, *SAMPLER_OPTIONS)]
    for name, cls in REGISTRY.items():
        assert f'.SS "[samplers.{name}]"' in text, name
        want += [f"{o.key} = {tomlkit.item(o.toml_default()).as_string()}"
                 for o in cls.options if o.key not in {c.key for c in SAMPLER_OPTIONS}]
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
