"""``rezolus-ue top``'s processes panel, in-process: records built from the
``rezolus_process`` and ``rezolus_processes`` schemas (packed, then unpacked, as the
subscription decodes them); the expected figures are worked out by hand from them."""

from __future__ import annotations

import re

import pytest
from top_host import GiB, Host, MiB, S, text_of

from rezolus_ue.consume.records import Record
from rezolus_ue.consume.top import processes
from rezolus_ue.consume.top.frame import Model
from rezolus_ue.consume.top.keys import UiState, handle_key
from rezolus_ue.consume.top.registry import complete, new_model
from rezolus_ue.consume.top.screen import render_screen
from rezolus_ue.samplers.processes import PROCESS, PROCESSES

T0 = 1000 * S


def _record(family: object, t_ns: int, values: dict[str, object]) -> Record:
    sch = family.schema  # type: ignore[attr-defined]
    labels = {lb.name for lb in family.labels}  # type: ignore[attr-defined]
    row = [values.get(f.name, "" if f.name in labels else 0) for f in sch.fields]
    return Record(sch.name, t_ns, 0, 4242, sch.unpack(sch.pack(*row)))


def proc(t_ns: int, pid: int, **values: object) -> Record:
    """Return a ``rezolus_process`` record (fields not given: empty or 0)."""
    return _record(PROCESS, t_ns, {"pid": pid, "state": "S", "comm": f"proc{pid}",
                                   "user": "root", "threads": 1, **values})


def summary(t_ns: int, **values: object) -> Record:
    """Return a ``rezolus_processes`` record (fields not given: 0)."""
    return _record(PROCESSES, t_ns, values)


#: A database process at T0 (started 10 s after boot) and its counters one second later.
PG0 = dict(comm="postgres", user="postgres", cgroup="system.slice/postgresql.service",
           start_ns=10 * S, cpu_user_ns=50 * S, cpu_system_ns=10 * S, rss_bytes=GiB,
           io_read_bytes=100 * MiB, io_write_bytes=50 * MiB, threads=8,
           ctx_voluntary=1000, ctx_involuntary=100)
PG1 = {**PG0, "state": "R", "cpu_user_ns": 50 * S + 300_000_000,
       "cpu_system_ns": 10 * S + 100_000_000, "cpu_interval_ns": 400_000_000,
       "io_read_bytes": 104 * MiB, "io_write_bytes": 52 * MiB, "io_interval_bytes": 6 * MiB,
       "ctx_voluntary": 1500, "ctx_involuntary": 150}
SUM0 = dict(processes=300, running=3, sleeping=280, blocked=1, idle=16, threads=1200,
            forks=10_000, load_1m_milli=520, load_5m_milli=1500, load_15m_milli=12_250,
            exited_cpu_ns=5 * S, published=2)
SUM1 = {**SUM0, "forks": 10_012, "exited_cpu_ns": 5 * S + 250_000_000}


def publish(m: Model, t_ns: int, *recs: Record) -> None:
    """Feed one publish of the processes sampler, then the quiet after it."""
    m.ingest(recs)
    m.flush()


def worked() -> Model:
    """Return a model fed two publishes a second apart: postgres busy, cron idle."""
    m = new_model(1.0)
    cron = dict(comm="cron", start_ns=5 * S, rss_bytes=4 * MiB, cpu_user_ns=S)
    publish(m, T0, proc(T0, 100, **PG0), proc(T0 + 1, 200, **cron), summary(T0 + 2, **SUM0))
    publish(m, T0 + S, proc(T0 + S, 100, **PG1), proc(T0 + S + 1, 200, **cron),
            summary(T0 + S + 2, **SUM1))
    return m


def by_pid(m: Model) -> dict[int, processes.ProcessRow]:
    return {r.pid: r for r in processes.rows(m.view).rows}


def test_a_process_over_its_interval() -> None:
    m = worked()
    pg = by_pid(m)[100]
    assert (pg.comm, pg.user, pg.state, pg.cgroup) == (
        "postgres", "postgres", "R", "system.slice/postgresql.service")
    # cpu_interval_ns 400 ms over the 1 s publish period; the split from the counters.
    assert pg.cpu == pytest.approx(0.40)
    assert pg.user_cpu == pytest.approx(0.30) and pg.system_cpu == pytest.approx(0.10)
    assert pg.io_bps == pytest.approx(6 * MiB)
    assert pg.read_bps == pytest.approx(4 * MiB) and pg.write_bps == pytest.approx(2 * MiB)
    assert pg.ctxsw_s == pytest.approx(550)
    assert pg.rss_bytes == GiB and pg.threads == 8
    assert pg.age_s == pytest.approx(1001 - 10, abs=1e-6)
    assert by_pid(m)[200].cpu == 0 and by_pid(m)[200].user_cpu == 0


