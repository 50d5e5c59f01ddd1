"""Bad input loses nothing and destroys nothing, case by case.

Each case is one thing a hostile or unlucky user does; the seeded campaigns that try
thousands of variations are in tests/reliability/test_fuzz.py. Costs are asserted as
counts (bytes checksummed, bytes allocated), never as times.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import io
import json
import logging
import os
import signal
import stat
import struct
import subprocess
import sys
import termios
import zlib
from collections import Counter
from pathlib import Path

import pytest
from test_recorder import workload
from waiting import scaled, wait_for

from rezolus_ue import cli, config
from rezolus_ue.consume.recording import blocks as recblocks
from rezolus_ue.consume.recording import dump
from rezolus_ue.consume.recording import files as recfile
from rezolus_ue.consume.recording import native as recnative
from rezolus_ue.consume.recording import parquet as recparquet
from rezolus_ue.consume.recording.blocks import KIND_DATA, RecordingError, ScanStats, encode_block
from rezolus_ue.consume.recording.files import read_records
from rezolus_ue.consume.records import Record
from rezolus_ue.errors import ConfigError, os_error_text
from rezolus_ue.samplers import options

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (mknod, mount, setpriv)")


def key(r: Record) -> tuple:
    return (r.event, r.time_ns, r.meta.cpu, r.meta.pid, json.dumps(r.fields, sort_keys=True,
                                                         default=bytes.hex))


def records_of(blocks: list[bytes]) -> Counter:
    """Return the records of the data blocks ``blocks`` (each read alone), as a multiset."""
    return Counter(key(r) for b in blocks for r in recnative.read_native(b))


def recording(tmp_path: Path, name: str = "ok.rzr", seconds: int = 5) -> tuple[Path, list[bytes]]:
    """Write a recording of several data blocks; return it and its blocks' bytes."""
    path = tmp_path / name
    recnative.write_native(workload(seconds), path, block_records=10)
    data = path.read_bytes()
    return path, [data[r.start : r.end] for r in recblocks.scan_blocks(data)]


def raw_block(kind: int, payload: bytes, flags: int = 0, hint: int = 0) -> bytes:
    """Return a block with a valid CRC around any payload (as stored)."""
    head = struct.pack("<4sBBHI", recblocks.SYNC, kind, flags, hint, len(payload))
    return head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head))) + payload


@functools.cache
def zlib_bomb(gib: int = 1) -> bytes:
    """Return a valid zlib stream of ``gib`` GiB of zeros (~1 MiB per GiB), made fast:
    one MiB deflated after a full flush repeats byte for byte, and the Adler-32 of n
    zeros is (n mod 65521) << 16 | 1."""
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    unit = z.compress(bytes(1 << 20)) + z.flush(zlib.Z_FULL_FLUSH)
    n = gib << 30
    body = b"\x78\xda" + unit * (n >> 20) + z.flush()
    out = body + struct.pack(">I", (n % 65521) << 16 | 1)
    assert zlib.decompressobj().decompress(out, 1 << 20) == bytes(1 << 20)
    return out


def run_cli(*argv: str) -> tuple[int, str]:
    """Run the CLI in-process (a process each is slow on a loaded machine); return its
    exit status and what it printed on stderr."""
    err = io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
    return code, err.getvalue()


# --- the reader follows its reading rule ----------------------------------------------------


def test_damage_before_the_first_block_loses_only_the_damaged_block(tmp_path: Path,
                                                                   caplog) -> None:  # type: ignore[no-untyped-def]
    path, blocks = recording(tmp_path)
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF  # the metadata block
    path.write_bytes(bytes(data))
    st = ScanStats()
    with caplog.at_level(logging.WARNING):
        got = Counter(key(r) for r in read_records(path, stats=st))
    assert got == records_of(blocks[1:])
    assert st.skipped_bytes == len(blocks[0])
    assert caplog.text.count("damaged") == 1  # one warning per file


