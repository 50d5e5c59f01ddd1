"""blockio_requests: the per-CPU counter records (pure), and on the host real BPF programs
timing known O_DIRECT IO on a loop device over a tmpfs file, with fake user_events handles.

Every device's IO counts (the root disk's too), so counts are checked as lower bounds.
The error path needs a device that fails on demand: tests/kernel/test_blockio_requests.py
does it with null_blk's badblocks in the VM.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from helpers import FakeHandle, bpf_struct, decoded, require_bpf_object, start_sampler
from waiting import wait_for

from rezolus_ue.encoding import EventSchema
from rezolus_ue.metrics import h2
from rezolus_ue.samplers.blockio_requests import (
    BLOCKIO_ERROR_KINDS,
    BLOCKIO_LATENCY,
    BLOCKIO_OPS,
    BLOCKIO_REQUESTS,
    BLOCKIO_SIZE,
)
from rezolus_ue.samplers.blockio_requests.sampler import (
    BlockioRequests,
    counter_records,
)

IO_SIZE = 4096
#: O_DIRECT reads and writes of each kind per test.
N = 100
#: ioctl BLKDISCARD = _IO(0x12, 119): discard a (start, length) byte range.
BLKDISCARD = 0x1277


# --- pure -------------------------------------------------------------------------------

def test_counter_records_sum_cpus_and_skip_unseen_ops() -> None:
    c = np.zeros(3, dtype=bpf_struct("blockio_requests", "blockio_requests_cpu"))
    c["ops"][0, 0], c["ops"][2, 0] = 5, 7  # reads on CPUs 0 and 2
    c["bytes"][1, 0] = 4096 * 12
    c["errors"][1, 1, BLOCKIO_ERROR_KINDS.index("timeout")] = 1  # a write timed out
    recs = counter_records(c)
    assert recs == [
        ("read", 12, 4096 * 12, 0, 0, 0, 0, 0, 0, 0),
        ("write", 0, 0, 0, 1, 0, 0, 0, 0, 0),
    ]
    assert [f.name for f in BLOCKIO_REQUESTS.schema.fields][3:] == [
        f"errors_{k}" for k in BLOCKIO_ERROR_KINDS]


def test_op_label_fits_every_op() -> None:
    size = BLOCKIO_REQUESTS.schema.fields[0].type.size
    assert all(len(op) < size for op in BLOCKIO_OPS)


# --- helpers shared with tests/kernel/test_blockio_requests.py ---------------------------

def aligned_buffer(size: int = IO_SIZE) -> mmap.mmap:
    """Return a page-aligned buffer (O_DIRECT needs one)."""
    return mmap.mmap(-1, size)


def direct_io(dev: str, n: int, *, write: bool, offset: int = 0) -> None:
    """Do ``n`` O_DIRECT IOs of 4 KiB at consecutive offsets from ``offset``, one at a
    time (each is one request: nothing to merge with)."""
    buf = aligned_buffer()
    fd = os.open(dev, (os.O_RDWR if write else os.O_RDONLY) | os.O_DIRECT)
    try:
        for i in range(n):
            at = offset + i * IO_SIZE
            done = os.pwritev(fd, [buf], at) if write else os.preadv(fd, [buf], at)
            assert done == IO_SIZE
    finally:
        os.close(fd)


def flush_and_discard(dev: str) -> None:
    """Issue a flush (fsync of the device) and a discard of its first 64 KiB."""
    fd = os.open(dev, os.O_RDWR)
    try:
        os.fsync(fd)
        fcntl.ioctl(fd, BLKDISCARD, struct.pack("QQ", 0, 65536))
    finally:
        os.close(fd)


def records_by_op(schema: EventSchema, handles: Mapping[str, FakeHandle]) -> dict[str, dict]:
    """Return the records written to ``schema``'s handle, by op (first part only)."""
    return {r["op"]: r for r in decoded(schema, handles) if r.get("part", 0) == 0}