def test_the_summary_counts_every_process() -> None:
    s = processes.rows(worked().view).summary
    assert s is not None and s.processes == 300 and s.threads == 1200
    assert dict(s.states) == {"R": 3, "S": 280, "D": 1, "Z": 0, "T": 0, "I": 16}
    assert s.forks_s == pytest.approx(12) and s.load == (0.52, 1.5, 12.25)
    assert s.exited_cpu == pytest.approx(0.25)


def test_a_reused_pid_is_another_process() -> None:
    m = new_model(1.0)
    publish(m, T0, proc(T0, 100, **PG0))
    # pid 100 exited; a new process got the pid, started 900 s after boot: its counters
    # are its own, far below the first's, and never differenced against them.
    new = dict(comm="worker", start_ns=900 * S, cpu_user_ns=2 * S, cpu_interval_ns=S // 10,
               io_read_bytes=MiB)
    publish(m, T0 + S, proc(T0 + S, 100, **new))
    (row,) = processes.rows(m.view).rows
    assert row.comm == "worker" and row.start_ns == 900 * S
    assert m.view.resets == 0  # not a counter reset: another process
    assert row.cpu == pytest.approx(0.1)  # the interval figure is its own
    # First seen: its rates since its start, 101 s ago, and said so.
    assert row.since_start and row.age_s == pytest.approx(101)
    assert row.user_cpu == pytest.approx(2 / 101) and row.read_bps == pytest.approx(MiB / 101)
    assert row.ctxsw_s == 0
    line = next(ln for ln in render_screen(m, 160, 40, UiState()).lines
                if ln.plain.startswith("worker"))
    dim = {line.plain[sp.start : sp.end].strip() for sp in line.spans if sp.style == "dim"}
    assert {"2.0%", "10K"} <= dim  # user CPU and read bytes since its start


def test_a_state_or_name_change_is_the_same_process() -> None:
    m = new_model(1.0)
    publish(m, T0, proc(T0, 100, **{**PG0, "comm": "python"}))
    publish(m, T0 + S, proc(T0 + S, 100, **{**PG1, "comm": "python3"}))
    (row,) = processes.rows(m.view).rows
    assert row.comm == "python3" and row.state == "R"
    assert row.user_cpu == pytest.approx(0.30)


def test_a_process_started_within_the_interval_has_its_rates_since_its_start() -> None:
    m = new_model(1.0)
    publish(m, T0, proc(T0, 100, **PG0))
    young = dict(comm="make", start_ns=T0 + S // 2, cpu_user_ns=200_000_000,
                 cpu_system_ns=100_000_000, cpu_interval_ns=300_000_000,
                 io_write_bytes=MiB, ctx_voluntary=20)
    publish(m, T0 + S, proc(T0 + S, 100, **PG1), proc(T0 + S, 300, **young))
    row = by_pid(m)[300]
    assert row.age_s == pytest.approx(0.5) and row.since_start
    assert not by_pid(m)[100].since_start
    # Its counters count from its start, half a second ago.
    assert row.user_cpu == pytest.approx(0.4) and row.system_cpu == pytest.approx(0.2)
    assert row.write_bps == pytest.approx(2 * MiB) and row.ctxsw_s == pytest.approx(40)
    assert row.cpu == pytest.approx(0.3)


def test_only_the_latest_publishs_processes_show_and_one_back_has_a_rate_since() -> None:
    m = worked()
    cron = dict(comm="cron", start_ns=5 * S, rss_bytes=4 * MiB, cpu_user_ns=S)
    publish(m, T0 + 2 * S, proc(T0 + 2 * S, 200, **cron))  # postgres left the list
    assert set(by_pid(m)) == {200}
    # Back a second later, with 1 s more user CPU over the 2 s since its last record.
    back = {**PG1, "cpu_user_ns": PG1["cpu_user_ns"] + S, "cpu_interval_ns": S // 2}
    publish(m, T0 + 3 * S, proc(T0 + 3 * S, 100, **back), proc(T0 + 3 * S, 200, **cron))
    assert by_pid(m)[100].user_cpu == pytest.approx(0.5)
    assert by_pid(m)[100].cpu == pytest.approx(0.5)  # the interval's, over the period


def test_once_waits_for_the_publish_period() -> None:
    m = new_model(1.0)
    publish(m, T0, proc(T0, 100, **PG0))
    assert processes.rows(m.view).rows[0].cpu is None and not processes.complete(m.view)
    publish(m, T0 + S, proc(T0 + S, 100, **PG1))
    assert processes.complete(m.view) and complete(m.view)


def many(n: int) -> Model:
    """Return a model of ``n`` processes published twice: pid k uses k ms of CPU, has k MiB
    resident and did (n - k) KiB of IO in the interval."""
    m = new_model(1.0)
    for step in range(2):
        t = T0 + step * S
        recs = [proc(t, k, comm=f"app{k}", user="u" if k % 2 else "longusername",
                     cgroup=f"kubepods.slice/pod{k % 7}/cri-containerd-{k}.scope",
                     start_ns=S, cpu_user_ns=step * k * 1_000_000,
                     cpu_interval_ns=k * 1_000_000, rss_bytes=k * MiB,
                     io_interval_bytes=(n - k) * 1024, io_read_bytes=step * (n - k) * 1024,
                     threads=k % 50 + 1)
                for k in range(1, n + 1)]
        publish(m, t, *recs, summary(t + 1, **{**SUM0, "processes": n + 500}))
    return m


def table_rows(out: str) -> list[str]:
    """Return the process table's lines after its header."""
    lines = out.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("PROCESS"))
    return [ln for ln in lines[at + 1 :] if re.match(r"app\d+ ", ln)]


