"""Overhead of the BPF samplers: workload slowdown beside bpftrace, and the agent's CPU.

    python bench/overhead.py [--runs 15] [--groups 10] [--loops 250] [--seconds 20]

1. Slowdown of ``perf bench sched messaging`` in rounds: in each round every
   configuration runs once, in an order rotated round by round, so drift on a shared
   machine hits them alike. Configurations: ``none``; ``ours``, the scheduler_runqueue and
   syscall samplers (those registered) attached in this process and publishing every
   second as the agent does, at their defaults (every syscall counted, those of a 100 ms
   window in each second timed: ``latency_window``); ``ours_all``, the same timing every
   call (``latency_window = "1s"``, the default before the windows); ``ours_rq``,
   scheduler_runqueue alone (the same probes as bpftrace's);
   ``bpftrace``, a script building the same run-queue latency histogram (sched_wakeup,
   sched_wakeup_new, sched_switch, as bpftrace's runqlat.bt does); ``bpftrace_all``, that
   plus syscall counts and a syscall latency histogram: the work of ``ours``; ``floor``,
   programs on sys_enter and sys_exit that return at once (bench/bpf/null_syscalls.bpf.c:
   the least any syscall sampler costs). Two
   measures: wall time (perf's "Total time") and the CPU time of the workload's processes
   (where BPF programs' cost lands; less disturbed by other jobs). The slowdown is the
   median over rounds of each round's time / that round's ``none`` time; the spread is
   its quartiles. Goals: ours within 3 points of ``floor``, the least any syscall
   sampler costs, measured beside it (what the hooks themselves cost is the kernel's, not
   ours to cut); and no worse than bpftrace doing the same work (ours against
   bpftrace_all, ours_rq against bpftrace, each pair the same probes).
2. The agent's CPU share, driving every registered BPF sampler in this process as the
   agent does (``Agent.tick``), at 1 s publishing: with a consumer (target <= 1% of a
   core) and with none (target <= 0.05%, and none of our programs loaded, checked with
   ``bpftool prog show -j``).

user_events is not needed: records go to /dev/null through always-enabled fake handles
(bench/collect.py's ``NullHandle``); "a consumer" is those handles' enable words set to 1.
What a user_events write costs is bench/publish.py's. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from collect import build_agent, run_loop  # noqa: E402

from rezolus_ue.agent import Agent  # noqa: E402
from rezolus_ue.bpf import build  # noqa: E402
from rezolus_ue.bpf.libbpf import Object  # noqa: E402
from rezolus_ue.errors import RezolusError  # noqa: E402
from rezolus_ue.samplers import REGISTRY  # noqa: E402
from rezolus_ue.samplers.bpf_sampler import BpfSampler  # noqa: E402

#: The samplers attached in configuration "ours" (those of them registered).
WORKLOAD_SAMPLERS = ("scheduler_runqueue", "syscall")

#: Run-queue latency as bpftrace's runqlat.bt measures it, counting preempted tasks as
#: runnable the way our sched_switch program does (the classic tracepoint reports them as
#: TASK_REPORT_MAX, 0x100). BEGIN fires once every probe is attached.
BPFTRACE_RUNQLAT = r"""
BEGIN { printf("ready\n"); }
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new {
    @enqueued[args->pid] = nsecs;
}
tracepoint:sched:sched_switch {
    if (args->prev_state == 0 || (args->prev_state & 0x100)) {
        @enqueued[args->prev_pid] = nsecs;
    }
    $t = @enqueued[args->next_pid];
    if ($t) {
        @usecs = hist((nsecs - $t) / 1000);
    }
    delete(@enqueued[args->next_pid]);
}
"""
#: What our syscall sampler does, as bpftrace users write it (syscount.bt's probe, and a
#: latency histogram): added to BPFTRACE_RUNQLAT for configuration ``bpftrace_all``, the
#: same work as ``ours``. bpftrace 0.17 has no raw tracepoints, so the classic ones.
BPFTRACE_SYSCALL = r"""
tracepoint:raw_syscalls:sys_enter {
    @calls[args->id] = count();
    @start[tid] = nsecs;
}
tracepoint:raw_syscalls:sys_exit /@start[tid]/ {
    @syscall_ns = hist(nsecs - @start[tid]);
    delete(@start[tid]);
}
"""
#: Configuration ``floor``: raw_syscalls programs that return at once.
NULL_SYSCALLS = ROOT / "bench" / "bpf" / "null_syscalls.bpf.c"
NULL_OBJECT = ROOT / "bench" / ".output" / "null_syscalls.bpf.o"
#: The syscall sampler timing every call, continuously (configuration ``ours_all``).
TIME_EVERY_CALL = {"latency_window": "1s"}


def syscall_defaults() -> dict[str, object]:
    """Return the syscall sampler's timing options at their defaults, as a config has them."""
    return {o.key: o.default for o in REGISTRY["syscall"].options
            if o.key.startswith("latency_")}


