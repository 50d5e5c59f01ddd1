"""A failing sampler, seen by a user: the agent publishes why, `events` and the exporter say it.

The agent runs as a user would run it (a subprocess, the shipped configs/default.toml)
with one change: the cgroup sampler's root is a small cgroup v2 tree of our own. Once the
exporter (a consumer of every cheap event) has the sampler running, its cpu.stat is corrupted in
place, so each walk of the hierarchy (every 10 s) raises: the sampler is "failed", with
its error and a growing count, while the others go on. It runs on this host's kernel,
whose tracepoints the consumers read through whichever transport ``transport = "auto"``
takes (uprobe events without user_events; the ``bus`` fixture).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from waiting import scaled

from rezolus_ue.agent import read_status
from rezolus_ue.consume.subscription import Subscription

from .conftest import Bus, wait_for
from .test_agent_e2e import ROOT, AgentProcess
from .tmux import tmux_session

pytestmark = pytest.mark.live
FAILING = "cgroup"
ERROR = "ValueError: invalid literal for int() with base 10: b'oops'"


def fake_cgroup_root(tmp: Path) -> Path:
    """Return a cgroup v2 hierarchy of one (root) group, as the cgroup sampler reads it."""
    root = tmp / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory io\n")
    (root / "cpu.stat").write_text("usage_usec 1000\nuser_usec 600\nsystem_usec 400\n"
                                   "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
    (root / "memory.current").write_text("4096\n")
    (root / "io.stat").write_text("")
    return root


def corrupt(path: Path) -> None:
    """Overwrite a file in place (the sampler keeps it open)."""
    with open(path, "r+") as f:
        f.truncate(0)
        f.write("usage_usec oops\n")


def sampler_status(name: str) -> dict:
    return ((read_status() or {}).get("samplers") or {}).get(name) or {}


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(30)) as r:
        return r.read().decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    """Return the value of the series ``name`` whose labels include ``labels``."""
    for line in text.splitlines():
        m = re.match(rf"{name}(?:\{{(.*)\}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            return float(m.group(2))
    return None


def test_a_failing_sampler_is_named_with_its_error_and_count_everywhere(
        bus: Bus, tmp_path: Path) -> None:
    cgroups = fake_cgroup_root(tmp_path)
    conf = tmp_path / "config.toml"
    shipped = (ROOT / "configs" / "default.toml").read_text()
    default_root = 'root = ""'
    at = shipped.index(default_root, shipped.index("[samplers.cgroup]"))
    conf.write_text(shipped[:at] + f'root = "{cgroups}"' + shipped[at + len(default_root):])
    agent = AgentProcess("--config", str(conf))
    exporter = subprocess.Popen(
        [sys.executable, "-m", "rezolus_ue", "exporter", "--listen", "127.0.0.1:0"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        agent.wait_registered(bus)
        line = exporter.stderr.readline()  # type: ignore[union-attr]
        m = re.search(r"(http://\S+/metrics)", line)
        assert m, f"exporter said {line!r}"
        url = m.group(1)
        # The exporter consumes every cheap event: the sampler runs (the deadlines are
        # long enough for an emulated CPU).
        wait_for(lambda: sampler_status(FAILING).get("status") == "active", timeout=240,
                 step=0.5)
        corrupt(cgroups / "cpu.stat")
        seen: list[dict] = []

        def failed_twice() -> bool:
            seen[:] = [sampler_status(FAILING)]
            return seen[0].get("status") == "failed" and seen[0].get("errors", 0) >= 2

        try:
            wait_for(failed_twice, timeout=180, step=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}; status.json said {seen}; agent:\n{agent.output()}"
                                 ) from None
        error = seen[0]["last_error"]
        assert error == ERROR, seen  # a sampler bug: its type and text, one line
        assert f"sampler {FAILING}: refresh failed (1 errors): {error}" in agent.output()

        # `rezolus-ue events`: the sampler's row says failed, its count, its error.
        out = subprocess.run([sys.executable, "-m", "rezolus_ue", "events"], cwd=ROOT,
                             capture_output=True, text=True, timeout=scaled(120))
        assert out.returncode == 0, out.stderr
        row = re.compile(rf"│ {FAILING}\s+│ failed\s+│\s+(\d+) │.*{re.escape(error[:30])}")
        m = next((m for ln in out.stdout.splitlines() if (m := row.search(ln))), None)
        assert m and int(m.group(1)) >= 2, out.stdout

        # The published records: rezolus_agent_status names it, with the same error.
        with Subscription(["rezolus_agent_status"], wait=False, tracefs=bus.tfs) as sub:
            recs: list = []

            def published() -> bool:
                recs.extend(r.fields for r in sub.poll(200)
                            if r.event == "rezolus_agent_status"
                            and r.fields["sampler"] == FAILING)
                return bool(recs) and recs[-1]["state"] == "failed"

            wait_for(published, timeout=60, step=0)
        rec = recs[-1]
        assert rec["last_error"] == error, rec
        assert rec["errors"] >= 2

        # The exporter: the per-sampler counters add up to the agent's total, and the
        # failing sampler's counter equals its status gauge (one scrape: one agent tick).
        got: dict = {}

        def consistent() -> bool:
            text = scrape(url)
            total = metric(text, "rezolus_agent_refresh_errors_total")
            per = [float(v) for v in re.findall(
                r'^rezolus_agent_sampler_errors_total\{sampler="[^"]+"\} (\S+)$', text, re.M)]
            mine = metric(text, "rezolus_agent_sampler_errors_total", sampler=FAILING)
            gauge = metric(text, "rezolus_agent_status_errors", sampler=FAILING,
                           state="failed", last_error=error)
            got.update(total=total, per=per, mine=mine, gauge=gauge)
            return (total is not None and mine is not None and mine >= 2
                    and sum(per) == total and gauge == mine)

        try:
            wait_for(consistent, timeout=60, step=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}; scraped {json.dumps(got)}") from None
        # The others went on: cpu_usage is still sampled and has no errors.
        assert sampler_status("cpu_usage").get("status") == "active"
        assert sampler_status("cpu_usage").get("errors") == 0
        top_names_it(error)
    finally:
        if exporter.poll() is None:
            exporter.terminate()
            try:
                exporter.wait(timeout=scaled(30))
            except subprocess.TimeoutExpired:
                exporter.kill()
        agent.stop()
        agent.log.close()


def top_names_it(error: str) -> None:
    """`rezolus-ue top` under tmux: its SAMPLER panel lists the failing sampler with its
    error, key e shows it on the samplers screen, and the header has load and PSI."""
    shown: list[str] = []
    with tmux_session(f"cd {ROOT} && {sys.executable} -m rezolus_ue top --interval 1s",
                      140, 40) as t:

        def showing(*texts: str) -> bool:
            shown[:] = [t.screen()]
            return all(x in shown[0] for x in texts)

        try:
            # The panel's row: name, state, count, then the error (cut to the column).
            wait_for(lambda: showing("SAMPLER", "load ", "psi ") and re.search(
                rf"{FAILING}\s+failed\s+\d+\s+{re.escape(error[:20])}", shown[0]),
                timeout=180, step=0.5)
            t.keys("e")
            wait_for(lambda: showing("Samplers of the running agent", "cpu_usage", error),
                     timeout=30, step=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{shown[0] if shown else ''}") from None
        t.keys("q")  # closes the samplers screen first
        wait_for(lambda: showing("HISTOGRAM"), timeout=30, step=0.2)
        t.keys("q")
        wait_for(t.ended, timeout=30, step=0.2)
