"""The API for local agents (``rezolus_ue.subscribe``) and the one record source behind
every consumer: docs/api.md's example agent, and ``top``/``exporter --from`` on recordings.

Recordings are written with ``recording.files`` from records packed and decoded as a live
subscription delivers them; no kernel is involved (tests/kernel/test_consume.py covers
the live source).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_recorder import COMMS, LONG_CGROUP, workload

import rezolus_ue
from rezolus_ue.consume.recording import blocks as recblocks
from rezolus_ue.consume.recording import files as recfile
from rezolus_ue.consume.recording import native as recnative
from rezolus_ue.consume.records import JSON_META, Record, record_from_json
from rezolus_ue.consume.source import JsonLinesSource, RecordingSource, open_source
from rezolus_ue.consume.top import Paced
from rezolus_ue.errors import ConfigError, RezolusError
from rezolus_ue.metrics import h2
from rezolus_ue.metrics.family import histogram_records
from rezolus_ue.samplers.processes import PROCESS, PROCESSES
from rezolus_ue.schema import by_name

ROOT = Path(__file__).resolve().parent.parent
RUNQ = "rezolus_scheduler_runqueue_latency"
S = 10**9
MS = 10**6


def runq_intervals(p99_ms: list[float], t0: int = 5000 * S) -> tuple[list[Record], list]:
    """Return one publish of RUNQ per second whose p99 is about ``p99_ms[i]``, and each
    interval's counts. The first interval also fills 450 buckets, so it comes in parts."""
    sch = by_name()[RUNQ]
    out, all_counts = [], []
    for i, ms in enumerate(p99_ms):
        counts = h2.new_counts()
        h2.record(counts, [int(ms * MS)] * 1000)
        if i == 0:
            counts[:450] += 1
        all_counts.append(counts)
        for vals in histogram_records(sch, (), (i * S,), counts):
            out.append(Record(RUNQ, t0 + i * S, 1, 4242, sch.unpack(sch.pack(*vals))))
    return out, all_counts


def api_example() -> str:
    """Return docs/api.md's example agent."""
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return next(b for b in blocks if "ALERT" in b)


