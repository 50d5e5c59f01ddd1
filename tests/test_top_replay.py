"""``top --from``'s steerable replay, in-process: the interval index, the playback clock
(pause, step, seek, speed), the position the header shows, the replay keys, and the loop
on a synthetic recording written to disk."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from top_host import Host, S, rec
from waiting import wait_for

from rezolus_ue.consume import top
from rezolus_ue.consume.intervals import EVENT, Interval, split
from rezolus_ue.consume.recording.native import write_native
from rezolus_ue.consume.records import Record
from rezolus_ue.consume.top.keys import (
    KEYS,
    LEFT,
    PGDN,
    RIGHT,
    UiState,
    handle_key,
    keys_for,
)
from rezolus_ue.consume.top.registry import new_model
from rezolus_ue.consume.top.replay import SPEEDS, Playback, Position, Replay, parse_goto
from rezolus_ue.consume.top.screen import help_lines, render

T0 = 1000 * S  # the synthetic host's first tick


def ticks(n: int) -> list[Record]:
    """Return ``n`` agent ticks of a small host, one second apart, each ended by its tick
    record (as the agent writes them)."""
    host = Host()
    out: list[Record] = []
    for seq in range(n):
        host.advance()
        recs = host.records()
        out += recs
        out.append(rec(EVENT, recs[-1].time_ns + 1000, seq, S, len(recs)))
    return out


def small_intervals(n: int) -> list[Interval]:
    """Return ``n`` one-record intervals whose ends are ``T0 + i`` seconds."""
    return [Interval(i, T0 + i * S, T0 + i * S, [rec("rezolus_cpu_cores", T0 + i * S, 2)],
                     True, 1) for i in range(n)]


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_index_keeps_each_interval_once_and_decodes_it_again() -> None:
    records = ticks(5)
    r = Replay(split(records))
    assert len(r) == 0 and not r.complete  # read as it plays
    assert r.read(2) and len(r) == 3
    first = list(split(records))
    assert r.interval(1) == first[1].records
    assert r.interval(4) if r.read(4) else False
    assert not r.read(5) and r.complete and len(r) == 5
    assert r.records == sum(len(iv.records) for iv in first)
    assert r.bytes() < sum(len(iv.records) for iv in first) * 100


def test_find_lands_on_the_interval_holding_the_time() -> None:
    r = Replay(small_intervals(100))
    assert r.find(T0 + 50 * S) == 50
    assert r.find(T0 + 50 * S + 1) == 51  # in 51's span, after 50 ended
    assert r.find(T0 - 10 * S) == 0
    assert r.find(T0 + 10_000 * S) == 99 and r.complete


def test_playback_paces_by_speed_pauses_and_steps() -> None:
    clock = Clock()
    pb = Playback(Replay(small_intervals(30)), clock)
    assert pb.due() == [0]  # the first at once
    assert pb.due() == []
    assert pb.wait_ns() == S
    clock.now = S - 1
    assert pb.due() == []
    clock.now = 3 * S
    assert pb.due() == [1, 2, 3]
    pb.set_speed(10.0)
    assert pb.due() == []
    clock.now += S // 10
    assert pb.due() == [4] and pb.wait_ns() == S // 10
    clock.now += S
    assert pb.due() == list(range(5, 15))
    pb.set_paused(True)
    clock.now += 100 * S
    assert pb.due() == [] and pb.position().paused
    pb.set_paused(False)
    pb.set_speed(math.inf)
    assert pb.due() == [15] and pb.due() == [16]  # one at a time: the loop's budget
    pb.jump(28)
    assert pb.due() == [29] and pb.due() == [] and pb.ended


def test_position_text() -> None:
    p = Position(62, 3600, True, 62 * S, 3599 * S, 0, 10.0, False, False)
    assert p.text() == "replay 1:02 / 59:59 #63/3600 10x"
    p = Position(0, 64, False, 0, 3 * 3600 * S, 0, math.inf, True, False)
    assert p.text() == "replay 0:00 / 3:00:00+ #1/64+ max PAUSED"
    wall = int(time.mktime((2024, 5, 6, 14, 3, 22, 0, 0, -1))) * S
    assert "14:03:22" in Position(0, 1, True, 0, 0, wall, 1.0, False, True).text()
    assert Position(0, 1, True, 0, 0, 0, 1.0, False, True).text().endswith("1x END")
    pb = Playback(Replay(small_intervals(10)), Clock())
    pb.due()
    assert pb.position().text() == "replay 0:00 / 0:00+ #1/1+ 1x"


def test_goto_texts() -> None:
    start, now = T0, T0 + 100 * S
    assert parse_goto("+10s", start, now, 0) == now + 10 * S
    assert parse_goto("-1m", start, now, 0) == now - 60 * S
    assert parse_goto("90s", start, now, 0) == start + 90 * S
    assert parse_goto("0:01:30", start, now, 0) == start + 90 * S  # no wall clock: offset
    wall0 = int(time.mktime((2024, 5, 6, 14, 0, 0, 0, 0, -1))) * S
    offset = wall0 - start
    assert parse_goto("14:03:22", start, now, offset) == start + 202 * S
    assert parse_goto("13:00", start, now, offset) == start + 23 * 3600 * S  # next day
    for bad in ("", "soon", "25:99", "1:2:3:4", "+x"):
        with pytest.raises(ValueError):
            parse_goto(bad, start, now, offset)


def test_replay_keys_act_only_in_a_replay() -> None:
    live = UiState()
    for k in (".", "n", "g", "<", ">", "[", "]", LEFT, RIGHT, PGDN):
        assert handle_key(live, k) == live
    ui = UiState(replay=True)
    assert handle_key(ui, RIGHT).jump == ("by", 10 * S)
    assert handle_key(ui, "[").jump == ("by", -60 * S)
    assert handle_key(ui, PGDN).jump == ("by", 60 * S)
    step = handle_key(ui, ".")
    assert step.jump == ("step", 0) and step.paused
    assert handle_key(ui, " ").paused
    fast = handle_key(handle_key(handle_key(ui, ">"), ">"), ">")
    assert SPEEDS[fast.speed] == math.inf and handle_key(fast, "<").speed == 1
    typed = ui
    for k in "g12:00q\n":
        typed = handle_key(typed, k)
    assert typed.jump == ("to", "12:00q") and typed.goto is None and not typed.quit
    assert handle_key(handle_key(ui, "g"), "\x1b").goto is None
    # The help lists each replay key once, and only in a replay; one pause key each.
    replay_keys = [k for k in KEYS if k.replay]
    assert all(k not in keys_for(False) for k in replay_keys)
    assert sum(k.what == "pause" for k in keys_for(True)) == 1
    assert {k for k, _ in help_lines(True)} > {k.keys for k in replay_keys}
    assert not {k for k, _ in help_lines(False)} & {". / n", "g"}


def test_seek_rebuilds_the_model_with_rates() -> None:
    records = ticks(40)
    pb = Playback(Replay(split(records)), Clock())
    model = new_model(1.0)
    model, ui = top.steer(pb, model, UiState(replay=True, jump=("to", "30s")))
    assert pb.shown == 30 and model.view.frame  # the first ending 30 s after the start
    text = render(model, 100, 40, UiState(interval_s=1.0, interactive=False)).plain
    assert "10.0%" in text  # the host's CPUs are 10% busy: a rate, so two intervals fed
    model, ui = top.steer(pb, model, replace_jump(ui, ("by", -10 * S)))
    assert pb.shown == 20
    frames = model.frames
    model, ui = top.steer(pb, model, replace_jump(ui, ("step", 0)))
    assert pb.shown == 21 and model.frames == frames + 1
    _m, bad = top.steer(pb, model, replace_jump(ui, ("to", "soon")))
    assert bad.goto_error and pb.shown == 21


def replace_jump(ui: UiState, jump: tuple) -> UiState:
    from dataclasses import replace

    return replace(ui, jump=jump)


class FakeLive:
    def __init__(self) -> None:
        self.frames: list[str] = []

    def update(self, screen: object, refresh: bool = False) -> None:
        self.frames.append(screen.text().plain)  # type: ignore[attr-defined]


def test_replay_loop_on_a_recording(tmp_path: Path) -> None:
    path = tmp_path / "run.rzr"
    write_native(ticks(120), path)
    pb = Playback(top.open_replay(path))
    r, w = os.pipe()
    live = FakeLive()
    try:
        # Full speed to the end, then back a minute, step, pause; q quits.
        os.write(w, b">>")
        console = SimpleNamespace(size=SimpleNamespace(width=100, height=40))

        def keys_then_quit() -> None:
            wait_for(lambda: pb.ended, what="the replay's end")
            os.write(w, b"[.")
            wait_for(lambda: live.frames and "PAUSED" in live.frames[-1], what="the step")
            os.write(w, b"q")

        import threading

        t = threading.Thread(target=keys_then_quit)
        t.start()
        top.replay_loop(pb, new_model(1.0), UiState(), live, console, r)
        t.join()
    finally:
        os.close(r)
        os.close(w)
    assert any("#120/120 max END" in f for f in live.frames)
    last = live.frames[-1]
    assert "replay 1:00 / 1:59" in last and "#61/120" in last and "PAUSED" in last
    assert "CPU" in last and "10.0%" in last
