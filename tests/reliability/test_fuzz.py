"""Property-based fuzzing of config files and command lines: no traceback, ever, and
every rejection names the file and line, or the argument.

Config files go through the same path as ``rezolus-ue run --config``/``config check``
(read from disk, permissions checked, parsed, validated); command lines through the real
argument parser of every subcommand, with option values drawn from what users type and
what they mistype.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import signal
import stat
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_input import zlib_bomb
from test_config import _DOCS
from test_recorder import workload

from rezolus_ue import cli, config
from rezolus_ue.consume.recording import blocks as recblocks
from rezolus_ue.consume.recording import dump
from rezolus_ue.consume.recording import files as recfile
from rezolus_ue.consume.recording import native as recnative
from rezolus_ue.consume.recording import parquet as recparquet
from rezolus_ue.consume.recording.blocks import KIND_DATA, RecordingError, ScanStats
from rezolus_ue.consume.records import Record
from rezolus_ue.errors import ConfigError
from rezolus_ue.samplers import options

OPTS = options()


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=_DOCS)
def test_config_file_rejections_name_file_and_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(text)
    path.chmod(0o644)
    try:
        config.load(path, OPTS)
    except ConfigError as e:
        assert re.match(rf"{re.escape(str(path))}:\d+: ", str(e)), str(e)


def _parser_options() -> dict[str, list[argparse.Action]]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {"": [a for a in parser._actions if a.option_strings]}
    for name, p in sub.choices.items():
        out[name] = [a for a in p._actions if a.option_strings or a.dest != "help"]
    return out


PARSERS = _parser_options()
VALUES = st.sampled_from([
    "1s", "100ms", "0", "-1", "10x", "", " ", "1e9", "abc", "/nonexistent", "/dev/null",
    "rezolus_cpu_usage", "rezolus_*", "user_events:rezolus_cpu_usage", "9745", "99999",
    "127.0.0.1:9745", "[::1]:0", "--", "-", "\x00", "é", "1h", "3600000s", "csv", "json",
])


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    cmd = draw(st.sampled_from(sorted(PARSERS)))
    argv = [cmd] if cmd else []
    for _ in range(draw(st.integers(0, 4))):
        actions = PARSERS[cmd]
        if not actions:
            break
        a = draw(st.sampled_from(actions))
        if a.option_strings:
            argv.append(draw(st.sampled_from(a.option_strings)))
            if a.nargs != 0:
                argv.append(draw(VALUES))
        else:
            argv.append(draw(VALUES))
    if draw(st.booleans()):
        argv.append(draw(st.sampled_from(["--bogus", "-z", "extra"])))
    return argv


@settings(max_examples=300, deadline=None, database=None)
@given(command_lines())
def test_command_line_rejections_name_the_argument(argv: list[str]) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.build_parser().parse_args(argv)
        except SystemExit as e:
            if e.code in (0, None):  # --help, --version
                return
            msg = err.getvalue()
            assert e.code == 2, msg
            assert "Traceback" not in msg
            assert re.search(r"error: (argument \S+|unrecognized arguments|the following"
                             r" arguments are required|invalid choice|argument)", msg), msg


@pytest.mark.parametrize("argv", [["run", "--interval", "fast"], ["run", "-s", "0"],
                                  ["check", "--config", "/nonexistent"]])
def test_bad_values_exit_with_a_message_not_a_traceback(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert "Traceback" not in err and "internal error" not in err
    assert argv[-1] in err or "--interval" in err or "-s" in err


# --- configs: a seeded campaign of hostile lines ------------------------------------------

_FRAGMENTS = [" " * 3000, "\t" * 500, "[" * 200, "]" * 200, "=" * 100, '"' * 101, "'", ".",
              "agent", "samplers", "publish_interval", "a" * 5000, "\\", "#", "{", "}",
              "\u0000", "é", "1s", "[agent]", "[samplers.cpu_usage]", "enabled = true",
              "x = [", "[[a]]", ' = "', "\r", "0x", "1e999", "inf"]


def test_hostile_config_lines_fail_in_one_line_in_linear_time(tmp_path: Path) -> None:
    """300 configs built from the fragments that made parsers backtrack or recurse: one
    short FILE:LINE error or a valid config, in CPU time proportional to the size (a
    generous multiple of an honest config's cost, measured in the same run)."""
    import time

    honest = "[agent]\n" + "".join(f"# {i:08d} {'x' * 60}\n" for i in range(300))
    t = time.process_time()
    for _ in range(5):
        config.parse(honest, OPTS)
    per_byte = (time.process_time() - t) / 5 / len(honest)
    path = tmp_path / "hostile.toml"
    for seed in range(300):
        rng = random.Random(seed)
        lines = ["".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 6)))
                 for _ in range(rng.randint(1, 8))]
        text = "\n".join(lines) + "\n"
        path.write_text(text)
        t = time.process_time()
        try:
            config.load(path, OPTS)
        except ConfigError as e:
            assert re.match(rf"{re.escape(str(path))}:\d+: ", str(e)), (seed, str(e))
            assert len(str(e)) < 400 and "\n" not in str(e), (seed, str(e))
        spent = time.process_time() - t
        assert spent < 100 * per_byte * len(text) + 0.5, (seed, spent, len(text))