def bpf_samplers() -> dict[str, type[BpfSampler]]:
    """Return every registered BPF sampler, by name."""
    return {n: c for n, c in REGISTRY.items() if issubclass(c, BpfSampler)}


def ensure_built(names: list[str]) -> dict[str, str]:
    """Build the objects of samplers ``names`` where missing; return name -> why not."""
    failed = {}
    for name in names:
        try:
            build.build([name])
        except (RezolusError, OSError) as e:
            failed[name] = str(e).splitlines()[0] if str(e) else type(e).__name__
    return failed


def our_program_names() -> set[str]:
    """Return the names of every program (all attach variants) in our built objects."""
    names = set()
    for cls in bpf_samplers().values():
        path = build.object_path(cls.name)
        if not path.exists():
            continue
        obj = Object(path)
        try:
            names |= {n[:15] for n in obj.programs}  # the kernel keeps 15 characters
        finally:
            obj.close()
    return names


def loaded_ours(ours: set[str]) -> dict[int, str]:
    """Return id -> name of the programs named like ours in the kernel now, whoever loaded
    them (``bpftool prog show -j``; tests running beside the bench load them too)."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: p["name"] for p in json.loads(out or "[]") if p.get("name") in ours}


def held_prog_ids(pid: int | None = None) -> set[int]:
    """Return the ids of the programs a process holds (fds of programs and of links)."""
    ids = set()
    fdinfo = Path(f"/proc/{pid or os.getpid()}/fdinfo")
    for f in fdinfo.iterdir():
        with contextlib.suppress(OSError):
            for line in f.read_text().splitlines():
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
    return ids


def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> float | None:
    """Return the seconds until ``cond()`` held, or None after ``timeout``.

    The kernel frees programs after an RCU grace period, not when their fd closes.
    """
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            return None
        time.sleep(0.01)
    return time.monotonic() - t0


def set_consumer(agent: Agent, on: bool) -> None:
    """Set every fake handle's enable word: a consumer arrives (or leaves) everywhere."""
    for st in agent.states.values():
        for h in st.sampler.handles.values():  # type: ignore[union-attr]
            h.word.value = int(on)


# --- 1. workload slowdown ---------------------------------------------------------------

