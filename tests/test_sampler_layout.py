"""One home per sampler: every registered sampler is a folder rezolus_ue/samplers/<name>/
declaring its families and options, every BPF sampler has bpf/<name>.bpf.c and
bpf/<name>.h, and nothing in either place belongs to no sampler."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from rezolus_ue.bpf import build
from rezolus_ue.metrics import catalog
from rezolus_ue.samplers import NAMES, REGISTRY
from rezolus_ue.samplers.base import FamilySampler, Sampler
from rezolus_ue.samplers.bpf_sampler import BpfSampler

PACKAGE = Path(importlib.import_module("rezolus_ue.samplers").__file__ or "").parent


def test_every_sampler_folder_is_registered_and_every_registered_sampler_has_one() -> None:
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(NAMES)
    assert all((PACKAGE / n / "sampler.py").is_file() for n in NAMES)
    assert list(REGISTRY) == list(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_sampler_publishes_and_declares_what_its_folder_says(name: str) -> None:
    package = importlib.import_module(f"rezolus_ue.samplers.{name}")
    cls = REGISTRY[name]
    assert cls.name == name
    assert cls.families == package.FAMILIES
    assert all(f.sampler == name for f in package.FAMILIES), "family declared for another"
    own = getattr(package, "OPTIONS", ())
    assert all(o in cls.options for o in own)
    assert package.__doc__ and "Events" in package.__doc__, "docstring lists its events"


@pytest.mark.parametrize("name", NAMES)
def test_a_sampler_reads_in_the_one_shape_and_publishes_through_the_one_helper(
        name: str) -> None:
    cls = REGISTRY[name]
    assert cls.capture is not Sampler.capture and cls.parse is not Sampler.parse
    if issubclass(cls, BpfSampler):
        assert cls.parse is not BpfSampler.parse
    assert cls.publish in (Sampler.publish, FamilySampler.publish)
    assert cls.publish_rows is Sampler.publish_rows and cls.emit is Sampler.emit
    if issubclass(cls, BpfSampler):  # every family is read from maps it declares
        assert {f for f, _m in (*cls.histograms, *cls.reads)} == set(cls.families)


def test_only_the_base_writes_records() -> None:
    writers = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if ".emit(" in p.read_text() or ".publish_rows(" in p.read_text()]
    assert writers == ["base.py"]


def test_the_catalog_is_the_samplers_families_and_nothing_else() -> None:
    declared = [f for n in NAMES for f in importlib.import_module(
        f"rezolus_ue.samplers.{n}").FAMILIES]
    assert list(catalog.FAMILIES) == declared
    assert len({f.event for f in declared}) == len(declared)


def test_every_bpf_sampler_has_its_source_and_header_named_after_it() -> None:
    for name, cls in REGISTRY.items():
        if issubclass(cls, BpfSampler):
            assert (build.SOURCE_DIR / f"{name}.bpf.c").is_file(), name
            assert (build.SOURCE_DIR / f"{name}.h").is_file(), name


def test_every_bpf_source_and_header_belongs_to_a_bpf_sampler() -> None:
    bpf = {n for n, cls in REGISTRY.items() if issubclass(cls, BpfSampler)}
    sources = {p.name.removesuffix(".bpf.c") for p in build.sources()}
    headers = {p.name.removesuffix(".h") for p in build.SOURCE_DIR.glob("*.h")}
    assert sources == bpf
    assert headers == bpf, "shared headers belong in bpf/include/"


def test_readme_layout_names_paths_that_exist_and_every_top_level_folder() -> None:
    root = build.ROOT
    text = (root / "README.md").read_text()
    section = text[text.index("## Layout"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    missing = [p for p in listed if not (root / p).exists()]
    assert not missing, f"README's layout names paths that do not exist: {missing}"
    folders = {p.name + "/" for p in root.iterdir()
               if p.is_dir() and not p.name.startswith(".") and _tracked(root, p.name)}
    assert folders <= set(listed), f"top-level folders missing from README's layout:" \
                                   f" {folders - set(listed)}"


def _tracked(root: Path, name: str) -> bool:
    import subprocess

    out = subprocess.run(["git", "-C", str(root), "ls-files", name], capture_output=True,
                         text=True)
    return bool(out.stdout.strip())