# --- recordings: seeded campaigns ---------------------------------------------------------
#
# Each campaign is a fixed number of seeded mutations: reproducible, and bounded in time
# whatever the machine. A failure names the seed and case: rerun with it to debug.


def _key(r: Record) -> tuple:
    return (r.event, r.time_ns, r.meta.cpu, r.meta.pid,
            json.dumps(r.fields, sort_keys=True, default=bytes.hex))


def _base(seconds: int = 20, t0: int = 7_000_000_000_000) -> tuple[bytes, list[bytes]]:
    """Return a recording's bytes and its data blocks' bytes."""
    recs = workload(seconds, t0=t0)
    blocks = [recblocks.meta_block(recblocks.recording_meta())]
    blocks += [b for i in range(0, len(recs), 25) for b in recnative.data_blocks(recs[i : i + 25])]
    return b"".join(blocks), blocks[1:]


def _mutate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """Return ``data`` damaged as disks, copies and people damage files."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        n = len(b)
        if n == 0:
            b += other[: rng.randrange(len(other))]
            continue
        at, size = rng.randrange(n), rng.choice([1, 2, 4, 16, 100, 1000, 5000])
        op = rng.randrange(9)
        if op == 0:  # bit flips
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1:  # a zeroed or random range
            b[at : at + size] = bytes(len(b[at : at + size])) if rng.random() < 0.5 \
                else rng.randbytes(len(b[at : at + size]))
        elif op == 2:  # lost bytes
            del b[at : at + size]
        elif op == 3:  # inserted garbage, sometimes sync words
            b[at:at] = rng.randbytes(size) if rng.random() < 0.7 else recblocks.SYNC * size
        elif op == 4:  # a repeated range (a bad copy)
            b[at:at] = b[at : at + size]
        elif op == 5:  # cut short (a crash)
            del b[at:]
        elif op == 6:  # another recording spliced in
            b[at:at] = other[rng.randrange(len(other)) :][: rng.randrange(1, 20000)]
        elif op == 7:  # a forged header claiming a payload to the end of the file
            b[at:at] = recblocks.HEADER.pack(recblocks.SYNC, KIND_DATA, 1, 0,
                                           max(0, n - at), rng.getrandbits(32))
        else:  # junk before the first block
            b[0:0] = rng.randbytes(size)
    return bytes(b)


def _expected(buf: bytes, blocks: list[bytes]) -> Counter:
    """Return the records of every original data block still whole in ``buf``."""
    out: Counter = Counter()
    for blk in blocks:
        if k := buf.count(blk):
            for r in recnative.read_native(blk):
                out[_key(r)] += k
    return out


def test_damaged_recordings_lose_only_the_damage(tmp_path: Path) -> None:
    """600 damaged recordings: every intact block's records come back, nothing else does,
    no exception escapes; tail's reader and dump agree; checksumming stays linear."""
    data, blocks = _base()
    other, other_blocks = _base(7, t0=9_000_000_000_000)
    for seed in range(600):
        rng = random.Random(seed)
        buf = _mutate(rng, data, other)
        st = ScanStats()
        got = Counter(_key(r) for r in recnative.read_native(buf, stats=st))
        assert got == _expected(buf, blocks + other_blocks), f"seed {seed}"
        if seed % 20:
            continue
        # Through files: read_records (tail --from) and a dump (dump --from) agree.
        src, out = tmp_path / f"{seed}.rzr", tmp_path / f"{seed}.dump.rzr"
        src.write_bytes(buf)
        try:
            via_tail = Counter(_key(r) for r in recfile.read_records(src))
        except RecordingError as e:
            assert not got and "not a rezolus-ue recording" in str(e), f"seed {seed}"
            continue
        files = [recblocks.MappedFile.open(src)]
        try:
            dump.assemble(files, out)
        except RecordingError as e:
            assert not got and "no records" in str(e), f"seed {seed}"
            continue
        finally:
            files[0].close()
        assert via_tail == got == Counter(_key(r) for r in recfile.read_records(out)), seed


