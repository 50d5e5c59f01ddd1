"""End to end with a real Prometheus server: it scrapes the exporter and answers PromQL.

The exporter's HTTP server runs in-process on a free loopback port, fed by a thread that
publishes realistic records every 200 ms like the agent (no kernel needed). Prometheus
(Debian package ``prometheus``, installed by ``scripts/setup.sh --dev``) scrapes it every
second with a generated config into a temporary TSDB; the test queries it through
``/api/v1/query``. Every wait is bounded; Prometheus is always killed.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_exporter import CPU_VALUES, Publisher, hist_records
from waiting import running, wait_for

from rezolus_ue.consume import exporter as ex
from rezolus_ue.metrics import catalog, h2

pytestmark = pytest.mark.host

PROMETHEUS = "/usr/bin/prometheus"
DEADLINE_S = 60
BUSY_PPM = [100_000, 200_000, 300_000, 400_000, 500_000, 600_000, 700_000, 800_000, 900_000,
            950_000]  # ten 100 ms samples per publish: p99 = max = 950_000
REFRESH_US = [100] * 90 + [3000] * 10  # per publish: p50 in the 100 bucket, p99 in 3000's


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def exporter() -> Iterator[tuple[ex.Exporter, int]]:
    """Serve an exporter on a free loopback port, fed every 200 ms until the test ends."""
    exp = ex.Exporter(native_buckets=True)
    srv = ex.serve_http("127.0.0.1", 0, exp.body)
    http = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                            daemon=True)
    http.start()
    stop = threading.Event()

    def feed() -> None:
        pub = Publisher(catalog.CPU_USAGE)
        n = 0
        while not stop.is_set():
            n += 1
            samples = [{(0,): [*CPU_VALUES, b], (1,): [*CPU_VALUES, 0]} for b in BUSY_PPM]
            exp.ingest(pub.publish(samples)
                       + hist_records(pub.t, "cpu_usage", [1, n, 0], REFRESH_US))
            stop.wait(0.2)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield exp, srv.server_address[1]
    finally:
        stop.set()
        feeder.join(10)
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def prometheus(tmp_path: Path, exporter: tuple[ex.Exporter, int]) -> Iterator[str]:
    """Run Prometheus scraping the exporter every second; yield its base URL once ready."""
    if not Path(PROMETHEUS).is_file():
        pytest.skip(f"{PROMETHEUS} is missing: apt-get install prometheus"
                    " (scripts/setup.sh --dev installs it)")
    _exp, target = exporter
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: rezolus\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target}']\n")
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            running(proc, lambda: (tmp_path / "prometheus.log").read_text()[-2000:],
                    "prometheus")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        wait_for(ready, timeout=DEADLINE_S, step=0.2, what=f"prometheus to be ready at {url}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(tmp_path / "tsdb", ignore_errors=True)


def query(url: str, promql: str) -> list[dict]:
    """Return the result vector of an instant query."""
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_value(url: str, promql: str) -> float:
    """Return the value of a one-series query, waiting (bounded) for a scrape to bring it."""
    result = wait_for(lambda: query(url, promql), timeout=DEADLINE_S, step=0.25,
                      what=f"a result for {promql}",
                      seen=lambda: urllib.request.urlopen(f"{url}/api/v1/targets",
                                                          timeout=10).read())
    assert isinstance(result, list) and len(result) == 1, result
    return float(result[0]["value"][1])


def test_prometheus_scrapes_and_answers_promql(prometheus: str,
                                               exporter: tuple[ex.Exporter, int]) -> None:
    url = prometheus
    # A counter, in seconds: user_ns 2_310_000_000 on cpu 0.
    assert wait_value(url, 'rezolus_cpu_usage_user_seconds_total{cpu="0"}') == 2.31
    # A _dist quantile: the p99 of ten 100 ms busy samples is the largest, 95%.
    assert wait_value(url, 'rezolus_cpu_usage_busy_ratio_dist{cpu="0",quantile="0.99"}') == 0.95
    # A summary quantile from the histogram record: the upper edge of 3000 us's bucket.
    p99 = int(h2.UPPER[h2.bucket_index(3000)]) / 1e6
    assert wait_value(
        url, 'rezolus_agent_sampler_refresh_seconds{sampler="cpu_usage",quantile="0.99"}') == p99
    # The classic histogram: histogram_quantile lands inside the true p50's bucket.
    lo, hi = h2.bucket_bounds(h2.bucket_index(100))
    got = wait_value(url, "histogram_quantile(0.5, rezolus_agent_sampler_refresh_seconds"
                          "_histogram_bucket)")
    assert (lo - 1) / 1e6 <= got <= hi / 1e6
    # Prometheus took every sample of a scrape (their number is steady once fed).
    lines = [x for x in exporter[0].render().splitlines() if not x.startswith("#")]
    assert wait_value(url, 'scrape_samples_scraped{job="rezolus"}') == len(lines)
    up = query(url, 'up{job="rezolus"}')
    assert up and math.isclose(float(up[0]["value"][1]), 1.0)
