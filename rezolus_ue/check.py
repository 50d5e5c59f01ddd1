"""``rezolus-ue check``: probe the kernel features rezolus-ue uses, each with a remedy.

Every probe asks the kernel itself (opens the file, makes the syscall) rather than reading
the kernel version, because distributions backport and configure features differently.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from tracefs_tools import Tracefs, TracefsError, find_tracefs

from .bpf.loader import release_probes
from .config import Config
from .errors import KernelFeatureMissing, RezolusError, SamplerUnavailable
from .user_events import missing_user_events_hint


@dataclass(frozen=True)
class Result:
    """One probe's outcome: ``status`` is "pass", "warn" or "fail"."""

    name: str
    status: str
    detail: str
    #: A failure of a required probe means `rezolus-ue run` cannot work.
    required: bool = False


_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "arm64": 280, "riscv64": 280}


def _probe_tracefs(mount: bool) -> tuple[Result, Path | None]:
    try:
        root = find_tracefs(mount=mount)
    except TracefsError as e:
        return Result("tracefs", "fail", str(e), required=True), None
    return Result("tracefs", "pass", f"mounted at {root}", required=True), root


def _probe_user_events(root: Path | None) -> Result:
    if root is None:
        return Result("user_events", "fail", "needs tracefs (see above)", required=True)
    path = root / "user_events_data"
    try:
        present = Tracefs(root).has_user_events
    except TracefsError as e:  # tracefs unreadable by this user
        return Result("user_events", "fail", str(e), required=True)
    if not present:
        return Result("user_events", "fail", missing_user_events_hint(root, more=False),
                      required=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except PermissionError:
        return Result("user_events", "fail",
                      f"{path} exists but this user cannot open it: run as root, or grant a"
                      " group read/write access to it (see the README)", required=True)
    except OSError as e:
        return Result("user_events", "fail", f"cannot open {path}: {e.strerror}",
                      required=True)
    os.close(fd)
    return Result("user_events", "pass", f"{path} is writable", required=True)


def _probe_bpf() -> Result:
    nr = _BPF_SYSCALL.get(platform.machine())
    if nr is None:
        return Result("bpf", "warn", f"unknown BPF syscall number on {platform.machine()}")
    # BPF_MAP_CREATE of a one-slot array: the smallest thing that proves we may use BPF.
    attr = (ctypes.c_uint32 * 32)(2, 4, 4, 1)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(nr, 0, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd >= 0:
        os.close(fd)
        return Result("bpf", "pass", "bpf() map creation works")
    err = ctypes.get_errno()
    if err in (errno.EPERM, errno.EACCES):
        hint = "run as root or grant CAP_BPF and CAP_PERFMON"
    elif err == errno.ENOSYS:
        hint = "kernel built without CONFIG_BPF_SYSCALL"
    else:
        hint = os.strerror(err)
    return Result("bpf", "fail", f"bpf() refused: {hint}; BPF samplers will be unavailable")


def _probe_btf() -> Result:
    path = Path("/sys/kernel/btf/vmlinux")
    if path.exists():
        return Result("btf", "pass", f"{path} present (CO-RE programs can load)")
    return Result("btf", "fail", f"{path} missing: kernel needs CONFIG_DEBUG_INFO_BTF=y;"
                  " BPF samplers will be unavailable")


def _probe_perf() -> list[Result]:
    from .perf_event import (
        PERF_COUNT_HW_CPU_CYCLES,
        PERF_COUNT_SW_CPU_CLOCK,
        PerfEvent,
    )

    out = []
    try:
        PerfEvent.software(PERF_COUNT_SW_CPU_CLOCK, cpu=0).close()
        out.append(Result("perf software events", "pass", "per-CPU cpu-clock opens"))
    except RezolusError as e:
        out.append(Result("perf software events", "fail", str(e)))
    try:
        PerfEvent.hardware(PERF_COUNT_HW_CPU_CYCLES, cpu=0).close()
        out.append(Result("perf hardware counters", "pass", "cycles counter opens"))
    except KernelFeatureMissing:
        out.append(Result("perf hardware counters", "warn",
                          "this CPU or VM exposes no hardware PMU; cycles, instructions and"
                          " IPC metrics will be unavailable"))
    except RezolusError as e:
        out.append(Result("perf hardware counters", "warn",
                          f"{e}; cycles, instructions and IPC metrics will be unavailable"))
    return out


def _probe_kprobes(root: Path | None) -> Result:
    try:
        present = root is not None and (root / "kprobe_events").exists()
    except OSError as e:
        return Result("kprobes", "warn", f"cannot read {root}: {e.strerror}")
    if present:
        return Result("kprobes", "pass", f"{root}/kprobe_events present")
    return Result("kprobes", "warn", "no kprobe_events: kernel lacks CONFIG_KPROBE_EVENTS;"
                  " samplers that need kprobes will be unavailable (tracepoints still work)")


def _probe_capabilities() -> Result:
    from .privilege import RUNTIME_CAPS, missing

    try:
        lacking = missing(RUNTIME_CAPS)
    except (OSError, KeyError, ValueError) as e:
        return Result("capabilities", "warn", f"cannot read /proc/self/status: {e}")
    if not lacking:
        return Result("capabilities", "pass", f"{' and '.join(RUNTIME_CAPS)} in effect (the"
                      " agent keeps only these after start-up)")
    why = {"CAP_BPF": "BPF samplers cannot load",
           "CAP_PERFMON": "BPF programs cannot attach and perf counters cannot open"}
    return Result("capabilities", "warn", "missing " + "; ".join(
        f"{c}: {why[c]}" for c in lacking) + " (run as root, or grant them, e.g. systemd"
        " AmbientCapabilities=CAP_BPF CAP_PERFMON)")


def probe_samplers(config: Config) -> list[Result]:
    """Return, per registered sampler, whether it can start here (and why not)."""
    from .samplers import REGISTRY, Roots, SamplerContext

    a = config.agent
    roots = Roots(Path(str(a["procfs"])), Path(str(a["sysfs"])))
    out = []
    for name, cls in REGISTRY.items():
        label = f"sampler {name}"
        if not config.sampler_enabled(name):
            out.append(Result(label, "warn", "disabled in config"))
            continue
        sampler = cls(SamplerContext(roots, config.samplers[name]))
        try:
            sampler.start()
        except (SamplerUnavailable, RezolusError, OSError) as e:
            reason = e.reason if isinstance(e, SamplerUnavailable) else str(e)
            out.append(Result(label, "warn", f"unavailable: {reason}"))
            continue
        try:
            sampler.verify()
        except (SamplerUnavailable, RezolusError, OSError) as e:
            reason = e.reason if isinstance(e, SamplerUnavailable) else str(e)
            out.append(Result(label, "warn", f"unavailable: {reason}"))
            sampler.close()
            continue
        try:
            detail = sampler.detail
            sampler.close()
        except Exception as e:  # closing must not hide the others' results
            detail = f"close failed: {e}"
        out.append(Result(label, "pass", "available" + (f" ({detail})" if detail else "")))
    release_probes()
    return out


def run_checks(mount: bool = True, config: Config | None = None) -> list[Result]:
    """Return every probe's result, required ones first, then each sampler's."""
    tracefs, root = _probe_tracefs(mount)
    out = [tracefs, _probe_user_events(root), _probe_capabilities(), _probe_bpf(),
           _probe_btf(), *_probe_perf(), _probe_kprobes(root)]
    if config is not None:
        out += probe_samplers(config)
    return out
