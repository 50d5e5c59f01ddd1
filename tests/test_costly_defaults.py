"""Consumers subscribe to cheap events unless the user asks: what
``tail`` and ``record`` hand the subscription, with and without ``--costly`` or patterns.
``top`` and ``exporter`` are covered in their own tests. In-process: the subscription is
a stand-in that records what it was asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from rezolus_ue import api, schema
from rezolus_ue.cli import build_parser
from rezolus_ue.consume import otlp
from rezolus_ue.consume.records import APP_EVENTS


class Asked(Exception):
    """Raised by the stand-in subscription: what a consumer asked for, then stop."""


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list:
    got: list = []

    def open_source(source: object, events: object, wait: bool = True,
                    asked: bool = True) -> None:
        got.append(events)
        raise Asked

    monkeypatch.setattr(api, "open_source", open_source)
    return got


#: Applications' events follow ours in every default set, where their decoder is installed.
APPS = list(APP_EVENTS) if otlp.available() else []
EVERY = [e.name for e in schema.EVENTS]
CHEAP = schema.cheap(EVERY) + APPS


@pytest.mark.parametrize(("argv", "want"), [
    ([], CHEAP),
    (["--costly"], EVERY + APPS),
    (["rezolus_syscall_latency"], ["rezolus_syscall_latency"]),  # named: asked for
])
def test_tail_subscribes_to_cheap_events_unless_asked(asked: list, argv: list[str],
                                                      want: list[str]) -> None:
    args = build_parser().parse_args(["tail", *argv])
    with pytest.raises(Asked):
        args.func(args)
    assert asked == [want]


@pytest.mark.parametrize(("argv", "want"), [
    ([], CHEAP),
    (["--costly"], EVERY + APPS),
    (["rezolus_tcp_srtt*"], ["rezolus_tcp_srtt"]),
])
def test_record_subscribes_to_cheap_events_unless_asked(asked: list, tmp_path: Path,
                                                        argv: list[str], want: list[str]
                                                        ) -> None:
    args = build_parser().parse_args(["record", str(tmp_path / "r.rzr"), *argv])
    with pytest.raises(Asked):
        args.func(args)
    assert asked == [want]


def test_subscribe_api_takes_cheap_events_unless_asked(asked: list) -> None:
    with pytest.raises(Asked):
        next(api.subscribe())
    with pytest.raises(Asked):
        next(api.subscribe(costly=True))
    assert asked == [CHEAP, EVERY + APPS]
