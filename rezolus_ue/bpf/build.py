"""Build the BPF objects: ``bpf/*.bpf.c`` -> ``bpf/.output/*.bpf.o`` (CO-RE, with BTF).

    python -m rezolus_ue.bpf.build            # build what is missing or stale
    python -m rezolus_ue.bpf.build --force    # rebuild everything (and vmlinux.h)
    python -m rezolus_ue.bpf.build --check    # exit 1 if something is missing or stale

Needs ``clang`` (any version with ``-target bpf``; Debian 12's 14 works), ``bpftool`` (to
dump ``vmlinux.h`` from ``/sys/kernel/btf/vmlinux``) and libbpf's headers (``libbpf-dev``:
``/usr/include/bpf``). The objects are CO-RE: built once, they load on any kernel with BTF,
so ``vmlinux.h`` is only generated when missing. An object is stale when older than its
source or any header in ``bpf/``, ``bpf/include/`` or ``vmlinux.h``. Each sampler's source
is named after it (``bpf/<sampler>.bpf.c``, its shared structs in ``bpf/<sampler>.h``);
headers shared by all are in ``bpf/include/``.

The agent never builds at start (no compiler runs as root behind the user's back): a BPF
sampler whose object is missing is unavailable with a message naming ``BUILD_COMMAND``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import KernelFeatureMissing, RezolusError
from .libbpf import VMLINUX_BTF

#: The checkout's root (the build works from a source checkout or an editable install).
ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "bpf"
#: Headers every object may include (h2.bpf.h, maps.bpf.h, core_fixes.bpf.h).
INCLUDE = "include"
OUTPUT_DIR = SOURCE_DIR / ".output"
LIBBPF_INCLUDE = Path("/usr/include")
#: What to tell a user whose objects are missing.
BUILD_COMMAND = f"{sys.executable} -m rezolus_ue.bpf.build"

#: platform.machine() -> the __TARGET_ARCH_* bpf_tracing.h expects.
_ARCH = {"x86_64": "x86", "aarch64": "arm64", "arm64": "arm64", "riscv64": "riscv",
         "s390x": "s390", "ppc64le": "powerpc", "loongarch64": "loongarch"}


class BuildError(RezolusError):
    """A BPF object could not be built; the message says why and what to install."""


def target_arch(machine: str | None = None) -> str:
    """Return the ``__TARGET_ARCH_`` suffix for this machine."""
    m = machine or platform.machine()
    try:
        return _ARCH[m]
    except KeyError:
        raise BuildError(f"no BPF target architecture known for {m!r}") from None


def object_path(name: str, output: Path | None = None) -> Path:
    """Return where the object of ``bpf/<name>.bpf.c`` is built (the agent loads it from
    there; ``REZOLUS_UE_BPF_OBJECTS`` names another directory, e.g. installed objects)."""
    if output is None:
        output = Path(os.environ.get("REZOLUS_UE_BPF_OBJECTS") or OUTPUT_DIR)
    return output / f"{name}.bpf.o"


def build_test_object(name: str, *, output: Path = OUTPUT_DIR,
                      source_dir: Path = SOURCE_DIR) -> Path:
    """Build test program ``bpf/tests/<name>.bpf.c`` into ``.output/tests/``; return it."""
    return build_one(source_dir / "tests" / f"{name}.bpf.c",
                     output / "tests" / f"{name}.bpf.o", output=output, source_dir=source_dir)


def sources(source_dir: Path = SOURCE_DIR) -> list[Path]:
    """Return the BPF sources of the samplers (``bpf/*.bpf.c``; tests' are in bpf/tests/)."""
    return sorted(source_dir.glob("*.bpf.c"))


def _tool(name: str, package: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists()
                                  else None)
    if path is None:
        raise BuildError(f"{name} not found: install it (apt-get install {package})")
    return path


def vmlinux_h(output: Path = OUTPUT_DIR, force: bool = False, btf: Path = VMLINUX_BTF) -> Path:
    """Return ``output/vmlinux.h``, dumping it from the kernel's BTF if missing."""
    out = output / "vmlinux.h"
    if out.exists() and not force:
        return out
    if not btf.exists():
        raise KernelFeatureMissing(f"kernel BTF ({btf})",
                                   "the kernel needs CONFIG_DEBUG_INFO_BTF=y to build and run"
                                   " the BPF samplers")
    bpftool = _tool("bpftool", "bpftool (Ubuntu: linux-tools-common)")
    output.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".h.tmp")
    with open(tmp, "wb") as f:
        p = subprocess.run([bpftool, "btf", "dump", "file", str(btf), "format", "c"],
                           stdout=f, stderr=subprocess.PIPE)
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"bpftool btf dump of {btf} failed: "
                         f"{p.stderr.decode(errors='replace').strip()}")
    os.replace(tmp, out)
    return out


def compile_command(src: Path, obj: Path, output: Path = OUTPUT_DIR,
                    source_dir: Path = SOURCE_DIR) -> list[str]:
    """Return the clang command line building ``src`` into ``obj``."""
    return ["clang", "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{target_arch()}",
            "-Wall", "-Wno-unused-function", "-I", str(output), "-I", str(source_dir),
            "-I", str(source_dir / INCLUDE), "-I", str(LIBBPF_INCLUDE), "-c", str(src),
            "-o", str(obj)]


def _deps(src: Path, output: Path, source_dir: Path) -> list[Path]:
    return [src, output / "vmlinux.h", *source_dir.glob("*.h"),
            *(source_dir / INCLUDE).glob("*.h"), *src.parent.glob("*.h")]


def is_stale(src: Path, obj: Path, output: Path = OUTPUT_DIR,
             source_dir: Path = SOURCE_DIR) -> bool:
    """Return True if ``obj`` is missing or older than anything it is built from."""
    try:
        built = obj.stat().st_mtime_ns
    except FileNotFoundError:
        return True
    return any(d.exists() and d.stat().st_mtime_ns > built
               for d in _deps(src, output, source_dir))


def build_one(src: Path, obj: Path | None = None, *, force: bool = False,
              output: Path = OUTPUT_DIR, source_dir: Path = SOURCE_DIR) -> Path:
    """Build ``src`` (if stale, or ``force``) and return its object's path."""
    name = src.name.removesuffix(".bpf.c")
    obj = obj or object_path(name, output)
    vmlinux_h(output, force=False)
    if not force and not is_stale(src, obj, output, source_dir):
        return obj
    _tool("clang", "clang")
    if not (LIBBPF_INCLUDE / "bpf" / "bpf_helpers.h").exists():
        raise BuildError(f"{LIBBPF_INCLUDE}/bpf/bpf_helpers.h missing: install libbpf's"
                         " headers (apt-get install libbpf-dev)")
    obj.parent.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_suffix(".o.tmp")
    p = subprocess.run(compile_command(src, tmp, output, source_dir), capture_output=True,
                       text=True)
    if p.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join(p.stderr.strip().splitlines()[-20:])
        raise BuildError(f"clang failed building {src}:\n{tail}")
    os.replace(tmp, obj)
    return obj


def build(names: Iterable[str] = (), *, force: bool = False, output: Path = OUTPUT_DIR,
          source_dir: Path = SOURCE_DIR) -> list[Path]:
    """Build the named sources (default: all of ``bpf/*.bpf.c``); return their objects."""
    srcs = sources(source_dir)
    wanted = list(names)
    if wanted:
        by_name = {s.name.removesuffix(".bpf.c"): s for s in srcs}
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            raise BuildError(f"no such BPF source: {', '.join(unknown)} (have:"
                             f" {', '.join(by_name) or 'none'})")
        srcs = [by_name[n] for n in wanted]
    if force:
        vmlinux_h(output, force=True)
    return [build_one(s, force=force, output=output, source_dir=source_dir) for s in srcs]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build what is missing or stale."""
    ap = argparse.ArgumentParser(prog="python -m rezolus_ue.bpf.build",
                                 description="Build rezolus-ue's BPF objects (bpf/*.bpf.c).")
    ap.add_argument("names", nargs="*", help="sources to build (default: all)")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument("--check", action="store_true",
                    help="build nothing; exit 1 if an object is missing or stale")
    args = ap.parse_args(argv)
    try:
        if args.check:
            stale = [s.name for s in sources() if not (OUTPUT_DIR / "vmlinux.h").exists()
                     or is_stale(s, object_path(s.name.removesuffix(".bpf.c")))]
            for s in stale:
                print(f"stale: {s}")
            return 1 if stale else 0
        for obj in build(args.names, force=args.force):
            print(obj.relative_to(ROOT) if obj.is_relative_to(ROOT) else obj)
    except RezolusError as e:
        print(f"rezolus-ue: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
