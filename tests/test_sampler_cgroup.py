"""The cgroup sampler: parsers, discovery, the walk/limit/glob logic and the sampler end to
end against fixture trees, and the host's real cgroup2 mount.

Golden files: ``tests/fixtures/cgroup/<case>.expected.json`` hold the decoded records the
sampler publishes for the fixture tree ``tests/fixtures/cgroup/<case>/`` (a procfs root with
``mounts`` and a sysfs root holding the cgroup2 hierarchy). After a deliberate change,
regenerate them with ``REZOLUS_UE_UPDATE_GOLDEN=1 pytest tests/test_sampler_cgroup.py`` and
review the diff.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    FailingFile,
    FakeHandle,
    check_golden,
    median_read_us,
    new_sampler,
    start_sampler,
)

from rezolus_ue.errors import SamplerUnavailable
from rezolus_ue.samplers.cgroup import CGROUP_FAMILY
from rezolus_ue.samplers.cgroup.sampler import (
    LABEL_MAX,
    RESCAN_NS,
    Cgroups,
    cgroup2_mounts,
    matches,
    parse_cpu_stat,
    parse_io_stat,
    select_top,
    truncate_label,
    walk,
)

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
CASES = ["basic", "old"]
SCHEMA = CGROUP_FAMILY.schema


def make(procfs: Path, sysfs: Path, **over: object) -> tuple[Cgroups, FakeHandle]:
    h = FakeHandle()
    s, _handles = start_sampler(Cgroups, procfs, sysfs, handles={SCHEMA.name: h}, **over)
    return s, h


def make_case(case: str, **over: object) -> tuple[Cgroups, FakeHandle]:
    return make(FIXTURES / case / "procfs", FIXTURES / case / "sysfs", **over)


def collect(s: Cgroups, h: FakeHandle, t_ns: int = 1) -> list[dict[str, object]]:
    """Return the records of one sample + publish."""
    h.payloads.clear()
    s.sample(t_ns)
    s.publish()
    return [SCHEMA.unpack(p) for p in h.payloads]


def by_label(records: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(r["cgroup"]): r for r in records}


# --- golden: the sampler against fixture trees -----------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    s, h = make_case(case)
    try:
        records = collect(s, h)
        got = {"root": str(s.root.relative_to(FIXTURES / case)),
               "detail": s.detail.replace(str(FIXTURES / case), f"<{case}>"),
               "records": records}
    finally:
        s.close()
    check_golden(FIXTURES / f"{case}.expected.json", got)


def test_basic_values() -> None:
    s, h = make_case("basic")
    try:
        recs = by_label(collect(s, h))
    finally:
        s.close()
    assert s.root == FIXTURES / "basic" / "sysfs" / "fs" / "cgroup"
    assert list(recs) == ["/", "/init.scope", "/system.slice",
                          "/system.slice/cron.service",
                          "/system.slice/docker-0123456789ab.scope", "/user.slice",
                          "/user.slice/user-1000.slice"]
    root = recs["/"]
    assert root["cpu_usage_ns"] == 1827241007 * 1000
    assert root["memory_bytes"] == 0  # no memory.current in the root group
    assert root["io_read_bytes"] == 5033984000 + 5070336  # summed over devices
    assert root["io_reads"] == 160311 + 214
    assert (root["throttled_periods"], root["throttled_ns"]) == (0, 0)
    cron = recs["/system.slice/cron.service"]
    assert (cron["throttled_periods"], cron["throttled_ns"]) == (30, 450000 * 1000)
    assert cron["memory_bytes"] == 8388608
    assert recs["/user.slice"]["io_writes"] == 0  # empty io.stat
    # io.latency's use_delay/delay_nsec and the discard counters are not summed
    docker = recs["/system.slice/docker-0123456789ab.scope"]
    assert (docker["io_read_bytes"], docker["io_write_bytes"]) == (3000, 7000)
    assert s.detail == ""


def test_old_hybrid_layout() -> None:
    s, h = make_case("old")
    try:
        recs = by_label(collect(s, h))
    finally:
        s.close()
    assert s.root == FIXTURES / "old" / "sysfs" / "fs" / "cgroup" / "unified"
    # "legacy" has no cpu.stat (a pre-4.15 group without the cpu controller): not published
    assert list(recs) == ["/", "/system.slice", "/system.slice/ssh.service", "/user.slice"]
    assert recs["/system.slice/ssh.service"]["cpu_user_ns"] == 40000 * 1000
    assert all(r["memory_bytes"] == 0 and r["io_reads"] == 0 for r in recs.values())
    assert "no cpu, memory, io controller" in s.detail


def test_v1_only_is_unavailable() -> None:
    s = new_sampler(Cgroups, FIXTURES / "v1only" / "procfs", FIXTURES / "v1only")
    with pytest.raises(SamplerUnavailable, match=r"no cgroup2 mount.*cgroup v1 only "
                                                 r"\(blkio, cpu, memory\)"):
        s.start()


def test_root_option_must_be_cgroup2(tmp_path: Path) -> None:
    s = new_sampler(Cgroups, tmp_path, tmp_path, root=str(tmp_path))
    with pytest.raises(SamplerUnavailable, match="not a cgroup v2 hierarchy"):
        s.start()


def test_root_option_overrides_discovery() -> None:
    root = FIXTURES / "basic" / "sysfs" / "fs" / "cgroup" / "user.slice"
    s, h = make(FIXTURES / "v1only" / "procfs", FIXTURES / "v1only",
                root=str(root))
    try:
        assert list(by_label(collect(s, h))) == ["/", "/user-1000.slice"]
    finally:
        s.close()


def test_not_wanted_reads_nothing() -> None:
    s, h = make_case("basic")
    try:
        h.word.value = 0
        s.sample(1)
        s.publish()
        assert h.payloads == []
    finally:
        s.close()


# --- parsers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", (0, 0, 0, 0, 0)),
        (b"usage_usec 5\nuser_usec 3\nsystem_usec 2\n", (5000, 3000, 2000, 0, 0)),
        (b"usage_usec 5\nuser_usec 3\nsystem_usec 2\nnice_usec 0\nnr_periods 9\n"
         b"nr_throttled 4\nthrottled_usec 7\nnr_bursts 1\nburst_usec 2\n",
         (5000, 3000, 2000, 4, 7000)),
        (b"usage_usec 18446744073709551\n", (18446744073709551000, 0, 0, 0, 0)),
    ],
)
def test_parse_cpu_stat(text: bytes, expected: tuple[int, ...]) -> None:
    assert parse_cpu_stat(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", (0, 0, 0, 0)),
        (b"8:0 rbytes=1 wbytes=2 rios=3 wios=4\n", (1, 2, 3, 4)),  # pre-5.2: no discard
        (b"8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6\n"
         b"8:16 rbytes=10 wbytes=20 rios=30 wios=40 dbytes=50 dios=60\n", (11, 22, 33, 44)),
        (b"259:0 rbytes=1 wbytes=1 rios=1 wios=1 dbytes=0 dios=0 cost.vrate=100.00"
         b" cost.usage=3 cost.wait=0 cost.indebt=0 cost.indelay=0\n", (1, 1, 1, 1)),
    ],
)
def test_parse_io_stat(text: bytes, expected: tuple[int, ...]) -> None:
    assert parse_io_stat(text) == expected


def test_cgroup2_mounts_prefer_standard_paths() -> None:
    text = ("cgroup2 /run/x cgroup2 rw 0 0\n"
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
            "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n"
            "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
            "cgroup2 /mnt/with\\040space cgroup2 rw 0 0\n")
    assert cgroup2_mounts(text) == ["/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/run/x",
                                    "/mnt/with space"]
    assert cgroup2_mounts("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n") == []


@pytest.mark.parametrize(
    ("path", "include", "exclude", "expected"),
    [
        ("/", ("*",), (), True),
        ("/system.slice/cron.service", ("*",), (), True),  # * also matches /
        ("/system.slice/cron.service", ("/system.slice/*",), (), True),
        ("/system.slice", ("/system.slice/*",), (), False),
        ("/user.slice", ("/system.slice*", "/user.slice"), (), True),
        ("/system.slice/cron.service", ("*",), ("*.service",), False),
        ("/", ("*",), ("/",), False),
        ("/a", (), (), False),
    ],
)
def test_matches(path: str, include: tuple[str, ...], exclude: tuple[str, ...],
                 expected: bool) -> None:
    assert matches(path, include, exclude) is expected


def test_select_top_ranks_by_usage_since_baseline() -> None:
    usage = {"/": 1000, "/a": 500, "/b": 300, "/c": 10}
    # First walk: cumulative usage.
    assert select_top(usage, {}, 2) == ["/", "/a"]
    # Later: what each used since the previous walk; /c is new (all of its usage counts).
    assert select_top({"/": 1100, "/a": 500, "/b": 390, "/c": 50}, usage, 3) == [
        "/", "/b", "/c"]
    # Ties go by path; a usage below the baseline is a new group of the same name.
    assert select_top({"/x": 5, "/y": 5, "/z": 1}, {"/z": 100}, 1) == ["/x"]
    assert select_top({"/x": 5, "/y": 5, "/z": 6}, {"/z": 100}, 1) == ["/z"]
    assert select_top(usage, {}, 10) == ["/", "/a", "/b", "/c"]


def test_truncate_label() -> None:
    assert truncate_label("/") == "/"
    long = "/" + "a" * 300
    assert truncate_label(long) == long[:LABEL_MAX]
    # A multi-byte character is never cut in half.
    t = truncate_label("/" + "a" * 253 + "é")
    assert t == "/" + "a" * 253 and len(t.encode()) == 254
    # Undecodable bytes in a directory name (surrogate-escaped by os) become "?".
    assert truncate_label(os.fsdecode(b"/bad\xff")) == "/bad?"


def test_walk_is_depth_first_in_name_order() -> None:
    root = FIXTURES / "basic" / "sysfs" / "fs" / "cgroup"
    assert walk(root) == ["/", "/init.scope", "/system.slice", "/system.slice/cron.service",
                          "/system.slice/docker-0123456789ab.scope", "/user.slice",
                          "/user.slice/user-1000.slice"]


# --- the sampler's walk, limit and globs on a writable copy -----------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Return a writable copy of the basic case (procfs/ and sysfs/ below it)."""
    shutil.copytree(FIXTURES / "basic", tmp_path / "basic")
    return tmp_path / "basic"


