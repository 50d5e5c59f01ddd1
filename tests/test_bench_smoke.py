"""The benchmarks still run: each one's pieces, with tiny counts (figures not checked)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name: str):  # type: ignore[no-untyped-def]
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
