"""Parquet recordings: Rezolus's viewer's rules checked with pyarrow alone, our readers
reading back ours (exactly) and Rezolus's (by the name mapping), the previous form."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_recorder import PROCESS, by_event, workload

from rezolus_ue.consume.recording import files as recfile
from rezolus_ue.consume.recording import parquet as recparquet
from rezolus_ue.consume.recording import read_meta, read_records
from rezolus_ue.consume.recording import rezolus_names as names
from rezolus_ue.metrics import h2
from rezolus_ue.metrics.family import Kind

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

#: Rezolus's metadata keys that are not labels (metriken-query's schema parser).
NOT_LABELS = {"metric", "metric_type", "unit", "grouping_power", "max_value_power"}


def check_rezolus_rules(path: Path) -> dict[str, list[dict[str, str]]]:
    """Check with pyarrow alone every rule Rezolus's viewer relies on; return each metric's
    label sets."""
    f = pq.ParquetFile(path)
    kv = {k.decode(): v.decode() for k, v in f.schema_arrow.metadata.items()}
    assert kv["source"] == "rezolus"
    assert int(kv["sampling_interval_ms"]) >= 1 and kv["sampling_interval_ms"].isdigit()
    assert kv["version"].startswith("rezolus-ue")
    json.loads(kv["descriptions"])
    assert all(f.metadata.row_group(i).num_rows <= 1800
               for i in range(f.metadata.num_row_groups))
    t = f.read()
    ts = t.schema.field("timestamp")
    assert ts.type == pa.uint64() and not ts.nullable
    times = t.column("timestamp").to_pylist()
    assert times == sorted(times) and len(set(times)) == len(times)
    assert all(1.5e18 < x < 4e18 for x in times)  # Unix ns
    series: dict[str, list[dict[str, str]]] = {}
    for field in t.schema:
        if field.name == "timestamp":
            continue
        meta = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
        if field.type == pa.binary():  # our records: a type the viewer skips
            assert field.name == kv["rezolus_ue.records"] and not meta
            continue
        kind = meta["metric_type"]
        want = {"counter": pa.uint64(), "gauge": pa.int64(),
                "histogram": pa.list_(pa.uint64())}[kind]
        assert field.type == want, field.name
        labels = {k: v for k, v in meta.items() if k not in NOT_LABELS}
        series.setdefault(meta["metric"], []).append(labels)
        if kind == "histogram":
            assert field.name.endswith(":buckets")
            assert (int(meta["grouping_power"]), int(meta["max_value_power"])) == (3, 64)
            rows = [r for r in t.column(field.name).to_pylist() if r is not None]
            assert rows and all(len(r) == h2.BUCKETS for r in rows)
            arr = np.array(rows, dtype=np.uint64)
            assert (np.diff(arr.astype(np.int64), axis=0) >= 0).all()  # cumulative
    assert len({tuple(sorted(x.items())) for v in series.values() for x in v}) <= \
        sum(len(v) for v in series.values())
    return series


def test_rules_hold_on_synthetic_records(tmp_path: Path) -> None:
    recs = workload(5)
    out = tmp_path / "run.parquet"
    recfile.write_recording(recs, out, "parquet")
    series = check_rezolus_rules(out)
    assert {"id": "0", "state": "user"} in series["cpu_usage"]
    assert not any("state" in x and x["state"] in ("idle", "iowait")
                   for x in series["cpu_usage"])  # the dashboards sum cpu_usage as busy
    assert list(read_records(out)) == recs
    assert read_meta(out)["format"] == "rezolus-ue recording"


def test_the_mapping_names_real_metrics_once() -> None:
    fams = names.families()
    seen = set()
    for event, metrics in names.MAPPING.items():
        declared = {m.name: m for m in fams[event].metrics}
        for ours, n in metrics.items():
            assert ours in declared, f"{event}.{ours}"
            key = (n.metric, n.labels, tuple(lb.name for lb in fams[event].labels))
            assert key not in seen, key
            seen.add(key)
    assert len(names.reverse()) == sum(len(f.metrics) for f in fams.values())
    assert "| `rezolus_cpu_usage.user_ns` | `cpu_usage` | state=user, id | counter |" in \
        names.mapping_table()


def test_every_metric_rezolus_dashboards_chart_is_written_or_said_missing() -> None:
    """Rezolus's built-in dashboards chart what a file has under their metric names: each
    metric their queries name is in the mapping or declared not collected, with why, and
    the declaration names nothing they do not chart."""
    fixture = Path(__file__).parent / "fixtures" / "rezolus" / "dashboard-metrics.txt"
    charted: dict[str, set[str]] = {}
    for line in fixture.read_text().splitlines():
        if line and not line.startswith("#"):
            dashboard, _, metrics = line.partition(":")
            for m in metrics.split():
                charted.setdefault(m, set()).add(dashboard)
    written = {n.metric for ms in names.MAPPING.values() for n in ms.values()}
    unaccounted = sorted(set(charted) - written - set(names.NOT_COLLECTED))
    assert not unaccounted, f"charted by Rezolus, neither mapped nor declared: {unaccounted}"
    assert not set(names.NOT_COLLECTED) & written
    assert set(names.NOT_COLLECTED) <= set(charted), set(names.NOT_COLLECTED) - set(charted)
    # The overview, CPU, memory, scheduler, syscall, softirq and block IO dashboards'
    # metrics are all written; only hardware and GPU telemetry stay out elsewhere.
    for dashboard in ("overview", "memory", "scheduler", "syscall", "softirq", "blockio",
                      "network"):
        missing = [m for m, ds in charted.items() if dashboard in ds and m not in written]
        assert not missing, (dashboard, missing)
    assert "| `cpu_aperf`, `cpu_mperf`, `cpu_tsc` |" in names.mapping_table()


def rezolus_file(path: Path, rows: int = 4) -> None:
    """Write a file as Rezolus's recorder does (metriken-exposition): opaque column names,
    ``metric`` and labels in field metadata, a ``duration`` column, a histogram."""
    t0 = 1_760_000_000_000_000_000
    cols: dict[str, tuple[Any, list, dict[str, str]]] = {
        "timestamp": (pa.uint64(), [t0 + i * 10**9 for i in range(rows)],
                      {"metric_type": "timestamp", "unit": "nanoseconds"}),
        "duration": (pa.uint64(), [1000] * rows, {"metric_type": "duration"}),
        "7x0": (pa.uint64(), [i * 10**8 for i in range(rows)],
                {"metric": "cpu_usage", "state": "user", "id": "0", "metric_type": "counter",
                 "unit": "nanoseconds", "sampler": "cpu_usage"}),
        "7x1": (pa.uint64(), [i * 10**7 for i in range(rows)],
                {"metric": "cpu_usage", "state": "system", "id": "0", "metric_type": "counter",
                 "unit": "nanoseconds", "sampler": "cpu_usage"}),
        "9": (pa.int64(), [8] * rows, {"metric": "cpu_cores", "metric_type": "gauge"}),
        "12": (pa.uint64(), [i * 5 for i in range(rows)],
               {"metric": "cpu_l3_miss", "metric_type": "counter"}),
    }
    hist = [[0] * h2.BUCKETS for _ in range(rows)]
    for i in range(rows):
        hist[i][h2.bucket_index(1000)] = 10 * i
    cols["syscall_latency/read:buckets"] = (
        pa.list_(pa.uint64()), hist,
        {"metric": "syscall_latency", "op": "read", "metric_type": "histogram",
         "grouping_power": "3", "max_value_power": "64"})
    fields = [pa.field(k, typ, metadata=m) for k, (typ, _v, m) in cols.items()]
    arrays = [pa.array(v, typ) for typ, v, _m in cols.values()]
    schema = pa.schema(fields, metadata={"source": "rezolus", "version": "5.8.3",
                                         "sampling_interval_ms": "1000"})
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path, compression="zstd")


def test_files_rezolus_wrote_read_as_our_events(tmp_path: Path) -> None:
    p = tmp_path / "rezolus.parquet"
    rezolus_file(p)
    got = by_event(list(read_records(p)))
    cpu = got["rezolus_cpu_usage"]
    assert [(r["cpu"], r["user_ns"], r["system_ns"]) for r in cpu][:2] == \
        [(0, 0, 0), (0, 10**8, 10**7)]
    assert [r["online"] for r in got["rezolus_cpu_cores"]] == [8] * 4
    lat = got["rezolus_syscall_latency"]
    assert [r["op"] for r in lat] == ["read"] * 4
    assert [r["count"] for r in lat] == [0, 10, 10, 10]  # interval deltas
    assert lat[1].histogram().percentile(0.5) >= 1000  # type: ignore[union-attr]
    generic = got[recparquet.GENERIC]
    assert {r["metric"] for r in generic} == {"cpu_l3_miss"}
    assert [r["value"] for r in generic] == [0, 5, 10, 15]
    assert read_meta(p)["source"] == "rezolus"


def test_the_previous_directory_form_is_still_read(tmp_path: Path) -> None:
    d = tmp_path / "old"
    d.mkdir()
    t = pa.table({"event": pa.array(["rezolus_cpu_cores"] * 2),
                  "time_ns": pa.array([5, 6], pa.int64()),
                  "common_cpu": pa.array([0, 1], pa.uint32()),
                  "common_pid": pa.array([9, 9], pa.int32()),
                  "online": pa.array([4, 4], pa.uint64())})
    pq.write_table(t, d / "rezolus_cpu_cores.parquet")
    got = list(read_records(d))
    assert [(r.event, r.time_ns, r["online"]) for r in got] == \
        [("rezolus_cpu_cores", 5, 4), ("rezolus_cpu_cores", 6, 4)]


def test_processes_stay_in_the_records_not_the_columns(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    recfile.write_recording(workload(2), out, "parquet")
    metrics = {(f.metadata or {}).get(b"metric", b"").decode()
               for f in pq.read_schema(out)}
    assert not any(m.startswith("rezolus_ue_process__") for m in metrics)
    assert PROCESS.event in by_event(list(read_records(out)))
    assert Kind.HISTOGRAM  # the histogram kinds are checked by check_rezolus_rules


#: Five seconds of a recording Rezolus itself wrote (tests/fixtures/rezolus/README.md).
REZOLUS_DEMO = Path(__file__).parent / "fixtures" / "rezolus" / "demo-5s.parquet"


def test_a_file_rezolus_itself_wrote_reads_as_our_events() -> None:
    """Real columns, not ones built from the docs: each CPU's counters and a histogram
    come back in our events with the values pyarrow reads, at every row."""
    t = pq.read_table(REZOLUS_DEMO)
    cols = {f.name: {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
            for f in t.schema}
    got = by_event(list(read_records(REZOLUS_DEMO)))
    user = {(int(m["id"]), row): v for name, m in cols.items()
            if m.get("metric") == "cpu_usage" and m.get("state") == "user"
            for row, v in enumerate(t.column(name).to_pylist())}
    cpu = got["rezolus_cpu_usage"]
    cpus = len({c for c, _row in user})
    assert len(cpu) == len(user) == cpus * t.num_rows
    times = sorted({r.time_ns for r in cpu})
    assert len(times) == t.num_rows
    for r in cpu:
        assert r["user_ns"] == user[r["cpu"], times.index(r.time_ns)]
    # A histogram: each record holds its interval's buckets, the difference between
    # consecutive cumulative rows.
    (name,) = [n for n, m in cols.items() if m.get("metric") == "syscall_latency"
               and m.get("op") == "read" and n.endswith(":buckets")]
    rows = [np.array(v, dtype=np.uint64) for v in t.column(name).to_pylist()]
    lat = [r for r in got["rezolus_syscall_latency"] if r["op"] == "read"]
    assert [r["count"] for r in lat[1:]] == [int((b - a).sum())
                                            for a, b in itertools.pairwise(rows)]
    assert read_meta(REZOLUS_DEMO)["source"] == "rezolus"
