"""BPF cost against Rezolus's own programs: the same hooks, the same workloads, one run.

    sudo .venv/bin/python bench/rezolus_compare.py --rezolus PATH [--rounds 9] [--quick]

PATH is a Rezolus source checkout (``git clone https://github.com/iopsystems/rezolus``;
or the environment variable REZOLUS_SRC): this project contains nothing of Rezolus. Its
BPF sources for the hooks our samplers cover (REZOLUS_SOURCES: scheduler runqueue, syscall
counts and latency, block IO, TCP) are built with clang against this kernel's
``vmlinux.h`` (``bpftool btf dump``, as our build does) and Rezolus's own headers from the
checkout, then loaded by a small loader over libbpf (rezolus_ue/bpf/libbpf.py; bpftool's
``prog loadall ... autoattach`` needs bpftool 7.3, Debian 12 has 7.1) the way Rezolus's
agent does: where a hook has a ``tp_btf`` and a ``raw_tp`` twin the ``raw_tp`` one is
not loaded, and ``syscall_lut`` (syscall number -> family, which Rezolus fills from user
space) gets the families of our syscall table (the same 16 families, in the same order).
Programs whose attach point this kernel lacks (kprobes without CONFIG_KPROBES) are listed
and left out; so are ours.

Configurations, interleaved: each round runs every configuration once, in an order
rotated round by round, and in each the three workloads (``perf bench sched messaging``;
``perf bench syscall basic``, getppid in a loop: syscall-bound; ``dd`` of 4 KiB
O_DIRECT reads from a loop device over a tmpfs file: block IO requests without a disk):
``none``; ``floor`` (bench/bpf/null_syscalls.bpf.c: programs on sys_enter and sys_exit
that return at once, the least any syscall sampler costs); ``floor1`` (its sys_exit
program alone: the least a one-program syscall sampler costs); ``rezolus`` (its
programs, attached, their maps not read: reading them costs the agent, not the
workload); ``ours`` (our samplers for the same hooks at their defaults, publishing every
second as the agent does: overhead.py's configuration; the syscall sampler times the
calls of a 100 ms window in each second, ``latency_window``, and counts every call);
``ours_all`` (the same timing every call: ``latency_window = "1s"``, the default before
the windows); ``ours_sN`` (timing continuously a random 1 call in N, ``latency_sample =
N``: the other way to sample, every call counted).

The figure is the CPU time (user + system) of the workload's processes, where a BPF
program's cost lands; slowdown = median over rounds of each round's time / that round's
``none``. Block IO completions run in the loop device's worker, so their cost is in the
per-program table only, which is also the steadier figure for the block hooks (the io
workload's CPU time is a few hundred ms, noisy on a shared machine). After the rounds,
one more round with ``kernel.bpf_stats_enabled`` gives every program's runs and ns per
run (the statistics add two clock reads per run: upper bounds).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import overhead as ov  # noqa: E402

from rezolus_ue.bpf import build  # noqa: E402
from rezolus_ue.bpf.libbpf import Object, Program  # noqa: E402
from rezolus_ue.errors import RezolusError  # noqa: E402
from rezolus_ue.samplers.syscall import table  # noqa: E402

#: Our sampler -> Rezolus's BPF sources for the same hooks, under src/agent/samplers/
#: of its checkout (each ``<dir>/mod.bpf.c``).
REZOLUS_SOURCES: dict[str, tuple[str, ...]] = {
    "scheduler_runqueue": ("scheduler/linux/runqueue",),
    "syscall": ("syscall/linux/counts", "syscall/linux/latency"),
    "blockio_requests": ("blockio/linux/latency", "blockio/linux/requests"),
    "tcp": ("tcp/linux/packet_latency", "tcp/linux/retransmit", "tcp/linux/connect_latency",
            "tcp/linux/receive"),
    "tcp_traffic": ("tcp/linux/traffic",),
}
#: Our build's __TARGET_ARCH_ suffix -> the directory of Rezolus's headers (its build
#: passes ``-I src/agent/bpf/<dir>``; its sources include ``../../../agent/bpf/*.h``
#: relative to that directory, and ``<vmlinux.h>``, which ours shadows).
REZOLUS_ARCH_DIR = {"x86": "x86_64", "arm64": "aarch64"}
#: The workloads the floor is the goal for: those whose cost is syscalls' and
#: context switches'. The io workload's is mostly block_rq_issue's (ours against
#: Rezolus's is its comparison: "ours / rezolus").
FLOOR_GOAL = ("messaging", "syscall")
#: latency_sample of configuration ``ours_sN``.
SAMPLED = 16
#: Where the Rezolus objects are built (the bench's own output directory).
OUTPUT = ROOT / "bench" / ".output" / "rezolus"


# --- building and loading Rezolus's programs ------------------------------------------

def unit(rel: str) -> str:
    """Return a short name for Rezolus source ``rel`` ("syscall/linux/counts" ->
    "syscall_counts")."""
    parts = rel.split("/")
    return f"{parts[0]}_{parts[-1]}"


def compile_command(checkout: Path, src: Path, obj: Path, output: Path) -> list[str]:
    """Return the clang command building one of Rezolus's sources against this kernel's
    vmlinux.h (in ``output``, searched before Rezolus's own)."""
    arch = build.target_arch()
    inc = checkout / "src" / "agent" / "bpf" / REZOLUS_ARCH_DIR.get(arch, arch)
    return ["clang", "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}",
            "-fno-unwind-tables", "-Wall", "-I", str(output), "-I", str(inc),
            "-I", str(build.LIBBPF_INCLUDE), "-c", str(src), "-o", str(obj)]


def build_rezolus(checkout: Path, output: Path = OUTPUT) -> tuple[dict[str, Path], dict[str, str]]:
    """Build every REZOLUS_SOURCES entry; return (unit -> object, unit -> why not built)."""
    build.vmlinux_h(output, force=True)  # this kernel's, dumped afresh
    objects, failed = {}, {}
    for rel in (r for rels in REZOLUS_SOURCES.values() for r in rels):
        src = checkout / "src" / "agent" / "samplers" / rel / "mod.bpf.c"
        if not src.exists():
            failed[unit(rel)] = f"{src} does not exist (an older or newer Rezolus layout?)"
            continue
        obj = output / f"{unit(rel)}.bpf.o"
        p = subprocess.run(compile_command(checkout, src, obj, output), capture_output=True,
                           text=True)
        if p.returncode != 0:
            err = [ln for ln in p.stderr.splitlines() if "error" in ln] or p.stderr.splitlines()
            failed[unit(rel)] = f"clang failed: {(err or ['?'])[0].strip()}"
            continue
        objects[unit(rel)] = obj
    return objects, failed


@dataclass
class RezolusPrograms:
    """Rezolus's objects, loaded once; ``attached`` attaches every program that can be."""

    objects: list[Object] = field(default_factory=list)
    #: "unit/program" -> program, for the programs whose attach point exists here.
    programs: dict[str, Program] = field(default_factory=dict)
    #: "unit/program" or "unit" -> why it is left out.
    left_out: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, objects: dict[str, Path]) -> RezolusPrograms:
        """Load every object as Rezolus's agent would (tp_btf over raw_tp twins, the
        syscall lookup table filled) and find which programs attach here."""
        arch = table.arch_of(platform.machine())
        res = cls()
        for name, path in objects.items():
            obj = Object(path, name=name[:15])
            sections = {p.section for p in obj.programs.values()}
            for p in obj.programs.values():
                if p.section.startswith("raw_tp/") and f"tp_btf/{p.section[7:]}" in sections:
                    p.autoload = False
            try:
                obj.load()
            except RezolusError as e:
                res.left_out[name] = f"load failed: {str(e).splitlines()[0]}"
                obj.close()
                continue
            res.objects.append(obj)
            if "syscall_lut" in obj.maps and arch is not None:
                codes = table.lookup_table(arch).astype("<u8").tobytes()  # its u64 values
                with obj.maps["syscall_lut"].mmap(writable=True) as lut:
                    lut[:len(codes)] = codes
            for p in obj.programs.values():
                if not p.autoload:
                    continue
                try:
                    p.attach().destroy()
                except RezolusError as e:
                    res.left_out[f"{name}/{p.name}"] = str(e).splitlines()[0]
                    continue
                res.programs[f"{name}/{p.name}"] = p
        return res

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        """Attach every attachable program for the block."""
        links = []
        try:
            for p in self.programs.values():
                links.append(p.attach())
            yield
        finally:
            for link in links:
                link.destroy()

    def loaded_ids(self) -> set[int]:
        """Return the ids of every loaded program (attached or not)."""
        return {p.id for obj in self.objects for p in obj.programs.values() if p.fd >= 0}

    def labels(self) -> dict[int, str]:
        """Return id -> "unit/program" of the attachable programs."""
        return {p.id: k for k, p in self.programs.items()}

    def close(self) -> None:
        for obj in self.objects:
            obj.close()


