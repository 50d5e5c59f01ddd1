"""The processes sampler: parsers, ranking and dedup, top N options, first-seen and reused
pids, exits mid-read, exited CPU, the summary and units, against the fixture procfs tree
``tests/fixtures/procfs/processes/`` (a copy, changed between walks in place, as procfs
regenerates its text); then procfs's own behaviour on this host.

Golden file: ``tests/fixtures/procfs/processes.expected.json`` holds the records of the
first walk of the fixture tree; regenerate it with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest
tests/test_sampler_processes.py`` after a deliberate change and review the diff.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FakeHandle, check_golden, decoded, start_sampler

from rezolus_ue.samplers.processes import PROCESS, PROCESSES
from rezolus_ue.samplers.processes import sampler as sampler_mod
from rezolus_ue.samplers.processes.sampler import (
    Processes,
    Stat,
    parse_cgroup,
    parse_io,
    parse_loadavg,
    parse_stat,
    parse_status,
    schedstat_works,
)
from rezolus_ue.samplers.ranked import Kept, growth, rank
from rezolus_ue.samplers.scheduler.sampler import parse_stat_scheduler

FIXTURE = Path(__file__).parent / "fixtures" / "procfs" / "processes"
TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
#: Fields of a stat line after the ") " that ends comm (field 3, state, is 0).
STAT_FIELD = {"state": 0, "ppid": 1, "utime": 11, "stime": 12, "cutime": 13, "cstime": 14,
              "threads": 17, "start": 19, "rss": 21}


# --- procfs's behaviour on a fixture tree ----------------------------------------------


class Procfs:
    """Stands in procfs's answers on a fixture tree: a kept-open file whose file was
    removed reads ESRCH (a reaped task's), ``denied_open`` paths refuse to open with
    EPERM (hidepid), ``denied_read`` ones read EACCES (io without ptrace access)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.denied_open: set[str] = set()
        self.denied_read: set[str] = set()
        real_open, real_pread = os.open, os.pread

        def fake_open(path, flags, *args, **kw):  # type: ignore[no-untyped-def]
            if str(path) in self.denied_open:
                raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
            return real_open(path, flags, *args, **kw)

        def fake_pread(fd: int, size: int, offset: int) -> bytes:
            if os.fstat(fd).st_nlink == 0:
                raise ProcessLookupError(errno.ESRCH, "No such process")
            if os.readlink(f"/proc/self/fd/{fd}") in self.denied_read:
                raise PermissionError(errno.EACCES, "Permission denied")
            return real_pread(fd, size, offset)

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(sampler_mod, "_pread", fake_pread)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Return a writable copy of the fixture procfs tree."""
    shutil.copytree(FIXTURE, tmp_path / "proc")
    return tmp_path / "proc"


@pytest.fixture
def procfs(monkeypatch: pytest.MonkeyPatch) -> Procfs:
    return Procfs(monkeypatch)


def set_stat(tree: Path, pid: int, ran: bool = True, **fields: object) -> None:
    """Rewrite fields of a process's stat in place; ``ran``: its schedstat moves too."""
    p = tree / str(pid) / "stat"
    head, _, tail = p.read_bytes().rpartition(b") ")
    f = tail.split()
    for name, value in fields.items():
        f[STAT_FIELD[name]] = str(value).encode()
    p.write_bytes(head + b") " + b" ".join(f) + b"\n")
    if ran:
        _ran(tree, pid)


def set_io(tree: Path, pid: int, read: int, write: int) -> None:
    """Rewrite a process's io counters (it ran to do that IO: its schedstat moves)."""
    p = tree / str(pid) / "io"
    lines = p.read_text().splitlines()
    lines[4], lines[5] = f"read_bytes: {read}", f"write_bytes: {write}"
    p.write_text("\n".join(lines) + "\n")
    _ran(tree, pid)


def _ran(tree: Path, pid: int) -> None:
    ss = tree / str(pid) / "schedstat"
    n = ss.read_text().split()
    ss.write_text(f"{int(n[0]) + 1000} {n[1]} {int(n[2]) + 1}\n")


def add_process(tree: Path, pid: int, like: int, **fields: object) -> None:
    """Create process ``pid`` with ``like``'s files, then ``fields`` in its stat."""
    shutil.copytree(tree / str(like), tree / str(pid))
    p = tree / str(pid) / "stat"
    p.write_bytes(str(pid).encode() + p.read_bytes()[len(str(like)):])
    set_stat(tree, pid, **fields)


def stat_of(tree: Path, pid: int) -> Stat:
    return parse_stat((tree / str(pid) / "stat").read_bytes())


class Run:
    """A started sampler on a tree, every event enabled, with a boot-time clock to set."""

    def __init__(self, tree: Path, **over: object) -> None:
        self.handles = {e.name: FakeHandle() for e in Processes.events()}
        self.s, _ = start_sampler(Processes, tree, tree, handles=self.handles, **over)
        self.clock_tick = 7000  # after every fixture process's start
        self.s._boottime_ns = lambda: self.clock_tick * TICK
        self.t = 0

    def walk(self, ticks: int = 100) -> tuple[list[dict[str, object]], dict[str, object]]:
        """Publish once, ``ticks`` clock ticks after the previous walk; return the
        rezolus_process records and the rezolus_processes one."""
        for h in self.handles.values():
            h.payloads.clear()
        self.clock_tick += ticks
        self.t += 1
        self.s.sample(self.t)
        self.s.publish()
        summary = decoded(PROCESSES.schema, self.handles)
        return decoded(PROCESS.schema, self.handles), summary[0] if summary else {}

    def close(self) -> None:
        self.s.close()


@pytest.fixture
def run(tree: Path, procfs: Procfs) -> Iterator[Run]:
    r = Run(tree)
    yield r
    r.close()


def pids(records: list[dict[str, object]]) -> list[object]:
    return [r["pid"] for r in records]


def by_pid(records: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    return {r["pid"]: r for r in records}


# --- the fixture tree -----------------------------------------------------------------


def test_golden_first_walk(run: Run) -> None:
    records, summary = run.walk()
    check_golden(FIXTURE.parent / "processes.expected.json",
                 {"records": records, "summary": summary})


def test_first_walk_ranks_by_rss_only_with_units_and_labels(run: Run) -> None:
    """No previous walk: no process has interval figures, so only the RSS list is
    published, largest first, in bytes, with every label."""
    records, _ = run.walk()
    assert pids(records) == [500, 400, 1, 800, 700]  # top_rss = 5, rss > 0
    odd = by_pid(records)[500]
    assert odd["comm"] == "a) b (c"  # comm holding ") " and "("
    assert odd["user"] == "root"
    assert odd["cgroup"] == "/user.slice/user-0.slice/session-1.scope"
    assert odd["state"] == "R"
    assert odd["rss_bytes"] == 50000 * PAGE
    assert odd["start_ns"] == 5000 * TICK
    assert (odd["cpu_user_ns"], odd["cpu_system_ns"]) == (9000 * TICK, 1000 * TICK)
    assert (odd["cpu_interval_ns"], odd["io_interval_bytes"]) == (0, 0)
    assert odd["threads"] == 4
    assert (odd["ctx_voluntary"], odd["ctx_involuntary"]) == (12, 345)
    assert (odd["io_read_bytes"], odd["io_write_bytes"]) == (4096, 8192)
    pg = by_pid(records)[400]
    assert pg["user"] == "4000000"  # no such user: the uid
    assert pg["cgroup"] == "/system.slice/postgresql.service"


def test_summary_counts_every_process(run: Run) -> None:
    _, summary = run.walk()
    # 1, 2, 10, 400..900 are read; 950 was listed but had gone: not a process.
    assert summary == {
        "processes": 9, "running": 1, "sleeping": 4, "blocked": 1, "zombie": 1,
        "stopped": 1, "idle": 1, "threads": 123, "threads_running": 2,
        "threads_blocked": 1, "forks": 217282, "load_1m_milli": 1250,
        "load_5m_milli": 500, "load_15m_milli": 50, "exited_cpu_ns": 0, "published": 5,
        "unreadable": 0}


def test_second_walk_ranks_by_cpu_then_rss_then_io_each_once(tree: Path,
                                                             procfs: Procfs) -> None:
    r = Run(tree, top_cpu=2, top_rss=2, top_io=2)
    try:
        r.walk()
        set_stat(tree, 1, utime=120 + 5)  # 5 ticks
        set_stat(tree, 700, stime=400 + 30)  # 30 ticks
        set_stat(tree, 500, utime=9000 + 20)  # 20 ticks
        set_stat(tree, 800, utime=10 + 1)  # 1 tick: beyond top_cpu
        set_io(tree, 400, 5_000_000_000 + 10, 1_000_000_000)  # 10 bytes
        set_io(tree, 700, 900_000_000 + 4096, 0)  # in the CPU list already
        set_io(tree, 1, 1_000_000 + 512, 2_000_000 + 512)  # 1024 bytes
        records, summary = r.walk()
    finally:
        r.close()
    # CPU: 700, 500. RSS beyond them: 400 (20000 pages), 1 (3000). IO beyond all: none
    # left with IO but 400 and 1, already published; so none.
    assert pids(records) == [700, 500, 400, 1]
    recs = by_pid(records)
    assert recs[700]["cpu_interval_ns"] == 30 * TICK
    assert recs[500]["cpu_interval_ns"] == 20 * TICK
    assert recs[1]["cpu_interval_ns"] == 5 * TICK  # published for its RSS, figures kept
    assert recs[400]["io_interval_bytes"] == 10
    assert recs[700]["io_interval_bytes"] == 4096
    assert recs[1]["io_interval_bytes"] == 1024
    assert summary["published"] == 4


def test_the_io_list_takes_what_the_others_left(tree: Path, procfs: Procfs) -> None:
    r = Run(tree, top_cpu=1, top_rss=0, top_io=2)
    try:
        r.walk()
        set_stat(tree, 500, utime=9000 + 20)
        set_io(tree, 500, 4096 + 10**9, 8192)  # the most IO, but in the CPU list
        set_io(tree, 400, 5_000_000_000 + 10, 1_000_000_000)
        set_io(tree, 1, 1_000_000 + 512, 2_000_000 + 512)
        set_io(tree, 700, 900_000_000 + 1, 0)
        records, _ = r.walk()
    finally:
        r.close()
    assert pids(records) == [500, 1, 400]  # IO: 1 (1024 bytes), 400 (10)


def test_a_long_comm_is_cut_to_the_label(tree: Path, run: Run) -> None:
    run.walk()
    set_stat(tree, 10, stime=30 + 1)  # the kernel worker ran
    records, _ = run.walk()
    assert by_pid(records)[10]["comm"] == "kworker/0:1-eve"  # 15 bytes and the NUL
    assert by_pid(records)[10]["state"] == "I"


@pytest.mark.parametrize(("over", "published"), [
    ({"top_cpu": 0, "top_rss": 0, "top_io": 0}, []),
    ({"top_cpu": 0, "top_rss": 1, "top_io": 0}, [500]),
    ({"top_cpu": 1, "top_rss": 0, "top_io": 0}, [700]),
    ({"top_cpu": 0, "top_rss": 0, "top_io": 1}, [400]),
])
def test_top_n_options(tree: Path, procfs: Procfs, over: dict[str, int],
                       published: list[int]) -> None:
    r = Run(tree, **over)
    try:
        r.walk()
        set_stat(tree, 700, stime=400 + 30)
        set_io(tree, 400, 5_000_000_000 + 10, 1_000_000_000)
        records, summary = r.walk()
        io_fds = [e[sampler_mod._IOFD] for e in r.s._procs.values()]
    finally:
        r.close()
    assert pids(records) == published
    assert summary["published"] == len(published)
    if over["top_io"] == 0:  # io not read at each walk
        assert set(io_fds) == {sampler_mod._NO_IO}


def test_top_io_0_still_reads_the_io_of_the_published(tree: Path, procfs: Procfs) -> None:
    r = Run(tree, top_cpu=0, top_rss=1, top_io=0)
    try:
        first, _ = r.walk()
        set_io(tree, 500, 4096 + 100, 8192)
        second, _ = r.walk()
    finally:
        r.close()
    assert (first[0]["io_read_bytes"], first[0]["io_interval_bytes"]) == (4096, 0)
    assert (second[0]["io_read_bytes"], second[0]["io_interval_bytes"]) == (4196, 100)


def test_a_process_started_in_the_interval_counts_all_it_used(tree: Path,
                                                              run: Run) -> None:
    run.walk(ticks=100)  # at tick 7100
    add_process(tree, 1000, like=900, start=7150, utime=40, stime=2)  # started since
    add_process(tree, 1001, like=900, start=7050, utime=90, stime=0)  # before: unseen
    set_io(tree, 1000, 300, 0)
    records, _ = run.walk(ticks=100)
    recs = by_pid(records)
    assert recs[1000]["cpu_interval_ns"] == 42 * TICK
    assert recs[1000]["io_interval_bytes"] == 300
    assert 1001 not in recs  # not ranked on a delta it does not have
    set_stat(tree, 1001, utime=90 + 3)
    recs = by_pid(run.walk()[0])
    assert recs[1001]["cpu_interval_ns"] == 3 * TICK  # from the walk that first saw it


@pytest.mark.parametrize("kept", [True, False])
def test_a_reused_pid_is_a_new_process(tree: Path, procfs: Procfs, kept: bool) -> None:
    """Process 400 exits and its pid comes back as another process: kept open, the old
    fd reads ESRCH; read by path, the start time differs. Either way the new one's
    interval is its own CPU, never a difference against the old one's totals."""
    r = Run(tree, top_rss=0)
    if not kept:
        r.s._fd_budget = 0
    try:
        r.walk()
        shutil.rmtree(tree / "400")
        add_process(tree, 400, like=900, start=r.clock_tick + 50, utime=7, stime=0)
        records, _ = r.walk()
        assert by_pid(records)[400]["cpu_interval_ns"] == 7 * TICK
        assert by_pid(records)[400]["start_ns"] == (r.clock_tick - 50) * TICK
        set_stat(tree, 400, utime=7 + 2)
        assert by_pid(r.walk()[0])[400]["cpu_interval_ns"] == 2 * TICK
    finally:
        r.close()


def test_exits_mid_read_are_skipped_quietly(tree: Path, run: Run) -> None:
    """Gone between the listing and the open (950), a kept-open file of a reaped one
    (ESRCH), a status gone before a process could be published: skipped, no error."""
    run.walk()
    kept = run.s._kept_fds
    shutil.rmtree(tree / "700")  # reaped: its kept-open files read ESRCH
    set_stat(tree, 900, rss=10**6)  # now the largest RSS, but its status is gone
    (tree / "900" / "status").unlink()
    records, summary = run.walk()
    assert 700 not in pids(records) and 900 not in pids(records)
    assert summary["processes"] == 8 and summary["unreadable"] == 0
    assert "700" not in run.s._procs
    assert run.s._kept_fds == kept - 3  # its stat, schedstat and io closed


def test_unreadable_processes_are_counted(tree: Path, procfs: Procfs) -> None:
    procfs.denied_open.add(str(tree / "400" / "stat"))  # hidepid=1: EPERM
    procfs.denied_read.add(str(tree / "500" / "io"))  # no ptrace access: EACCES
    r = Run(tree)
    try:
        records, summary = r.walk()
    finally:
        r.close()
    assert 400 not in pids(records)
    assert by_pid(records)[500]["io_read_bytes"] == 0  # published without its io
    assert summary["unreadable"] == 2
    assert summary["processes"] == 9  # 400 exists, unread


def test_exited_cpu_is_the_growth_of_reaped_children_time(tree: Path, run: Run) -> None:
    run.walk()
    set_stat(tree, 1, cutime=3000 + 30, cstime=1000 + 10)  # reaped a child of 40 ticks
    set_stat(tree, 500, cutime=20 + 5)
    add_process(tree, 1000, like=900, start=run.clock_tick + 10, cutime=500)  # first seen
    _, summary = run.walk()
    assert summary["exited_cpu_ns"] == 45 * TICK
    # 500 exits and 1 reaps it: 1's cutime grows by 500's own 7 ticks and by the 30 of
    # its reaped children (cutime + cstime), counted as 500's grew: counted once.
    shutil.rmtree(tree / "500")
    set_stat(tree, 1, cutime=3000 + 30 + 7 + 30, cstime=1000 + 10)
    _, summary = run.walk()
    assert summary["exited_cpu_ns"] == (45 + 7) * TICK
    set_stat(tree, 1000, cutime=500 + 1)
    _, summary = run.walk()
    assert summary["exited_cpu_ns"] == (45 + 7 + 1) * TICK  # a counter


def test_an_exited_process_s_children_are_offset_at_the_next_walk(tree: Path,
                                                                  run: Run) -> None:
    """The reaper, read before the reap in a walk, shows the growth at the next one."""
    run.walk()
    set_stat(tree, 500, cutime=30)  # reaped 10 ticks of children: 20 + 5 -> 30 + 5
    assert run.walk()[1]["exited_cpu_ns"] == 10 * TICK
    shutil.rmtree(tree / "500")
    assert run.walk()[1]["exited_cpu_ns"] == 10 * TICK
    set_stat(tree, 1, cutime=3000 + 4 + 35)
    assert run.walk()[1]["exited_cpu_ns"] == (10 + 4) * TICK


def test_an_exited_process_s_children_unreaped_for_two_walks_are_forgotten(
        tree: Path, run: Run) -> None:
    """Its parent exited too (init reaps it unread): the offset does not outlive it."""
    run.walk()
    shutil.rmtree(tree / "500")
    run.walk()
    run.walk()
    set_stat(tree, 1, cutime=3000 + 3)
    assert run.walk()[1]["exited_cpu_ns"] == 3 * TICK

def test_the_gate_skips_single_threaded_processes_that_did_not_run(tree: Path,
                                                                  run: Run) -> None:
    """A stat that changed while schedstat did not (impossible on procfs) shows what the
    gate spares: not read. A process of several threads (500) is always read."""
    run.walk()
    set_stat(tree, 700, ran=False, stime=400 + 30)
    set_stat(tree, 500, ran=False, utime=9000 + 20)
    assert pids(run.walk()[0])[:1] == [500]
    set_stat(tree, 700, ran=True, stime=400 + 31)
    assert by_pid(run.walk()[0])[700]["cpu_interval_ns"] == 31 * TICK


def test_without_schedstat_every_stat_is_read(tree: Path, procfs: Procfs) -> None:
    shutil.rmtree(tree / "self")
    r = Run(tree, top_rss=0)
    try:
        assert not r.s._gate
        r.walk()
        set_stat(tree, 700, ran=False, stime=400 + 30)
        assert pids(r.walk()[0]) == [700]
    finally:
        r.close()


def test_past_the_fd_budget_files_are_read_by_path(tree: Path, procfs: Procfs) -> None:
    kept, by_path = Run(tree), Run(tree)
    by_path.s._fd_budget = 4
    try:
        assert kept.walk() == by_path.walk()
        set_stat(tree, 700, stime=400 + 30)
        assert kept.walk() == by_path.walk()
        assert by_path.s._kept_fds == 4
        assert "processes opened at each read" in by_path.s.detail
    finally:
        kept.close()
        by_path.close()


def test_nothing_is_read_unless_wanted_and_leaving_closes_every_file(tree: Path,
                                                                    run: Run) -> None:
    fds = len(os.listdir("/proc/self/fd"))
    for h in run.handles.values():
        h.word.value = 0
    assert run.walk() == ([], {})
    assert run.s._procs == {}
    for h in run.handles.values():
        h.word.value = 1
    run.walk()
    assert len(os.listdir("/proc/self/fd")) > fds
    run.s.deactivate()
    assert len(os.listdir("/proc/self/fd")) == fds
    records, _ = run.walk()  # a new baseline: ranked by RSS only again
    assert all(r["cpu_interval_ns"] == 0 for r in records)


def test_summary_only_reads_no_io_and_publishes_no_process(tree: Path, run: Run) -> None:
    run.handles[PROCESS.schema.name].word.value = 0
    records, summary = run.walk()
    assert records == [] and summary["published"] == 0
    assert {e[sampler_mod._IOFD] for e in run.s._procs.values()} == {sampler_mod._NO_IO}


def test_without_proc_stat_and_loadavg_the_summary_says_so(tree: Path,
                                                           procfs: Procfs) -> None:
    (tree / "stat").unlink()
    (tree / "loadavg").unlink()
    r = Run(tree)
    try:
        _, summary = r.walk()
    finally:
        r.close()
    assert summary["processes"] == 9 and summary["forks"] == 0 and summary["threads"] == 0
    assert "subset=pid" in r.s.detail


# --- parsers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "want"), [
    ((FIXTURE / "500" / "stat").read_bytes(),
     Stat(500, b"a) b (c", b"R", 9000, 1000, 20, 5, 4, 5000, 50000)),
    ((FIXTURE / "10" / "stat").read_bytes(),
     Stat(10, b"kworker/0:1-events", b"I", 0, 30, 0, 0, 1, 5, 0)),
    # A Linux 2.6.32 line (44 fields): the fields read are where they always were.
    (b"1 (init) S 0 1 1 0 -1 4202752 2873 29547 25 165 8 96 310 153 20 0 1 0 3 19828736"
     b" 384 18446744073709551615 1 1 0 0 0 0 0 4096 536962595 18446744073709551615 0 0"
     b" 0 0 0 0 0 0 0\n", Stat(1, b"init", b"S", 8, 96, 310, 153, 1, 3, 384)),
])
def test_parse_stat(line: bytes, want: Stat) -> None:
    assert parse_stat(line) == want


