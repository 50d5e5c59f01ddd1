"""Run every benchmark and write docs/PERFORMANCE.md: machine, kernel, date, each figure
with its target, and each benchmark's full output.

    sudo .venv/bin/python bench/all.py                      # full runs (~15 min)
    sudo .venv/bin/python bench/all.py --quick              # short runs, for a smoke test
    sudo .venv/bin/python bench/all.py --vm ../shared/vmkernel/bzImage
                                          # also the enabled-write cost, in a VM
    sudo .venv/bin/python bench/all.py --rezolus ../rezolus   # also BPF cost against
                                          # Rezolus's programs (a checkout; or REZOLUS_SRC)

Each benchmark runs as its own process (``bench/<name>.py``), one after the other, so
they do not disturb each other; their figures are taken from their output by the
patterns in FIGURES (a figure a benchmark did not print shows as "not measured"). The
benchmarks print and assert nothing; neither does this.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "PERFORMANCE.md"


@dataclass(frozen=True)
class Figure:
    """One figure: which benchmark prints it, the pattern capturing it, and the target."""

    bench: str
    name: str
    pattern: str
    unit: str
    target: str


#: bench/scale.py's host profiles (PROFILES there; a test checks they match).
PROFILES = ("small VM", "64-CPU database host", "128-CPU Kubernetes node")
FIGURES = (
    Figure("publish", "disabled check (enable-word read + branch)",
           r"enable-word read \(word\.value\) \+ branch\s+([\d.]+) ns", "ns", "<= 100 ns"),
    Figure("publish_vm", "enabled write / same-size writev to /dev/null (in the VM)",
           r"ratio write / devnull\s+([\d.]+) x", "x", "<= 3x"),
    Figure("collect", "agent CPU, no consumer",
           r"agent CPU, no consumer, 1 s ticks:\s+([\d.]+) %", "% of a core", "<= 0.05%"),
    Figure("collect", "agent CPU, every procfs/sysfs/perf sampler, default config, 100 ms / 1 s",
           r"100 ms sampling / 1 s publishing: ([\d.]+) %", "% of a core", "<= 1%"),
    Figure("collect", "the same with the perf counters oversampled (not the default)",
           r"oversample = true, not the default\): ([\d.]+) %", "% of a core", ""),
    Figure("collect", "the same without oversampling (1 s)",
           r"1 s publishing, no oversampling:\s+([\d.]+) %", "% of a core", ""),
    Figure("collect", "ours / prometheus-node-exporter, same collectors and rate",
           r"ratio[^\n]*?([\d.]+) ?x", "x", "<= 0.5x"),
    Figure("overhead", "perf bench sched messaging slowdown, scheduler + syscall BPF",
           r"slowdown \(cpu\): ours ([+-][\d.]+)%", "% (CPU time)", "<= floor + 3 points"),
    Figure("overhead", "the same, above the do-nothing floor measured beside it",
           r"slowdown \(cpu\): ours [+-][\d.]+% \(([+-][\d.]+) points above the floor",
           "points", "<= 3"),
    Figure("overhead", "same, every syscall timed (latency_window = 1s, no windows)",
           r"slowdown \(cpu\): ours_all ([+-][\d.]+)%", "% (CPU time)", ""),
    Figure("overhead", "bpftrace doing the same (runqlat + syscall counts + latency)",
           r"CPU time of the workload[\s\S]*?\n  ours [^\n]*? bpftrace_all ([+-][\d.]+)%",
           "% (CPU time)", "ours no worse"),
    Figure("overhead", "floor: raw_syscalls programs that return at once",
           r"CPU time of the workload[\s\S]*?\n  floor ([+-][\d.]+)%", "% (CPU time)",
           "(what any syscall sampler costs)"),
    Figure("overhead", "scheduler_runqueue alone",
           r"CPU time of the workload[\s\S]*?\n  ours_rq ([+-][\d.]+)%", "% (CPU time)",
           "no worse than bpftrace runqlat"),
    Figure("overhead", "bpftrace runqlat",
           r"CPU time of the workload[\s\S]*?\n  ours_rq [^\n]*? bpftrace ([+-][\d.]+)%",
           "% (CPU time)", ""),
    Figure("overhead", "agent CPU, every BPF sampler attached, consumer, 1 s",
           r"agent CPU, consumer, 1 s publishing:\s+([\d.]+) %", "% of a core", "<= 1%"),
    Figure("overhead", "agent CPU, BPF samplers, no consumer",
           r"agent CPU, no consumer, 1 s publishing:\s+([\d.]+) %", "% of a core",
           "<= 0.05%, 0 programs"),
    Figure("transports", "uprobe transport: disabled check (reference counter read)",
           r"uprobe disabled check\s+([\d.]+) ns", "ns", "<= 100 ns"),
    Figure("transports", "uprobe transport: enabled emit, scalar event",
           r"uprobe enabled emit, scalar event\s+([\d.]+) ns", "ns", ""),
    Figure("transports", "agent CPU, shipped config, perf consuming every event, uprobe",
           r"every event, uprobe:\s+([\d.]+) %", "% of a core", "<= 1%"),
    Figure("transports_vm", "uprobe / user_events, enabled emit, scalar (in the VM)",
           r"ratio uprobe / user_events, enabled emit, scalar event\s+([\d.]+) x", "x", ""),
    Figure("transports_vm", "uprobe / user_events, disabled check (in the VM)",
           r"ratio uprobe / user_events, disabled check\s+([\d.]+) x", "x", "~1x"),
    Figure("transports_vm", "uprobe / user_events, agent CPU, every event consumed (in the VM)",
           r"ratio agent CPU uprobe / user_events\s+([\d.]+) x", "x", ""),
    Figure("bpf_hooks", "slowest BPF hook, per run (table: every hook)",
           r"slowest hook: \S+ \S+ ([\d.]+) ns/run", "ns", ""),
    Figure("memory", "agent peak RSS (VmHWM), every BPF sampler activating",
           r"peak RSS \(VmHWM\): ([\d.]+) MB", "MB", "<= 60 MB"),
    Figure("memory", "agent steady RSS, every event enabled",
           r"steady RSS \(every event enabled[^)]*\): ([\d.]+) MB", "MB", "<= 60 MB"),
    Figure("memory_vm", "agent peak RSS (VmHWM), in the VM (user_events)",
           r"peak RSS \(VmHWM\): ([\d.]+) MB", "MB", "<= 60 MB"),
    *(Figure("memory_profiles", f"agent {what}, {label} (scale.py's fixture tree: every"
             " non-BPF, non-perf sampler, every event)",
             rf"agent {re.escape(what)}, {label}\b[^:]*: ([\d.]+) MB", "MB", "<= 60 MB")
      for label in PROFILES for what in ("peak RSS (VmHWM)", "steady RSS")),
    Figure("scale", "agent CPU, 128-CPU Kubernetes node (16 disks, 64 NICs, 500 cgroups),"
           " every non-BPF, non-perf sampler, every event, 100 ms / 1 s",
           r"agent CPU, 128-CPU Kubernetes node, 100 ms / 1 s, every event: ([\d.]+) %",
           "% of a core", "<= 2%"),
    Figure("scale", "the same with the large-host parsers as they were (same run)",
           r"agent CPU, 128-CPU Kubernetes node, paced: before ([\d.]+) %", "% of a core", ""),
    Figure("scale", "the same, 64-CPU database host (16 disks, 16 NICs, 50 cgroups)",
           r"agent CPU, 64-CPU database host, 100 ms / 1 s, every event: ([\d.]+) %",
           "% of a core", ""),
    Figure("scale", "the same, small VM (2 CPUs, 1 disk, 2 NICs, 10 cgroups)",
           r"agent CPU, small VM, 100 ms / 1 s, every event: ([\d.]+) %", "% of a core", ""),
    Figure("rezolus_compare", "messaging, Rezolus's programs for the same hooks",
           r"\nmessaging: [^\n]*?\brezolus ([+-][\d.]+)%", "% (CPU time)", ""),
    Figure("rezolus_compare", "messaging, do-nothing floor (raw_syscalls enter + exit)",
           r"\nmessaging: [^\n]*?\bfloor ([+-][\d.]+)%", "% (CPU time)", ""),
    Figure("rezolus_compare", "messaging, ours (same hooks, defaults)",
           r"\nmessaging: [^\n]*?\bours ([+-][\d.]+)%", "% (CPU time)",
           "<= floor + 3 points"),
    Figure("rezolus_compare", "messaging, ours above the floor",
           r"messaging ours above floor: ([+-][\d.]+) points", "points", "<= 3"),
    Figure("rezolus_compare", "messaging, ours timing every syscall (no windows), above the"
           " floor", r"messaging ours above floor: [^\n]*?; ours_all ([+-][\d.]+) points",
           "points", ""),
    Figure("rezolus_compare", "syscall-bound (getppid), Rezolus's programs",
           r"\nsyscall: [^\n]*?\brezolus ([+-][\d.]+)%", "% (CPU time)", ""),
    Figure("rezolus_compare", "syscall-bound (getppid), ours",
           r"\nsyscall: [^\n]*?\bours ([+-][\d.]+)%", "% (CPU time)", ""),
    Figure("rezolus_compare", "syscall-bound (getppid), floor",
           r"\nsyscall: [^\n]*?\bfloor ([+-][\d.]+)%", "% (CPU time)", ""),
    Figure("rezolus_compare", "syscall-bound (getppid), ours above the floor",
           r"syscall ours above floor: ([+-][\d.]+) points", "points", "<= 3"),
    Figure("uprobe_enable", "uprobe transport: perf record -a, every event, until it samples",
           r"rezolus_ue perf record -a, every event: sampling after ([\d.]+) s", "s", ""),
    Figure("uprobe_enable", "uprobe transport: perf record -a, every event, teardown at exit",
           r"rezolus_ue perf record -a, every event: [^\n]*?teardown ([\d.]+) s", "s", ""),
    Figure("uprobe_enable", "uprobe transport: closing one event (last CPU: RCU grace periods)",
           r"rezolus_ue per event: [^\n]*?close ([\d.]+) ms", "ms", ""),
    Figure("uprobe_enable", "the same close, a kernel tracepoint",
           r"rezolus_ue per event: [^\n]*?kernel tracepoint: [\d.]+ ms, ([\d.]+) ms", "ms", ""),
    Figure("uprobe_enable", "uprobe transport: closing every event from a thread each",
           r"rezolus_ue closing every event at once from \d+ threads: ([\d.]+) s", "s", ""),
    Figure("uprobe_enable_vm", "user_events: closing one event (in the VM)",
           r"user_events per event: [^\n]*?close ([\d.]+) ms", "ms", ""),
    # bench/top.py --against: a row per host and size, its total, then before and ratio.
    *(Figure("top", name, rf"\n\s*{host}\s+200x60\s+\d+(?:\s+[\d.]+ms){{3}}\s+{what}",
             unit, target)
      for host, label in ((r"64\s+50\s+0", "64 CPUs"),
                          (r"128\s+500\s+0", "128 CPUs, 500 cgroups"))
      for name, what, unit, target in (
          (f"top: one frame, {label}, 200x60 (ingest + render + draw)", r"([\d.]+)ms", "ms",
           "<= 20 ms" if "500" in label else "CPU share at 1 Hz = ms/10 %"),
          (f"the same, top before its split by panel ({label}, same run)",
           r"[\d.]+ms\s+[\d.]+%\s+([\d.]+)ms", "ms", ""),
          (f"the same, after / before ({label})",
           r"[\d.]+ms\s+[\d.]+%\s+[\d.]+ms\s+([\d.]+)x", "x", "<= 1x (no growth)"))),
    Figure("top", "top: one frame, 128 CPUs, 500 cgroups, 2,000 processes, 200x60",
           r"\n\s*128\s+500\s+2000\s+200x60\s+\d+(?:\s+[\d.]+ms){3}\s+([\d.]+)ms", "ms",
           "<= 20 ms"),
    Figure("processes", "processes sampler, 2,000 real processes, watched at 1 s",
           r"processes sampler, real, 2000 asked, \d+ running: ([\d.]+) %", "% of a core",
           "<= 1%"),
    Figure("processes", "the same, 20,000 real processes (or as many as fit)",
           r"processes sampler, real, 20000 asked, \d+ running: ([\d.]+) %", "% of a core",
           ""),
    Figure("processes", "the same, 2,000 processes of a fixture tree (no kernel cost)",
           r"processes sampler, fixture, 2000 processes: ([\d.]+) %", "% of a core", ""),
    Figure("processes", "processes sampler / `top -b -n 1`, 2,000 real processes",
           r"real, 2000 asked, [^\n]*?ours / top -b -n 1: ([\d.]+) x", "x", ""),
    Figure("processes", "processes sampler / `ps aux`, 2,000 real processes",
           r"real, 2000 asked, [^\n]*?ours / ps aux: ([\d.]+) x", "x", ""),
    Figure("processes", "processes sampler calls with no consumer",
           r"no consumer: (\d+) sampler calls", "calls", "0"),
    # bench/otel.py: an application's OpenTelemetry export, per data point, on this host's
    # transport (its section's first line names it).
    Figure("intervals", "tick record (rezolus_interval) per record published",
           r"tick record, enabled: [\d.]+ ns per tick, ([\d.]+) ns per record", "ns", ""),
    Figure("intervals", "agent publish tick with / without the tick record",
           r"ratio publish tick with / without the tick record: ([\d.]+) x", "x",
           "<= 1.01x"),
    Figure("otel", "OTel exporter: disabled check (exporter.enabled + branch)",
           r"disabled check \(exporter\.enabled \+ branch\): ([\d.]+) ns", "ns", "<= 100 ns"),
    Figure("otel", "OTel SDK: aggregation alone, per measurement",
           r"\naggregation alone \(record\)\s+([\d.]+)", "ns", ""),
    Figure("otel", "OTel export cycle per data point, no consumer (record + collect + check)",
           r"\nUserEventsMetricExporter\s+([\d.]+)", "ns", ""),
    Figure("otel", "the same / InMemoryMetricReader (same run)",
           r"ratio export cycle, no consumer: ours / InMemoryMetricReader\s+([\d.]+) x", "x",
           "~1x (the check adds nothing)"),
    Figure("otel", "OTel export cycle per data point, consumer (every point written)",
           r"\nUserEventsMetricExporter\s+[\d.]+\s+([\d.]+)", "ns", ""),
    Figure("otel", "the same, OTLP/HTTP to a sink on 127.0.0.1",
           r"\nOTLP/HTTP\s+[\d.]+\s+([\d.]+)", "ns", ""),
    Figure("otel", "export() alone per data point, enabled: ours / OTLP-HTTP (same run)",
           r"ratio export\(\) alone, enabled: ours / OTLP-HTTP\s+([\d.]+) x", "x", "<= 1x"),
    # bench/replay.py, parquet_size.py and view.py measure bench/hour.py's hour of every event
    # at the shipped config.
    Figure("view", "view --from: loading an hour of every event",
           r"view replay: loaded \d+ intervals in [\d.]+ s: (\d+) records/s", "records/s", ""),
    Figure("replay", "top --from: replay of an hour of every event, as fast as it can",
           r"top --from, as fast as it can: (\d+) records/s", "records/s", ""),
    Figure("replay", "top --from: the hour's index in memory (compressed)",
           r"top --from index: ([\d.]+) MiB", "MiB", ""),
    Figure("replay", "top --from: seek 30 min back",
           r"top --from seek 30 min back: ([\d.]+) ms", "ms", ""),
    Figure("replay", "tail --from: an hour of every event, printed",
           r"tail --from: (\d+) records/s", "records/s", ""),
    Figure("parquet_size", "Parquet recording per hour of every event",
           r"parquet size per hour: ([\d.]+) MiB", "MiB", ""),
    Figure("parquet_size", "native .rzr recording per hour of every event",
           r"native \.rzr size per hour: ([\d.]+) MiB", "MiB", ""),
    Figure("parquet_size", "Parquet / native .rzr", r"parquet / native: ([\d.]+)x", "x", ""),
    *(Figure("parquet_size", f"Rezolus's recorder, {fmt} per hour at 1 s (its maintainers'"
             " 32-core host, not these events)",
             rf"Rezolus recorder size per hour[^:\n]*:[^\n]*?{re.escape(fmt)} ([\d.]+) MB", "MB",
             "") for fmt in ("Parquet", ".rez")),
    Figure("view", "view following the live agent, one page open, 1 s publishes",
           r"one page open, 1 s publishes, \d+ s \(\d+ intervals\): ([\d.]+) %", "% of a core",
           "<= 1%"),
)


def commands(quick: bool, vm: str | None, rezolus: str | None = None) -> dict[str, list[str]]:
    """Return each benchmark's command line (``rezolus``: a Rezolus source checkout; without
    one, rezolus_compare prints one line saying it skipped)."""
    py = sys.executable
    hour = ["--seconds", "5", "--hour", "300"] if quick else []
    return {
        # The disabled check is a host figure (the VM emulates its CPU: ~26x slower); the
        # enabled write needs user_events, so the VM (its ratio to writev is what counts).
        "publish": [py, "bench/publish.py", "-n", "20000" if quick else "200000"],
        "collect": [py, "bench/collect.py", "--seconds", "2" if quick else "20"],
        "overhead": [py, "bench/overhead.py", *(["--runs", "2", "--groups", "2", "--loops",
                                                  "20", "--seconds", "2"] if quick else [])],
        "memory": [py, "bench/memory.py", *(["--quick"] if quick else [])],
        "memory_profiles": [py, "bench/memory.py", "--profiles", *(["--quick"] if quick else [])],
        "top": [py, "bench/top.py", *(["--frames", "3", "--rounds", "1"] if quick else []),
                "--against"],
        "processes": [py, "bench/processes.py", *(["--quick"] if quick else [])],
        "scale": [py, "bench/scale.py", *(["--quick"] if quick else [])],
        "bpf_hooks": [py, "bench/bpf_hooks.py", "--seconds", "3" if quick else "20"],
        "rezolus_compare": [py, "bench/rezolus_compare.py", *(["--quick"] if quick else []),
                            *(["--rezolus", rezolus] if rezolus else [])],
        "transports": [py, "bench/transports.py", *(["-n", "20000", "--seconds", "3",
                                                      "--rounds", "1"] if quick else [])],
        "uprobe_enable": [py, "bench/uprobe_enable.py", *(["--rounds", "1"] if quick else [])],
        "intervals": [py, "bench/intervals.py", *(["-n", "20", "--calls", "10000"] if quick
                                                  else [])],
        "otel": [py, "bench/otel.py", *(["--series", "20", "-n", "3", "--rounds", "3"] if quick
                                        else [])],
        # Each makes bench/hour.py's hour (quick: five minutes from 5 s).
        "replay": [py, "bench/replay.py", *hour],
        "parquet_size": [py, "bench/parquet_size.py", *hour],
        "view": [py, "bench/view.py", *hour, "--live", *(["--follow", "5"] if quick else [])],
        # Last: its emulated CPU loads the machine long after it exits.
        **({"publish_vm": [py, "bench/publish.py", "-n", "20000" if quick else "200000",
                           "--vm", vm],
            "memory_vm": [py, "bench/memory.py", "--vm", vm, *(["--quick"] if quick else [])],
            "uprobe_enable_vm": [py, "bench/uprobe_enable.py", "--vm", vm, "--rounds", "1"],
            "transports_vm": [py, "bench/transports.py", "--vm", vm,
                              *(["-n", "20000", "--seconds", "5", "--rounds", "1"] if quick
                                else ["--seconds", "30"])]} if vm else {}),
    }


def machine(load_before: tuple[float, float, float]) -> list[str]:
    """Return the header lines: machine, kernel, CPUs, date, the load average at start."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [
        f"- machine: `{platform.node()}`, {os.cpu_count()} CPUs ({model})",
        f"- kernel: Linux {platform.release()} ({platform.machine()})",
        f"- Python {platform.python_version()}",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- load average before: {' '.join(f'{x:.2f}' for x in load_before)}",
    ]


