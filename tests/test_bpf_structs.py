"""Every struct shared between BPF C and Python matches the compiled object's BTF.

The Python mirrors (NumPy dtypes) are declared once, beside the code that reads the maps;
here each is compared, field by field (name, offset, size) and in total size, with the
struct as clang laid it out, read two independent ways: bpftool's JSON dump of the
object's BTF, and the binding's own BTF reader (which the samplers use at run time).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_bpf_h2 import H2_TEST_DTYPE

from rezolus_ue.bpf import build
from rezolus_ue.errors import RezolusError
from rezolus_ue.samplers.blockio_requests import sampler as blockio_rq
from rezolus_ue.samplers.cgroup_scheduler import sampler as cgroup_scheduler
from rezolus_ue.samplers.cpu_migrations import sampler as migrations
from rezolus_ue.samplers.cpu_softirq_time import sampler as softirq_time
from rezolus_ue.samplers.network_traffic import sampler as network_traffic
from rezolus_ue.samplers.scheduler_runqueue import sampler as runqueue
from rezolus_ue.samplers.syscall import sampler as syscall
from rezolus_ue.samplers.tcp import sampler as tcp
from rezolus_ue.samplers.tcp_traffic import sampler as tcp_traffic

#: (object, struct name, Python mirror); padding fields the mirror leaves out are allowed
#: when their names start with "__".
SHARED = [
    *(("scheduler_runqueue", name, dtype) for name, dtype in runqueue.SHARED_STRUCTS.items()),
    *(("syscall", name, dtype) for name, dtype in syscall.SHARED_STRUCTS.items()),
    *(("cpu_softirq_time", n, d) for n, d in softirq_time.SHARED_STRUCTS.items()),
    *(("cpu_migrations", n, d) for n, d in migrations.SHARED_STRUCTS.items()),
    *(("cgroup_scheduler", n, d) for n, d in cgroup_scheduler.SHARED_STRUCTS.items()),
    *(("network_traffic", n, d) for n, d in network_traffic.SHARED_STRUCTS.items()),
    *(("tcp", n, d) for n, d in tcp.SHARED_STRUCTS.items()),
    *(("tcp_traffic", n, d) for n, d in tcp_traffic.SHARED_STRUCTS.items()),
    *(("blockio_requests", n, d) for n, d in blockio_rq.SHARED_STRUCTS.items()),
    ("tests/h2_test", "h2_test_data", H2_TEST_DTYPE),
]


@pytest.fixture(scope="module")
def objects() -> dict[str, Path]:
    try:
        out = {p.name.removesuffix(".bpf.o"): p for p in build.build()}
        out["tests/h2_test"] = build.build_test_object("h2_test")
    except RezolusError as e:
        pytest.skip(f"cannot build the BPF objects: {e}")
    return out


def _bpftool_layout(obj: Path, struct: str) -> tuple[int, dict[str, tuple[int, int]]]:
    bpftool = shutil.which("bpftool") or "/usr/sbin/bpftool"
    if not Path(bpftool).exists():
        pytest.skip("bpftool not installed")
    doc = json.loads(subprocess.run([bpftool, "btf", "dump", "file", str(obj), "format",
                                     "raw", "-j"], capture_output=True, check=True).stdout)
    types = {t["id"]: t for t in doc["types"]}

    def size(tid: int) -> int:
        t = types[tid]
        if t["kind"] in ("TYPEDEF", "VOLATILE", "CONST", "RESTRICT", "TYPE_TAG"):
            return size(t["type_id"])
        if t["kind"] == "ARRAY":
            return t["nr_elems"] * size(t["type_id"])
        return t["size"]

    (st,) = [t for t in doc["types"] if t["kind"] == "STRUCT" and t["name"] == struct]
    return st["size"], {m["name"]: (m["bits_offset"] // 8, size(m["type_id"]))
                        for m in st["members"]}


def _python_layout(dtype: np.dtype) -> tuple[int, dict[str, tuple[int, int]]]:
    assert dtype.names is not None
    return dtype.itemsize, {n: (dtype.fields[n][1], dtype.fields[n][0].itemsize)
                            for n in dtype.names}


def _check(c: tuple[int, dict[str, tuple[int, int]]],
           py: tuple[int, dict[str, tuple[int, int]]], what: str) -> None:
    csize, cmembers = c
    pysize, pymembers = py
    assert pysize == csize, f"{what}: Python {pysize} bytes, C {csize}"
    for name, layout in pymembers.items():
        assert name in cmembers, f"{what}: {name} is not a member of the C struct"
        assert layout == cmembers[name], f"{what}.{name}: Python (offset, size) {layout}," \
                                         f" C {cmembers[name]}"
    missing = [n for n in cmembers if n not in pymembers and not n.startswith("__")]
    assert not missing, f"{what}: C members missing from the Python mirror: {missing}"


@pytest.mark.parametrize(("obj", "struct", "dtype"), SHARED, ids=[s[1] for s in SHARED])
def test_mirror_matches_btf_by_bpftool(objects: dict[str, Path], obj: str, struct: str,
                                       dtype: np.dtype) -> None:
    _check(_bpftool_layout(objects[obj], struct), _python_layout(dtype), struct)


@pytest.mark.parametrize(("obj", "struct", "dtype"), SHARED, ids=[s[1] for s in SHARED])
def test_mirror_matches_btf_by_binding(objects: dict[str, Path], obj: str, struct: str,
                                       dtype: np.dtype) -> None:
    from rezolus_ue.bpf.libbpf import Btf

    with Btf.parse(objects[obj]) as btf:
        layout = btf.struct(struct)
    _check((layout.size, layout.members), _python_layout(dtype), struct)


def test_global_variables_have_the_expected_sizes(objects: dict[str, Path]) -> None:
    from rezolus_ue.bpf.libbpf import Btf

    with Btf.parse(objects["scheduler_runqueue"]) as btf:
        assert btf.datasec(".bss")["attached_ns"][1] == 8
    with Btf.parse(objects["tests/h2_test"]) as btf:
        assert btf.datasec(".bss")["data"][1] == H2_TEST_DTYPE.itemsize