def test_parsers_of_the_other_files() -> None:
    assert parse_io((FIXTURE / "400" / "io").read_bytes()) == (5_000_000_000, 1_000_000_000)
    assert parse_status((FIXTURE / "400" / "status").read_bytes()) == (4000000, 777, 66)
    assert parse_status(b"Name:\tx\n") == (0, 0, 0)
    assert parse_loadavg(b"1.25 0.50 0.05 3/123 4567\n") == (1250, 500, 50, 123)
    # The summary reads /proc/stat as the scheduler sampler does: forks, running, blocked.
    assert parse_stat_scheduler((FIXTURE / "stat").read_bytes())[1:] == (217282, 2, 1)


@pytest.mark.parametrize(("text", "want"), [
    (b"0::/\n", "/"),
    (b"0::/system.slice/cron.service\n", "/system.slice/cron.service"),
    (b"12:pids:/a\n1:cpu:/b\n0::/user.slice\n", "/user.slice"),  # hybrid
    (b"4:memory:/legacy\n1:cpu:/legacy\n", ""),  # cgroup v1 only
    (b"0::/" + b"a" * 300 + b"\n", "/" + "a" * 254),  # cut as the cgroup sampler's
    (b"0::/bad\xff\n", "/bad?"),  # as the cgroup sampler labels it
])
def test_parse_cgroup(text: bytes, want: str) -> None:
    assert parse_cgroup(text) == want


