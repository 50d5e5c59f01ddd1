"""``rezolus-ue check``: probe the kernel features rezolus-ue uses, each with a remedy.

Every probe asks the kernel itself (opens the file, makes the syscall) rather than reading
the kernel version, because distributions backport and configure features differently.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracefs_tools import Tracefs, TracefsError, UprobeEvents, find_tracefs, parse_mounts

from .bpf.loader import release_probes
from .config import Config
from .errors import KernelFeatureMissing, RezolusError, SamplerUnavailable
from .linux.user_events import missing_user_events_hint
from .schema import GROUPS

if TYPE_CHECKING:
    from .samplers.base import Sampler


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
    except TracefsError as e:  # e.g. tracefs is root's, mode 0700, and this is not root
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


def _probe_uprobe_events(root: Path | None, required: bool) -> Result:
    """The uprobe transport: uprobe_events writable and the stub installed and safe."""
    from .linux.uprobe_stub import Stub
    if root is None:
        return Result("uprobe_events", "fail", "needs tracefs (see above)", required=required)
    path = root / "uprobe_events"
    try:
        present = Tracefs(root).has_uprobe_events
    except TracefsError as e:
        return Result("uprobe_events", "fail", str(e), required=required)
    if not present:
        return Result("uprobe_events", "fail", f"{path} is missing: the kernel needs"
                      " CONFIG_UPROBE_EVENTS=y", required=required)
    try:
        UprobeEvents(root).close()  # what `run` opens at start and keeps
    except TracefsError as e:
        return Result("uprobe_events", "fail", str(e), required=required)
    try:
        stub = Stub()
    except RezolusError as e:
        return Result("uprobe_events", "fail", str(e), required=required)
    return Result("uprobe_events", "pass", f"{path} is writable; stub {stub.path}"
                  f" ({stub.slots} slots)", required=required)


def _probe_transports(root: Path | None, setting: str) -> list[Result]:
    """Which transport `run` takes here and why, then the probes of both: the chosen
    one's failure is fatal, the other's a note."""
    from .publisher import choose_transport
    chosen = None
    if root is not None:
        try:
            chosen, why = choose_transport(root, setting)
        except RezolusError as e:
            head = Result("transport", "fail", str(e), required=True)
        else:
            group = GROUPS[chosen]
            head = Result("transport", "pass", f"{chosen} ({why}; transport = \"{setting}\"):"
                          f" tracepoints {group}:rezolus_*", required=True)
    else:
        head = Result("transport", "fail", "needs tracefs (see above)", required=True)
    ue = _probe_user_events(root)
    up = _probe_uprobe_events(root, required=chosen == "uprobe")
    if chosen == "uprobe" and ue.status == "fail":
        ue = Result(ue.name, "warn", ue.detail + " (the uprobe transport is used instead)")
    if chosen == "user_events" and up.status == "fail":
        up = Result(up.name, "warn", up.detail)
    return [head, ue, up]


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
    from .linux.perf_event import PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_SW_CPU_CLOCK, PerfEvent

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
    except PermissionError:
        return Result("kprobes", "warn", f"{root} is not readable by this user: run as root")
    except OSError as e:
        return Result("kprobes", "warn", f"cannot read {root}: {e.strerror}")
    if present:
        return Result("kprobes", "pass", f"{root}/kprobe_events present")
    return Result("kprobes", "warn", "no kprobe_events: kernel lacks CONFIG_KPROBE_EVENTS;"
                  " samplers that need kprobes will be unavailable (tracepoints still work)")


def _probe_capabilities(config: Config | None) -> Result:
    """Whether this process has what the enabled samplers need after start-up (with no
    config, every sampler), saying which sampler needs which."""
    from .privilege import declared, describe, kept, missing, union

    keep = kept(config) if config is not None else union(declared())
    try:
        lacking = missing(keep)
    except (OSError, KeyError, ValueError) as e:
        return Result("capabilities", "warn", f"cannot read /proc/self/status: {e}")
    if not lacking:
        return Result("capabilities", "pass", f"{describe(keep)} in effect: the agent keeps"
                      " only what its enabled samplers need after start-up")
    def needed(cap: str) -> str:
        by_why: dict[str, list[str]] = {}
        for who, why in keep[cap].items():
            by_why.setdefault(why, []).append(who)
        return "; ".join(f"{', '.join(whos)}: to {why}" for why, whos in by_why.items())

    return Result("capabilities", "warn", "missing " + ", ".join(
        f"{c} ({needed(c)})" for c in lacking) + "; run as root, or grant them (e.g."
        f" systemd AmbientCapabilities={' '.join(lacking)})")


#: What each hidepid mode of a proc mount hides (proc(5)): named since Linux 5.8,
#: numbered before.
_HIDEPID = {
    "noaccess": "other users' processes are listed but their files cannot be read",
    "invisible": "other users' processes are not even listed",
    "ptraceable": "the processes the reader may not ptrace are not listed",
}
_HIDEPID_NUMBERS = {"0": "off", "1": "noaccess", "2": "invisible", "4": "ptraceable"}


def procfs_visibility(mounts_text: str, procfs: str, sees: bool | None) -> Result:
    """Return what the proc mount at ``procfs`` (in a /proc/mounts text) hides from the
    agent: hidepid (and its gid=), subset=pid. ``sees``: whether the agent will see past
    hidepid (it keeps CAP_SYS_PTRACE); None: no enabled sampler reads other processes."""
    mounts = [e for e in parse_mounts(mounts_text)
              if e.fstype == "proc" and os.path.normpath(e.target) == os.path.normpath(procfs)]
    if not mounts:
        return Result("procfs", "warn", f"no proc filesystem mounted at {procfs}")
    opts = dict(o.partition("=")[::2] for o in mounts[-1].options.split(","))
    mode = _HIDEPID_NUMBERS.get(opts.get("hidepid", "off"), opts.get("hidepid", "off"))
    if opts.get("subset") == "pid":
        return Result("procfs", "warn", f"{procfs} is mounted with subset=pid: only process"
                      f" directories, no {procfs}/stat, meminfo, loadavg and the rest, so the"
                      " procfs samplers read nothing there and no capability sees past it;"
                      " give the agent a proc mount without subset=pid")
    if mode == "off":
        return Result("procfs", "pass", f"{procfs}: every process visible (no hidepid)")
    hidden = _HIDEPID.get(mode, f"hidepid={mode}, unknown to this version")
    if "gid" in opts:
        hidden += f", except to members of group {opts['gid']}"
    head = f"{procfs} is mounted with hidepid={mode}: {hidden}"
    if sees is None:
        return Result("procfs", "pass", f"{head}; no enabled sampler reads other processes")
    if sees:
        return Result("procfs", "pass", f"{head}; the agent keeps CAP_SYS_PTRACE, which"
                      " sees past it")
    return Result("procfs", "warn", f"{head}; the agent will not hold CAP_SYS_PTRACE, so the"
                  " processes sampler sees only its own user's processes (the others are"
                  " counted in rezolus_processes.unreadable, or not at all): run as root, or"
                  " grant CAP_SYS_PTRACE")


def _probe_procfs(config: Config | None) -> Result:
    """Whether hidepid hides processes from the agent, as ``run`` with ``config`` keeps
    its capabilities (with no config: every sampler enabled)."""
    from .privilege import declared, kept, missing, union

    procfs = str(config.agent["procfs"]) if config is not None else "/proc"
    try:
        text = Path("/proc/self/mounts").read_text()
    except OSError as e:
        return Result("procfs", "warn", f"cannot read /proc/self/mounts: {e.strerror}")
    if config is not None and not config.sampler_enabled("processes"):
        return procfs_visibility(text, procfs, None)
    keep = kept(config) if config is not None else union(declared())
    drops = config is None or bool(config.agent.get("drop_capabilities", True))
    try:
        held = not missing(["CAP_SYS_PTRACE"])
    except (OSError, KeyError, ValueError):
        held = False
    return procfs_visibility(text, procfs, held and ("CAP_SYS_PTRACE" in keep or not drops))


def _reason(e: BaseException) -> str:
    """Return the reason the agent gives for a sampler that cannot run, on one line (a
    verifier error's log lines joined by " | ")."""
    text = e.reason if isinstance(e, SamplerUnavailable) else str(e)
    return " | ".join(ln.strip() for ln in text.splitlines() if ln.strip())


def _after_drop(name: str, sampler: Sampler) -> Result:
    """Return whether a started ``sampler`` works with the privileges held now: what the
    agent does when a consumer arrives (BPF: load, verify and attach), then release."""
    from .samplers.bpf_sampler import BpfSampler

    label = f"sampler {name}"
    try:
        sampler.verify()
        if isinstance(sampler, BpfSampler):
            notes = sampler.bpf.notes()
            detail = f"loads and attaches as {sampler.bpf.attach_kinds}" + (
                f" ({'; '.join(notes)})" if notes else "")
            return Result(label, "pass", detail)
        # The other samplers' detail says what they found missing at start.
        if sampler.detail:
            return Result(label, "warn", f"degraded: {sampler.detail}")
        return Result(label, "pass", "available")
    except (SamplerUnavailable, RezolusError, OSError) as e:
        return Result(label, "warn", f"unavailable: {_reason(e)}")
    finally:
        with contextlib.suppress(Exception):  # closing must not hide the others' results
            sampler.close()


def _check_samplers(config: Config, drop: Callable[[], Result]) -> list[Result]:
    """Start every enabled sampler as ``run`` does, call ``drop`` (which returns the line
    saying what privileges remain), then check each with those privileges."""
    from .samplers import REGISTRY, Roots, SamplerContext

    a = config.agent
    roots = Roots(Path(str(a["procfs"])), Path(str(a["sysfs"])))
    out: dict[str, Result] = {}
    started = {}
    for name, cls in REGISTRY.items():
        if not config.sampler_enabled(name):
            out[name] = Result(f"sampler {name}", "warn", "disabled in config")
            continue
        sampler = cls(SamplerContext(roots, config.samplers[name]))
        try:
            sampler.start()
        except (SamplerUnavailable, RezolusError, OSError) as e:
            with contextlib.suppress(Exception):
                sampler.close()
            out[name] = Result(f"sampler {name}", "warn", f"unavailable: {_reason(e)}")
            continue
        started[name] = sampler
    release_probes()
    privileges = drop()
    for name, sampler in started.items():
        out[name] = _after_drop(name, sampler)
    return [privileges, *(out[n] for n in REGISTRY)]


def _in_child(work: Callable[[], list[Result]]) -> list[Result]:
    """Return ``work()`` run in a forked child (whose privileges it may drop for good),
    its results coming back as JSON over a pipe."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(rfd)
            data = json.dumps([asdict(r) for r in work()]).encode()
        except BaseException as e:  # reported by the parent as one line
            data, code = json.dumps({"error": _reason(e)}).encode(), 1
        try:
            with os.fdopen(wfd, "wb") as f:
                f.write(data)
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    try:
        doc = json.loads(data)
    except ValueError:
        doc = {"error": f"it ended without a result ({_ended(status)})"}
    if isinstance(doc, dict):
        return [Result("samplers", "fail", f"checking the samplers failed: {doc['error']}")]
    return [Result(**r) for r in doc]


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def probe_samplers(config: Config, user: str | None = None) -> list[Result]:
    """Return whether each enabled sampler works as ``run`` (``run --user USER``) runs it.

    As root: in a forked child that starts the samplers as root, then drops to what the
    agent keeps (privilege.kept: what the enabled samplers need, becoming ``user``), then
    loads, verifies and attaches each BPF sampler, as a consumer's arrival would. So a
    sampler the agent could start but not load after its drop is not reported PASS. Not
    as root: in this process, with this user's privileges, and the first line says so.
    The first result is that line: the privileges the samplers were checked with.
    """
    from . import privilege
    from .cli_base import PROG
    from .linux import capabilities

    drops = bool(config.agent.get("drop_capabilities", True)) or user is not None
    if os.geteuid() != 0:
        held = capabilities.members(capabilities.current().get("CapEff", 0))
        caps = ", ".join(sorted(capabilities.cap_name(n) for n in held)) or "no capabilities"
        line = Result("privileges", "warn",
                      f"not root: samplers checked as uid {os.getuid()} with {caps}, not as"
                      f" `sudo {PROG} run` runs them (rerun as root)")
        return _check_samplers(config, lambda: line)
    if not drops:
        line = Result("privileges", "pass", "samplers checked as root: agent.drop_capabilities"
                      " is off, so `run` keeps every capability")
        return _check_samplers(config, lambda: line)

    if user is not None:
        privilege.require_user(user)

    keep = privilege.kept(config)

    def drop() -> Result:
        try:
            privilege.drop_to(keep, user=user)
        except OSError as e:  # as drop_after_start: an error with --user, else a warning
            if user is not None:
                raise RezolusError(f"cannot become user {user}: {e.strerror}") from None
            return Result("privileges", "warn", f"could not drop capabilities ({e.strerror}):"
                          " samplers checked with every capability, as `run` keeps them then")
        who = f"as {user} (uid {os.getuid()})" if user else "as root"
        return Result("privileges", "pass", f"samplers started as root, then checked {who}"
                      f" with only {', '.join(keep) or 'no capabilities'}, as `run"
                      f"{' --user ' + user if user else ''}` runs them")

    return _in_child(lambda: _check_samplers(config, drop))


def run_checks(mount: bool = True, config: Config | None = None,
               user: str | None = None) -> list[Result]:
    """Return every probe's result, required ones first, then each sampler's (checked as
    ``run``, or ``run --user USER``, would run them)."""
    tracefs, root = _probe_tracefs(mount)
    setting = str(config.agent["transport"]) if config is not None else "auto"
    out = [tracefs, *_probe_transports(root, setting), _probe_capabilities(config),
           _probe_procfs(config), _probe_bpf(),
           _probe_btf(), *_probe_perf(), _probe_kprobes(root)]
    if config is not None:
        out += probe_samplers(config, user)
    return out