# --- workloads --------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    """How much each workload does."""

    groups: int = 10
    loops: int = 250
    syscalls: int = 10_000_000
    reads: int = 65_536


def cpu_of(cmd: list[str]) -> float:
    """Run ``cmd``; return the CPU seconds (user + system) of its processes."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {p.stderr.strip()[-300:]}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


@contextlib.contextmanager
def loop_device(size: int) -> Iterator[str | None]:
    """Yield a loop device over a sparse tmpfs file of ``size`` bytes (None if losetup
    fails: no loop driver, no permission), detached and deleted after."""
    losetup = shutil.which("losetup") or "/usr/sbin/losetup"
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(dir=shm, prefix="rezolus_compare.") as f:
        f.truncate(size)
        p = subprocess.run([losetup, "-f", "--show", f.name], capture_output=True, text=True)
        dev = p.stdout.strip()
        if p.returncode != 0 or not dev:
            print(f"io workload: skipped: losetup failed: {p.stderr.strip()}")
            yield None
            return
        try:
            yield dev
        finally:
            subprocess.run([losetup, "-d", dev], capture_output=True)


def workloads(sizes: Sizes, loop: str | None) -> dict[str, list[str]]:
    """Return each workload's command."""
    out = {"messaging": ["perf", "bench", "sched", "messaging", "-g", str(sizes.groups),
                         "-l", str(sizes.loops)],
           "syscall": ["perf", "bench", "syscall", "basic", "-l", str(sizes.syscalls)]}
    if loop is not None:
        out["io"] = ["dd", f"if={loop}", "of=/dev/null", "bs=4k", f"count={sizes.reads}",
                     "iflag=direct"]
    return out