def extract(outputs: dict[str, str]) -> list[tuple[Figure, str]]:
    """Return every figure with its value (or why not) from the benchmarks' outputs."""
    rows = []
    for f in FIGURES:
        out = outputs.get(f.bench)
        if out is None:
            rows.append((f, "not run (needs --vm BZIMAGE)" if f.bench.endswith("_vm")
                         else "not run"))
            continue
        m = re.search(f.pattern, out)
        skipped = re.search(rf"^{f.bench}: (skipped: .*)$", out, re.M)
        rows.append((f, f"{m.group(1)} {f.unit}" if m else skipped.group(1) if skipped
                     else "not measured"))
    return rows


def render(outputs: dict[str, str], seconds: dict[str, float], argv: list[str],
           load_before: tuple[float, float, float],
           kept: dict[str, tuple[str, str]] | None = None,
           loads: dict[str, float] | None = None) -> str:
    """Return docs/PERFORMANCE.md: ``outputs`` just measured, and ``kept`` (name: heading,
    output) from the previous file for benchmarks this run did not repeat. Each section's
    heading says when it ran and the load average it started at (``loads``), so a file
    assembled from several ``--only`` runs says where each figure comes from."""
    kept = {k: v for k, v in (kept or {}).items() if k not in outputs}
    lines = ["# Performance", "",
             "<!-- Written by `bench/all.py`; rerun it rather than editing. -->", "",
             f"Command: `{' '.join(['bench/all.py', *argv])}`", "", *machine(load_before), ""]
    if kept:
        lines += [f"Kept from an earlier run (not repeated by this command, each heading says"
                  f" when): {', '.join(kept)}.", ""]
    lines += ["| benchmark | figure | measured | target |", "|---|---|---|---|"]
    every = {**{k: out for k, (_h, out) in kept.items()}, **outputs}
    for f, value in extract(every):
        lines.append(f"| {f.bench} | {f.name} | {value} | {f.target} |")
    lines += ["", "One run on a shared, noisy machine: compare figures taken in the same run,"
              " and rerun before drawing conclusions.", ""]
    today = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}"
    loads = loads or {}
    sections = {name: (f"{name} ({seconds[name]:.0f} s, {today}"
                       + (f", load {loads[name]:.2f} at start" if name in loads else "")
                       + ")", out)
                for name, out in outputs.items()}
    for name in commands(False, "vm", "rezolus"):  # one order, whichever run wrote a section
        heading, out = sections.get(name) or kept.get(name) or ("", "")
        if heading:
            lines += [f"## {heading}", "", "```", out.rstrip(), "```", ""]
    return "\n".join(lines)