def test_sorts_by_cpu_memory_and_io_with_p_m_and_i() -> None:
    m = many(30)
    ui = UiState()
    assert table_rows(text_of(m, 120, 60, ui))[0].startswith("app30 ")  # CPU first
    ui = handle_key(ui, "I")
    out = text_of(m, 120, 60, ui)
    assert table_rows(out)[0].startswith("app1 ") and "io/s▼" in out  # IO: app1 did most
    ui = handle_key(ui, "M")
    out = text_of(m, 120, 60, ui)
    assert table_rows(out)[0].startswith("app30 ") and "rss▼" in out
    assert "sort mem" in out
    ui = handle_key(handle_key(ui, "s"), "s")  # mem -> io -> name: by pid
    assert table_rows(text_of(m, 120, 60, ui))[0].startswith("app1 ") and ui.mode.name == "name"
    assert handle_key(ui, "P").mode.name == "cpu"


def test_says_how_many_processes_it_does_not_show() -> None:
    out = text_of(many(30), 120, 60)
    shown = len(table_rows(out))
    assert f"PROCESS +{30 + 500 - shown} " in out
    assert re.search(r"Procs 530\s+state R 3 S 280 D 1 Z 0 T 0 I 16\s+threads 1\.2k", out)


def test_the_table_spans_the_screen_below_the_columns_when_wide() -> None:
    host = Host(ncpu=4, cgroups=5)
    m = new_model(1.0)
    for step in range(2):
        t = host.t
        publish(m, t, *host.records(), proc(t + 90, 100, **(PG1 if step else PG0)),
                summary(t + 91, **(SUM1 if step else SUM0)))
        host.advance()
    out = text_of(m, 160, 50)
    lines = out.split("\n")
    head = next(ln for ln in lines if ln.startswith("PROCESS"))
    assert "│" not in head and head.split()[:6] == ["PROCESS", "+299", "pid", "user", "S", "cpu%▼"]
    assert head.rstrip().endswith("cgroup")  # wide enough for every column
    row = next(ln for ln in lines if ln.startswith("postgres"))
    assert re.search(r"postgres\s+100 postgres\s+R\s+40\.0%\s+30\.0%\s+10\.0%\s+1\.0G\s+6\.0M"
                     r"\s+4\.0M\s+2\.0M\s+8\s+550\s+16m31s system\.slice/postgresql\.service",
                     row), row
    # Above it, the two columns as before.
    assert lines.index(head) > next(i for i, ln in enumerate(lines) if "│" in ln)
    # At 80 columns the table drops its least needed columns, and sits last.
    narrow = text_of(m, 80, 60)
    head = next(ln for ln in narrow.split("\n") if ln.startswith("PROCESS"))
    assert head.split()[2:] == ["pid", "user", "S", "cpu%▼", "rss", "io/s", "thr", "cs/s",
                                "age"]


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60), (40, 12)])
def test_two_thousand_processes_fit_the_screen(size: tuple[int, int]) -> None:
    w, h = size
    lines = text_of(many(2000), w, h).split("\n")[:-1]
    assert len(lines) == h and max(len(line) for line in lines) <= w


def test_filter_matches_command_user_and_cgroup() -> None:
    m = many(30)
    out = text_of(m, 120, 60, UiState(filter="containerd-17."))
    assert [r.split()[0] for r in table_rows(out)] == ["app17"]
    out = text_of(m, 120, 60, UiState(filter="longuser"))
    assert {int(r.split()[0][3:]) % 2 for r in table_rows(out)} == {0}