def test_docs_example_agent_alerts_on_a_recording(tmp_path: Path) -> None:
    # High for 2 intervals (no alert), low, then high for 4: one alert, at the third.
    recs, counts = runq_intervals([2, 2, 0.5, 2, 2, 2, 2, 0.3])
    assert max(r.fields["parts"] for r in recs) > 1  # the merge of parts is exercised
    rec = tmp_path / "rq.rzr"
    recnative.write_native(recs, rec)
    script = tmp_path / "alert.py"
    script.write_text(api_example())
    assert len(script.read_text().strip().splitlines()) <= 25
    r = subprocess.run([sys.executable, str(script), str(rec)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    p99 = h2.percentiles(counts[5], [0.99])[0]
    assert r.stdout.splitlines() == [
        f"ALERT: run-queue p99 {p99 / 1e6:.2f} ms above 1 ms for 3 intervals"], r.stdout


def test_subscribe_a_recording_keeps_fields_and_metadata_apart(tmp_path: Path) -> None:
    recs = workload(2)
    rec = tmp_path / "w.rzr"
    recnative.write_native(recs, rec)
    got = list(rezolus_ue.subscribe("rezolus_cpu_usage", source=rec))
    want = [r for r in recs if r.event == "rezolus_cpu_usage"]
    assert got == want
    # The workload writes CPU c's record on CPU c; make one where they differ.
    r = Record("rezolus_cpu_usage", 7, 3, 99, {**want[0].fields, "cpu": 1})
    assert (r["cpu"], r.meta.cpu, r.meta.pid, r.meta.time_ns) == (1, 3, 99, 7)
    d = r.to_json()
    assert (d["cpu"], d["common_cpu"], d["common_pid"]) == (1, 3, 99)
    assert record_from_json(json.loads(json.dumps(d))) == r
    with pytest.raises(KeyError):
        r["common_cpu"]  # metadata is not a field


def test_tail_json_is_to_json_with_the_wall_offset(tmp_path: Path) -> None:
    """``tail --format json`` prints ``Record.to_json(wall_offset_ns)``, which differs from
    ``to_json()`` by ``time`` alone, and JSON lines read back as the same records."""
    recs = workload(2)
    rec = tmp_path / "w.rzr"
    recnative.write_native(recs, rec, {**recfile.recording_meta(), "wall_offset_ns": 5 * S})
    p = subprocess.run([sys.executable, "-m", "rezolus_ue", "tail", "--from", str(rec),
                        "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert lines == [json.loads(json.dumps(r.to_json(5 * S))) for r in recs]
    for r, d in zip(recs, lines, strict=True):
        assert d["time"] == r.time_ns + 5 * S
        assert {k: v for k, v in d.items() if k != "time"} == json.loads(json.dumps(r.to_json()))
    jsonl = tmp_path / "w.jsonl"
    jsonl.write_text(p.stdout)
    src = JsonLinesSource(str(jsonl))
    got: list[Record] = []
    while not src.exhausted:
        got += src.poll(1000)
    src.close()
    assert got == recs


def test_processes_through_subscribe_and_tail(tmp_path: Path) -> None:
    """Both events of the processes sampler come back from a recording through
    ``subscribe`` and ``tail``: a comm not ASCII, one cut inside a character, a long
    cgroup path."""
    recs = workload(2)
    want = [r for r in recs if r.event in (PROCESS.event, PROCESSES.event)]
    assert {r.event for r in want} == {PROCESS.event, PROCESSES.event}
    rec = tmp_path / "w.rzr"
    recnative.write_native(recs, rec)
    assert list(rezolus_ue.subscribe("rezolus_process*", source=rec)) == want
    p = subprocess.run(cli("tail", "--from", str(rec), PROCESS.event, PROCESSES.event),
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == len(want)
    first = next(line for line in lines if f" {PROCESS.event}: " in line)
    assert f"pid=1000 comm={COMMS[0]} user=root cgroup={LONG_CGROUP} state=R " in first
    assert sum("comm=ab日本語プ\ufffd " in line for line in lines) == 2
    assert sum(f" {PROCESSES.event}: " in line and " published=3 " in line
               for line in lines) == 2


def test_no_event_field_takes_a_json_metadata_key() -> None:
    for sch in by_name().values():
        assert not {f.name for f in sch.fields} & set(JSON_META), sch.name


def test_subscribe_histogram_helpers(tmp_path: Path) -> None:
    recs, counts = runq_intervals([2, 0.5])
    rec = tmp_path / "rq.rzr"
    recnative.write_native(recs, rec)
    got = list(rezolus_ue.subscribe([RUNQ], source=str(rec)))
    last = got[-1].histogram()
    assert last is not None and last.sum() == 1000
    assert last.percentiles([50, 99]) == h2.percentiles(counts[1], [0.5, 0.99])
    first = [r.histogram() for r in got if r.time_ns == got[0].time_ns]
    merged = first[0]
    for h in first[1:]:
        merged = merged + h
    assert merged.percentile(99) == h2.percentiles(counts[0], [0.99])[0]
    assert got[0].fields["p99"] == merged.percentile(99)  # as the agent computed it
    assert next(r for r in workload(1)).histogram() is None


def test_subscribe_refuses_unknown_events_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no rezolus-ue event matches"):
        next(rezolus_ue.subscribe("rezolus_nonesuch", source=tmp_path / "x.rzr"))
    with pytest.raises(RezolusError, match=r"x\.rzr"):
        next(rezolus_ue.subscribe(None, source=tmp_path / "x.rzr"))


def test_recording_source_polls_in_batches_then_idles(tmp_path: Path) -> None:
    recs = workload(2)
    rec = tmp_path / "w.rzr"
    recnative.write_native(recs, rec, recblocks.recording_meta())
    with RecordingSource(rec, batch=10) as src:
        assert not src.live and src.lost == 0 and src.wall_offset_ns != 0
        got = []
        while not src.exhausted:
            got += src.poll(0)
        assert got == recs and src.poll(1) == [] and src.drain() == []
    assert isinstance(open_source(rec, ["rezolus_agent"]), RecordingSource)


def test_paced_replays_at_the_recorded_pace() -> None:
    now = [0]

    class Src:
        events = ["e"]
        exhausted = False

        def poll(self, timeout_ms: int, settle_ms: int = 0) -> list[Record]:
            self.exhausted = True
            return [Record("e", t, 0, 1, {}) for t in (100 * S, 100 * S + 5, 101 * S)]

        def close(self) -> None:
            pass

    p = Paced(Src(), clock=lambda: now[0])
    assert [r.time_ns for r in p.poll(0)] == [100 * S]
    now[0] = 5
    assert [r.time_ns for r in p.poll(0)] == [100 * S + 5] and not p.exhausted
    now[0] = S - 1
    assert p.poll(0) == []
    now[0] = S
    assert [r.time_ns for r in p.poll(0)] == [101 * S] and p.exhausted


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rezolus_ue", *args]


def test_top_once_from_a_recording(tmp_path: Path) -> None:
    rec = tmp_path / "w.rzr"
    recnative.write_native(workload(4), rec)
    env = {**os.environ, "COLUMNS": "120", "LINES": "40"}
    r = subprocess.run(cli("top", "--from", str(rec), "--once"), cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "waiting" not in r.stdout and re.search(r"\bcpu\b", r.stdout), r.stdout
    r = subprocess.run(cli("top", "--from", str(tmp_path / "none.rzr"), "--once"), cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "none.rzr" in r.stderr


def test_exporter_serves_a_recording(tmp_path: Path) -> None:
    rec = tmp_path / "w.rzr"
    recnative.write_native(workload(3), rec)
    p = subprocess.Popen(cli("exporter", "--from", str(rec), "--listen", "127.0.0.1:0"),
                         cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        m = re.search(r"http://(\S+)/metrics", line)
        assert m, line
        deadline, body = time.monotonic() + 60, ""
        while 'rezolus_cpu_usage_user_seconds_total{cpu="3"}' not in body:
            assert time.monotonic() < deadline, f"no cpu_usage series served: {body[-2000:]}"
            time.sleep(0.2)
            body = urllib.request.urlopen(f"http://{m.group(1)}/metrics", timeout=30)\
                .read().decode()
        # Staleness is judged by the recording's clock: the series stay while served.
        time.sleep(3.5)
        body = urllib.request.urlopen(f"http://{m.group(1)}/metrics", timeout=30).read().decode()
        assert 'rezolus_cpu_usage_user_seconds_total{cpu="3"}' in body
        # The busiest processes of the last interval, by pid, comm and start time.
        assert f'rezolus_process_threads{{pid="1000",comm="{COMMS[0]}",start_ns="{S}"}} 4' \
            in body
        assert "\nrezolus_processes_published 3\n" in body
    finally:
        p.send_signal(signal.SIGTERM)
        _out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
