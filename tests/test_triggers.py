"""``[[trigger]]`` rules: their config checks, and the pure evaluation per publish interval
(the recorder's side runs against the real kernel in tests/test_triggers_live.py)."""

from __future__ import annotations

import pytest

from rezolus_ue.config import parse
from rezolus_ue.consume.intervals import Interval
from rezolus_ue.consume.recording.blocks import MappedFile
from rezolus_ue.consume.recording.dump import assemble
from rezolus_ue.consume.recording.files import read_records
from rezolus_ue.consume.recording.native import write_native
from rezolus_ue.consume.recording.triggers import HOLD_LIMIT_NS, Triggers, rules
from rezolus_ue.consume.records import Record
from rezolus_ue.errors import ConfigError
from rezolus_ue.samplers import options

S = 1_000_000_000


def rule_text(**keys: object) -> str:
    base: dict[str, object] = {"event": "rezolus_cpu_usage", "metric": "busy_ppm",
                               "above": 900_000, "for": 2, "before": "3s", "after": "2s"}
    base.update(keys)
    body = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in base.items()
                     if v is not None)
    return f"[[trigger]]\n{body}\n"


def triggers(**keys: object) -> Triggers:
    return Triggers(rules(parse(rule_text(**keys), options()).triggers))


def cpu_interval(seq: int, busy: tuple[int, ...], user_ns: tuple[int, ...] = ()) -> Interval:
    """Return publish interval ``seq`` (one second each): a record per CPU."""
    t = 100 * S + seq * S
    recs = [Record("rezolus_cpu_usage", t + 1000 + c, c, 1,
                   {"cpu": c, "busy_ppm": b, "user_ns": user_ns[c] if user_ns else 0})
            for c, b in enumerate(busy)]
    return Interval(seq, t + 1000, t + 5000, recs, True, len(recs))


def run(tr: Triggers, busy: list[tuple[int, ...]]) -> list[tuple[int, list]]:
    """Feed one interval per entry; return (seq, windows) for each that made any due."""
    out = []
    for seq, b in enumerate(busy):
        w = tr.feed(cpu_interval(seq, b))
        if w:
            out.append((seq, w))
    return out


IDLE, BUSY = (100_000, 50_000), (990_000, 950_000)


def test_fires_after_for_intervals_and_writes_once_after_passed() -> None:
    tr = triggers(over="min")
    # busy at 3, 4, 5; idle after: fired at 4, due once 2 s passed after 5's end (at 7).
    got = run(tr, [IDLE] * 3 + [BUSY] * 3 + [IDLE] * 5)
    assert [seq for seq, _ in got] == [7]
    (w,) = got[0][1]
    assert w.start_ns == 103 * S + 1000 - 3 * S  # before the first busy interval's start
    assert w.end_ns == 105 * S + 5000 + 2 * S  # after the last busy interval's end
    assert w.fired_ns == 104 * S + 5000 and w.peak == 950_000


def test_one_interval_is_not_enough_and_min_over_series() -> None:
    assert run(triggers(over="min"), [IDLE, BUSY, IDLE, BUSY, IDLE] + [IDLE] * 4) == []
    # One busy CPU: max holds, min does not.
    half = (990_000, 10_000)
    assert run(triggers(over="min"), [half] * 4 + [IDLE] * 4) == []
    assert len(run(triggers(over="max"), [half] * 4 + [IDLE] * 4)) == 1


def test_second_burst_inside_the_window_extends_it() -> None:
    got = run(triggers(over="min"), [BUSY] * 2 + [IDLE] + [BUSY] * 2 + [IDLE] * 4)
    assert [seq for seq, _ in got] == [6]
    (w,) = got[0][1]
    assert w.end_ns == 104 * S + 5000 + 2 * S
    # Re-armed: a later burst fires again.
    tr = triggers(over="min")
    got = run(tr, [BUSY] * 2 + [IDLE] * 4 + [BUSY] * 2 + [IDLE] * 4)
    assert [seq for seq, _ in got] == [3, 9]


def test_counter_compares_rate_and_below() -> None:
    tr = triggers(metric="user_ns", over="sum", above=1.5e9, **{"for": 1})
    user = [0, 0]
    got = []
    for seq in range(8):
        step = S if seq in (2, 3) else S // 10  # two CPUs busy in 2 and 3
        user = [u + step for u in user]
        got += tr.feed(cpu_interval(seq, IDLE, tuple(user)))
    assert len(got) == 1 and got[0].start_ns == 102 * S + 1000 - 3 * S
    assert got[0].peak == pytest.approx(2e9)
    tr = triggers(above=None, below=200_000, over="max", **{"for": 1, "after": "0s"})
    assert [seq for seq, _ in run(tr, [BUSY, IDLE, BUSY])] == [2]


def test_flush_writes_what_fired_and_hold_limit() -> None:
    tr = triggers(over="min")
    assert run(tr, [BUSY] * 3) == []
    (w,) = tr.flush()
    assert w.end_ns == 102 * S + 5000 + 2 * S and tr.flush() == []
    tr = triggers(over="min")
    n = HOLD_LIMIT_NS // S + 3
    got = run(tr, [BUSY] * n)
    assert len(got) == 1


@pytest.mark.parametrize(("keys", "message"), [
    ({"event": "rezolus_nope"}, "[[trigger]] 'rezolus_nope.busy_ppm' event: unknown event"),
    ({"metric": "nope"}, "metric: rezolus_cpu_usage has no metric 'nope'"),
    ({"percentile": "p99"}, "percentile: rezolus_cpu_usage busy_ppm is a gauge"),
    ({"event": "rezolus_cpu_usage_dist"}, "percentile: rezolus_cpu_usage_dist busy_ppm needs"),
])
def test_bad_rules_name_the_rule_and_key(keys: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        triggers(**keys)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("text", "message"), [
    (rule_text(above=None), "<config>:1: [[trigger]] 'rezolus_cpu_usage.busy_ppm': give one"
     " of above and below"),
    (rule_text(name="a b"), "<config>:8: [[trigger]] 'a b' name: use 1 to 64"),
    (rule_text(over="median"), "<config>:8: [[trigger]] 'rezolus_cpu_usage.busy_ppm' over:"),
    (rule_text() + rule_text(wat=1), "<config>:15: unknown key 'wat' in [[trigger]]"
     " 'rezolus_cpu_usage.busy_ppm'; allowed:"),
    (rule_text(after="2h"), "after: '2h' is out of range"),
    ("trigger = 3\n", "'trigger' must be an array of tables"),
])
def test_bad_config_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(text, options())
    assert message in str(e.value) and "\n" not in str(e.value)


def test_dist_percentile_rule() -> None:
    (r,) = rules(parse(rule_text(event="rezolus_cpu_usage_dist", percentile="p99"),
                       options()).triggers)
    assert r.field == "p99" and r.dist and not r.counter


def test_a_window_dump_cuts_blocks(tmp_path) -> None:
    recs = [Record("rezolus_cpu_cores", t * S, 0, 1, {"online": 2}) for t in range(10)]
    src = tmp_path / "seg.rzr"
    write_native(recs, src)
    out = tmp_path / "out.rzr"
    res = assemble([MappedFile.open(src)], out, window=(3 * S, 6 * S))
    assert [r.time_ns for r in read_records(out)] == [3 * S, 4 * S, 5 * S, 6 * S]
    assert res.records == 4 and res.first_ns == 3 * S and res.last_ns == 6 * S