def rounds(n: int, work: dict[str, list[str]],
           configs: dict[str, Callable[[], contextlib.AbstractContextManager]]
           ) -> dict[str, dict[str, list[float]]]:
    """Return {workload: {config: [CPU s, round by round]}}, configurations rotated."""
    times = {w: {k: [] for k in configs} for w in work}
    names = list(configs)
    for r in range(n):
        for k in names[r % len(names):] + names[:r % len(names)]:
            with configs[k]():
                for w, cmd in work.items():
                    times[w][k].append(cpu_of(cmd))
    return times


@contextlib.contextmanager
def null_exit_attached() -> Iterator[None]:
    """Attach the floor's sys_exit program alone: what a syscall sampler with one program
    (counting at exit, say) would cost at least."""
    obj = Object(build.build_one(ov.NULL_SYSCALLS, ov.NULL_OBJECT,
                                 source_dir=ov.NULL_SYSCALLS.parent))
    link = None
    try:
        obj.programs["null_enter"].autoload = False
        obj.load()
        link = obj.programs["null_exit"].attach()
        yield
    finally:
        if link is not None:
            link.destroy()
        obj.close()


# --- per-program cost -------------------------------------------------------------------

def program_costs(work: dict[str, list[str]],
                  configs: dict[str, tuple[Callable[[], contextlib.AbstractContextManager],
                                           Callable[[], set[int]]]],
                  labels: dict[int, str]) -> dict[str, dict[str, tuple[int, int]]]:
    """Return {config: {program: (runs, run ns)}} over one run of every workload, with
    kernel.bpf_stats_enabled; ``configs`` gives each one's context and a function giving,
    inside it, the ids of its programs; ``labels`` names programs by id (else the kernel's
    name)."""
    out = {}
    with ov.bpf_stats():
        for k, (ctx, ids) in configs.items():
            with ctx():
                progs = ids()
                before = stats(progs)
                for cmd in work.values():
                    cpu_of(cmd)
                after = stats(progs)
            out[k] = {labels.get(i, name): (cnt - before.get(i, ("", 0, 0))[1],
                                            ns - before.get(i, ("", 0, 0))[2])
                      for i, (name, cnt, ns) in after.items()}
    return out


