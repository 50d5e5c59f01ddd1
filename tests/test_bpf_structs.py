"""Every struct shared between BPF C and Python is read the same way the C lays it out.

Python declares no mirror: the samplers' NumPy dtypes are derived at run time from the
object's BTF (``Btf.dtype``, through ``BpfObject.array``). Here each struct of a sampler's
``bpf/<name>.h`` is derived so and compared, field by field (name, offset, size) and in
total size, with the struct as clang laid it out, read two independent ways: bpftool's
JSON dump of the object's BTF, and the binding's struct reader.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_bpf_h2 import H2_TEST_DTYPE

from rezolus_ue.bpf import build
from rezolus_ue.errors import RezolusError

#: (object, struct name): every struct declared in a sampler's bpf/<name>.h.
SHARED = [(h.name.removesuffix(".h"), struct)
          for h in sorted(build.SOURCE_DIR.glob("*.h"))
          for struct in re.findall(r"^struct (\w+) \{", h.read_text(), re.M)]


def _derived(obj: Path, struct: str) -> np.dtype:
    from rezolus_ue.bpf.libbpf import BTF_KIND_STRUCT, Btf

    with Btf.parse(obj) as btf:
        tid = btf.find(struct, BTF_KIND_STRUCT)
        assert tid is not None, f"no struct {struct} in {obj.name}"
        return btf.dtype(tid)


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


@pytest.mark.parametrize(("obj", "struct"), SHARED, ids=[s[1] for s in SHARED])
def test_derived_dtype_matches_btf_by_bpftool(objects: dict[str, Path], obj: str,
                                              struct: str) -> None:
    _check(_bpftool_layout(objects[obj], struct),
           _python_layout(_derived(objects[obj], struct)), struct)


@pytest.mark.parametrize(("obj", "struct"), SHARED, ids=[s[1] for s in SHARED])
def test_derived_dtype_matches_btf_by_binding(objects: dict[str, Path], obj: str,
                                              struct: str) -> None:
    from rezolus_ue.bpf.libbpf import Btf

    with Btf.parse(objects[obj]) as btf:
        layout = btf.struct(struct)
    _check((layout.size, layout.members), _python_layout(_derived(objects[obj], struct)),
           struct)


def test_a_hand_declared_dtype_matches_btf(objects: dict[str, Path]) -> None:
    """The test program's struct, declared in Python by hand, checks _check itself."""
    obj = objects["tests/h2_test"]
    _check(_bpftool_layout(obj, "h2_test_data"), _python_layout(H2_TEST_DTYPE), "h2_test")
    assert _derived(obj, "h2_test_data") == H2_TEST_DTYPE


def test_global_variables_have_the_expected_sizes(objects: dict[str, Path]) -> None:
    from rezolus_ue.bpf.libbpf import Btf

    with Btf.parse(objects["scheduler_runqueue"]) as btf:
        assert btf.datasec(".bss")["attached_ns"][1] == 8
    with Btf.parse(objects["tests/h2_test"]) as btf:
        assert btf.datasec(".bss")["data"][1] == H2_TEST_DTYPE.itemsize


def _indices(header: str, prefix: str) -> list[str]:
    """Return the names of ``#define <prefix><NAME> <i>`` in bpf/<header>, in index order."""
    found = re.findall(rf"^#define {prefix}(\w+)\s+(\d+)", (build.SOURCE_DIR / header)
                       .read_text(), re.M)
    return [name for name, _ in sorted(found, key=lambda f: int(f[1]))]


def test_c_indices_and_array_sizes_are_the_python_names(objects: dict[str, Path]) -> None:
    """The C numbers slots (operations, error kinds, softirq vectors, drop reasons, syscall
    families); Python names them: the compiled array sizes and the C order are Python's."""
    from rezolus_ue.samplers.blockio_requests import BLOCKIO_ERROR_KINDS, BLOCKIO_OPS
    from rezolus_ue.samplers.cpu_softirq import SOFTIRQ_KINDS
    from rezolus_ue.samplers.network_traffic.sampler import DROP_REASONS
    from rezolus_ue.samplers.syscall import table

    assert _indices("blockio_requests.h", "BLOCKIO_OP_") == [o.upper() for o in BLOCKIO_OPS]
    assert _indices("blockio_requests.h", "BLOCKIO_ERR_") == [
        k.upper() for k in BLOCKIO_ERROR_KINDS]
    blockio = _derived(objects["blockio_requests"], "blockio_requests_cpu")
    assert blockio["errors"].shape == (len(BLOCKIO_OPS), len(BLOCKIO_ERROR_KINDS))
    softirq = _derived(objects["cpu_softirq_time"], "softirq_time")
    assert softirq["time_ns"].shape == (len(SOFTIRQ_KINDS),)
    drops = _derived(objects["network_traffic"], "network_drop_reasons")
    assert drops["drops"].shape == (DROP_REASONS,)
    calls = _derived(objects["syscall"], "syscall_counts")
    assert calls["calls"].shape == (len(table.FAMILIES),)