def check_published(handles: Mapping[str, FakeHandle], n: int) -> None:
    """Assert the records show at least ``n`` 4 KiB reads and writes."""
    reqs = records_by_op(BLOCKIO_REQUESTS.schema, handles)
    lat = records_by_op(BLOCKIO_LATENCY.schema, handles)
    size = records_by_op(BLOCKIO_SIZE.schema, handles)
    for op in ("read", "write"):
        assert reqs[op]["operations"] >= n, (op, reqs[op])
        assert reqs[op]["bytes"] >= n * IO_SIZE, (op, reqs[op])
        assert lat[op]["count"] >= n, (op, lat[op])
        assert 0 < lat[op]["p50"] <= lat[op]["max"], (op, lat[op])
        assert 0 < lat[op]["attached_ns"] < 60 * 10**9
        # The size histogram's bucket of 4096 holds (at least) our n requests.
        counts = sum((h2.decode_sparse(r["buckets"]) for r in decoded(BLOCKIO_SIZE.schema,
                                                                       handles)
                      if r["op"] == op), h2.new_counts())
        assert counts[h2.bucket_index(IO_SIZE)] >= n, op
        assert size[op]["count"] >= n


# --- host -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built() -> None:
    require_bpf_object("blockio_requests")


@contextlib.contextmanager
def loop_device(size: int = 16 << 20) -> Iterator[str]:
    """Yield a loop device over a tmpfs file (skip if this machine has none)."""
    losetup = shutil.which("losetup")
    shm = Path("/dev/shm")
    if losetup is None or not shm.is_dir():
        pytest.skip("needs losetup and /dev/shm")
    img = shm / f"rezolus_blkrq_{os.getpid()}.img"
    with open(img, "wb") as f:
        f.truncate(size)
    try:
        out = subprocess.run([losetup, "-f", "--show", str(img)], capture_output=True,
                             text=True)
        if out.returncode != 0:
            pytest.skip(f"no loop device: {out.stderr.strip()}")
        dev = out.stdout.strip()
        try:
            yield dev
        finally:
            subprocess.run([losetup, "-d", dev], check=False)
    finally:
        img.unlink()


@pytest.fixture(scope="module")
def loop(built: None) -> Iterator[str]:
    with loop_device() as dev:
        yield dev


@pytest.mark.host
@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp", "tracepoint"])
def test_known_io_is_counted(loop: str, attach: str) -> None:
    s, handles = start_sampler(BlockioRequests, attach=attach)
    try:
        assert f"attaches as {attach})" in s.detail
        s.activate()
        direct_io(loop, N, write=True)
        direct_io(loop, N, write=False)
        flush_and_discard(loop)
        t0 = time.perf_counter_ns()
        s.publish()
        publish_us = (time.perf_counter_ns() - t0) / 1000
        s.deactivate()
    finally:
        s.close()
    print(f"publish took {publish_us:.0f} us")
    check_published(handles, N)
    reqs = records_by_op(BLOCKIO_REQUESTS.schema, handles)
    assert reqs["flush"]["operations"] >= 1 and reqs["discard"]["operations"] >= 1, reqs
    assert reqs["discard"]["bytes"] >= 65536
    assert not any(r[f"errors_{k}"] for r in reqs.values() for k in BLOCKIO_ERROR_KINDS)


@pytest.mark.host
def test_programs_loaded_only_while_active(loop: str) -> None:
    from test_bpf_loader import attached_prog_ids, loaded_progs

    s, _handles = start_sampler(BlockioRequests)
    try:
        assert not s.bpf.loaded and "detached: no consumer" in s.detail
        s.activate()
        ids = {p.id for p in s.bpf.programs}
        names = loaded_progs()
        assert sorted(names[i] for i in ids) == ["blk_btf_done", "blk_btf_issue"]
        assert ids <= attached_prog_ids()
        direct_io(loop, 10, write=False)
        s.deactivate()
        wait_for(lambda: not ids & set(loaded_progs()), step=0.05,
                 what="its programs to be unloaded after deactivate")
        reads = int(s._counters["ops"][:, 0].sum())
        assert reads >= 10
        direct_io(loop, 200, write=False)  # detached: not counted
        s.activate()  # the same maps: totals go on
        direct_io(loop, 10, write=False)
        s.deactivate()
        assert reads + 10 <= int(s._counters["ops"][:, 0].sum()) < reads + 110
    finally:
        s.close()


@pytest.mark.host
def test_silent_without_consumer(built: None) -> None:
    s, handles = start_sampler(BlockioRequests, enabled=False)
    try:
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())
