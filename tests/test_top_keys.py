"""``rezolus-ue top``'s keys, number formats and command line, in-process."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from top_host import GiB, MiB

from rezolus_ue.consume import top
from rezolus_ue.consume.top import widgets
from rezolus_ue.consume.top.keys import SORT_MODES, UiState, handle_key, split_keys
from rezolus_ue.metrics import h2


def test_keys() -> None:
    ui = UiState()
    ui = handle_key(ui, "p")
    assert ui.paused
    assert not handle_key(ui, "p").paused
    sorts = [ui.sort]
    for _ in range(len(SORT_MODES)):
        ui = handle_key(ui, "s")
        sorts.append(ui.sort)
    assert sorts == [0, 1, 2, 3, 0]
    assert handle_key(ui, "S").sort == len(SORT_MODES) - 1
    ui = handle_key(UiState(interval_s=1.0), "+")
    assert ui.interval_s == 2.0
    ui = handle_key(handle_key(ui, "-"), "-")
    assert ui.interval_s == 0.5
    assert handle_key(UiState(interval_s=60.0), "+").interval_s == 60.0
    assert handle_key(UiState(interval_s=0.1), "-").interval_s == 0.1
    assert handle_key(UiState(interval_s=1.5), "+").interval_s == 2.0
    assert handle_key(UiState(), "q").quit
    h = handle_key(UiState(), "h")
    assert h.help and not handle_key(h, "q").quit and not handle_key(h, "q").help


def test_filter_editing() -> None:
    ui = handle_key(UiState(), "/")
    assert ui.editing
    for k in "nvqx":
        ui = handle_key(ui, k)
    assert ui.filter == "nvqx" and not ui.quit  # q is text while typing
    ui = handle_key(ui, "\x7f")
    ui = handle_key(ui, "\n")
    assert ui.filter == "nvq" and not ui.editing
    assert handle_key(ui, "\x1b").filter == ""  # Esc clears a kept filter
    ui = handle_key(handle_key(ui, "/"), "\x1b")
    assert ui.filter == "" and not ui.editing


def test_split_keys() -> None:
    assert split_keys("qs") == ["q", "s"]
    assert split_keys("\x1b[A+") == ["\x1b[A", "+"]
    assert split_keys("\x1b") == ["\x1b"]
    assert split_keys("\r") == ["\n"]
    assert split_keys("\x1b[15~h") == ["\x1b[15~", "h"]


def test_formatting() -> None:
    assert widgets.fmt_num(0) == "0" and widgets.fmt_num(3.46) == "3.5"
    assert widgets.fmt_num(12_345) == "12k" and widgets.fmt_num(1_234_567) == "1.2M"
    assert widgets.fmt_bytes(512) == "512" and widgets.fmt_bytes(1536) == "1.5K"
    assert widgets.fmt_bytes(16 * GiB) == "16G"
    assert widgets.fmt_pct(0.4) == "40.0%" and widgets.fmt_pct(1.0) == "100%"
    assert widgets.fmt_uptime(3 * 3600 + 12 * 60) == "3h12m"
    assert widgets.fmt_value(1500, "us") == "1.5ms" and widgets.fmt_value(120, "us") == "120us"
    # Byte values, histograms' included, in one style: binary K, M, G.
    for n in (512, 4608, 52 * 1024, 3 * MiB, 16 * GiB):
        assert widgets.fmt_value(n, "bytes") == widgets.fmt_bytes(n)
    assert widgets.fmt_value(4608, "bytes") == "4.5K" and widgets.fmt_bytes(52 * 1024) == "52K"


def test_add_parser() -> None:
    p = argparse.ArgumentParser()
    top.add_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(["top", "--interval", "500ms", "--once", "--no-wait"])
    assert args.func is top.run and args.interval == 0.5 and args.once and args.no_wait
    assert p.parse_args(["top", "-i", "2"]).interval == 2.0
    with pytest.raises(SystemExit):
        p.parse_args(["top", "--interval", "1ms"])


def test_histogram_spark_shape() -> None:
    counts = h2.new_counts()
    h2.record(counts, [10] * 8 + [12] * 2)
    spark = widgets.spark(counts, 3).plain
    assert spark == "█ ▂" and np.count_nonzero(counts) == 2


def test_key_c_toggles_the_costly_events() -> None:
    ui = handle_key(UiState(), "c")
    assert ui.costly and not handle_key(ui, "c").costly


def test_costly_option_in_the_cli() -> None:
    from rezolus_ue.cli import build_parser

    assert build_parser().parse_args(["top", "--costly"]).costly
    assert not build_parser().parse_args(["top"]).costly