def cg(tree: Path) -> Path:
    return tree / "sysfs" / "fs" / "cgroup"


def set_usage(tree: Path, rel: str, usec: int) -> None:
    p = cg(tree) / rel.lstrip("/") / "cpu.stat"
    lines = p.read_text().splitlines()
    lines[0] = f"usage_usec {usec}"
    p.write_text("\n".join(lines) + "\n")


def test_max_cgroups_keeps_the_busiest(tree: Path) -> None:
    s, h = make(tree / "procfs", tree / "sysfs", max_cgroups=3)
    try:
        # Cumulative at the first walk: / > system.slice > user.slice(600s) > user-1000.
        assert list(by_label(collect(s, h))) == ["/", "/system.slice", "/user.slice"]
        assert s.detail.startswith("3 of 7 matching cgroups published: 4 beyond"
                                   " max_cgroups=3")
        assert (s.matched, s.over_limit) == (7, 4)
        # cron.service becomes the busiest since the first walk; user.slice idles.
        set_usage(tree, "/system.slice/cron.service", 1500000 + 10**9)
        set_usage(tree, "/system.slice", 900000000 + 10**9)
        set_usage(tree, "/", 1827241007 + 10**9)
        clock = [s._next_scan - 1]
        s._clock = lambda: clock[0]
        # Not yet due: the same groups.
        assert list(by_label(collect(s, h))) == ["/", "/system.slice", "/user.slice"]
        clock[0] += 1
        assert list(by_label(collect(s, h))) == ["/", "/system.slice",
                                                 "/system.slice/cron.service"]
        assert s._next_scan == clock[0] + RESCAN_NS
    finally:
        s.close()


