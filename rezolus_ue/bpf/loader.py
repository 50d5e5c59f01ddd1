"""Load a sampler's BPF object: one attach variant per hook chosen by probing the kernel.

A BPF source may define each hook in several variants, told apart by section name:

    SEC("tp_btf/sched_switch")        tp_btf      BTF-typed raw tracepoint (Linux >= 5.5)
    SEC("raw_tp/sched_switch")        raw_tp      raw tracepoint (Linux >= 4.17)
    SEC("tp/sched/sched_switch")      tracepoint  classic tracepoint (tracefs record)
    SEC("fentry/tcp_rcv_established") fentry      BPF trampoline on a kernel function
                                                  (fexit/F: its return)
    SEC("kprobe/tcp_rcv_established") kprobe      kprobe (kretprobe/F: its return)

Functions have no stable ABI, so a sampler uses fentry/kprobe only where no tracepoint
carries what it needs; both need the function to exist here (BTF, kallsyms) and kprobe
needs CONFIG_KPROBES (the development host has none: the sampler reports it unavailable).

``BpfObject.load`` probes what the kernel supports, prefers tp_btf > raw_tp > tracepoint
(Rezolus's order; the preference can be forced for tests), switches autoload off for the
losers and loads the rest, so a verifier error surfaces at sampler start. Programs are
attached by ``attach`` (a consumer arrived) and detached by ``detach``.

Privileges: probing runs at start-up, before the agent drops to CAP_BPF and CAP_PERFMON
(and, under ``run --user``, to a user that cannot read tracefs: its root is root's, mode
0700). So the probe also reads each chosen classic tracepoint's tracefs id, and ``attach``
opens that tracepoint's perf event itself (perf_event_open: CAP_PERFMON) instead of
letting libbpf read the id from tracefs at attach time, which the user could not.
tp_btf, raw_tp and fentry attach by BTF id or name (BPF_RAW_TRACEPOINT_OPEN or
BPF_LINK_CREATE: CAP_BPF and CAP_PERFMON) and kprobes through the perf kprobe PMU
(CAP_PERFMON): none reads tracefs after start-up.

``unload`` goes further: it closes the object, so no program of ours stays in the kernel
(``bpftool prog show`` lists none), but keeps a dup of each kept map: every
``BPF_F_MMAPABLE`` one, which user space reads (``.bss`` included; not ``.rodata`` or
``.data``, set before each load), and those named in ``keep_maps`` (maps user space
writes, e.g. a hash it fills);
the next ``load`` hands those fds to libbpf (``bpf_map__reuse_fd``), so cumulative
histograms and counters, and the NumPy views over them, survive unload/load cycles.
``array`` maps a ``BPF_F_MMAPABLE`` array into a NumPy view: reading it is a memory load,
not a syscall.

Just over 500 lines: probing (``Features``) and loading (``BpfObject``) share the
hook-choice rules above, which read best next to both.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracefs_tools import Tracefs, TracefsError

from ..errors import KernelFeatureMissing, SamplerUnavailable
from ..linux.perf_event import PERF_TYPE_TRACEPOINT, PerfEventAttr, perf_event_open
from . import build
from .libbpf import (
    BPF_F_MMAPABLE,
    BPF_PROG_TYPE_KPROBE,
    BPF_PROG_TYPE_RAW_TRACEPOINT,
    BPF_PROG_TYPE_TRACEPOINT,
    BPF_PROG_TYPE_TRACING,
    BTF_HINT,
    BTF_KIND_FUNC,
    Btf,
    Link,
    Object,
    Program,
    num_possible_cpus,
    probe_prog_type,
)

#: Attach kinds, most preferred first.
ATTACH_KINDS = ("tp_btf", "raw_tp", "tracepoint", "fentry", "kprobe")
_PROG_TYPE = {"tp_btf": BPF_PROG_TYPE_TRACING, "raw_tp": BPF_PROG_TYPE_RAW_TRACEPOINT,
              "tracepoint": BPF_PROG_TYPE_TRACEPOINT, "fentry": BPF_PROG_TYPE_TRACING,
              "kprobe": BPF_PROG_TYPE_KPROBE}
#: The suffix telling a function's return hook (fexit, kretprobe) from its entry.
RETURN = "%return"


@dataclass(frozen=True)
class Hook:
    """Where a program attaches: its kind, tracepoint or function name (``F%return`` for a
    function's return) and (classic tracepoints only) category."""

    kind: str
    tracepoint: str
    category: str = ""


def parse_section(section: str) -> Hook | None:
    """Return the hook of a program's section name (None: not a tracepoint variant)."""
    prefix, _, rest = section.partition("/")
    if prefix == "tp_btf" and rest:
        return Hook("tp_btf", rest)
    if prefix in ("raw_tp", "raw_tracepoint") and rest:
        return Hook("raw_tp", rest)
    if prefix in ("tp", "tracepoint"):
        cat, _, name = rest.partition("/")
        if cat and name:
            return Hook("tracepoint", name, cat)
    if rest and "/" not in rest:
        if prefix in ("fentry", "kprobe"):
            return Hook(prefix, rest)
        if prefix in ("fexit", "kretprobe"):
            return Hook("fentry" if prefix == "fexit" else "kprobe", rest + RETURN)
    return None


def _exists(path: Path) -> bool:
    """Return True if ``path`` exists and this process may see it (tracefs is 0700)."""
    try:
        return path.exists()
    except OSError:
        return False


@dataclass
class Features:
    """What this kernel supports, probed on first use; tracefs root injectable."""

    tracefs: Path | None = Path("/sys/kernel/tracing")
    _types: dict[str, bool] = field(default_factory=dict)
    _btf_tps: dict[str, bool] = field(default_factory=dict)
    _vmlinux: Btf | bool | None = None
    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    _btf_funcs: dict[str, bool] = field(default_factory=dict)
    _kallsyms: set[str] | None = None
    _tp_ids: dict[str, int | None] = field(default_factory=dict)

    def prog_type(self, kind: str) -> bool:
        """Return True if the kernel loads programs of this attach kind.

        tp_btf (BPF_PROG_TYPE_TRACING) is not probed by a test load (libbpf 1.1's probe
        loads no attach target, so the kernel always refuses it): the ``btf_trace_*``
        typedefs that ``btf_tracepoint`` looks for arrived in vmlinux BTF with tp_btf
        itself (Linux 5.5), so their presence is the probe.
        """
        if kind in ("tp_btf", "fentry"):
            return True
        if kind not in self._types:
            self._types[kind] = probe_prog_type(_PROG_TYPE[kind])
        return self._types[kind]

    def _btf(self) -> Btf | None:
        if self._vmlinux is None:
            try:
                self._vmlinux = Btf.vmlinux()  # ~20 ms: parsed once per probing
            except KernelFeatureMissing:
                self._vmlinux = False
        return self._vmlinux if isinstance(self._vmlinux, Btf) else None

    def btf_tracepoint(self, name: str) -> bool:
        """Return True if vmlinux BTF declares tracepoint ``name`` (btf_trace_<name>)."""
        if name not in self._btf_tps:
            vm = self._btf()
            self._btf_tps[name] = vm is not None and vm.has_tracepoint(name)
        return self._btf_tps[name]

    def btf_function(self, name: str) -> bool:
        """Return True if vmlinux BTF has kernel function ``name`` (fentry's target)."""
        if name not in self._btf_funcs:
            vm = self._btf()
            self._btf_funcs[name] = vm is not None and vm.find(name, BTF_KIND_FUNC) is not None
        return self._btf_funcs[name]

    def kernel_symbol(self, name: str) -> bool:
        """Return True if /proc/kallsyms lists function ``name`` (a kprobe target)."""
        if self._kallsyms is None:
            try:
                text = (self.procfs / "kallsyms").read_text()
            except OSError:
                text = ""
            self._kallsyms = {f[2] for ln in text.splitlines()
                              if len(f := ln.split()) >= 3 and f[1] in "tTwW"}
        return name in self._kallsyms

    def kprobes(self) -> bool:
        """Return True if the kernel has kprobes (the perf kprobe PMU, else kprobe_events)."""
        if _exists(self.sysfs / "bus/event_source/devices/kprobe/type"):
            return True
        return self.tracefs is not None and _exists(self.tracefs / "kprobe_events")

    def trampolines(self) -> bool:
        """Return True if fentry can attach: BPF trampolines ride on dynamic ftrace, whose
        function list is readable only where it is usable."""
        if self.tracefs is None:
            return False
        try:
            with open(self.tracefs / "available_filter_functions", "rb") as f:
                return bool(f.read(1))
        except OSError:
            return False

    def release(self) -> None:
        """Free the kernel BTF parsed for probing (the answers stay cached)."""
        if self._vmlinux:
            self._vmlinux.close()
        self._vmlinux = None

    def notes(self, tracepoints: Iterable[str]) -> list[str]:
        """Return what the kernel logs here on attaching to ``tracepoints`` (KERNEL_NOTES)."""
        out = []
        for tp in tracepoints:
            if tp in KERNEL_NOTES:
                file, value, note = KERNEL_NOTES[tp]
                with contextlib.suppress(OSError):
                    if (self.procfs / file).read_text().strip() == value:
                        out.append(note)
        return out

    def tracefs_event(self, name: str, category: str = "*") -> bool:
        """Return True if tracefs lists event ``category/name``."""
        if self.tracefs is None:
            return False
        if category != "*":
            return self.tracepoint_id(name, category) is not None
        return any((self.tracefs / "events").glob(f"*/{name}/id"))

    def tracepoint_id(self, name: str, category: str) -> int | None:
        """Return the perf event id of tracepoint ``category/name`` (None: not readable)."""
        key = f"{category}/{name}"
        if key not in self._tp_ids:
            try:
                tracefs = Tracefs(self.tracefs) if self.tracefs else None
                self._tp_ids[key] = tracefs.event_id(category, name) if tracefs else None
            except (TracefsError, ValueError):  # ValueError: not a tracefs name
                self._tp_ids[key] = None
        return self._tp_ids[key]

    def supports(self, hook: Hook) -> bool:
        """Return True if a program of ``hook`` can load and attach here."""
        if not self.prog_type(hook.kind):
            return False
        if hook.kind == "tp_btf":
            return self.btf_tracepoint(hook.tracepoint)
        if hook.kind == "raw_tp":
            return self.btf_tracepoint(hook.tracepoint) or self.tracefs_event(hook.tracepoint)
        func = hook.tracepoint.removesuffix(RETURN)
        if hook.kind == "fentry":
            return self.trampolines() and self.btf_function(func)
        if hook.kind == "kprobe":
            return self.kprobes() and self.kernel_symbol(func)
        return self.tracefs_event(hook.tracepoint, hook.category)


#: Kernel log lines that attaching to a tracepoint causes on some kernels, though nothing
#: of ours is lost: tracepoint -> (procfs file, its value when the kernel logs it, what
#: to tell the user). ``sched_stat_runtime``: with CONFIG_SCHEDSTATS=y and schedstats off,
#: check_schedstat_required() (kernel/sched/stats.h, on every CFS enqueue) logs once per
#: boot that the sched_stat_* tracepoints need schedstats. sched_stat_runtime does not:
#: update_curr_task() fires it unconditionally (measured in the test VM, Linux 6.12: over
#: a 1 s busy loop cgroup_scheduler counted 1.06 s of cpu_ns with schedstats off, 1.05 s
#: with it on).
KERNEL_NOTES = {
    "sched_stat_runtime": (
        "sys/kernel/sched_schedstats", "0",
        "the kernel logs once \"Scheduler tracepoints stat_sleep, stat_iowait, stat_blocked"
        " and stat_runtime require the kernel parameter schedstats=enable\": harmless"
        " here, sched_stat_runtime fires without schedstats"),
}

#: The probes every sampler shares (one parse of the kernel's BTF for all of them);
#: ``release_probes`` frees that parse once the samplers have started.
SHARED_FEATURES = Features()


def release_probes() -> None:
    """Free the kernel BTF parsed for probing (answers stay cached)."""
    SHARED_FEATURES.release()


def choose(hooks: dict[str, Hook], features: Features, prefer: str = "auto") -> dict[str, str]:
    """Return, for each tracepoint, the chosen attach kind.

    ``hooks`` maps program name to hook. ``prefer`` "auto" takes the best supported kind
    per tracepoint; a kind name forces it (KernelFeatureMissing if unsupported).
    """
    by_tp: dict[str, dict[str, Hook]] = {}
    for h in hooks.values():
        by_tp.setdefault(h.tracepoint, {})[h.kind] = h
    out = {}
    for tp, variants in by_tp.items():
        # A forced kind applies where the hook has that variant (function hooks of a
        # mostly-tracepoint sampler keep their own order).
        forced = prefer != "auto" and prefer in variants
        kinds = [prefer] if forced else [k for k in ATTACH_KINDS if k in variants]
        for k in kinds:
            if k in variants and features.supports(variants[k]):
                out[tp] = k
                break
        else:
            tried = ", ".join(f"{k}/{tp}" for k in kinds) or "none"
            raise KernelFeatureMissing(f"tracepoint {tp}",
                                       f"none of the program variants ({tried}) can attach"
                                       " on this kernel")
    return out


#: Suffixes of the internal maps of globals set before each load (never kept).
_PER_LOAD = (".rodata", ".data", ".kconfig")


def kept_maps(obj: Object, also: tuple[str, ...] = ()) -> list[str]:
    """Return the maps of ``obj`` kept across unload: every ``BPF_F_MMAPABLE`` one (user
    space mmaps it to read it) except those set before each load, and ``also``."""
    # libbpf names an internal map "<object name prefix>.bss"; ".bss" finds it too.
    names = {n: n[n.index("."):] if "." in n else n for n in obj.maps}
    return [names[n] for n, m in obj.maps.items()
            if (m.flags & BPF_F_MMAPABLE and not n.endswith(_PER_LOAD)) or n in also]


class BpfObject:
    """A sampler's loaded BPF object: chosen programs, attach/detach, mmapped arrays."""

    def __init__(self, name: str, *, path: str | Path | None = None, prefer: str = "auto",
                 features: Features | None = None,
                 per_cpu_maps: tuple[str, ...] = (),
                 keep_maps: tuple[str, ...] = (),
                 before_load: Callable[[Object], None] | None = None) -> None:
        self.name = name
        self.path = Path(path) if path else build.object_path(name)
        self.prefer = prefer
        self.features = features or SHARED_FEATURES
        self.per_cpu_maps = per_cpu_maps
        #: Called with the opened object just before load: set .rodata/.data values here.
        self.before_load = before_load
        self.obj: Object | None = None
        #: tracepoint -> chosen attach kind
        self.chosen: dict[str, str] = {}
        #: program name -> its hook, for the loaded programs
        self._hooks: dict[str, Hook] = {}
        #: tracepoint -> perf event id, for those chosen as classic tracepoints
        self._tp_ids: dict[str, int] = {}
        self.programs: list[Program] = []
        #: program name -> its link, for the attached programs
        self.links: dict[str, Link] = {}
        self.load_ns = 0
        self.loads = 0
        #: Maps kept across unload beyond the mmapable ones (module docstring).
        self.keep_maps = keep_maps
        self._kept: dict[str, int] = {}
        self._maps: list[mmap.mmap] = []
        #: NumPy views by map name (or section/variable), valid across unload/load.
        self._views: dict[str, np.ndarray] = {}

    def load(self, programs: bool = True) -> BpfObject:
        """Open, pick the programs, size per-CPU maps and load; return self.

        ``programs=False`` creates the maps only (nothing is verified: cheap): a sampler
        starts that way to map its kept arrays, and loads its programs when a consumer
        comes. Raise SamplerUnavailable naming the build command when the object is
        missing, and the binding's translated errors otherwise. After ``unload`` it loads
        again, with the same attach kinds and the kept maps.
        """
        if self.obj is not None:
            if self.programs or not programs:
                return self
            self.unload()  # maps only so far: load again, with the programs
        if not build.VMLINUX_BTF.exists():  # CO-RE: no kernel BTF, no program of ours loads
            raise KernelFeatureMissing("kernel BTF", BTF_HINT)
        if not self.path.exists():
            raise SamplerUnavailable(self.name, f"BPF object {self.path} is not built: run"
                                     f" `{build.BUILD_COMMAND}` (needs clang, bpftool,"
                                     " libbpf-dev)")
        t0 = time.perf_counter_ns()
        obj = Object(self.path)
        try:
            hooks = {n: h for n, p in obj.programs.items()
                     if (h := parse_section(p.section)) is not None}
            if not self.chosen:  # probed once: the kernel does not change under us
                self.chosen = choose(hooks, self.features, self.prefer)
                self._tp_ids = self._tracepoint_ids(hooks)
            for n, p in obj.programs.items():
                h = hooks.get(n)
                p.autoload = programs and (h is None or self.chosen[h.tracepoint] == h.kind)
            self.programs = [p for p in obj.programs.values() if p.autoload]
            self._hooks = {n: h for n, h in hooks.items() if obj.programs[n].autoload}
            if self.per_cpu_maps:
                ncpu = num_possible_cpus()
                for m in self.per_cpu_maps:
                    obj.map(m).max_entries = ncpu
            for m, fd in self._kept.items():
                obj.map(m).reuse_fd(fd)
            if self.before_load is not None:
                self.before_load(obj)
            obj.load()
            for m in kept_maps(obj, self.keep_maps):
                if m not in self._kept:
                    self._kept[m] = os.dup(obj.map(m).fd)
        except BaseException:
            obj.close()
            raise
        self.obj = obj
        self.loads += 1
        self.load_ns = time.perf_counter_ns() - t0
        return self

    def _tracepoint_ids(self, hooks: dict[str, Hook]) -> dict[str, int]:
        """Return the perf event id of each tracepoint chosen as a classic tracepoint, read
        now (at start-up, privileged): see the module docstring."""
        out = {}
        for h in hooks.values():
            if h.kind == "tracepoint" and self.chosen.get(h.tracepoint) == "tracepoint":
                tp_id = self.features.tracepoint_id(h.tracepoint, h.category)
                if tp_id is None:
                    raise KernelFeatureMissing(
                        f"tracepoint {h.category}/{h.tracepoint}",
                        f"its id in {self.features.tracefs}/events is not readable")
                out[h.tracepoint] = tp_id
        return out

    def _attach(self, p: Program) -> Link:
        """Attach one program: classic tracepoints through their perf event (opened here,
        with the id read at start-up), the others by libbpf's section rules."""
        h = self._hooks.get(p.name)
        if h is None or h.kind != "tracepoint":
            return p.attach()
        attr = PerfEventAttr(type=PERF_TYPE_TRACEPOINT, config=self._tp_ids[h.tracepoint])
        pfd = perf_event_open(attr, -1, 0)  # any CPU: the program runs wherever it fires
        try:
            return p.attach_perf_event(pfd)
        except BaseException:
            os.close(pfd)
            raise

    @property
    def loaded(self) -> bool:
        """Return True while the programs are in the kernel."""
        return self.obj is not None and bool(self.programs)

    def unload(self) -> None:
        """Detach and close the object: no program stays loaded; kept maps stay."""
        self.detach()
        if self.obj is not None:
            self.obj.close()
            self.obj = None
            self.programs = []

    @property
    def attach_kinds(self) -> str:
        """Return the chosen kinds, e.g. ``"tp_btf"`` or ``"sched_switch=raw_tp, ..."``."""
        kinds = set(self.chosen.values())
        if len(kinds) == 1:
            return kinds.pop()
        return ", ".join(f"{tp}={k}" for tp, k in sorted(self.chosen.items()))

    def notes(self) -> list[str]:
        """Return what the kernel logs here when these programs attach (see KERNEL_NOTES)."""
        return self.features.notes(self.chosen)

    @property
    def attached(self) -> bool:
        """Return True while the programs are attached."""
        return bool(self.links)

    def attach(self, skip: Collection[str] = ()) -> None:
        """Attach every loaded program (all or none) but those of the tracepoints in
        ``skip`` (``attach_hook`` attaches them later); load first if unloaded."""
        if self.links:
            return
        self.load()
        links: dict[str, Link] = {}
        try:
            for p in self.programs:
                h = self._hooks.get(p.name)
                if h is None or h.tracepoint not in skip:
                    links[p.name] = self._attach(p)
        except BaseException:
            for link in links.values():
                link.destroy()
            raise
        self.links = links

    def _program_of(self, tracepoint: str) -> Program:
        for p in self.programs:
            h = self._hooks.get(p.name)
            if h is not None and h.tracepoint == tracepoint:
                return p
        raise KeyError(f"{self.name}: no loaded program on {tracepoint}")

    def attach_hook(self, tracepoint: str) -> None:
        """Attach the loaded program of ``tracepoint`` alone (left out by ``attach(skip)``:
        a program attached part of the time), raising what ``attach`` raises."""
        p = self._program_of(tracepoint)
        if p.name not in self.links:
            self.links[p.name] = self._attach(p)

    def detach_hook(self, tracepoint: str) -> None:
        """Detach the program of ``tracepoint`` (the others stay attached)."""
        link = self.links.pop(self._program_of(tracepoint).name, None)
        if link is not None:
            link.destroy()

    def detach(self) -> None:
        """Detach every program; maps keep their contents."""
        links, self.links = self.links, {}
        for link in links.values():
            link.destroy()

    def _require(self) -> Object:
        if self.obj is None:
            raise RuntimeError(f"{self.name}: BPF object not loaded")
        return self.obj

    def array(self, map_name: str, writable: bool = False) -> np.ndarray:
        """Return a NumPy view of a BPF_F_MMAPABLE array's values (``max_entries`` long),
        typed as the C declares the value (from the object's BTF: a struct becomes a
        structured dtype without its ``__`` padding members).

        The map is kept across unload (it is mmapable), so the view stays valid.
        """
        key = f"{map_name}:{writable}"
        if key in self._views:
            return self._views[key]
        obj = self._require()
        m = obj.map(map_name)
        dt = obj.btf().dtype(m.btf_value_type_id)
        mm = m.mmap(writable)
        self._maps.append(mm)
        if dt.itemsize != (m.value_size + 7) // 8 * 8:
            raise ValueError(f"{map_name}: value stride {m.value_size} does not match"
                             f" {dt} ({dt.itemsize} bytes)")
        view = np.frombuffer(mm, dtype=dt, count=m.max_entries)
        self._views[key] = view
        return view

    def global_var(self, name: str, dtype: np.dtype | type = np.uint64,
                   section: str = ".bss", writable: bool = True) -> np.ndarray:
        """Return a one-element view of global variable ``name`` (mmapped ``section``).

        ``.bss`` is kept across unload, so its views stay valid.
        """
        key = f"{section}/{name}"
        if key in self._views:
            return self._views[key]
        obj = self._require()
        off, size = obj.btf().datasec(section)[name]
        dt = np.dtype(dtype)
        if dt.itemsize != size:
            raise ValueError(f"{name}: {size} bytes, not {dt}")
        mm = obj.map(section).mmap(writable)
        self._maps.append(mm)
        view = np.frombuffer(mm, dtype=dt, count=1, offset=off)
        self._views[key] = view
        return view

    def close(self) -> None:
        """Detach, unload, unmap and free the kept maps (views still referenced keep their
        mapping alive)."""
        self.unload()
        self._views = {}
        for mm in self._maps:
            with contextlib.suppress(BufferError):  # a view is still in use: GC unmaps
                mm.close()
        self._maps = []
        kept, self._kept = self._kept, {}
        for fd in kept.values():
            os.close(fd)