def sections(text: str) -> dict[str, tuple[str, str]]:
    """Return each benchmark's (heading, output) from a PERFORMANCE.md ``render`` wrote."""
    date = re.search(r"^- date: (\d{4}-\d\d-\d\d)", text, re.M)
    out = {}
    for m in re.finditer(r"^## ((\w+) \(([^)\n]*)\))\n\n```\n(.*?)\n```$", text,
                         re.M | re.S):
        heading = m.group(1)
        if date and not re.search(r"\d{4}-\d\d-\d\d", m.group(3)):  # the file's date
            heading = f"{m.group(2)} ({m.group(3)}, {date.group(1)})"
        out[m.group(2)] = (heading, m.group(4))
    return out


def settle(below: float = 1.0, most_s: float = 120.0) -> float:
    """Wait (at most ``most_s``) for the 1-minute load average to fall below ``below``, so
    one benchmark's tail (the VM, the workload's 400 tasks) does not land in the next's
    figures; return the seconds waited."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= below and time.monotonic() - t0 < most_s:
        time.sleep(5)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs (figures are rough)")
    ap.add_argument("--vm", metavar="BZIMAGE", help="measure the enabled write in this VM")
    ap.add_argument("--rezolus", metavar="PATH", default=os.environ.get("REZOLUS_SRC"),
                    help="a Rezolus source checkout, for rezolus_compare (default:"
                         " $REZOLUS_SRC; without one it is skipped)")
    ap.add_argument("--only", action="append", metavar="BENCH",
                    help="run only this benchmark (repeatable); the others' sections are"
                    " kept from the existing file")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = ap.parse_args()
    outputs: dict[str, str] = {}
    seconds: dict[str, float] = {}
    loads: dict[str, float] = {}
    load_before = os.getloadavg()
    for name, cmd in commands(args.quick, args.vm, args.rezolus).items():
        if args.only and name not in args.only:
            continue
        waited = settle()
        loads[name] = os.getloadavg()[0]
        print(f"== {name}: {' '.join(cmd[1:])} (after {waited:.0f} s for the load average"
              f" to settle: {os.getloadavg()[0]:.2f})", flush=True)
        t0 = time.monotonic()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        seconds[name] = time.monotonic() - t0
        outputs[name] = p.stdout + (f"\n[stderr]\n{p.stderr}" if p.returncode else "")
        print(p.stdout, flush=True)
    # With --only, the other benchmarks' sections stay as the last full run wrote them.
    kept = sections(args.out.read_text()) if args.only and args.out.exists() else {}
    text = render(outputs, seconds, sys.argv[1:], load_before, kept, loads)
    args.out.write_text(text)
    for f, value in extract(outputs):
        print(f"{f.name:70s} {value:>22s}   target {f.target}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