def _bad_payload(rng: random.Random, payload: bytes) -> bytes:
    """Return a data payload made wrong in one way a CRC cannot see."""
    (hlen,) = recblocks._U32.unpack_from(payload)
    head, body = json.loads(payload[4 : 4 + hlen]), payload[4 + hlen :]
    t = rng.choice(head["tables"])
    op = rng.randrange(10)
    if op == 0:
        t["rows"] = rng.choice([-1, 0, t["rows"] + 1, 2**31, 2**64, 1e9, "10", None])
    elif op == 1:
        rng.choice(t["columns"])[1] = rng.choice(["<f8", "str", "bytes", "<u16", "", 7])
    elif op == 2:
        rng.shuffle(t["columns"])
    elif op == 3:
        t["columns"].append(rng.choice(t["columns"]))
    elif op == 4:
        t.pop(rng.choice(["event", "rows", "columns"]))
    elif op == 5:
        head = {"tables": head["tables"] + [t] * rng.randint(1, 3)}
    elif op == 6:
        depth = rng.choice([50, 5000, 100_000])
        return recblocks._U32.pack(2 * depth) + b"[" * depth + b"]" * depth
    elif op == 7:
        body = body[: rng.randrange(len(body) + 1)]
    elif op == 8:
        i = rng.randrange(len(body))
        body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :]
    else:
        text = json.dumps(head).encode()
        return recblocks._U32.pack(rng.choice([0, len(text) + 10**6, 2**32 - 1])) + text + body
    text = json.dumps(head).encode()
    return recblocks._U32.pack(len(text)) + text + body


def test_valid_checksum_bad_blocks_are_skipped_alone() -> None:
    """400 blocks whose CRC is right but whose contents are wrong, each between intact
    blocks: the intact ones are all read, the bad one is read whole or skipped whole."""
    data, blocks = _base()
    payloads = [recblocks.BlockRef(KIND_DATA, 1, 0, len(b), 0).payload(b) for b in blocks]
    intact = _expected(data, blocks)
    for seed in range(400):
        rng = random.Random(seed)
        k = rng.randrange(len(blocks))
        bad = recblocks.encode_block(KIND_DATA, _bad_payload(rng, payloads[k]),
                                   compress=rng.random() < 0.8)
        buf = b"".join(blocks[:k]) + bad + b"".join(blocks[k:])
        st = ScanStats()
        got = Counter(_key(r) for r in recnative.read_native(buf, stats=st))
        assert not intact - got, f"seed {seed}: intact records lost"
        assert st.bad_blocks == 1 or got - intact or not _expected(bad, [bad]), f"seed {seed}"
        assert st.skipped_bytes == 0, f"seed {seed}"