def messaging(groups: int, loops: int) -> tuple[float, float]:
    """Run ``perf bench sched messaging`` once; return its reported seconds and the CPU
    seconds (user + system) of its processes.

    BPF programs run in the context of the task that hits the hook, so their cost is in
    the workload's system time; unlike wall time, CPU time barely moves when other jobs
    compete for the CPUs.
    """
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(["perf", "bench", "sched", "messaging", "-g", str(groups),
                        "-l", str(loops)], capture_output=True, text=True, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"Total time:\s*([\d.]+)", r.stdout)
    if m is None:
        raise RuntimeError(f"no 'Total time' in perf bench output: {r.stdout[-300:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return float(m.group(1)), cpu


def activate(agent: Agent) -> None:
    """Tick once with consumers (BPF samplers begin loading in threads), then wait until
    every sampler has loaded and attached, as the agent's next ticks would."""
    agent.tick(time.monotonic_ns(), True)
    for st in agent.states.values():
        while st.sampler is not None and not st.sampler.poll_activation():
            time.sleep(0.005)
    agent.tick(time.monotonic_ns(), True)


@contextlib.contextmanager
def ours_attached(agent: Agent, publish_s: float = 1.0) -> Iterator[None]:
    """Attach the agent's samplers and publish every ``publish_s`` in a thread, as the
    agent would with a consumer."""
    set_consumer(agent, True)
    activate(agent)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(publish_s):
            agent.tick(time.monotonic_ns(), True)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        set_consumer(agent, False)
        agent.tick(time.monotonic_ns(), True)  # deactivates: detach + unload


@contextlib.contextmanager
def null_syscalls_attached() -> Iterator[None]:
    """Attach NULL_SYSCALLS' two programs for the block (built on first use)."""
    obj_path = build.build_one(NULL_SYSCALLS, NULL_OBJECT, source_dir=NULL_SYSCALLS.parent)
    obj = Object(obj_path)
    links = []
    try:
        obj.load()
        links = [p.attach() for p in obj.programs.values()]
        yield
    finally:
        for link in links:
            link.destroy()
        obj.close()


class Bpftrace:
    """bpftrace running BPFTRACE_RUNQLAT (and ``extra``); ``counts`` collects each run's
    run-queue latency histogram total."""

    def __init__(self, exe: str, extra: str = "") -> None:
        self.exe = exe
        # One END (bpftrace allows no more): drop the per-thread maps, print the histograms.
        self.script = (BPFTRACE_RUNQLAT + extra + "END { clear(@enqueued);"
                       + (" clear(@start); clear(@calls);" if extra else "") + " }\n")
        self.counts: list[int] = []

    @contextlib.contextmanager
    def attached(self) -> Iterator[int]:
        """Run bpftrace until the block ends; yield its pid."""
        proc = subprocess.Popen([self.exe, "-e", self.script], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        head = []
        for line in proc.stdout:  # EOF if it fails to start
            if line.strip() == "ready":
                break
            head.append(line)
        else:
            proc.wait()
            raise RuntimeError(f"bpftrace did not start: {''.join(head)[-500:]}")
        try:
            yield proc.pid
        finally:
            proc.send_signal(signal.SIGINT)  # prints @usecs and exits
            try:
                out, _ = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:  # a starved machine: no count this round
                proc.kill()
                proc.communicate()
                print("bpftrace did not exit within 120 s of SIGINT: killed, its histogram"
                      " lost", file=sys.stderr, flush=True)
                out = ""
            if "@usecs:" in out:
                usecs = out.split("@usecs:", 1)[1].split("\n\n", 1)[0]
                self.counts.append(sum(int(m.group(1)) for m in re.finditer(
                    r"^\[[^\]\n]*[\])][ \t]+(\d+)[ \t]", usecs, re.M)))


@contextlib.contextmanager
def bpf_stats() -> Iterator[None]:
    """Turn on kernel.bpf_stats_enabled (run time and count per program) for the block.

    It costs two clock reads per program run, so the timed rounds run without it.
    """
    path = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = path.read_text().strip()
    path.write_text("1\n")
    try:
        yield
    finally:
        path.write_text(f"{old}\n")


def prog_stats(ids: set[int]) -> dict[str, tuple[float, int]]:
    """Return name -> (ns per run, runs) of the loaded programs with these ids."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=True).stdout
    return {p["name"]: (p.get("run_time_ns", 0) / max(p.get("run_cnt", 0), 1),
                        p.get("run_cnt", 0))
            for p in json.loads(out or "[]") if p["id"] in ids}


def program_costs(agent: Agent, tracer: Bpftrace | None, groups: int,
                  loops: int) -> dict[str, dict[str, tuple[float, int]]]:
    """Return, for ours and bpftrace, each program's ns per run over one workload run."""
    costs = {}
    with bpf_stats():
        with ours_attached(agent):
            messaging(groups, loops)
            costs["ours"] = prog_stats(held_prog_ids())
        if tracer is not None:
            with tracer.attached() as pid:
                messaging(groups, loops)
                costs["bpftrace"] = prog_stats(held_prog_ids(pid))
    return costs


def slowdown(runs: int, groups: int, loops: int,
             configs: dict[str, Callable[[], contextlib.AbstractContextManager]]
             ) -> dict[str, dict[str, list[float]]]:
    """Return each configuration's workload seconds, run by run, in rotated rounds:
    ``{"wall": {config: [s, ...]}, "cpu": {...}}``."""
    times: dict[str, dict[str, list[float]]] = {m: {k: [] for k in configs}
                                                for m in ("wall", "cpu")}
    names = list(configs)
    for r in range(runs):
        for k in names[r % len(names):] + names[:r % len(names)]:
            with configs[k]():
                wall, cpu = messaging(groups, loops)
            times["wall"][k].append(wall)
            times["cpu"][k].append(cpu)
    return times


def quartiles(xs: list[float]) -> tuple[float, float]:
    """Return the first and third quartiles (both xs[0] for a single value)."""
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def report_slowdown(times: dict[str, list[float]]) -> dict[str, float]:
    """Print every configuration's times and slowdown; return the median slowdowns (%)."""
    base = times["none"]
    out = {}
    print(f"{'config':10s} {'median s':>9s} {'quartiles s':>15s} {'min..max s':>15s}"
          f" {'slowdown %':>11s} {'quartiles %':>15s}")
    for k, ts in times.items():
        q1, q3 = quartiles(ts)
        line = (f"{k:10s} {statistics.median(ts):9.3f} {q1:7.3f}..{q3:<7.3f}"
                f" {min(ts):7.3f}..{max(ts):<7.3f}")
        if k != "none":
            ratios = [100 * (t / b - 1) for t, b in zip(ts, base, strict=True)]
            out[k] = statistics.median(ratios)
            r1, r3 = quartiles(ratios)
            line += f" {out[k]:+11.1f} {r1:+7.1f}..{r3:<+7.1f}"
        print(line)
    return out


# --- 2. agent CPU -----------------------------------------------------------------------

@dataclass
class AgentCpu:
    """agent_cpu's figures; program lists are names from ``bpftool prog show -j``."""

    samplers: list[str]
    unavailable: dict[str, str]
    idle_share: float = 0.0
    #: Programs named like ours loaded while idle: by this process, by any process.
    idle_held: list[str] = field(default_factory=list)
    idle_any: list[str] = field(default_factory=list)
    consumer_share: float = 0.0
    consumer_held: list[str] = field(default_factory=list)
    activate_ms: float = 0.0
    #: Seconds until the kernel had freed them after the consumer left (None: not in 5 s).
    gone_after_s: float | None = None


def agent_cpu(seconds: float) -> AgentCpu:
    """Measure the agent's CPU share with every BPF sampler, without and with a consumer,
    and which of our programs are loaded in each phase."""
    ours = our_program_names()
    agent, skipped = build_agent(tuple(bpf_samplers()))
    res = AgentCpu(sorted(agent.states), skipped)
    idle: dict[int, str] = {}
    try:
        set_consumer(agent, False)
        agent.tick(time.monotonic_ns(), True)
        idle |= loaded_ours(ours)
        res.idle_share = run_loop(agent, seconds, 1.0, 1.0)
        idle |= loaded_ours(ours)
        held = held_prog_ids()
        res.idle_any = sorted(idle.values())
        res.idle_held = sorted(n for i, n in idle.items() if i in held)
        set_consumer(agent, True)
        t0 = time.perf_counter()
        activate(agent)  # every sampler loads and attaches
        res.activate_ms = 1000 * (time.perf_counter() - t0)
        held = held_prog_ids()
        mine = {i: n for i, n in loaded_ours(ours).items() if i in held}
        res.consumer_held = sorted(mine.values())
        res.consumer_share = run_loop(agent, seconds, 1.0, 1.0)
        set_consumer(agent, False)
        agent.tick(time.monotonic_ns(), True)  # the consumer left: detach and unload
        res.gone_after_s = wait_until(lambda: not mine.keys() & loaded_ours(ours).keys())
    finally:
        agent.close()
    return res


def report_agent_cpu(res: AgentCpu) -> None:
    """Print agent_cpu's figures."""
    for name, why in res.unavailable.items():
        print(f"{name:20s} unavailable: {why}")
    print(f"BPF samplers driven: {', '.join(res.samplers) or 'none'}")
    print(f"agent CPU, no consumer, 1 s publishing:   {res.idle_share:.4f} % of a core"
          "   (target <= 0.05%)")
    others = len(res.idle_any) - len(res.idle_held)
    print(f"  our programs loaded by the agent meanwhile: {len(res.idle_held)}   (target 0)"
          f"{' ' + ', '.join(res.idle_held) if res.idle_held else ''}"
          + (f"; {others} of that name loaded by other processes" if others else ""))
    print(f"agent CPU, consumer, 1 s publishing:      {res.consumer_share:.4f} % of a core"
          "   (target <= 1%)")
    print(f"  our programs loaded by the agent meanwhile: {len(res.consumer_held)}"
          f" ({', '.join(res.consumer_held)}); load + attach took {res.activate_ms:.0f} ms")
    gone = res.gone_after_s
    print("  after the consumer left: " + (f"all freed {gone:.2f} s later" if gone is not None
                                            else "STILL LOADED after 5 s"))


def report_workload(runs: int, groups: int, loops: int) -> None:
    """Run the workload in every configuration and print the slowdowns and verdicts."""
    workload = tuple(n for n in WORKLOAD_SAMPLERS if n in bpf_samplers())
    missing = [n for n in WORKLOAD_SAMPLERS if n not in bpf_samplers()]
    agents = {"ours": build_agent(workload)}
    if "syscall" in workload:
        agents["ours_all"] = build_agent(workload, overrides={"syscall": TIME_EVERY_CALL})
    if len(workload) > 1 and "scheduler_runqueue" in workload:
        agents["ours_rq"] = build_agent(("scheduler_runqueue",))
    configs: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
        "none": contextlib.nullcontext}
    for k, (agent, skipped) in agents.items():
        for name, why in skipped.items():
            print(f"{name:20s} unavailable: {why}")
        configs[k] = lambda a=agent: ours_attached(a)
        print(f"{k:8s} = {', '.join(agent.states) or 'nothing'} attached, publishing every"
              " 1 s to /dev/null" + (f" ({', '.join(missing)}: not registered yet)"
                                     if missing and k == "ours" else "")
              + ("; syscall " + ", ".join(f"{o} = {v}" for o, v in syscall_defaults().items())
                 + " (defaults)" if k == "ours" and "syscall" in workload else "")
              + ("; syscall latency_window = 1s (every call timed)"
                 if k == "ours_all" else ""))
    if "syscall" in workload:
        configs["floor"] = null_syscalls_attached
        print("floor    = two raw_syscalls programs that return at once (what any syscall"
              " sampler costs at least)")
    exe = shutil.which("bpftrace")
    tracer = Bpftrace(exe) if exe else None
    if tracer is None:
        print("bpftrace: skipped: not installed (Debian: apt-get install bpftrace)")
    else:
        configs["bpftrace"] = tracer.attached
        print("bpftrace = the run-queue latency histogram only (runqlat.bt's probes)")
        if "syscall" in workload:
            configs["bpftrace_all"] = Bpftrace(exe, BPFTRACE_SYSCALL).attached
            print("bpftrace_all = the same plus syscall counts and a syscall latency"
                  " histogram (the work of ours; classic raw_syscalls tracepoints)")
    try:
        times = slowdown(runs, groups, loops, configs)
        costs = program_costs(agents["ours"][0], tracer, groups, loops)
    finally:
        for agent, _ in agents.values():
            agent.close()
    for measure, title in (("wall", "wall time (perf's Total time)"),
                           ("cpu", "CPU time of the workload's processes (user + system)")):
        print(f"\n{title}:")
        slow = report_slowdown(times[measure])
        for k in ("ours", "ours_all"):
            if k in slow:
                goal = ""
                if "floor" in slow:
                    # The goal is the defaults'; ours_all (every call timed) is shown beside.
                    above = slow[k] - slow["floor"]
                    goal = f" ({above:+.1f} points above the floor" + (
                        f"; goal <= 3: {'met' if above <= 3 else 'NOT met'})" if k == "ours"
                        else ")")
                print(f"slowdown ({measure}): {k} {slow[k]:+.1f}%{goal}")
        if "bpftrace" in slow:
            # Each pair does the same work: ours and ours_all against bpftrace_all (the
            # run-queue histogram plus syscall counts and latency), ours_rq against runqlat.
            for k, ref in (("ours", "bpftrace_all"), ("ours_all", "bpftrace_all"),
                           ("ours_rq", "bpftrace")):
                if k in slow and ref in slow:
                    better = "no worse than" if slow[k] <= slow[ref] else "WORSE than"
                    print(f"  {k} {slow[k]:+.1f}% {better} {ref} {slow[ref]:+.1f}%")
        if "floor" in slow:
            print(f"  floor {slow['floor']:+.1f}%: two raw_syscalls programs that do nothing;"
                  " ours is " + ", ".join(f"{k} {slow[k] - slow['floor']:+.1f}"
                                          for k in ("ours", "ours_all") if k in slow)
                  + " points above it")
    if tracer is not None and tracer.counts:
        print(f"bpftrace measured {statistics.median(tracer.counts):,.0f} run-queue"
              " latencies per run (median)")
    print("\nper program, one more run with kernel.bpf_stats_enabled=1:")
    for k, progs in costs.items():
        for name, (ns, runs_) in sorted(progs.items()):
            print(f"  {k:8s} {name:24s} {runs_:>10,d} runs {ns:8.0f} ns/run")
        total = sum(ns * n for ns, n in progs.values()) / 1e6
        print(f"  {k:8s} {'all':24s} {total:17.1f} ms of BPF in the run")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="rounds of the workload")
    ap.add_argument("--groups", type=int, default=10, help="perf bench messaging -g")
    ap.add_argument("--loops", type=int, default=250, help="perf bench messaging -l")
    ap.add_argument("--seconds", type=float, default=20.0, help="each agent CPU run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("overhead.py needs root (BPF)", file=sys.stderr)
        return 1
    print(f"# BPF overhead  ({platform.node()}, Linux {platform.release()},"
          f" {os.cpu_count()} CPUs, Python {platform.python_version()})")
    for name, why in ensure_built(list(bpf_samplers())).items():
        print(f"{name:20s} not built: {why}")

    print(f"\n## workload: perf bench sched messaging -g {args.groups} -l {args.loops},"
          f" {args.runs} rounds, configurations interleaved (load average at start:"
          f" {os.getloadavg()[0]:.1f}; the machine may be shared)")
    if shutil.which("perf") is None:
        print("skipped: perf is not installed (Debian: linux-perf)")
    else:
        report_workload(args.runs, args.groups, args.loops)

    print(f"\n## agent CPU: every registered BPF sampler, driven in-process ({args.seconds:g} s"
          " each; no user_events here: fake enabled handles write to /dev/null)")
    report_agent_cpu(agent_cpu(args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
