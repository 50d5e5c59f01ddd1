"""Kept-open files: whole-file rereads, the per-tick read shared by several holders, and
that closing is per holder. Files here are ordinary files rewritten in place, as procfs
regenerates its text (same inode, new contents)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import rewrite_in_place

from rezolus_ue.errors import PermissionDenied
from rezolus_ue.linux.procfs import KeptOpen
from rezolus_ue.samplers.base import SharedFiles


def test_read_rereads_from_the_start(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"one\n")
    with KeptOpen(p) as f:
        assert f.read() == b"one\n"
        rewrite_in_place(p, b"two two\n")
        assert f.read() == b"two two\n"
        assert f.read_text() == "two two\n"


def test_read_grows_past_its_buffer(tmp_path: Path) -> None:
    p = tmp_path / "big"
    data = bytes(range(256)) * 1000  # 256000 bytes, several times the first buffer
    p.write_bytes(data)
    with KeptOpen(p) as f:
        assert f.read() == data


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        KeptOpen(tmp_path / "missing")
    if os.geteuid() != 0:
        p = tmp_path / "secret"
        p.write_bytes(b"x")
        p.chmod(0)
        with pytest.raises(PermissionDenied):
            KeptOpen(p)


def test_read_at_reads_once_per_stamp(tmp_path: Path) -> None:
    p = tmp_path / "stat"
    p.write_bytes(b"a\n")
    with KeptOpen(p) as f:
        assert f.read_at(10) == b"a\n"
        rewrite_in_place(p, b"b\n")
        assert f.read_at(10) == b"a\n"  # same tick: the bytes already read
        assert f.read_at(11) == b"b\n"  # next tick: read again
        rewrite_in_place(p, b"c\n")
        assert f.read_at(None) == b"c\n"  # no stamp: always read...
        rewrite_in_place(p, b"d\n")
        assert f.read_at(None) == b"d\n"  # ... and never reused


def test_shared_holders_share_one_read_per_stamp(tmp_path: Path) -> None:
    shared = SharedFiles().open  # the agent's: one per agent
    p = tmp_path / "stat"
    p.write_bytes(b"a\n")
    cpu, sched = shared(p), shared(p)
    try:
        assert cpu.read_at(1) == b"a\n"
        rewrite_in_place(p, b"b\n")
        assert sched.read_at(1) == b"a\n"  # what cpu read in this tick
        assert sched.read_at(2) == b"b\n"
        assert cpu.read_at(2) == b"b\n"
        assert cpu.read() == b"b\n"
    finally:
        cpu.close()
        sched.close()


def test_shared_file_stays_open_until_its_last_holder_closes(tmp_path: Path) -> None:
    shared = SharedFiles().open  # the agent's: one per agent
    p = tmp_path / "stat"
    p.write_bytes(b"a\n")
    before = len(os.listdir("/proc/self/fd"))
    first, second = shared(p), shared(p)
    assert len(os.listdir("/proc/self/fd")) == before + 1  # one fd for both
    first.close()
    first.close()  # idempotent: does not release the other holder's share
    assert second.read() == b"a\n"
    with pytest.raises(AssertionError, match="read after close"):
        first.read()
    second.close()
    assert len(os.listdir("/proc/self/fd")) == before
    third = shared(p)  # opened afresh
    try:
        assert third.read_at(None) == b"a\n"
    finally:
        third.close()


def test_shared_open_error_leaves_nothing_behind(tmp_path: Path) -> None:
    shared = SharedFiles().open  # the agent's: one per agent
    with pytest.raises(FileNotFoundError):
        shared(tmp_path / "missing")
    p = tmp_path / "missing"
    p.write_bytes(b"now here")
    f = shared(p)
    try:
        assert f.read() == b"now here"
    finally:
        f.close()


def test_read_view_reads_what_read_reads_into_one_kept_buffer(tmp_path: Path) -> None:
    p = tmp_path / "big"
    texts = [b"x" * 200_000, b"y" * 70_000, b"z" * 300_000 + b"\n", b""]
    p.write_bytes(texts[0])
    with KeptOpen(p) as f:
        views = []
        for text in texts:
            rewrite_in_place(p, text)
            views.append(f.read_view())
            assert bytes(views[-1]) == f.read() == text
        assert views[0].obj is views[1].obj and views[3].obj is views[2].obj  # kept