def test_decompression_bombs_stay_within_memory() -> None:
    """Blocks that inflate to 64 MiB .. 1 GiB, with and without (lying) size hints: each
    is skipped, and what is allocated stays under the cap, not the bomb's size."""
    import tracemalloc

    data, blocks = _base(4)
    bomb = zlib_bomb()
    for stored, hint in ((bomb, 0), (bomb, 0xFFFF), (bomb, 3), (bomb[: len(bomb) // 16], 0)):
        head = recblocks.HEADER.pack(recblocks.SYNC, KIND_DATA, 1, hint, len(stored), 0)[:12]
        blk = head + recblocks._U32.pack(zlib.crc32(stored, zlib.crc32(head))) + stored
        buf = blocks[0] + blk + b"".join(blocks[1:])
        st = ScanStats()
        tracemalloc.start()
        try:
            got = Counter(_key(r) for r in recnative.read_native(buf, stats=st))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert got == _expected(data, blocks) and st.bad_blocks == 1
        assert peak < 2 * recblocks.MAX_PAYLOAD + 64 * len(buf), (hint, peak)


def test_damaged_parquet_never_escapes_and_keeps_other_row_groups(tmp_path: Path) -> None:
    """150 damaged Parquet recordings: no exception but a one-line RecordingError, and
    damage inside one row group's bytes leaves every other row group's records."""
    pq = pytest.importorskip("pyarrow.parquet")
    recs = workload(30)
    clean = tmp_path / "clean.parquet"
    recparquet.write_parquet(recs, clean, row_group=8)
    files = [clean]
    for seed in range(150):
        rng = random.Random(seed)
        d = tmp_path / f"pq{seed}"
        d.mkdir()
        victim = rng.choice(files)
        spared: Counter = Counter()
        for f in files:
            data = bytearray(f.read_bytes())
            if f == victim:
                md = pq.ParquetFile(f).metadata
                g = rng.randrange(md.num_row_groups)
                rg = md.row_group(g)
                chunks = [rg.column(c) for c in range(rg.num_columns)]
                starts = [c.dictionary_page_offset if c.has_dictionary_page
                          else c.data_page_offset for c in chunks]
                lo = min(starts)
                hi = max(a + c.total_compressed_size for a, c in zip(starts, chunks,
                                                                     strict=True))
                anywhere = rng.random() < 0.3  # footer and magic included
                for _ in range(rng.randint(1, 20)):
                    i = rng.randrange(len(data)) if anywhere else rng.randrange(max(lo, 4), hi)
                    data[i] = rng.randrange(256)
                if not anywhere:
                    pf = pq.ParquetFile(f)
                    spared += Counter(_key(r) for i in range(md.num_row_groups) if i != g
                                      for r in recparquet.group_reader(pf, f.stem)(i))
            (d / f.name).write_bytes(bytes(data))
        try:
            got = Counter(_key(r) for r in recfile.read_records(d / clean.name))
        except RecordingError as e:
            assert "\n" not in str(e), f"seed {seed}"
            continue
        assert not spared - got, f"seed {seed}: records of intact row groups lost"


# --- command lines that touch files: run for real, in-process -------------------------------


def _hostile_paths(tmp_path: Path) -> dict[str, str]:
    data, _blocks = _base(3)
    rec = tmp_path / "rec.rzr"
    rec.write_bytes(data)
    damaged = tmp_path / "damaged.rzr"
    damaged.write_bytes(b"\0" * 100 + data[: len(data) // 2])
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "keep").write_text("keep")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    toml = tmp_path / "c.toml"
    toml.write_text("[agent]\nlog_level = \"debug\"\n")
    toml.chmod(0o644)
    return {
        "rec": str(rec), "damaged": str(damaged), "dir": str(tmp_path / "dir"),
        "missing": str(tmp_path / "missing" / "x.rzr"), "loop": str(tmp_path / "loop"),
        "long": str(tmp_path / ("n" * 300)), "nul": str(tmp_path / "a\0b"), "empty": "",
        "under_file": str(rec / "x"), "device": "/dev/null", "zero": "/dev/zero",
        "fifo": str(tmp_path / "fifo"), "toml": str(toml), "dash": "-",
    }


#: (argv template, path kinds that would block: a FIFO or stdin opened for reading waits
#: for a writer, as ``cat`` does, which is not a failure).
_FILE_COMMANDS = [
    (["tail", "--from", "{a}", "-n", "3"], ()),
    (["dump", "--from", "{a}", "{out}"], ()),
    (["dump", "--from", "{rec}", "--force", "{a}"], ()),
    (["dump", "--from", "{rec}", "--format", "parquet", "--force", "{a}"], ()),
    (["dump", "--ring", "{a}", "{out}"], ()),
    (["config", "check", "{a}"], ("fifo", "dash")),
    (["config", "show", "{a}"], ("fifo", "dash")),
    (["record", "--source-file", "{rec}", "--force", "{a}"], ()),
    (["record", "--source-file", "{a}", "{out}"], ("fifo", "dash")),
    (["record", "--source-file", "{rec}", "--ring", "{a}", "--segment-size", "64K"], ()),
]


def test_file_commands_with_hostile_paths_fail_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file-taking command with every kind of bad path: exit 0, 1 or 2, one line,
    never an internal error; and /dev/null, directories and links are left as they were."""
    monkeypatch.chdir(tmp_path)  # "-" as an output is a file named "-"
    paths = _hostile_paths(tmp_path)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    n = 0
    for template, blocking in _FILE_COMMANDS:
        for kind, path in paths.items():
            if kind in blocking:
                continue
            n += 1
            out = tmp_path / f"out{n}.rzr"
            argv = [w.format(a=path, out=out, rec=paths["rec"]) for w in template]
            try:
                code = cli.main(argv)
            except SystemExit as e:
                code = e.code  # type: ignore[assignment]
            finally:
                for s, h in handlers.items():
                    signal.signal(s, h)
            err = capsys.readouterr().err
            assert code in (0, 1, 2), (argv, code, err)
            assert "internal error" not in err and "Traceback" not in err, (argv, err)
            errors = [ln for ln in err.splitlines() if ": error:" in ln or ln.startswith(
                ("rezolus-ue: error", "<stdin>", str(tmp_path)))]
            assert len(errors) <= 2, (argv, err)  # the error, and argparse's "Try --help"
    assert stat.S_ISCHR(Path("/dev/null").lstat().st_mode)
    assert (tmp_path / "dir" / "keep").read_text() == "keep"
    assert (tmp_path / "loop").is_symlink()