def stats(ids: set[int]) -> dict[int, tuple[str, int, int]]:
    """Return id -> (name, run_cnt, run_time_ns) of these loaded programs."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: (p.get("name", "?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in json.loads(out or "[]") if p["id"] in ids}


# --- report -----------------------------------------------------------------------------

def report(times: dict[str, dict[str, list[float]]], others: tuple[str, ...]) -> None:
    """Print each workload's table and one summary line per workload."""
    summary = {}
    for w, by_config in times.items():
        print(f"\n{w}: CPU time of the workload's processes (user + system):")
        summary[w] = ov.report_slowdown(by_config)
    print("\nsummary: slowdown vs none (median of rounds, workload CPU time)")
    for w, slow in summary.items():
        print(f"{w}: " + ", ".join(f"{k} {v:+.1f}%" for k, v in slow.items()))
        if "ours" in slow and "floor" in slow:
            above = slow["ours"] - slow["floor"]
            goal = (f"goal <= 3: {'met' if above <= 3 else 'NOT met'}" if w in FLOOR_GOAL
                    else "no goal: the floor has no block hooks, ours has")
            print(f"  {w} ours above floor: {above:+.1f} points ({goal})"
                  + "".join(f"; {k} {slow[k] - slow['floor']:+.1f} points"
                            for k in others if k in slow))
        if "ours" in slow and "rezolus" in slow and slow["rezolus"] > 0:
            print(f"  {w} ours / rezolus (added CPU): {slow['ours'] / slow['rezolus']:.2f} x")


def report_costs(costs: dict[str, dict[str, tuple[int, int]]]) -> None:
    """Print every program's runs and ns per run, and each configuration's BPF total."""
    print("\nper program, one more round of every workload with kernel.bpf_stats_enabled=1"
          " (ns/run includes the statistics' two clock reads):")
    print(f"  {'config':9s} {'program':44s} {'runs':>11s} {'ns/run':>8s} {'ms':>8s}")
    for k, progs in costs.items():
        for name, (runs, ns) in sorted(progs.items()):
            print(f"  {k:9s} {name:44s} {runs:11,d} {ns / max(runs, 1):8.0f} {ns / 1e6:8.1f}")
        total = sum(ns for _, ns in progs.values()) / 1e6
        print(f"  {k:9s} {'all':44s} {'':11s} {'':8s} {total:8.1f}")


# --- main -------------------------------------------------------------------------------