def test_include_exclude(tree: Path) -> None:
    s, h = make(tree / "procfs", tree / "sysfs", include=["/system.slice*", "/"],
                exclude=["*.scope"])
    try:
        assert list(by_label(collect(s, h))) == ["/", "/system.slice",
                                                 "/system.slice/cron.service"]
    finally:
        s.close()


def test_rescan_finds_new_groups_and_drops_removed_ones(tree: Path) -> None:
    s, h = make(tree / "procfs", tree / "sysfs")
    clock = [0]
    s._clock = lambda: clock[0]
    s._next_scan = RESCAN_NS
    try:
        assert len(collect(s, h)) == 7
        new = cg(tree) / "system.slice" / "new.service"
        new.mkdir()
        (new / "cpu.stat").write_text("usage_usec 1\nuser_usec 1\nsystem_usec 0\n")
        shutil.rmtree(cg(tree) / "user.slice" / "user-1000.slice")
        # A regular file keeps reading after unlink; a removed cgroup's files read ENODEV.
        # Stand in for that by making the kept-open cpu.stat of init.scope fail so.
        g = s._groups["/init.scope"]
        g.cpu.close()
        g.cpu = FailingFile(errno.ENODEV, "No such device")  # type: ignore[assignment]
        recs = by_label(collect(s, h))
        assert "/init.scope" not in recs  # dropped at once, without waiting for a walk
        assert "/init.scope" not in s._groups
        assert "/system.slice/new.service" not in recs  # not walked yet
        clock[0] = RESCAN_NS
        recs = by_label(collect(s, h))
        assert "/system.slice/new.service" in recs
        assert "/user.slice/user-1000.slice" not in recs
        assert "/init.scope" in recs  # it still exists on disk: found again
    finally:
        s.close()


def test_other_read_errors_propagate(tree: Path) -> None:
    s, _h = make(tree / "procfs", tree / "sysfs")
    try:
        g = s._groups["/"]
        g.cpu.close()
        g.cpu = FailingFile(errno.EIO, "I/O error")  # type: ignore[assignment]
        with pytest.raises(OSError):
            s.sample(1)
    finally:
        s.close()


