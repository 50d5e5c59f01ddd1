"""The benchmarks still run: each one's pieces, with tiny counts (figures not checked)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name: str):  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:  # run as scripts, the benchmarks import each other
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_publish_disabled_check_runs() -> None:
    figures = load("publish").bench_disabled(1000)
    assert set(figures) >= {"empty loop iteration"}


def test_publish_payload_matches_the_schema() -> None:
    from rezolus_ue.schema import CPU_USAGE

    # bench_enabled writes this payload; it must follow the schema as it changes.
    assert CPU_USAGE.unpack(load("publish").sample_payload(3))["cpu"] == 3


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="samplers read root-only files (perf, BPF)")
def test_collect_builds_and_refreshes_every_sampler() -> None:
    collect = load("collect")
    agent, skipped = collect.build_agent(None)
    try:
        costs = collect.refresh_costs(agent, n=10)
        assert set(costs) | set(skipped) == set(collect.REGISTRY)
    finally:
        agent.close()


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="BPF needs root")
def test_overhead_runs_every_configuration() -> None:
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (Debian: linux-perf)")
    ov = load("overhead")
    agent, _skipped = ov.build_agent(tuple(n for n in ov.WORKLOAD_SAMPLERS
                                           if n in ov.bpf_samplers()))
    configs = {"none": contextlib.nullcontext, "ours": lambda: ov.ours_attached(agent)}
    tracer = ov.Bpftrace(shutil.which("bpftrace")) if shutil.which("bpftrace") else None
    if tracer is not None:
        configs["bpftrace"] = tracer.attached
    try:
        times = ov.slowdown(1, 1, 5, configs)["wall"]
        costs = ov.program_costs(agent, tracer, 1, 5)
    finally:
        agent.close()
    assert set(ov.report_slowdown(times)) == set(configs) - {"none"}
    assert costs["ours"], "none of our programs ran"
    if tracer is not None:
        assert tracer.counts and tracer.counts[0] > 0, "bpftrace measured nothing"
        assert costs["bpftrace"]
    res = ov.agent_cpu(0.2)
    assert set(res.samplers) | set(res.unavailable) == set(ov.bpf_samplers())
    ov.report_agent_cpu(res)


def test_scale_runs_every_sampler_on_a_small_synthetic_host() -> None:
    scale = load("scale")
    host = scale.Host(cpus=4, disks=2, nics=3, cgroups=12)
    with scale.tree(host) as t:
        for name in scale.SAMPLERS:
            assert scale.per_second(name, t, 1) > 0, name
        for name in scale.FIXED_SAMPLERS:
            with scale.old_code(True):
                assert scale.per_second(name, t, 1, before=True) > 0, name
        assert scale.paced(t, 1.0) > 0
    slope, exponent = scale.fit([1, 2, 4], [1.0, 2.0, 4.0])
    assert round(slope, 6) == 1.0 and round(exponent, 6) == 1.0


def test_scale_fixtures_read_as_the_samplers_expect() -> None:
    """The synthetic files take the samplers' fast paths, as the kernel's would."""
    from rezolus_ue.samplers.cpu_interrupts.sampler import InterruptsReader, parse_interrupts
    from rezolus_ue.samplers.cpu_usage.sampler import CpuTimes

    scale = load("scale")
    host = scale.Host(cpus=32)
    reader, times = InterruptsReader(), CpuTimes(10_000_000)
    for k in range(3):
        data = scale.proc_interrupts(host, k)
        assert reader.read(data) == parse_interrupts(data)
        times.rows(scale.proc_stat(host, k))
    assert reader._plan is not None and times._last is not None


def test_uprobe_enable_reports_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    ue = load("uprobe_enable")
    ph = ue.Phases(first_open=[2e-5], other_open=[1e-5], enable=[3e-5], close_other=[4e-5],
                   close_last=[0.08], close=[0.08], add_total=[7e-5])
    r = ue.Result("rezolus_ue", 52, 2, 1, "xfs",
                  perf={1: [(0.1, 1.0, 1.1)], 52: [(0.2, 4.8, 5.0)]},
                  perf_base={1: [(0.1, 1.0, 1.1)], 52: [(0.2, 2.3, 2.5)]},
                  rings={1: [(0.005, 0.07)], 52: [(0.01, 4.2)]},
                  rings_base={1: [(0.001, 0.04)], 52: [(0.01, 2.0)]},
                  phases=ph, phases_base=ph, threaded_close=[4.3])
    ue.report(r)
    out = capsys.readouterr().out
    assert "rezolus_ue per event: open + enable 0.07 ms, close 80.00 ms" in out
    assert "rezolus_ue perf record -a, every event: sampling after 0.20 s, teardown 4.80 s" in out
    assert "2.0x" in out  # perf record, every event: ours / the kernel tracepoints'
    assert ("rezolus_ue closing every event at once from 52 threads: 4.30 s (one by one:"
            " 4.20 s)") in out


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="perf_event_open on tracepoints (root)")
def test_uprobe_enable_times_kernel_tracepoints() -> None:
    """The baseline half of bench/uprobe_enable.py, which needs no agent."""
    from rezolus_ue.linux.perf_ring import TracepointRings
    from tracefs_tools import Tracefs, find_tracefs

    ue = load("uprobe_enable")
    tfs = Tracefs(find_tracefs(mount=True))
    base = ue.baseline(tfs, 2)
    if base is None:
        pytest.skip("no baseline tracepoint group in this kernel")
    ids = [tfs.event_id(*name.split(":", 1)) for name in base[1]]
    ph = ue.Phases()
    with TracepointRings(ring_pages=1) as rings:
        ue.open_all(rings, ids, ph)
        assert rings.tracepoints == []  # open_all closed what it opened
    assert len(ph.first_open) == len(ph.close_last) == len(ph.close) == 2
    assert len(ph.other_open) == len(ph.close_other) == 2 * (len(rings.cpus) - 1)
    assert ue.close_threaded(ids) > 0
    if shutil.which("perf") is not None:
        sampling, teardown, total = ue.perf_record(base[1][:1])
        assert 0 < sampling < total and 0 < teardown < total


def test_all_extracts_figures_and_renders_the_table() -> None:
    all_ = load("all")
    outputs = {
        "publish": "enable-word read (word.value) + branch     35.2 ns\n",
        "publish_vm": "enable-word read (word.value) + branch    996.6 ns\n"
                      "ratio write / devnull                        1.95 x   (target <= 3x)\n",
        "top": "# before (REV) / after (this tree), the fastest of 5 alternated rounds\n"
               "   64      50     0  200x60      900   1.00ms   2.00ms   3.00ms   6.00ms     0.60%"
               "    6.60ms   0.91x\n"
               "  128     500     0  200x60     1800   2.00ms   3.00ms   4.00ms   9.00ms     0.90%"
               "    9.00ms   1.00x\n"
               "  128     500  2000  200x60     3800   9.00ms   3.00ms   1.00ms  13.00ms     1.30%"
               "         -      -\n",
        "overhead": "CPU time of the workload's processes (user + system):\n"
                    "slowdown (cpu): ours +12.4% (+0.3 points above the floor; goal <= 3: met)\n",
    }
    rows = {f.name: v for f, v in all_.extract(outputs)}
    assert rows["disabled check (enable-word read + branch)"] == "35.2 ns"
    assert rows["enabled write / same-size writev to /dev/null (in the VM)"] == "1.95 x"
    assert rows["top: one frame, 64 CPUs, 200x60 (ingest + render + draw)"] == "6.00 ms"
    assert rows["the same, after / before (64 CPUs)"] == "0.91 x"
    assert rows["top: one frame, 128 CPUs, 500 cgroups, 200x60 (ingest + render + draw)"] == \
        "9.00 ms"
    assert rows["the same, top before its split by panel (128 CPUs, 500 cgroups, same run)"] \
        == "9.00 ms"
    assert rows["top: one frame, 128 CPUs, 500 cgroups, 2,000 processes, 200x60"] == "13.00 ms"
    assert rows["agent CPU, no consumer"] == "not run"
    assert rows["the same, above the do-nothing floor measured beside it"] == "+0.3 points"
    no_vm = {f.name: v for f, v in all_.extract({"publish": outputs["publish"]})}
    assert no_vm["enabled write / same-size writev to /dev/null (in the VM)"] == (
        "not run (needs --vm BZIMAGE)")
    text = all_.render(outputs, {"publish": 1.0, "publish_vm": 9.0, "top": 2.0, "overhead": 3.0},
                       ["--quick"],
                       (0.5, 0.25, 0.125))
    assert "| publish | disabled check (enable-word read + branch) | 35.2 ns | <= 100 ns |" in text
    assert "Linux" in text and "## top (2 s, " in text
    assert "- load average before: 0.50 0.25 0.12" in text  # taken at the start, passed in


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="runs the agent (root)")
def test_memory_runs_the_agent_through_its_phases() -> None:
    """bench/memory.py starts the installed CLI, subscribes to every event, and prints the
    figures bench/all.py extracts (root: the agent)."""
    out = subprocess.run([sys.executable, str(BENCH / "memory.py"), "--quick"],
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {f.name: v for f, v in load("all").extract({"memory": out.stdout})
            if f.bench == "memory"}
    assert rows and all(v.endswith(" MB") for v in rows.values()), (rows, out.stdout)


def test_memory_profiles_measures_the_agent_in_a_process_of_its_own(
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench/memory.py --profiles: a fresh process paces scale.py's agent on a tree this
    process steps after every tick; it prints the figures bench/all.py extracts."""
    all_, memory, scale = load("all"), load("memory"), load("scale")
    assert tuple(scale.PROFILES) == all_.PROFILES
    host = scale.Host(cpus=4, disks=2, nics=3, cgroups=12)
    with scale.tree(host) as t:
        r = memory.run_profile(t, 1.0)
        assert t._k >= scale.PUBLISH_EVERY  # the counters moved, by this process
    assert r["reset"], "VmHWM was not reset by /proc/self/clear_refs"
    assert r["peak"] >= r["steady"] > 0 and r["peak"] >= r["before"] > 0
    memory.report(all_.PROFILES[-1], host, r, 1.0)
    rows = {f.name: v for f, v in all_.extract({"memory_profiles": capsys.readouterr().out})
            if f.bench == "memory_profiles"}
    assert sum(v.endswith(" MB") for v in rows.values()) == 2, rows


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="a consumer enables otlp_metrics (root)")
def test_otel_times_every_configuration_with_and_without_a_consumer() -> None:
    """bench/otel.py times each exporter with no consumer and with one, and prints every
    figure bench/all.py extracts."""
    out = subprocess.run([sys.executable, str(BENCH / "otel.py"), "--series", "3", "-n", "1",
                          "--rounds", "1"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {f.name: v for f, v in load("all").extract({"otel": out.stdout}) if f.bench == "otel"}
    assert rows and all(v.endswith((" ns", " x")) for v in rows.values()), (rows, out.stdout)
    assert re.search(r"records written with the consumer: [1-9]\d*, dropped: 0", out.stdout)


def test_top_times_a_frame_with_every_panel() -> None:
    top = load("top")
    r = top.bench(4, 200, 60, 2, ncgroups=5, nprocs=30)
    assert r["records"] > 30 and r["ingest"] > 0 and r["render"] > 0 and r["draw"] > 0


def test_all_only_keeps_the_other_benchmarks_sections() -> None:
    """`bench/all.py --only X` rewrites X's section and keeps the others, dated."""
    all_ = load("all")
    first = all_.render({"publish": "a\nb", "top": "t"}, {"publish": 1.0, "top": 2.0}, [],
                        (0.0, 0.0, 0.0))
    kept = all_.sections(first)
    assert kept["top"][1] == "t" and kept["publish"][1] == "a\nb"
    second = all_.render({"publish": "new"}, {"publish": 3.0}, ["--only", "publish"],
                         (0.0, 0.0, 0.0), kept)
    again = all_.sections(second)
    assert again["publish"][1] == "new" and again["top"] == kept["top"]
    assert "Kept from an earlier run" in second and "top" in second.split("Kept", 1)[1]


def test_rezolus_compare_skips_without_a_checkout(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("REZOLUS_SRC", raising=False)
    assert load("rezolus_compare").main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "skipped" in out
    rows = {f.name: v for f, v in load("all").extract({"rezolus_compare": out})}
    assert rows["messaging, ours above the floor"].startswith("skipped: no Rezolus checkout")


def test_all_extracts_the_rezolus_comparison() -> None:
    out = ("\nmessaging: CPU time of the workload's processes (user + system):\n"
           "summary: slowdown vs none (median of rounds, workload CPU time)\n"
           "messaging: floor +10.0%, floor1 +5.0%, rezolus +45.2%, ours +24.0%,"
           " ours_all +30.0%, ours_s16 +19.0%\n"
           "  messaging ours above floor: +14.0 points (goal <= 3: NOT met); ours_all +20.0"
           " points; ours_s16 +9.0 points\n"
           "syscall: floor +90.8%, floor1 +59.0%, rezolus +378.7%, ours +163.9%,"
           " ours_s16 +124.8%\n"
           "  syscall ours above floor: +73.1 points (goal <= 3: NOT met)\n")
    rows = {f.name: v for f, v in load("all").extract({"rezolus_compare": out})
            if f.bench == "rezolus_compare"}
    assert rows == {
        "messaging, Rezolus's programs for the same hooks": "+45.2 % (CPU time)",
        "messaging, do-nothing floor (raw_syscalls enter + exit)": "+10.0 % (CPU time)",
        "messaging, ours (same hooks, defaults)": "+24.0 % (CPU time)",
        "messaging, ours above the floor": "+14.0 points",
        "messaging, ours timing every syscall (no windows), above the floor": "+20.0 points",
        "syscall-bound (getppid), Rezolus's programs": "+378.7 % (CPU time)",
        "syscall-bound (getppid), ours": "+163.9 % (CPU time)",
        "syscall-bound (getppid), floor": "+90.8 % (CPU time)",
        "syscall-bound (getppid), ours above the floor": "+73.1 points",
    }


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="BPF needs root")
def test_rezolus_compare_builds_loads_and_measures() -> None:
    checkout = os.environ.get("REZOLUS_SRC")
    if not checkout:
        pytest.skip("no Rezolus checkout (set REZOLUS_SRC)")
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (Debian: linux-perf)")
    rc = load("rezolus_compare")
    objects, failed = rc.build_rezolus(Path(checkout))
    assert objects, f"nothing of Rezolus built: {failed}"
    rz = rc.RezolusPrograms.load(objects)
    try:
        assert any(k.startswith("syscall_counts/") for k in rz.programs), rz.left_out
        lut = next(o for o in rz.objects if "syscall_lut" in o.maps).maps["syscall_lut"]
        with lut.mmap() as m:
            assert any(m[:8 * 1024]), "syscall_lut not filled"
        work = rc.workloads(rc.Sizes(1, 5, 1000, 16), None)
        configs = {"none": contextlib.nullcontext, "floor1": rc.null_exit_attached,
                   "rezolus": rz.attached}
        times = rc.rounds(1, work, configs)
        assert set(times) == {"messaging", "syscall"}
        costs = rc.program_costs({"syscall": work["syscall"]},
                                 {"rezolus": (rz.attached, lambda: set(rz.labels()))},
                                 rz.labels())
    finally:
        rz.close()
    assert costs["rezolus"]["syscall_counts/sys_enter"][0] >= 1000
    rc.report(times, ("ours_all", "ours_s16"))


def test_processes_bench_tree_is_read_whole_by_the_sampler() -> None:
    """bench/processes.py's tree is read whole by the sampler: every process counted, the
    busy ones (whose counters move) first by CPU; with no consumer it is never called."""
    from rezolus_ue.samplers.processes import PROCESS, PROCESSES

    bench = load("processes")
    with bench.tree(60) as t:
        s = bench.start(t.procfs)
        try:
            costs = bench.interval_costs(s, 2, 0.0, t.step)
            t.step()
            s.sample(1, True)
            rows = s.parse(s.capture())
        finally:
            s.close()
    assert len(costs) == 2 and all(c.capture > 0 for c in costs)
    assert rows[PROCESSES][()][0] == 60  # processes
    busy = {k[0] for k, v in rows[PROCESS].items() if v[PROCESS.slot("cpu_interval_ns")]}
    assert busy == set(t.pids[::bench.BUSY])
    assert bench.no_consumer(3)[0] == 0


def _short_recording(path: Path, ticks: int) -> None:
    """Write a short recording as the recorder would: bench/top.py's host publishing at 1 s,
    each tick ended by its tick record, the first tick joined mid-way."""
    from rezolus_ue.consume.intervals import EVENT
    from rezolus_ue.consume.recording import write_recording
    from rezolus_ue.consume.records import Record

    top = load("top")
    records = []
    for i in range(1, ticks + 1):
        tick = top.tick(2, i, 2, 3)
        records += tick[len(tick) // 2:] if i == 1 else tick
        records.append(Record(EVENT, i * 10**9 + 1000, 0, 1,
                              {"seq": i, "interval_ns": 10**9, "records": len(tick)}))
    write_recording(records, path, "native", {"wall_offset_ns": 0})


def test_hour_repeats_the_whole_intervals_with_their_tick_records(tmp_path: Path) -> None:
    """bench/hour.py fills the hour with the short recording's whole intervals (not the
    first, joined mid-tick), each closed by a tick record, in time order."""
    from rezolus_ue.consume.intervals import split
    from rezolus_ue.consume.recording import read_records

    hour = load("hour")
    _short_recording(tmp_path / "short.rzr", 4)
    records, intervals = hour.hour_recording(tmp_path / "short.rzr", tmp_path / "hour.rzr", 10)
    ivs = list(split(read_records(tmp_path / "hour.rzr")))
    assert intervals == len(ivs) == 10 and records == sum(len(iv.records) + 1 for iv in ivs)
    assert all(iv.exact and iv.written == len(iv.records) for iv in ivs)
    assert [iv.seq for iv in ivs] == list(range(10))
    assert {len(iv.records) for iv in ivs} == {len(load("top").tick(2, 1, 2, 3))}
    ends = [iv.end_ns for iv in ivs]
    assert ends == sorted(ends) and len(set(ends)) == 10


@pytest.mark.parametrize("bench", ["replay", "parquet_size", "view"])
def test_hour_benchmarks_print_every_figure_all_extracts(bench: str, tmp_path: Path) -> None:
    """replay, parquet_size and view, from a short recording (no agent), print every figure
    bench/all.py takes from them (view's live figure needs the agent: not here)."""
    _short_recording(tmp_path / "short.rzr", 4)
    out = subprocess.run([sys.executable, str(BENCH / f"{bench}.py"), "--from",
                          str(tmp_path / "short.rzr"), "--hour", "20"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {f.name: v for f, v in load("all").extract({bench: out.stdout})
            if f.bench == bench and "live agent" not in f.name}
    assert rows and "not measured" not in rows.values(), (rows, out.stdout)