def our_ids(rezolus: RezolusPrograms) -> Callable[[], set[int]]:
    """Return a function giving the ids of the programs this process holds that are not
    Rezolus's (ours, or the floor's): Rezolus's stay loaded throughout."""
    theirs = rezolus.loaded_ids()
    return lambda: ov.held_prog_ids() - theirs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rezolus", type=Path, default=os.environ.get("REZOLUS_SRC") or None,
                    help="a Rezolus source checkout (default: $REZOLUS_SRC)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    ap.add_argument("--quick", action="store_true", help="2 rounds of tiny workloads")
    args = ap.parse_args(argv)
    if args.rezolus is None:
        print("rezolus_compare: skipped: no Rezolus checkout (--rezolus PATH or REZOLUS_SRC)")
        return 0
    if not (args.rezolus / "src" / "agent" / "samplers").is_dir():
        print(f"rezolus_compare: {args.rezolus} is not a Rezolus source checkout"
              " (no src/agent/samplers)", file=sys.stderr)
        return 1
    if os.geteuid() != 0:
        print("rezolus_compare.py needs root (BPF)", file=sys.stderr)
        return 1
    if shutil.which("perf") is None:
        print("rezolus_compare: skipped: perf is not installed (Debian: linux-perf)")
        return 0
    sizes = Sizes(2, 20, 200_000, 2048) if args.quick else Sizes()
    n = 2 if args.quick else args.rounds
    rev = subprocess.run(["git", "-C", str(args.rezolus), "log", "-1", "--format=%h %cs"],
                         capture_output=True, text=True).stdout.strip() or "not a git checkout"
    print(f"# BPF cost against Rezolus's programs  ({platform.node()}, Linux"
          f" {platform.release()}, {os.cpu_count()} CPUs; Rezolus {args.rezolus}: {rev})")
    return run(args.rezolus, n, sizes)


def run(checkout: Path, n: int, sizes: Sizes) -> int:
    """Build, load, measure and print."""
    objects, failed = build_rezolus(checkout)
    for name, why in failed.items():
        print(f"rezolus {name}: not built: {why}")
    rz = RezolusPrograms.load(objects)
    ours_names = tuple(n_ for n_ in REZOLUS_SOURCES if n_ in ov.bpf_samplers())
    for name, why in ov.ensure_built(list(ours_names)).items():
        print(f"ours {name}: not built: {why}")
    variants = {"ours": {}, "ours_all": ov.TIME_EVERY_CALL,
                f"ours_s{SAMPLED}": {**ov.TIME_EVERY_CALL, "latency_sample": SAMPLED}}
    agents = {k: ov.build_agent(ours_names, overrides={"syscall": v} if v else None)
              for k, v in variants.items()}
    try:
        for name, why in rz.left_out.items():
            print(f"rezolus {name}: left out: {why}")
        print("rezolus  = " + ", ".join(rz.programs))
        for name, why in agents["ours"][1].items():
            print(f"ours {name}: left out: {why.splitlines()[0]}")
        for k, (agent, _) in agents.items():
            opts = {**ov.syscall_defaults(), **variants[k]}
            print(f"{k:8s} = {', '.join(agent.states)}; syscall "
                  + ", ".join(f"{o} = {v}" for o, v in opts.items()))
        print("floor    = two raw_syscalls programs that return at once;"
              " floor1 = the sys_exit one alone")
        configs: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
            "none": contextlib.nullcontext, "floor": ov.null_syscalls_attached,
            "floor1": null_exit_attached, "rezolus": rz.attached,
            **{k: (lambda a=a: ov.ours_attached(a)) for k, (a, _) in agents.items()}}
        with loop_device(sizes.reads * 4096) as loop:
            work = workloads(sizes, loop)
            print("workloads: " + "; ".join(" ".join(c) for c in work.values()))
            print(f"{n} rounds, configurations interleaved (load average at start:"
                  f" {os.getloadavg()[0]:.1f})")
            times = rounds(n, work, configs)
            mine = our_ids(rz)
            costs = program_costs(work, {
                "floor": (ov.null_syscalls_attached, mine),
                "rezolus": (rz.attached, lambda: set(rz.labels())),
                **{k: (configs[k], mine) for k in agents}}, rz.labels())
    finally:
        for agent, _ in agents.values():
            agent.close()
        rz.close()
    report(times, ("ours_all", f"ours_s{SAMPLED}"))
    report_costs(costs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