@pytest.mark.parametrize(("text", "works"), [
    ("123456789 1000 50\n", True),
    ("0 0 1\n", True),  # a process that has not yet been switched out
    ("0 0 0\n", False),  # schedstats and delay accounting off (before 5.14)
    (None, False),  # no CONFIG_SCHED_INFO
])
def test_schedstat_works(tmp_path: Path, text: str | None, works: bool) -> None:
    if text is not None:
        (tmp_path / "self").mkdir()
        (tmp_path / "self" / "schedstat").write_text(text)
    assert schedstat_works(tmp_path) is works


# --- the shared walk, rank and keep ----------------------------------------------------


def test_rank_keeps_the_largest_ties_by_key() -> None:
    values = {"c": 5, "b": 9, "a": 5, "d": 0}
    keys, vals = values.keys(), values.values()
    assert rank(keys, vals, 2) == ["b", "a"]
    assert rank(keys, vals, 10) == ["b", "a", "c", "d"]
    assert rank(keys, vals, 10, positive=True) == ["b", "a", "c"]
    assert rank(keys, vals, 2, skip={"b", "x"}) == ["a", "c"]
    assert rank(keys, vals, 3, skip={"a"}, positive=True) == ["b", "c"]
    assert rank(keys, vals, 0) == []
    assert growth({"a": 10, "b": 3, "c": 4}, {"a": 4, "b": 5}) == {"a": 6, "b": 3, "c": 4}