def _bad_payloads() -> dict[str, bytes]:
    """Data block payloads whose CRC will be right but whose contents are wrong."""
    common = [["time_ns", "<i8"], ["common_cpu", "<u4"], ["common_pid", "<i4"]]

    def head(tables: object) -> bytes:
        h = json.dumps({"tables": tables}).encode()
        return struct.pack("<I", len(h)) + h

    return {
        "rows beyond the block": head([{"event": "e", "rows": 10**9, "columns": common}]),
        "negative rows": head([{"event": "e", "rows": -1, "columns": common}]),
        "unknown column type": head([{"event": "e", "rows": 0, "columns": [*common,
                                                                           ["x", "<f8"]]}]),
        "no common columns": head([{"event": "e", "rows": 0, "columns": [["x", "<u8"]]}]),
        "duplicate columns": head([{"event": "e", "rows": 0, "columns": common + common}]),
        "deeply nested header": struct.pack("<I", 200_000) + b"[" * 100_000 + b"]" * 100_000,
        "header longer than the block": struct.pack("<I", 1 << 30) + b"{}",
        "not JSON": struct.pack("<I", 5) + b"\xff\xfe{[(",
        "offsets going back": head([{"event": "e", "rows": 2, "columns": [*common,
                                                                         ["s", "str"]]}])
        + bytes(32) + struct.pack("<3I", 0, 5, 2) + b"abcde",
        "bad UTF-8": head([{"event": "e", "rows": 1, "columns": [*common, ["s", "str"]]}])
        + bytes(16) + struct.pack("<2I", 0, 2) + b"\xc3\x28",
        "too short": b"\x01",
    }


@pytest.mark.parametrize("name", sorted(_bad_payloads()))
def test_a_valid_checksum_bad_block_is_skipped_alone(tmp_path: Path, name: str) -> None:
    _path, blocks = recording(tmp_path)
    bad = encode_block(KIND_DATA, _bad_payloads()[name])
    mixed = tmp_path / "mixed.rzr"
    mixed.write_bytes(b"".join(blocks[:3]) + bad + b"".join(blocks[3:]))
    st = ScanStats()
    assert Counter(key(r) for r in read_records(mixed, stats=st)) == records_of(blocks)
    assert st.bad_blocks == 1 and st.skipped_bytes == 0
    # dump reads it the same way: the dump holds exactly what tail prints.
    out = tmp_path / "dump.rzr"
    files = [recblocks.MappedFile.open(mixed)]
    dump.assemble(files, out)
    files[0].close()
    assert Counter(key(r) for r in read_records(out)) == records_of(blocks)


def test_bad_compressed_data_and_bombs_are_skipped_within_bounds(tmp_path: Path) -> None:
    import tracemalloc

    _path, blocks = recording(tmp_path)
    bomb = zlib_bomb()  # 1 GiB of zeros in ~1 MiB
    honest_hint = recblocks.encode_block(KIND_DATA, bytes(4096))
    cases = [
        raw_block(KIND_DATA, b"not zlib at all", recblocks.FLAG_ZLIB),
        raw_block(KIND_DATA, zlib.compress(b"x" * 1000)[:-6], recblocks.FLAG_ZLIB),  # cut
        raw_block(KIND_DATA, bomb, recblocks.FLAG_ZLIB),  # no size hint: the 32 MiB cap
        raw_block(KIND_DATA, bomb, recblocks.FLAG_ZLIB, hint=1),  # hint: 4 KiB
        honest_hint[:6] + b"\x00\x00" + honest_hint[8:],  # CRC now wrong: damage
    ]
    mixed = tmp_path / "mixed.rzr"
    mixed.write_bytes(blocks[0] + b"".join(c + b for c, b in zip(cases, blocks[1:], strict=False))
                      + b"".join(blocks[len(cases) + 1 :]))
    st = ScanStats()
    tracemalloc.start()
    try:
        got = Counter(key(r) for r in read_records(mixed, stats=st))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == records_of(blocks)
    assert st.bad_blocks == 4 and st.skipped_bytes == len(cases[-1])
    # Inflating stops at the cap: nothing near the bomb's 1 GiB is ever allocated.
    assert peak < 2 * recblocks.MAX_PAYLOAD + 64 * len(mixed.read_bytes()), peak


