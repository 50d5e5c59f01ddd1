"""The BPF side's H2 bucket index (bpf/include/h2.bpf.h) equals metrics.h2.bucket_index.

Two ways: the header compiled for the host with the system C compiler (both the
__builtin_clzll and the binary-search log2), and compiled for BPF and run in the kernel
with BPF_PROG_TEST_RUN (bpf/tests/h2_test.bpf.c; host tier).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rezolus_ue.bpf import build
from rezolus_ue.errors import RezolusError
from rezolus_ue.metrics import h2

TEST_VALUES = 256  # H2_TEST_VALUES in bpf/tests/h2_test.h
H2_TEST_DTYPE = np.dtype([("values", "=u8", TEST_VALUES), ("indices", "=u4", TEST_VALUES)])

_HOST_MAIN = r"""
#include <stdio.h>
#include "h2.bpf.h"

int main(void)
{
	__u64 v;

	while (fread(&v, sizeof(v), 1, stdin) == 1) {
		__u32 i = h2_index(v);
		fwrite(&i, sizeof(i), 1, stdout);
	}
	return 0;
}
"""


def _values() -> list[int]:
    """Return edge values (around every power of two and every bucket edge) and random
    values of every magnitude."""
    vals = set(range(0, 300))
    for k in range(64):
        p = 1 << k
        vals.update(x for x in (p - 1, p, p + 1) if 0 <= x <= h2.MAX_VALUE)
    vals.update(int(x) for x in h2.LOWER)
    vals.update(int(x) for x in h2.UPPER)
    vals.add(h2.MAX_VALUE)
    rng = random.Random(20240601)
    vals.update(rng.getrandbits(64) for _ in range(5000))
    vals.update(rng.getrandbits(rng.randint(1, 64)) for _ in range(5000))
    return sorted(vals)


VALUES = _values()
EXPECTED = [h2.bucket_index(v) for v in VALUES]


@pytest.mark.parametrize("variant", ["clzll", "soft_log2"])
def test_host_compiled_index_matches_python(tmp_path: Path, variant: str) -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the header for the host")
    src = tmp_path / "h2_host.c"
    src.write_text(_HOST_MAIN)
    exe = tmp_path / "h2_host"
    flags = ["-DH2_SOFT_LOG2"] if variant == "soft_log2" else []
    include = build.SOURCE_DIR / build.INCLUDE
    subprocess.run([cc, "-O2", "-Wall", "-Werror", *flags, "-I", str(include),
                    str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], input=np.array(VALUES, dtype=np.uint64).tobytes(),
                         capture_output=True, check=True).stdout
    got = np.frombuffer(out, dtype=np.uint32).tolist()
    bad = [(v, g, e) for v, g, e in zip(VALUES, got, EXPECTED, strict=True) if g != e]
    assert not bad, f"C index differs (value, C, Python): {bad[:10]}"


def test_vectorised_python_index_agrees() -> None:
    assert h2.bucket_indices(VALUES).tolist() == EXPECTED


@pytest.mark.host
def test_bpf_index_matches_python() -> None:
    if os.geteuid() != 0 or not build.VMLINUX_BTF.exists():
        pytest.skip("needs root and kernel BTF (/sys/kernel/btf/vmlinux)")
    try:
        path = build.build_test_object("h2_test")
    except RezolusError as e:
        pytest.skip(f"cannot build bpf/tests/h2_test.bpf.c: {e}")
    from rezolus_ue.bpf.libbpf import Object
    from rezolus_ue.bpf.loader import BpfObject

    def preset(o: Object) -> None:
        # Global data's initial value, set before load: runs starts at 1000.
        bss = o.map(".bss")
        bss.set_initial_value(bytes(H2_TEST_DTYPE.itemsize)
                                        + (1000).to_bytes(8, sys.byteorder))
        assert bss.value_size == H2_TEST_DTYPE.itemsize + 8

    obj = BpfObject("h2_test", path=path, before_load=preset).load()
    try:
        data = obj.global_var("data", H2_TEST_DTYPE)[0]
        runs = obj.global_var("runs")
        (prog,) = obj.programs
        got: list[int] = []
        for i in range(0, len(VALUES), TEST_VALUES):
            batch = VALUES[i : i + TEST_VALUES]
            data["values"][: len(batch)] = batch
            assert prog.test_run() == (0, b"")
            got += data["indices"][: len(batch)].tolist()
        assert int(runs[0]) == 1000 + (len(VALUES) + TEST_VALUES - 1) // TEST_VALUES
        del data, runs
    finally:
        obj.close()
    bad = [(v, g, e) for v, g, e in zip(VALUES, got, EXPECTED, strict=True) if g != e]
    assert not bad, f"BPF index differs (value, BPF, Python): {bad[:10]}"