class Files:
    """A stand-in for kept-open files: records opens and closes."""

    opened: list[str] = []
    closed: list[str] = []

    def __init__(self, key: str) -> None:
        if key == "gone":
            raise FileNotFoundError(key)
        if key == "emfile":
            raise OSError(errno.EMFILE, "Too many open files")
        self.key = key
        Files.opened.append(key)

    def close(self) -> None:
        Files.closed.append(self.key)


def test_kept_reopens_only_what_changed() -> None:
    Files.opened, Files.closed = [], []
    kept: Kept[str, Files] = Kept()
    assert kept.keep(["a", "b", "gone", "emfile"], Files) == 1
    assert list(dict(kept.items())) == ["a", "b"]
    assert kept.keep(["b", "c", "c"], Files) == 1  # a repeated key counts as failed
    assert Files.opened == ["a", "b", "c"] and Files.closed == ["a"]
    kept.drop("b")
    kept.close()
    assert sorted(Files.closed) == ["a", "b", "c"] and len(kept) == 0


# --- this host's procfs ----------------------------------------------------------------


@pytest.mark.host
def test_host_a_kept_fd_of_a_reaped_process_reads_esrch_even_once_its_pid_is_reused() -> None:
    """What the sampler relies on: a kept-open /proc/<pid>/stat reads a zombie still, and
    ESRCH once the task is reaped, also after its pid is given to a new process."""
    p = subprocess.Popen(["sleep", "60"])
    fd = os.open(f"/proc/{p.pid}/stat", os.O_RDONLY)
    try:
        assert os.pread(fd, 1024, 0).startswith(f"{p.pid} (sleep) ".encode())
        p.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not reaped
        assert parse_stat(os.pread(fd, 1024, 0)).state == b"Z"
        p.wait()
        with pytest.raises(ProcessLookupError):
            os.pread(fd, 1024, 0)
        if os.geteuid() != 0:
            return
        for _ in range(20):  # another fork may take the pid first: try again
            try:
                Path("/proc/sys/kernel/ns_last_pid").write_text(f"{p.pid - 1}\n")
            except OSError:
                return  # a pid namespace we may not steer
            q = subprocess.Popen(["sleep", "60"])
            try:
                if q.pid == p.pid:
                    with pytest.raises(ProcessLookupError):
                        os.pread(fd, 1024, 0)
                    return
            finally:
                q.kill()
                q.wait()
    finally:
        os.close(fd)


