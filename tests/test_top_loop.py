"""``rezolus-ue top``'s I/O loop with a stand-in subscription and screen, the terminal
modes and the load averages it reads itself (the pure parts: test_top_frame and
test_top_screen)."""

from __future__ import annotations

import os
import termios
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from rich.text import Text
from top_host import Host

from rezolus_ue.consume import top
from rezolus_ue.consume.records import Record
from rezolus_ue.consume.top.keys import UiState
from rezolus_ue.consume.top.registry import TOP_EVENTS, new_model


class FakeSubscription:
    """Hands out one agent tick per poll, then quiet (as the agent's bursts look)."""

    exhausted = False  # live: never

    def __init__(self, ticks: int, key_fd: int) -> None:
        self.host = Host()
        self.left = ticks
        self.quiet = False
        self.key_fd = key_fd
        self.lost = 0
        self.events = list(TOP_EVENTS)

    def poll(self, timeout_ms: int) -> list[Record]:
        if self.quiet or not self.left:
            if not self.left and not self.quiet:  # the last frame is drawn: quit
                os.write(self.key_fd, b"q")
            self.quiet = False
            time.sleep(timeout_ms / 1000)
            return []
        self.quiet = True
        self.left -= 1
        self.host.advance()
        return self.host.records()


class FakeLive:
    def __init__(self) -> None:
        self.frames: list[str] = []

    def update(self, renderable: Text, refresh: bool = False) -> None:
        assert refresh
        self.frames.append(renderable.plain)


def run_loop(live: FakeLive, sub: Callable[[int], FakeSubscription | None],
             keys: bytes = b"") -> None:
    """Run top's loop on an 80x24 screen until the stand-in subscription has quit it;
    ``sub(key_fd)`` is the subscription to start with (None: the loop subscribes)."""
    r, w = os.pipe()
    try:
        os.write(w, keys)
        console = SimpleNamespace(size=SimpleNamespace(width=80, height=24))
        top.loop([sub(w)], new_model(), UiState(), live, console, r)
    finally:
        os.close(r)
        os.close(w)


def test_loop_draws_a_frame_per_tick_and_quits_on_q() -> None:
    live = FakeLive()
    run_loop(live, lambda w: FakeSubscription(3, w), b"s")
    # The waiting screen, then one frame per tick; the key redrew at once (sort mem).
    assert "waiting for the first records" in live.frames[0]
    assert "subscribed to" in live.frames[0]
    assert sum("CPU " in f for f in live.frames) == 3
    assert "mem▼" in live.frames[-1]  # the sorted column


def test_cbreak_restores_the_terminal_on_error() -> None:
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        with pytest.raises(RuntimeError), top.cbreak(slave):
            assert termios.tcgetattr(slave)[3] & termios.ICANON == 0
            os.write(master, b"\x1b[Aq")
            assert top.read_keys(slave, 1.0) == ["\x1b[A", "q"]
            raise RuntimeError
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_read_loadavg(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "loadavg"
    f.write_text("0.52 1.50 12.25 3/456 7890\n")
    assert top.read_loadavg(str(f)) == (0.52, 1.5, 12.25)
    assert top.read_loadavg(str(tmp_path / "missing")) is None
    f.write_text("garbage\n")
    assert top.read_loadavg(str(f)) is None


def test_loop_draws_the_first_screen_before_subscribing(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    live = FakeLive()
    key_fd: list[int] = []

    def subscribe(wait: bool, costly: bool = False) -> FakeSubscription:
        assert wait and live.frames, "subscribed before anything was drawn"
        return FakeSubscription(1, key_fd[0])

    monkeypatch.setattr(top, "subscribe", subscribe)
    run_loop(live, lambda w: key_fd.append(w))  # type: ignore[func-returns-value]
    assert "subscribing to" in live.frames[0]
    assert any("CPU " in f for f in live.frames)


class ClosingSubscription(FakeSubscription):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_loop_resubscribes_with_the_costly_events_on_key_c(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    live = FakeLive()
    first: list[ClosingSubscription] = []
    asked: list[bool] = []

    def subscribe(wait: bool, costly: bool = False) -> FakeSubscription:
        asked.append(costly)
        return FakeSubscription(2, first[0].key_fd)

    def start(w: int) -> ClosingSubscription:
        first.append(ClosingSubscription(5, w))
        return first[0]

    monkeypatch.setattr(top, "subscribe", subscribe)
    run_loop(live, start, b"c")
    assert first[0].closed and asked == [True]  # closed, then subscribed with them
    assert any(f"subscribing to {len(TOP_EVENTS)} events" in f for f in live.frames)
    assert "costly off" not in live.frames[-1] and "CPU " in live.frames[-1]