def test_inflating_stops_at_the_size_hint() -> None:
    payload = bytes(100_000)
    block = encode_block(KIND_DATA, payload)
    ref = next(recblocks.scan_blocks(block))
    assert ref.hint == -(-len(payload) // recblocks.SIZE_UNIT)
    assert ref.payload(block) == payload
    lying = raw_block(KIND_DATA, block[recblocks.HEADER.size :], recblocks.FLAG_ZLIB, hint=2)
    with pytest.raises(recblocks.BlockError, match="inflates beyond 8192"):
        next(recblocks.scan_blocks(lying)).payload(lying)


def test_writers_split_blocks_so_readers_can_cap_them(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setattr(recnative, "BLOCK_PAYLOAD", 2000)
    recs = workload(5)
    path = tmp_path / "split.rzr"
    recnative.write_native(recs, path)
    data = path.read_bytes()
    refs = [r for r in recblocks.scan_blocks(data) if r.kind == KIND_DATA]
    assert len(refs) > 4
    assert all(len(r.payload(data)) <= 2000 or r.hint == 1 for r in refs)
    assert Counter(key(r) for r in read_records(path)) == Counter(key(r) for r in recs)


class _CountingZlib:
    """zlib, counting the bytes crc32 reads."""

    def __init__(self) -> None:
        self.crc_bytes = 0

    def __getattr__(self, name: str) -> object:
        return getattr(zlib, name)

    def crc32(self, data: bytes, value: int = 0) -> int:
        self.crc_bytes += len(data)
        return zlib.crc32(data, value)


@pytest.mark.parametrize("combine", ["libz", "python"])
def test_scanning_is_linear_in_the_file_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             combine: str) -> None:
    """Headers that each claim a payload to the end of the file took 25 s for 1 MB: each
    was checked by reading the rest of the file. Now bytes checksummed stay a small
    multiple of the file size."""
    if combine == "python":
        monkeypatch.setattr(recblocks, "_crc32_combine", recblocks._crc32_combine_py)
    path, blocks = recording(tmp_path)
    ok = path.read_bytes()
    n = 4096 if combine == "python" else 32768
    total = 16 * n + len(ok)
    junk = b"".join(struct.pack("<4sBBHII", recblocks.SYNC, KIND_DATA, 1, 0,
                                total - 16 * i - 16, 0) for i in range(n))
    data = junk + ok
    counting = _CountingZlib()
    monkeypatch.setattr(recblocks, "zlib", counting)
    st = ScanStats()
    got = Counter(key(r) for r in recnative.read_native(data, stats=st))
    assert got == records_of(blocks)
    assert st.skipped_bytes == len(junk)
    assert counting.crc_bytes < 4 * len(data) + 2 * recblocks._RangeCrc.STEP * n, \
        (counting.crc_bytes, len(data))


def test_crc32_combine_matches_zlib() -> None:
    import random

    rng = random.Random(3)
    for _ in range(50):
        a, b = rng.randbytes(rng.randrange(100)), rng.randbytes(rng.randrange(3000))
        want = zlib.crc32(a + b)
        assert recblocks._crc32_combine_py(zlib.crc32(a), zlib.crc32(b), len(b)) == want
        assert recblocks._crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == want


def test_files_without_a_valid_block_and_pipes_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.rzr"
    junk.write_bytes(b"RZRB" + os.urandom(1000))
    with pytest.raises(RecordingError, match="not a rezolus-ue recording"):
        list(read_records(junk))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for reader in (read_records, recfile.read_meta, recfile.read_tables):
        with pytest.raises(RecordingError, match=r"is a pipe.*save the stream to a file"):
            list(reader(fifo))  # type: ignore[call-overload]


def test_tail_from_a_pipe_is_an_error_and_from_a_redirected_file_works(tmp_path: Path) -> None:
    path, blocks = recording(tmp_path)
    cmd = [sys.executable, "-m", "rezolus_ue", "tail", "--from", "/dev/stdin"]
    with open(path, "rb") as f:
        p = subprocess.run(cmd, stdin=f, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == sum(records_of(blocks).values())
    p = subprocess.run(cmd, input=path.read_bytes(), capture_output=True, timeout=60)
    assert p.returncode == 1 and b"is a pipe" in p.stderr and not p.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_tail_stops_when_its_reader_has_stopped_reading(tmp_path: Path, sig: int) -> None:
    """`tail | reader` where the reader no longer reads (stopped, hung): the pipe fills and
    tail blocks writing. A signal must still stop it (once, not with kill -9), saying what
    was left unwritten."""
    path, _blocks = recording(tmp_path, seconds=60)
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: the smallest pipe, full after a few lines
    p = subprocess.Popen([sys.executable, "-m", "rezolus_ue", "tail", "--from", str(path)],
                         stdout=w, stderr=subprocess.PIPE, text=True)
    os.close(w)
    try:
        wchan = Path(f"/proc/{p.pid}/wchan")
        wait_for(lambda: wchan.read_text().endswith("pipe_write"), timeout=60,
                 what="tail to fill the pipe and block writing",
                 seen=lambda: (pipe_bytes(r), p.poll(), wchan.read_text()))
        p.send_signal(sig)
        _out, err = p.communicate(timeout=scaled(60))
    finally:
        p.kill()
        os.close(r)
    assert p.returncode == 0, err
    assert "lines unwritten" in err and "Traceback" not in err, err


def pipe_bytes(fd: int) -> int:
    """Return how many bytes wait in the pipe ``fd`` reads."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]


def test_metadata_of_the_wrong_type_is_dropped(tmp_path: Path) -> None:
    _path, blocks = recording(tmp_path)
    meta = recblocks.encode_block(recblocks.KIND_META, json.dumps(
        {"wall_offset_ns": "soon", "hostname": "h"}).encode(), compress=False)
    bad = tmp_path / "meta.rzr"
    bad.write_bytes(raw_block(recblocks.KIND_META, b"{not json") + meta + b"".join(blocks[1:]))
    assert recfile.read_meta(bad) == {"hostname": "h"}
    code, err = run_cli("tail", "--from", str(bad), "-n", "1")
    assert code == 0, err


def test_damaged_parquet_loses_one_row_group(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    recs = [r for r in workload(40) if r.event == "rezolus_cpu_usage"]
    out = f = tmp_path / "run.parquet"
    recparquet.write_parquet(recs, out, row_group=10)  # a row per second: 4 records
    md = pq.ParquetFile(f).metadata
    assert md.num_row_groups == 4
    col = md.row_group(1).column(md.num_columns - 1)  # the second row group's records
    data = bytearray(f.read_bytes())
    for i in range(col.data_page_offset, col.data_page_offset + col.total_compressed_size):
        data[i] = 0xFF
    f.write_bytes(bytes(data))
    st = ScanStats()
    got = Counter(key(r) for r in read_records(out, stats=st))
    want = Counter(key(r) for i, r in enumerate(recs) if not 40 <= i < 80)
    assert got == want and st.bad_blocks == 1
    f.write_bytes(b"PAR1" + bytes(100))  # no footer: the file is skipped, said once
    st = ScanStats()
    assert list(read_records(out, stats=st)) == [] and st.bad_blocks == 1


# --- outputs: nothing but a regular file is ever replaced -------------------------------------


def _targets(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "dir"
    d.mkdir()
    (d / "precious").write_text("keep me")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    (tmp_path / "target").write_text("keep me")
    link.symlink_to(tmp_path / "target")
    out = {"directory": d, "fifo": fifo, "symlink": link}
    if IS_ROOT:
        dev = tmp_path / "null"
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        out["device"] = dev
    return out


def _unchanged(tmp_path: Path, what: str, path: Path) -> None:
    if what == "directory":
        assert (path / "precious").read_text() == "keep me"
    elif what == "symlink":
        assert path.is_symlink() and (tmp_path / "target").read_text() == "keep me"
    elif what == "fifo":
        assert stat.S_ISFIFO(path.lstat().st_mode)
    else:
        assert stat.S_ISCHR(path.lstat().st_mode)


@pytest.mark.parametrize("fmt", ["native", "parquet"])
def test_force_never_replaces_anything_but_a_regular_file(tmp_path: Path, fmt: str) -> None:
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    src, _blocks = recording(tmp_path)
    for what, target in _targets(tmp_path).items():
        for argv in (["dump", "--from", str(src)], ["record", "--source-file", str(src)]):
            code, err = run_cli(*argv, "--force", "--format", fmt, str(target))
            assert code == 1 and "refusing to replace it" in err, (what, argv, err)
            _unchanged(tmp_path, what, target)
    assert not list(tmp_path.glob(".*.part"))


def test_force_replaces_a_file_and_never_a_directory(tmp_path: Path) -> None:
    src, blocks = recording(tmp_path)
    out = tmp_path / "out.rzr"
    out.write_text("old")
    part = tmp_path / "out.rzr.part"
    part.mkdir()  # someone's directory with the name the old code used as its temporary
    (part / "precious").write_text("keep me")
    code, err = run_cli("dump", "--from", str(src), str(out))
    assert code == 1 and "exists: use --force" in err and out.read_text() == "old"
    code, err = run_cli("dump", "--from", str(src), "--force", str(out))
    assert code == 0, err
    assert Counter(key(r) for r in read_records(out)) == records_of(blocks)
    assert (part / "precious").read_text() == "keep me"
    pytest.importorskip("pyarrow")
    pq = tmp_path / "out.parquet"
    assert run_cli("dump", "--from", str(src), str(pq))[0] == 0
    code, err = run_cli("dump", "--from", str(src), "--force", str(pq))
    assert code == 0, err
    assert Counter(key(r) for r in read_records(pq)) == records_of(blocks)
    code, err = run_cli("dump", "--from", str(src), "--format", "parquet", "--force",
                        str(part))
    assert code == 1 and "is a directory" in err and (part / "precious").exists()


def test_a_dump_through_the_recorder_is_created_by_the_asker(tmp_path: Path) -> None:
    """The recorder writes into a file the asker made: it refuses anything else."""
    f = tmp_path / "into"
    f.write_bytes(b"")
    uid = os.geteuid()
    os.close(dump._open_into(f, uid))
    for bad, why in ((f, uid + 1), (tmp_path, uid)):
        with pytest.raises(RecordingError):
            dump._open_into(bad, why)
    f.write_bytes(b"x")
    with pytest.raises(RecordingError, match="not an empty file"):
        dump._open_into(f, uid)
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(RecordingError, match="too many levels"):
        dump._open_into(link, uid)


# --- configs ------------------------------------------------------------------------------------


def _cpu_seconds(fn, *args) -> float:  # type: ignore[no-untyped-def]
    import time

    t = time.process_time()
    fn(*args)
    return time.process_time() - t


def _parse_or_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        config.parse(text, options())


def test_config_parsing_is_linear_in_its_size() -> None:
    """A line of 3,000 spaces took 39 s (the key-line pattern backtracked cubically).
    Compared with an honest config of the same size, so the bound is not a speed."""
    honest = "[agent]\n" + "".join(f"# {i:08d} {'x' * 60}\n" for i in range(1000))
    for hostile in (" " * len(honest) + "\n", "[" + " " * len(honest) + "\n",
                    "a" + " " * len(honest) + "b\n", '"' + " ." * (len(honest) // 2) + "\n"):
        base = min(_cpu_seconds(_parse_or_error, honest) for _ in range(3))
        assert _cpu_seconds(_parse_or_error, hostile) < 50 * base + 0.5


def test_config_files_over_a_sane_size_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (config.MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        config.load(big, options())
    p = subprocess.run([sys.executable, "-m", "rezolus_ue", "config", "check", "-"],
                       input=b"#" * (2 << 20), capture_output=True, timeout=60)
    assert p.returncode == 1 and b"larger than 1 MiB" in p.stderr


@pytest.mark.parametrize("value", ["a\\u0000b", "x" * 5000])
def test_path_options_that_run_would_reject_fail_config_check(value: str) -> None:
    with pytest.raises(ConfigError, match=r":2: \[agent\] tracefs: a path cannot"):
        config.parse(f'[agent]\ntracefs = "{value}"\n', options(), Path("c.toml"))


def test_config_errors_quote_a_short_value() -> None:
    with pytest.raises(ConfigError) as e:
        config.parse("k" * 10_000 + " = 1\n", options())
    assert len(str(e.value)) < 200


# --- OS errors: one line, the path, what to do ---------------------------------------------------


def test_os_error_text_names_the_path_and_the_remedy() -> None:
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/x")
    assert os_error_text(e, "/r/x", "write") == (
        "cannot write /r/x: no space left on the device: free some space or choose"
        " another path")
    assert "NUL" in os_error_text(ValueError("embedded null byte"), "a\0b")


def test_long_names_and_nul_are_one_line_errors(tmp_path: Path) -> None:
    src, _blocks = recording(tmp_path)
    long = str(tmp_path / ("a" * 300))
    for argv in (["tail", "--from", long], ["dump", "--from", str(src), long],
                 ["record", "--source-file", str(src), long], ["config", "check", long],
                 ["dump", "--from", long, str(tmp_path / "x.rzr")],
                 ["record", "--source-file", str(src), "--ring", long]):
        code, err = run_cli(*argv)
        assert code in (1, 2) and "file name too long" in err, (argv, err)
        assert "internal error" not in err and len(err.splitlines()) == 1, err


@needs_root
@pytest.mark.parametrize("trouble", ["full", "read-only"])
def test_full_and_read_only_disks_are_one_line_errors(tmp_path: Path, trouble: str) -> None:
    src = tmp_path / "src.rzr"
    recnative.write_native(workload(400, cpus=16), src)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        if trouble == "full":
            (mnt / "fill").write_bytes(os.urandom(250 << 10))
            (mnt / "ring").mkdir()
        else:
            (mnt / "ring").mkdir()
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        why = "no space left" if trouble == "full" else "read-only file system"
        for argv in (["record", "--source-file", str(src), str(mnt / "x.rzr")],
                     ["record", "--source-file", str(src), "--ring", str(mnt / "ring"),
                      "--segment-size", "64K"],
                     ["dump", "--from", str(src), str(mnt / "y.rzr")]):
            code, err = run_cli(*argv)
            last = err.splitlines()[-1]
            assert code == 1 and why in last and str(mnt) in last, (argv, err)
        assert not list(mnt.glob(".*.part"))
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@needs_root
@pytest.mark.host  # the host's tracefs, read while no agent runs
def test_check_and_events_on_a_tracefs_the_user_cannot_read() -> None:
    from tracefs_tools import find_tracefs

    root = find_tracefs(mount=True)
    if os.stat(root).st_mode & stat.S_IXOTH:
        pytest.skip(f"{root} is readable by everyone here")
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            str(ROOT / ".venv/bin/rezolus-ue")]
    p = subprocess.run([*drop, "check"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "internal error" not in p.stderr, p.stderr
    assert "FAIL  user_events:" in p.stdout and "Permission denied" in p.stdout
    p = subprocess.run([*drop, "events"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and p.stderr.startswith("rezolus-ue: error: "), p.stderr
    assert len(p.stderr.splitlines()) == 1


def test_cli_translates_a_path_os_error_that_escaped(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def boom(_args: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", "/etc/x")

    monkeypatch.setitem(cli._COMMANDS, "events", boom)
    assert cli.main(["events"]) == 1
    assert capsys.readouterr().err == ("rezolus-ue: error: cannot use /etc/x: permission"
                                       " denied: run as a user who may use it, or choose"
                                       " another path\n")


def test_tail_of_a_small_bomb_stays_small(tmp_path: Path) -> None:
    """The issue's case: a 2 MB recording whose block inflates to 2 GiB took `tail --from`
    to 4.2 GB. Its peak RSS now stays within the payload cap plus the interpreter."""
    _path, blocks = recording(tmp_path)
    bomb = zlib_bomb(2)
    path = tmp_path / "bomb.rzr"
    path.write_bytes(blocks[0] + raw_block(KIND_DATA, bomb, recblocks.FLAG_ZLIB)
                     + b"".join(blocks[1:]))
    # A parent of its own, so RUSAGE_CHILDREN's peak is this one child's.
    probe = ("import resource, subprocess, sys;"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE);"
             "sys.stderr.buffer.write(p.stderr);"
             "print(len(p.stdout.splitlines()), p.returncode,"
             " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "rezolus_ue",
                        "tail", "--from", str(path)], capture_output=True, text=True,
                       timeout=120)
    lines, code, rss_kib = map(int, p.stdout.split())
    assert code == 0 and "1 undecodable block" in p.stderr, p.stderr
    assert lines == sum(records_of(blocks).values())
    assert rss_kib < 400 << 10, rss_kib
