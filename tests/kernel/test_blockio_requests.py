"""blockio_requests in the VM (Linux 6.12): known O_DIRECT IO on a null_blk device made
through configfs, whose sectors 64-71 (the 4 KiB at 32 KiB) are bad, so reading them fails
with BLK_STS_IOERR. The tp_btf programs see that status as a blk_status_t, the classic
tracepoint as an errno: both must count it as an "io" error of a read.

Falls back to a loop device over a tmpfs file (no error test) when null_blk is missing.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import start_sampler
from test_bpf_blockio_requests import (
    IO_SIZE,
    aligned_buffer,
    check_published,
    direct_io,
    loop_device,
    records_by_op,
)
from waiting import wait_for

from rezolus_ue.bpf import build
from rezolus_ue.samplers.blockio_requests import BLOCKIO_REQUESTS
from rezolus_ue.samplers.blockio_requests.sampler import BlockioRequests

pytestmark = pytest.mark.kernel

#: Reads and writes of each kind: few, the VM emulates its CPUs.
N = 32
CONFIGFS = Path("/sys/kernel/config/nullb")
#: The bad 4 KiB, in 512-byte sectors, and its byte offset.
BAD_SECTORS, BAD_OFFSET = "+64-71", 64 * 512
#: Where the good IO goes (well clear of the bad block).
GOOD_OFFSET = 1 << 20


@contextlib.contextmanager
def null_blk() -> Iterator[str | None]:
    """Yield a fresh null_blk device with a bad block, or None without configfs null_blk."""
    if not CONFIGFS.is_dir():
        yield None
        return
    d = CONFIGFS / f"rzblkrq{os.getpid()}"
    d.mkdir()
    try:
        for attr, value in (("size", "16"), ("memory_backed", "1"),
                            ("badblocks", BAD_SECTORS), ("power", "1")):
            (d / attr).write_text(value)
        # The disk is named after the configfs directory (Linux 5.19+), else nullb<index>.
        names = (f"/dev/{d.name}", f"/dev/nullb{(d / 'index').read_text().strip()}")
        yield wait_for(lambda: next((n for n in names if os.path.exists(n)), ""), timeout=30,
                       step=0.05, what=f"one of {names} to appear")
        (d / "power").write_text("0")
    finally:
        d.rmdir()


@pytest.fixture(scope="module")
def device() -> Iterator[tuple[str, bool]]:
    """Yield (block device, whether reading BAD_OFFSET fails)."""
    if not build.object_path("blockio_requests").exists():
        pytest.skip(f"BPF object not built: run `{build.BUILD_COMMAND}` on the host")
    with null_blk() as dev:
        if dev is not None:
            yield dev, True
            return
    with loop_device() as loop:
        yield loop, False


def read_bad_block(dev: str) -> None:
    """Read the bad 4 KiB: the device fails it."""
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    try:
        with pytest.raises(OSError) as e:
            os.preadv(fd, [aligned_buffer()], BAD_OFFSET)
        assert e.value.errno == errno.EIO
    finally:
        os.close(fd)


@pytest.mark.parametrize("attach", ["auto", "tracepoint"])
def test_known_io_and_an_error(device: tuple[str, bool], attach: str) -> None:
    dev, can_fail = device
    s, handles = start_sampler(BlockioRequests, attach=attach)
    try:
        s.activate()
        if attach == "auto":
            assert s.bpf.attach_kinds == "tp_btf"
        direct_io(dev, N, write=True, offset=GOOD_OFFSET)
        direct_io(dev, N, write=False, offset=GOOD_OFFSET)
        if can_fail:
            read_bad_block(dev)
        s.publish()
        s.deactivate()
    finally:
        s.close()
    check_published(handles, N)
    reqs = records_by_op(BLOCKIO_REQUESTS.schema, handles)
    assert reqs["write"]["bytes"] >= N * IO_SIZE
    if not can_fail:
        pytest.skip("no null_blk: the error path was not exercised")
    assert reqs["read"]["errors_io"] >= 1, reqs["read"]
    assert reqs["read"]["errors_other"] == 0, reqs["read"]
