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