def test_long_paths_are_truncated(tree: Path) -> None:
    deep = cg(tree)
    rel = ""
    for i in range(3):
        name = f"{i}" * 100
        deep = deep / name
        rel += "/" + name
        deep.mkdir()
        (deep / "cpu.stat").write_text(f"usage_usec {i}\n")
    s, h = make(tree / "procfs", tree / "sysfs")
    try:
        recs = by_label(collect(s, h))
        labels = [lb for lb in recs if lb.startswith("/000")]
        assert labels == [rel[:101], rel[:202], rel[:LABEL_MAX]]
        assert recs[rel[:LABEL_MAX]]["cpu_usage_ns"] == 2000
    finally:
        s.close()


def test_memory_and_io_files_are_opened_when_they_appear(tree: Path) -> None:
    s, h = make(tree / "procfs", tree / "sysfs")
    clock = [0]
    s._clock = lambda: clock[0]
    s._next_scan = RESCAN_NS
    try:
        (cg(tree) / "memory.current").write_text("7\n")
        assert by_label(collect(s, h))["/"]["memory_bytes"] == 0
        clock[0] = RESCAN_NS
        assert by_label(collect(s, h))["/"]["memory_bytes"] == 7
    finally:
        s.close()


def test_files_stay_open_between_reads(tree: Path) -> None:
    s, h = make(tree / "procfs", tree / "sysfs")
    try:
        fds = len(os.listdir("/proc/self/fd"))
        set_usage(tree, "/init.scope", 4)  # rewritten in place: the same inode
        for _ in range(3):
            recs = by_label(collect(s, h))
        assert recs["/init.scope"]["cpu_usage_ns"] == 4000
        assert len(os.listdir("/proc/self/fd")) == fds
    finally:
        s.close()


# --- the host --------------------------------------------------------------------------


def host_cgroup2() -> Path:
    points = cgroup2_mounts(Path("/proc/mounts").read_text())
    if not points:
        pytest.skip("no cgroup2 mount on this host (cgroup v1 only)")
    return Path(points[0])


@pytest.mark.host
def test_host_root_usage_rises_with_our_cpu() -> None:
    host_cgroup2()
    s, h = make(Path("/proc"), Path("/sys"))
    try:
        before = by_label(collect(s, h))["/"]
        t0 = time.thread_time_ns()
        while time.thread_time_ns() - t0 < 300_000_000:
            pass
        burned = time.thread_time_ns() - t0
        after = by_label(collect(s, h))["/"]
    finally:
        s.close()
    # The root group's usage is the whole machine's CPU time: at least what we burned.
    assert after["cpu_usage_ns"] - before["cpu_usage_ns"] >= 0.9 * burned
    assert after["cpu_user_ns"] > before["cpu_user_ns"]


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="creating a cgroup needs root")
def test_host_child_group_accounts_its_process_and_vanishes() -> None:
    """A child group we create sees the CPU of a process we move into it; after rmdir
    its kept-open files read ENODEV and it is dropped on the next read."""
    root = host_cgroup2()
    child = root / f"rezolus_ue_test_{os.getpid()}"
    try:
        child.mkdir()
    except OSError as e:
        pytest.skip(f"cannot create a cgroup in {root}: {e.strerror}")
    burner = None
    s = None
    try:
        s, h = make(Path("/proc"), Path("/sys"), include=["/", f"/{child.name}"])
        assert set(by_label(collect(s, h))) == {"/", f"/{child.name}"}
        burner = subprocess.Popen(
            [sys.executable, "-c",
             "import sys,time\nsys.stdin.readline()\nt=time.thread_time()\n"
             "while time.thread_time()-t<0.3: pass\n"], stdin=subprocess.PIPE)
        (child / "cgroup.procs").write_text(f"{burner.pid}\n")
        burner_in = Path(f"/proc/{burner.pid}/cgroup").read_text()
        assert f"0::/{child.name}" in burner_in
        burner.communicate(b"go\n", timeout=30)  # it burns only once inside the group
        rec = by_label(collect(s, h))[f"/{child.name}"]
        assert rec["cpu_usage_ns"] >= 250_000_000
        child.rmdir()
        assert f"/{child.name}" not in by_label(collect(s, h))
        assert f"/{child.name}" not in s._groups
    finally:
        if burner is not None and burner.poll() is None:
            burner.kill()
            burner.wait()
        if s is not None:
            s.close()
        if child.exists():
            child.rmdir()


@pytest.mark.host
def test_host_read_cost() -> None:
    """One read() of the host's groups stays cheap (reported, loosely bounded)."""
    host_cgroup2()
    s, _h = make(Path("/proc"), Path("/sys"))
    try:
        median_us = median_read_us(s)
        groups = len(s._groups)
    finally:
        s.close()
    print(f"cgroup read(): median {median_us:.1f} us for {groups} groups")
    assert median_us < 5000
