"""What the sampler tests share: fake event handles, golden files, samplers built against
fixture roots, the records they wrote, and files rewritten the way procfs changes.

Import it as ``from helpers import ...``: ``tests/`` has no ``__init__.py``, so pytest's
default ("prepend") import mode puts ``tests/`` itself on sys.path, for conftest.py and
every test module in it alike.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rezolus_ue import config
from rezolus_ue.encoding import EventSchema
from rezolus_ue.samplers.base import Roots, Sampler, SamplerContext, SharedFiles

if TYPE_CHECKING:
    import numpy as np

#: ``REZOLUS_UE_UPDATE_GOLDEN=1`` rewrites the golden files from what the code gives now.
UPDATE_GOLDEN = os.environ.get("REZOLUS_UE_UPDATE_GOLDEN") == "1"

_DEFAULT_ROOTS = Roots()

SamplerT = TypeVar("SamplerT", bound=Sampler)


class FakeHandle:
    """Stands in for a user_events registration: an enable word and a record sink."""

    def __init__(self, enabled: bool = True) -> None:
        self.word = ctypes.c_uint32(1 if enabled else 0)
        self.payloads: list[bytes] = []

    @property
    def enabled(self) -> bool:
        return self.word.value != 0

    def write(self, payload: bytes) -> bool:
        self.payloads.append(payload)
        return True


def check_golden(golden: Path, got: object) -> None:
    """Assert ``got`` equals the JSON in ``golden`` (first writing it, when updating)."""
    if UPDATE_GOLDEN:
        golden.write_text(json.dumps(got, indent=1) + "\n")
    assert golden.exists(), f"{golden} missing: run with REZOLUS_UE_UPDATE_GOLDEN=1"
    assert got == json.loads(golden.read_text()), (
        f"{golden.name} differs; if intended, regenerate with REZOLUS_UE_UPDATE_GOLDEN=1")


def sampler_options(cls: type[Sampler], **over: object) -> dict[str, object]:
    """Return the default options of ``cls`` (the common ones too), as the agent's default
    configuration has them, with ``over`` checked and converted as a config file's are."""
    opts = {o.key: o.convert(o.default) for o in config.SAMPLER_OPTIONS + cls.options}
    for key, value in over.items():
        opts[key] = next(o for o in cls.options if o.key == key).convert(value)
    return opts


def new_sampler(cls: type[SamplerT], procfs: Path = _DEFAULT_ROOTS.procfs,
                sysfs: Path = _DEFAULT_ROOTS.sysfs, *, shared: SharedFiles | None = None,
                **over: object) -> SamplerT:
    """Return an unstarted ``cls`` reading these roots, with its default options but
    ``over``; ``shared`` as the agent hands the same one to all its samplers."""
    return cls(SamplerContext(Roots(procfs=procfs, sysfs=sysfs), sampler_options(cls, **over),
                              shared=shared or SharedFiles()))


def start_sampler(cls: type[SamplerT], procfs: Path = _DEFAULT_ROOTS.procfs,
                  sysfs: Path = _DEFAULT_ROOTS.sysfs, *, enabled: bool = True,
                  handles: Mapping[str, FakeHandle] | None = None,
                  shared: SharedFiles | None = None,
                  **over: object) -> tuple[SamplerT, dict[str, FakeHandle]]:
    """Return a started ``cls`` (see new_sampler) and the handles it is bound to: by
    default one FakeHandle per event, all ``enabled`` or all not. (``enabled`` is the
    handles' state, not the common sampler option of that name.)"""
    s = new_sampler(cls, procfs, sysfs, shared=shared, **over)
    s.start()
    if handles is None:
        handles = {e.name: FakeHandle(enabled) for e in cls.events()}
    s.bind(handles)
    return s, handles  # type: ignore[return-value]


def decoded(schema: EventSchema | None,
            handles: Mapping[str, FakeHandle]) -> list[dict[str, object]]:
    """Return the records written to the handle of ``schema``, unpacked."""
    assert schema is not None
    return [schema.unpack(p) for p in handles[schema.name].payloads]


def sample_twice(s: Sampler, t0_ns: int = 1_000_000_000, t1_ns: int = 1_100_000_000) -> None:
    """Sample at ``t0_ns`` and ``t1_ns``, then publish at ``t1_ns``."""
    s.sample(t0_ns)
    s.sample(t1_ns)
    s.publish()


def assert_silent_without_consumer(s: Sampler, handles: Mapping[str, FakeHandle]) -> None:
    """With no handle enabled: read() reads nothing and a sample + publish writes nothing.
    Closes ``s``."""
    try:
        assert s.read() == {}
        s.sample(1)
        s.publish()
    finally:
        s.close()
    assert not any(h.payloads for h in handles.values())


def rewrite_in_place(path: Path, data: str | bytes) -> None:
    """Rewrite ``path`` in place (same inode, as procfs regenerates its text on every
    read)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data.encode() if isinstance(data, str) else data)


def replace_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Rewrite ``path`` in place (see rewrite_in_place) with ``old`` replaced by ``new``."""
    rewrite_in_place(path, path.read_bytes().replace(old, new))


class FailingFile:
    """Stands in for a sampler's kept-open file whose reads fail with ``err`` (a removed
    cgroup's or network interface's files read ENODEV)."""

    def __init__(self, err: int, message: str) -> None:
        self.err, self.message = err, message

    def read(self) -> bytes:
        raise OSError(self.err, self.message)

    def close(self) -> None:
        pass


def median_read_us(s: Sampler, n: int = 1000) -> float:
    """Return the median time of ``n`` calls of ``s.read()``, in microseconds."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        s.read()  # type: ignore[attr-defined]
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return times[len(times) // 2] / 1000


def require_bpf_object(name: str) -> None:
    """Build bpf/<name>.bpf.c for a host BPF test, or skip it: needs root and kernel BTF."""
    import pytest

    from rezolus_ue.bpf import build
    from rezolus_ue.errors import RezolusError

    if os.geteuid() != 0:
        pytest.skip("needs root")
    if not build.VMLINUX_BTF.exists():
        pytest.skip("needs kernel BTF (/sys/kernel/btf/vmlinux)")
    try:
        build.build([name])
    except RezolusError as e:
        pytest.skip(f"cannot build {name}.bpf.c: {e}")


def bpf_struct(name: str, struct: str) -> np.dtype:
    """Return the dtype the samplers derive for ``struct`` of bpf/<name>.bpf.c (its BTF),
    building the object if needed; skip the test where it cannot be built."""
    import pytest

    from rezolus_ue.bpf import build
    from rezolus_ue.bpf.libbpf import BTF_KIND_STRUCT, Btf
    from rezolus_ue.errors import RezolusError

    try:
        (obj,) = build.build([name])
    except RezolusError as e:
        pytest.skip(f"cannot build {name}.bpf.c: {e}")
    with Btf.parse(obj) as btf:
        tid = btf.find(struct, BTF_KIND_STRUCT)
        assert tid is not None, f"no struct {struct} in {obj.name}"
        return btf.dtype(tid)


def unit(path: Path) -> dict[str, list[str]]:
    """Return a systemd unit file's settings: key -> every value it is given, in order."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def words(settings: dict[str, list[str]], key: str) -> list[str]:
    """Return the whitespace-separated words of every value of ``key`` in ``settings``."""
    return [w for v in settings.get(key, []) for w in v.split()]
