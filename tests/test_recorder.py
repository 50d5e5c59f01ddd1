"""``rezolus-ue record`` / ``dump`` and the recording formats, without a kernel.

Records are built from the real schemas (pack, then unpack, as a consumer decodes them).
Recorder processes run for real, fed JSON lines on stdin through the hidden
``--source-file -`` instead of a Subscription.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from waiting import wait_for

from rezolus_ue.cli_base import Parser as _Parser
from rezolus_ue.consume.recording import blocks as recblocks
from rezolus_ue.consume.recording import dump, recorder
from rezolus_ue.consume.recording import files as recfile
from rezolus_ue.consume.recording import native as recnative
from rezolus_ue.consume.recording import parquet as recparquet
from rezolus_ue.consume.recording import ring as segments
from rezolus_ue.consume.recording import tables as rectables
from rezolus_ue.consume.recording.blocks import RecordingError, ScanStats
from rezolus_ue.consume.recording.files import read_records
from rezolus_ue.consume.records import Record, record_from_json
from rezolus_ue.errors import RezolusError
from rezolus_ue.metrics import h2
from rezolus_ue.samplers.processes import PROCESS, PROCESSES
from rezolus_ue.schema import by_name

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = by_name()
needs_pyarrow = pytest.mark.skipif(not recparquet.have_pyarrow(),
                                   reason="pyarrow is not installed (the optional Parquet path)")


# --- realistic records ----------------------------------------------------------------------


def rec(event: str, t: int, cpu: int, *values: object, pid: int = 4242) -> Record:
    """Return a record of ``event`` as a consumer decodes it (packed, then unpacked)."""
    s = SCHEMAS[event]
    return Record(event, t, cpu, pid, s.unpack(s.pack(*values)))


def workload(seconds: int = 3, cpus: int = 4, t0: int = 7_000_000_000_000) -> list[Record]:
    """Return a few seconds of what an agent publishes: several events, in time order."""
    from rezolus_ue.metrics.family import histogram_records

    rng = random.Random(seconds * 1000 + cpus)
    out: list[Record] = []
    busy = [rng.randrange(10**12) for _ in range(cpus)]
    for sec in range(seconds):
        t = t0 + sec * 10**9
        for c in range(cpus):
            busy[c] += rng.randrange(10**9)
            out.append(rec("rezolus_cpu_usage", t + c, c, c, busy[c], 0, busy[c] // 3,
                           10**13 + sec, 7, 0, 11, 0, rng.randrange(10**6)))
            out.append(rec("rezolus_cpu_usage_dist", t + 100 + c, c, c, "user_ns", busy[c],
                           1, 2, 3, 2**64 - 1))
        out.append(rec("rezolus_pressure", t + 200, 0, "memory", 0, 1, 2, 3))
        out.append(rec("rezolus_cgroup", t + 300, 1, f"/system.slice/ünï-{sec}.service",
                       *range(10)))
        counts = h2.new_counts()
        h2.record(counts, [rng.randrange(1, 10**7) for _ in range(50)])
        for vals in histogram_records(SCHEMAS["rezolus_agent_sampler"], ("cpu_usage",),
                                      (1, sec, 0), counts):
            out.append(rec("rezolus_agent_sampler", t + 400, 2, *vals))
        out.append(rec("rezolus_agent", t + 500, 3, 4242, sec * 10**9, *range(11)))
        out += processes_interval(t + 600, sec)
    out.sort(key=lambda r: r.time_ns)  # as a Subscription delivers them
    return out


#: Process names as the kernel keeps them (15 bytes, cut with no regard for UTF-8): one
#: not ASCII, one cut inside a character (decoded with U+FFFD), one ASCII.
COMMS: tuple[str | bytes, ...] = ("café-wörker", "ab日本語プロ".encode()[:15], "kworker/0:1H-kb")
#: A container's cgroup: a long path, within what the event carries (255 bytes).
LONG_CGROUP = ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f3c2a9e_5b1d_"
               "4c7e_9a2f_3d8e6b1c4a7f.slice/cri-containerd-" + "9f3a" * 16 + ".scope")


def processes_interval(t: int, sec: int) -> list[Record]:
    """Return one interval of the processes sampler: the busiest processes, then the
    summary (fields by name from the declarations, so a new one needs no edit here)."""
    out = []
    for i, comm in enumerate(COMMS):
        values = {"start_ns": (i + 1) * 10**9, "cpu_user_ns": (sec + 1) * 10**9 * (i + 1),
                  "rss_bytes": 2**40 + i, "io_read_bytes": 2**64 - 1, "threads": 4 + i}
        out.append(rec(PROCESS.event, t + i, i, 1000 + i, comm, "wörker" if i else "root",
                       LONG_CGROUP if i == 0 else "/", "RSD"[i],
                       *(values.get(m.name, sec) for m in PROCESS.scalars)))
    summary = {"processes": 300, "published": len(COMMS), "load_1m_milli": 1250}
    out.append(rec(PROCESSES.event, t + 10, 0,
                   *(summary.get(m.name, sec) for m in PROCESSES.scalars)))
    return out


def by_event(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(r.event, []).append(r)
    return out


def write_blocks(path: Path, batches: list[list[Record]]) -> None:
    w = recnative.NativeWriter.create(path, recblocks.recording_meta(), overwrite=True)
    for b in batches:
        w.write_records(b)
    w.close()


# --- round trips ----------------------------------------------------------------------------


def test_native_round_trip_per_event(tmp_path: Path) -> None:
    recs = workload()
    p = tmp_path / "a.rzr"
    assert recnative.write_native(recs, p) == len(recs)
    back = list(read_records(p))
    assert by_event(back) == by_event(recs)
    assert back == sorted(recs, key=lambda r: r.time_ns)
    # Field order is the schema's, as tail prints them.
    for r in back:
        assert list(r.fields) == list(SCHEMAS[r.event].field_names)
    # Histogram buckets come back byte for byte.
    h = [r for r in back if r.event == "rezolus_agent_sampler"]
    assert h and all(r.histogram() is not None and r.histogram().sum() > 0 for r in h)


def test_event_filter_and_meta(tmp_path: Path) -> None:
    p = tmp_path / "a.rzr"
    recnative.write_native(workload(), p, recblocks.recording_meta(note="x"))
    got = list(read_records(p, events=["rezolus_cgroup", "rezolus_agent"]))
    assert {r.event for r in got} == {"rezolus_cgroup", "rezolus_agent"}
    meta = recfile.read_meta(p)
    assert meta["format"] == "rezolus-ue recording" and meta["note"] == "x"
    assert isinstance(meta["wall_offset_ns"], int)


def test_tables_keep_types(tmp_path: Path) -> None:
    p = tmp_path / "a.rzr"
    recnative.write_native(workload(), p)
    t = recfile.read_tables(p)
    cpu = t["rezolus_cpu_usage"]
    assert list(cpu)[:4] == ["time_ns", "common_cpu", "common_pid", "cpu"]
    assert cpu["user_ns"].dtype == np.dtype("<u8") and cpu["cpu"].dtype == np.dtype("<u4")
    assert cpu["time_ns"].dtype == np.dtype("<i8")
    assert int(t["rezolus_cpu_usage_dist"]["max"][0]) == 2**64 - 1
    assert t["rezolus_cgroup"]["cgroup"][0].startswith("/system.slice/ünï")
    assert isinstance(t["rezolus_agent_sampler"]["buckets"][0], bytes)
    assert t["rezolus_agent"]["pid"][0] == 4242  # the field, beside common_pid
    procs = t[PROCESS.event]
    assert procs["comm"][:3] == ["café-wörker", "ab日本語プ\ufffd", "kworker/0:1H-kb"]
    assert procs["cgroup"][0] == LONG_CGROUP and procs["user"][1] == "wörker"
    assert procs["pid"].dtype == np.dtype("<u4") and procs["rss_bytes"].dtype == np.dtype("<u8")
    assert int(procs["io_read_bytes"][0]) == 2**64 - 1
    assert t[PROCESSES.event]["published"].tolist() == [len(COMMS)] * 3


def test_to_pandas_keeps_u64(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas", reason="pandas is optional (docs/recording.md)")
    p = tmp_path / "a.rzr"
    recnative.write_native(workload(), p)
    df = recfile.to_pandas(p)["rezolus_cpu_usage_dist"]
    assert isinstance(df, pd.DataFrame) and df["max"].dtype == np.uint64
    assert int(df["max"].iloc[0]) == 2**64 - 1


def test_unknown_event_and_other_layouts_infer_types(tmp_path: Path) -> None:
    recs = [
        Record("rezolus_future", 1, 0, 1, {"a": -5, "b": 2**64 - 1, "s": "x", "raw": b"\0\1"}),
        Record("rezolus_future", 2, 0, 1, {"a": 7, "b": 0, "s": "", "raw": b""}),
        # A known event whose agent registered another layout: value types differ.
        Record("rezolus_cpu_cores", 3, 1, 1, {"online": "many"}),
        Record("rezolus_cpu_cores", 4, 1, 1, {"online": 8, "extra": 1}),
    ]
    p = tmp_path / "a.rzr"
    recnative.write_native(recs, p)
    assert list(read_records(p)) == recs
    t = recfile.read_tables(p)
    assert t["rezolus_future"]["a"].dtype == np.dtype("<i8")
    assert set(t) == {"rezolus_future", "rezolus_cpu_cores", "rezolus_cpu_cores#2"}


def test_empty_and_foreign_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.rzr"
    empty.write_bytes(b"")
    assert list(read_records(empty)) == []
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(RecordingError, match="not a rezolus-ue recording"):
        list(read_records(other))
    with pytest.raises(RecordingError, match="no such file"):
        list(read_records(tmp_path / "missing"))


def test_concatenated_recordings_are_a_recording(tmp_path: Path) -> None:
    a, b = workload(2), workload(2, t0=9_000_000_000_000)
    recnative.write_native(a, tmp_path / "a.rzr")
    recnative.write_native(b, tmp_path / "b.rzr")
    cat = tmp_path / "ab.rzr"
    cat.write_bytes((tmp_path / "a.rzr").read_bytes() + (tmp_path / "b.rzr").read_bytes())
    assert by_event(list(read_records(cat))) == by_event(a + b)


# --- crash safety ---------------------------------------------------------------------------


def _batches() -> list[list[Record]]:
    recs = workload(4)
    return [recs[i : i + 15] for i in range(0, len(recs), 15)]


def test_truncation_at_every_offset_of_the_last_block(tmp_path: Path) -> None:
    batches = _batches()
    p = tmp_path / "a.rzr"
    write_blocks(p, batches)
    data = p.read_bytes()
    refs = list(recblocks.scan_blocks(data))
    assert len(refs) == len(batches) + 1  # meta + one data block per batch
    last = refs[-1]
    complete = sorted(itertools.chain(*batches[:-1]), key=lambda r: r.time_ns)
    for cut in range(last.start, last.end):
        st = ScanStats()
        got = list(recnative.read_native(data[:cut], stats=st))
        assert by_event(got) == by_event(complete), cut
        assert st.tail_bytes == cut - last.start and st.skipped_bytes == 0
    # The same through files, at a few offsets.
    for cut in (last.start + 1, last.start + recblocks.HEADER.size, last.end - 1):
        q = tmp_path / f"cut{cut}.rzr"
        q.write_bytes(data[:cut])
        assert by_event(list(read_records(q))) == by_event(complete)


def test_truncation_at_random_offsets_reads_every_complete_block(tmp_path: Path) -> None:
    batches = _batches()
    p = tmp_path / "a.rzr"
    write_blocks(p, batches)
    data = p.read_bytes()
    ends = [r.end for r in recblocks.scan_blocks(data)][1:]  # after each data block
    rng = random.Random(7)
    for cut in [rng.randrange(len(data) + 1) for _ in range(300)]:
        n = sum(1 for e in ends if e <= cut)
        got = list(recnative.read_native(data[:cut]))
        assert by_event(got) == by_event(list(itertools.chain(*batches[:n]))), cut


def test_damage_in_the_middle_skips_one_block(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    batches = _batches()
    p = tmp_path / "a.rzr"
    write_blocks(p, batches)
    data = bytearray(p.read_bytes())
    refs = list(recblocks.scan_blocks(bytes(data)))
    victim = refs[2]  # the second data block
    data[(victim.start + victim.end) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    st = ScanStats()
    got = list(read_records(p, stats=st))
    want = list(itertools.chain(batches[0], *batches[2:]))
    assert by_event(got) == by_event(want)
    assert st.skipped_bytes == victim.end - victim.start
    assert "damaged" in caplog.text


# --- Parquet ------------------------------------------------------------------------------


@needs_pyarrow
def test_parquet_round_trip(tmp_path: Path) -> None:
    recs = workload()
    out = tmp_path / "run.parquet"
    assert recparquet.write_parquet(recs, out, recblocks.recording_meta()) == len(recs)
    assert list(read_records(out)) == recs
    assert by_event(list(read_records(out, ["rezolus_cgroup"]))) == \
        {"rezolus_cgroup": by_event(recs)["rezolus_cgroup"]}
    assert recfile.read_meta(out)["format"] == "rezolus-ue recording"
    assert recfile.read_tables(out)[PROCESS.event]["comm"][:2] == ["café-wörker",
                                                                   "ab日本語プ\ufffd"]


@needs_pyarrow
def test_dump_as_parquet_with_last(tmp_path: Path) -> None:
    recs = workload(6)
    p = tmp_path / "a.rzr"
    write_blocks(p, [recs[i : i + 11] for i in range(0, len(recs), 11)])
    mf = recblocks.MappedFile.open(p)
    try:
        res = dump.assemble([mf], tmp_path / "pq.parquet", "parquet", last_ns=2 * 10**9)
    finally:
        mf.close()
    newest = max(r.time_ns for r in recs)
    want = [r for r in recs if r.time_ns >= newest - 2 * 10**9]
    assert by_event(list(read_records(tmp_path / "pq.parquet"))) == by_event(want)
    assert res.records == len(want)
    assert recfile.read_meta(tmp_path / "pq.parquet")["format"] == "rezolus-ue recording"


def test_parquet_without_pyarrow_says_how(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(RecordingError, match="pip install pyarrow"):
        recparquet.write_parquet(workload(1), tmp_path / "pq.parquet")


# --- ring -----------------------------------------------------------------------------------


class Clock:
    """A monotonic clock and a wall clock that tests move by hand."""

    def __init__(self) -> None:
        self.ns = 0

    def mono(self) -> int:
        return self.ns

    def wall(self) -> float:
        return 1_700_000_000 + self.ns / 1e9


def test_ring_rotates_by_size_and_keeps_the_newest(tmp_path: Path) -> None:
    clock = Clock()
    ring = segments.Ring(tmp_path / "ring", max_size=12_000, segment_size=3_000,
                         clock=clock.mono, wall=clock.wall)
    ring.open()
    recs = workload(40)
    batches = [recs[i : i + 10] for i in range(0, len(recs), 10)]
    for b in batches:
        ring.write(b)
        segs = segments.list_segments(ring.root)
        assert sum(s.size for s in segs) <= 12_000
        assert sum(1 for s in segs if not s.complete) == 1
    assert ring.deleted > 0
    ring.close()
    assert not (ring.root / segments.PID_FILE).exists()
    segs = segments.list_segments(ring.root)
    assert all(s.complete for s in segs) and len(segs) >= 3
    got = list(read_records(ring.root))
    # What is left is the newest stretch of whole blocks, ending with the last record.
    assert got and got[-1] == batches[-1][-1]
    tail = sorted(itertools.chain(*batches), key=lambda r: r.time_ns)[-len(got):]
    assert by_event(got) == by_event(tail)


def test_ring_rotates_by_age(tmp_path: Path) -> None:
    clock = Clock()
    ring = segments.Ring(tmp_path / "ring", max_size=1 << 30, max_age_ns=10 * 10**9,
                         clock=clock.mono, wall=clock.wall)
    assert ring.segment_ns == 10**9 + 250_000_000
    ring.open()
    recs = workload(60)
    per_sec = len(recs) // 60
    for sec in range(60):
        ring.write(recs[sec * per_sec : (sec + 1) * per_sec])
        clock.ns += 10**9
    ring.tick()
    segs = segments.list_segments(ring.root)
    ages = [clock.wall() - s.mtime for s in segs if s.complete]
    assert ages and max(ages) <= 10  # nothing older than --max-age is kept
    got = list(read_records(ring.root))
    assert 8 * per_sec <= len(got) <= 12 * per_sec
    assert got[-1] == recs[60 * per_sec - 1]
    ring.close()


def test_ring_is_locked_and_repairs_a_killed_recorders_segment(tmp_path: Path) -> None:
    root = tmp_path / "ring"
    ring = segments.Ring(root, max_size=1 << 20)
    ring.open()
    with pytest.raises(RecordingError, match=r"another recorder \(pid \d+\) is writing"):
        segments.Ring(root, max_size=1 << 20).open()
    assert segments.running_recorder(root) == os.getpid()
    batches = _batches()
    for b in batches:
        ring.write(b)
    part = ring.current
    assert part is not None and part.name.endswith(".part")
    # Simulate kill -9 mid-write: half a block at the end, lock released by the kernel.
    blk = recblocks.encode_block(recblocks.KIND_DATA, rectables.encode_tables(
        rectables.to_tables(workload(1))))
    with open(part, "ab") as f:
        f.write(blk[: len(blk) // 2])
    os.close(ring._lock_fd)
    ring._lock_fd = -1
    assert segments.running_recorder(root) is None
    ring2 = segments.Ring(root, max_size=1 << 20)
    ring2.open()
    assert not part.exists() and part.with_name(part.name[: -len(".part")]).exists()
    ring2.close()
    assert by_event(list(read_records(root))) == by_event(list(itertools.chain(*batches)))


def test_assemble_last_window(tmp_path: Path) -> None:
    recs = workload(10)
    p = tmp_path / "a.rzr"
    write_blocks(p, [recs[i : i + 7] for i in range(0, len(recs), 7)])
    mf = recblocks.MappedFile.open(p)
    try:
        res = dump.assemble([mf], tmp_path / "out.rzr", last_ns=3 * 10**9)
    finally:
        mf.close()
    newest = max(r.time_ns for r in recs)
    want = [r for r in recs if r.time_ns >= newest - 3 * 10**9]
    got = list(read_records(tmp_path / "out.rzr"))
    assert by_event(got) == by_event(want)
    assert res.records == len(want) and res.last_ns == newest
    assert not (tmp_path / "out.rzr.part").exists()


def test_sizes() -> None:
    assert recorder.parse_size("100M") == 100 << 20
    assert recorder.parse_size("1G") == 1 << 30
    assert recorder.parse_size("1.5k") == 1536
    assert recorder.parse_size("512") == 512
    assert recorder.parse_size("2GiB") == 2 << 30
    assert recorder.parse_size(" 10 MB ") == 10 << 20
    for bad in ("", "M", "10X", "-1M", "1e9", "10 M B"):
        with pytest.raises(ValueError, match="invalid size"):
            recorder.parse_size(bad)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="rezolus-ue")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    recorder.add_parser(sub)
    dump.add_parser(sub)
    return p.parse_args(argv)


@pytest.mark.parametrize(("argv", "message"), [
    (["record", "--ring", "d", "--max-size", "10X"], "argument --max-size: invalid size '10X'"),
    (["record", "--ring", "d", "--max-size", "100K"], "'100K' is too small: at least 1M"),
    (["record", "--ring", "d", "--max-age", "soon"], "argument --max-age: invalid duration"),
    (["record", "f.rzr", "--duration", "0s"], "'0s' must be more than 0"),
    (["dump", "--last", "1x", "out.rzr"], "argument --last: invalid duration"),
])
def test_bad_values_are_one_line_errors(argv: list[str], message: str, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as e:
        _parse(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and message in err[0] and err[1].startswith("Try ")


def test_record_arguments_are_checked(tmp_path: Path) -> None:
    cases = [
        (["record"], "record needs a FILE, or --ring DIR"),
        (["record", "f.rzr", "--max-size", "1G"], "--max-size needs --ring DIR"),
        (["record", "--ring", str(tmp_path), "--format", "parquet"], "--ring writes native"),
        (["record", "f.rzr", "rezolus_nonesuch"], "no rezolus-ue event matches"),
    ]
    for argv, message in cases:
        with pytest.raises(RezolusError, match=message):
            recorder.run_record(_parse(argv))


def test_json_forms(tmp_path: Path) -> None:
    for r in workload(1):
        assert record_from_json(json.loads(json.dumps(r.to_json()))) == r
    h = next(r for r in workload(1) if r.event == "rezolus_agent_sampler")
    # tail --format json writes buckets as {index: count}.
    back = record_from_json(json.loads(json.dumps(h.to_json())))
    assert back.fields["buckets"] == h.fields["buckets"]


def test_record_loop_with_a_list_source(tmp_path: Path) -> None:
    recs = workload(3)

    class ListSource:
        lost = 0

        def __init__(self) -> None:
            self.chunks = [recs[i : i + 9] for i in range(0, len(recs), 9)]
            self.exhausted = False

        def poll(self, timeout_ms: int) -> list[Record]:
            out = self.chunks.pop(0)
            self.exhausted = not self.chunks
            return out

        def close(self) -> None:
            pass

    sink = recorder.FileSink(tmp_path / "a.rzr")
    stats = recorder.record_loop(ListSource(), sink, recorder.Control(), flush_ns=10**9)
    sink.close()
    assert stats.records == len(recs) and len(stats.events) == len(by_event(recs))
    assert by_event(list(read_records(tmp_path / "a.rzr"))) == by_event(recs)


# --- recorder processes ---------------------------------------------------------------------


def lines(records: list[Record]) -> bytes:
    return b"".join(json.dumps(r.to_json()).encode() + b"\n" for r in records)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rezolus_ue", *args]


def start(*args: str) -> subprocess.Popen[bytes]:
    """Start a recorder reading JSON lines on stdin; return once it is recording."""
    p = subprocess.Popen(cli(*args, "--source-file", "-"), cwd=ROOT, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stderr is not None
    line = p.stderr.readline().decode()
    assert "recording to" in line, line + p.stderr.read().decode()
    return p


def count(path: Path) -> int:
    try:
        return sum(1 for _ in read_records(path))
    except RecordingError:
        return -1


def finish(p: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> tuple[int, str]:
    if p.poll() is None:
        p.send_signal(sig)
    try:
        _out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        _out, err = p.communicate()
    return p.returncode, err.decode()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_duration_stops_the_recorder(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    recs = workload(2)
    out = tmp_path / "a.rzr"
    t0 = time.monotonic()
    p = start("record", str(out), "--duration", "700ms", "--flush", "50ms")
    procs.append(p)
    assert p.stdin is not None
    p.stdin.write(lines(recs))
    p.stdin.flush()  # and keep stdin open: only the duration can stop it
    rc = p.wait(timeout=20)
    elapsed = time.monotonic() - t0
    assert rc == 0, p.stderr.read() if p.stderr else ""
    assert 0.7 <= elapsed < 10
    assert by_event(list(read_records(out))) == by_event(recs)


def test_sigterm_closes_cleanly_and_existing_file_is_refused(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "a.rzr"
    p = start("record", str(out), "--flush", "20ms")
    procs.append(p)
    assert p.stdin is not None
    p.stdin.write(lines(workload(1)))
    p.stdin.flush()
    wait_for(lambda: count(out) == len(workload(1)), timeout=20)
    rc, err = finish(p)
    assert rc == 0 and "recorded" in err
    again = subprocess.run(cli("record", str(out), "--source-file", "/dev/null"), cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"rezolus-ue: error: {out} exists: use --force to overwrite it"]


def _ring_recorder(tmp_path: Path, procs, *extra: str) -> tuple[Path, subprocess.Popen[bytes]]:  # type: ignore[no-untyped-def]
    root = tmp_path / "ring"
    p = start("record", "--ring", str(root), "--max-size", "1M", "--flush", "20ms", *extra)
    procs.append(p)
    assert segments.running_recorder(root) == p.pid
    return root, p


def test_sigusr1_dumps_the_window(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    root, p = _ring_recorder(tmp_path, procs)
    recs = workload(3)
    assert p.stdin is not None
    p.stdin.write(lines(recs))
    p.stdin.flush()
    wait_for(lambda: count(root) == len(recs), timeout=20)
    p.send_signal(signal.SIGUSR1)
    dumps = root / segments.DUMPS_DIR
    wait_for(lambda: dumps.is_dir() and any(f.suffix == ".rzr" for f in dumps.iterdir()),
             timeout=20)
    (dump,) = [f for f in dumps.iterdir() if f.suffix == ".rzr"]
    assert by_event(list(read_records(dump))) == by_event(recs)
    assert p.poll() is None  # SIGUSR1 did not stop it
    rc, err = finish(p)
    assert rc == 0 and "wrote" in err


def test_dump_command_asks_the_running_recorder_then_reads_segments(tmp_path: Path,
                                                                     procs) -> None:  # type: ignore[no-untyped-def]
    root, p = _ring_recorder(tmp_path, procs, "--flush", "1h")  # only a dump flushes
    recs = workload(3)
    assert p.stdin is not None
    p.stdin.write(lines(recs))
    p.stdin.flush()
    time.sleep(0.5)  # read from the pipe, buffered, not written
    out = tmp_path / "out.rzr"
    d = subprocess.run(cli("dump", "--ring", str(root), str(out)), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert d.returncode == 0, d.stderr
    assert f"by the recorder, pid {p.pid}" in d.stderr
    assert by_event(list(read_records(out))) == by_event(recs)
    assert not list(root.glob(".dump-*"))
    rc, _err = finish(p)
    assert rc == 0
    assert not list(root.glob("*.part")) and not (root / segments.PID_FILE).exists()
    out2 = tmp_path / "out2.rzr"
    d = subprocess.run(cli("dump", "--ring", str(root), "--last", "1s", str(out2)), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert d.returncode == 0 and "no recorder is running" in d.stderr, d.stderr
    newest = max(r.time_ns for r in recs)
    assert by_event(list(read_records(out2))) == by_event(
        [r for r in recs if r.time_ns >= newest - 10**9])
    d = subprocess.run(cli("dump", "--ring", str(tmp_path / "nope"), str(tmp_path / "x")),
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert d.returncode == 1 and d.stderr.count("\n") == 1 and "no ring at" in d.stderr


def test_kill_9_mid_write_leaves_a_readable_ring(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "ring"
    rng = random.Random(3)
    rounds: list[list[Record]] = []
    for k in range(3):
        recs = workload(40, cpus=8, t0=(k + 1) * 10**15)  # each round its own time range
        rounds.append(recs)
        p = start("record", "--ring", str(root), "--max-size", "1M", "--flush", "1ms",
                  "--segment-size", "8000")
        procs.append(p)
        stop = threading.Event()
        assert p.stdin is not None

        def feed(stdin=p.stdin, recs=recs, stop=stop) -> None:  # type: ignore[no-untyped-def]
            for i in range(0, len(recs), 5):
                if stop.is_set():
                    return
                try:
                    stdin.write(lines(recs[i : i + 5]))
                    stdin.flush()
                except (BrokenPipeError, ValueError):
                    return
                time.sleep(0.001)

        before = count(root)
        t = threading.Thread(target=feed)
        t.start()
        wait_for(lambda before=before: count(root) > before, timeout=20)
        time.sleep(rng.random() * 0.3)
        p.kill()  # SIGKILL: no cleanup at all
        p.wait()
        stop.set()
        t.join()
        st = ScanStats()
        got = list(read_records(root, stats=st))
        assert st.skipped_bytes == 0
        assert len(list(root.glob("*.part"))) <= 1
        # Every round kept a prefix of what it was fed, in order: nothing garbled.
        for j, fed in enumerate(rounds):
            mine = [r for r in got if (j + 1) * 10**15 <= r.time_ns < (j + 2) * 10**15]
            assert mine and mine == fed[: len(mine)], f"round {k}, records of round {j}"
    # A new recorder repairs the killed one's segment and carries on; nothing is lost.
    before = by_event(list(read_records(root)))
    p = start("record", "--ring", str(root), "--max-size", "1M")
    procs.append(p)
    assert segments.running_recorder(root) == p.pid
    rc, _err = finish(p)
    assert rc == 0
    assert by_event(list(read_records(root))) == before
    assert not list(root.glob("*.part"))


@needs_pyarrow
def test_record_parquet_and_convert(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    recs = workload(2)
    out = tmp_path / "run.parquet"
    p = start("record", str(out))
    procs.append(p)
    assert p.stdin is not None
    p.stdin.write(lines(recs))
    p.stdin.close()  # end of the source: the recorder stops and converts
    assert p.wait(timeout=60) == 0, p.stderr.read() if p.stderr else ""
    assert sorted(f.name for f in tmp_path.iterdir()) == ["run.parquet"]  # no journal
    assert by_event(list(read_records(out))) == by_event(recs)
    # And back to native with dump --from.
    back = tmp_path / "back.rzr"
    d = subprocess.run(cli("dump", "--from", str(out), str(back)), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert d.returncode == 0, d.stderr
    assert by_event(list(read_records(back))) == by_event(recs)


def test_help_has_examples() -> None:
    for cmd in ("record", "dump"):
        r = subprocess.run(cli(cmd, "--help"), cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "examples:" in r.stdout
        assert "--source-file" not in r.stdout


def test_dump_copy_is_cheap(tmp_path: Path) -> None:
    """A dump of a ring copies verified blocks: check it writes what it says."""
    recs = workload(5)
    src = tmp_path / "ring"
    ring = segments.Ring(src, max_size=1 << 20, segment_size=2000)
    ring.open()
    for i in range(0, len(recs), 10):
        ring.write(recs[i : i + 10])
    files = ring.snapshot()
    try:
        res = dump.assemble(files, tmp_path / "d.rzr")
    finally:
        for f in files:
            f.close()
    ring.close()
    assert res.records == len(recs) and res.bytes == (tmp_path / "d.rzr").stat().st_size
    assert by_event(list(read_records(tmp_path / "d.rzr"))) == by_event(recs)
    shutil.rmtree(src)


def test_docs_standalone_reader_reads_what_we_write(tmp_path: Path) -> None:
    """docs/recording.md's reader, written from the specification, agrees with ours."""
    doc = (ROOT / "docs" / "recording.md").read_text()
    code = doc.split("<!-- standalone-reader -->\n```python\n", 1)[1].split("```", 1)[0]
    ns: dict[str, object] = {}
    exec(compile(code, "docs/recording.md", "exec"), ns)
    p = tmp_path / "a.rzr"
    write_blocks(p, _batches())
    theirs = ns["read_rzr"](p)  # type: ignore[operator]
    ours = recfile.read_tables(p)
    assert theirs == {e: {c: list(v.tolist() if isinstance(v, np.ndarray) else v)
                          for c, v in cols.items()} for e, cols in ours.items()}