@pytest.mark.host
def test_host_a_busy_child_leads_and_a_reaped_one_counts_as_exited() -> None:
    """On the host's /proc: a child that burns CPU tops the CPU list with about what it
    burned; once it exits and we reap it, our cutime grows by it: exited_cpu_ns."""
    burn = [sys.executable, "-c", "import sys,time\nsys.stdin.readline()\nt=time.thread_time()"
            "\nwhile time.thread_time()-t<0.3: pass\nprint(1, flush=True)\nsys.stdin.readline()"]
    handles = {e.name: FakeHandle() for e in Processes.events()}
    s, _ = start_sampler(Processes, handles=handles, top_cpu=3)
    child = subprocess.Popen(burn, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None

    def walk() -> tuple[dict[object, dict[str, object]], dict[str, object]]:
        for h in handles.values():
            h.payloads.clear()
        s.publish()
        return by_pid(decoded(PROCESS.schema, handles)), decoded(PROCESSES.schema, handles)[0]

    try:
        walk()
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"1\n"  # it burned 0.3 s of CPU
        records, before = walk()
        assert records[child.pid]["cpu_interval_ns"] >= 250_000_000
        child.stdin.write(b"end\n")
        child.stdin.flush()
        child.wait()  # we reap it: our cutime + cstime grow by its CPU
        _, after = walk()
        assert after["exited_cpu_ns"] - before["exited_cpu_ns"] >= 250_000_000
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        s.close()


@pytest.mark.host
@pytest.mark.parametrize(("mode", "listed"), [("noaccess", True), ("invisible", False)])
def test_host_hidepid_hides_other_users_processes_without_ptrace(mode: str,
                                                                 listed: bool) -> None:
    """On a proc mount with hidepid, the sampler run as ``nobody`` without capabilities
    reads only its own processes: the others are counted unreadable (noaccess: listed)
    or not seen at all (invisible)."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux)")
    point = Path(tempfile.mkdtemp())
    point.chmod(0o755)
    try:
        if subprocess.run(["mount", "-t", "proc", "-o", f"hidepid={mode}", "proc",
                           str(point)], capture_output=True).returncode != 0:
            pytest.skip("cannot mount proc here")
        try:
            code = ("import json, sys\nsys.path.insert(0, 'tests')\n"
                    "from helpers import FakeHandle, decoded, start_sampler\n"
                    "from rezolus_ue.samplers.processes import PROCESSES\n"
                    "from pathlib import Path\n"
                    "from rezolus_ue.samplers.processes.sampler import Processes\n"
                    "h = {e.name: FakeHandle() for e in Processes.events()}\n"
                    f"s, _ = start_sampler(Processes, Path({str(point)!r}), handles=h)\n"
                    "s.publish()\nprint(json.dumps(decoded(PROCESSES.schema, h)[0]))\n")
            out = subprocess.run(
                [setpriv, "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", code],
                cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True,
                timeout=60)
            as_root = len([n for n in os.listdir(point) if n.isdigit()])
        finally:
            subprocess.run(["umount", str(point)], check=True)
    finally:
        point.rmdir()
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    own = summary["processes"] - summary["unreadable"]
    assert own >= 1  # itself
    if listed:
        assert summary["unreadable"] >= 1 and summary["processes"] >= as_root // 2
    else:
        assert summary["unreadable"] == 0 and summary["processes"] < as_root
