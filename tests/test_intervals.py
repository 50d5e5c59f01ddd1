"""Publish intervals from a record stream: exact from the agent's tick records, inferred
without them, rates and staleness (``rezolus_ue.consume.intervals``)."""

from __future__ import annotations

from rezolus_ue.consume.intervals import EVENT, Intervals, Publishes, Rates, split
from rezolus_ue.consume.records import Record
from rezolus_ue.otel.wire import EVENT as OTLP_EVENT
from rezolus_ue.samplers.agent import INTERVAL

S = 10**9


def cpu(t: int, n: int, user: int = 0) -> Record:
    return Record("rezolus_cpu_usage", t, 0, 1, {"cpu": n, "user_ns": user})


def tick(t: int, seq: int, written: int) -> Record:
    return Record(EVENT, t, 0, 1, {"seq": seq, "interval_ns": S, "records": written})


def burst(t: int, cpus: int = 2) -> list[Record]:
    return [cpu(t + i, i) for i in range(cpus)]


def test_the_event_is_the_agent_samplers_family() -> None:
    assert INTERVAL.event == EVENT
    assert INTERVAL.schema.field_names == ("seq", "interval_ns", "records")


def test_exact_intervals_end_at_each_tick_record_at_once() -> None:
    iv = Intervals()
    assert iv.feed(burst(S)) == []  # no tick record yet: still open
    (one,) = iv.feed([tick(S + 10, 7, 2)])
    assert (one.seq, one.start_ns, one.end_ns, one.exact, one.written, one.missing) == (
        7, S, S + 10, True, 2, 0)
    assert [r["cpu"] for r in one.records] == [0, 1]
    assert not iv.pending
    (two,) = iv.feed([*burst(2 * S), tick(2 * S + 10, 8, 2)])
    assert two.seq == 8 and iv.period_ns == S


def test_without_tick_records_a_repeated_series_ends_the_interval() -> None:
    out = list(split([*burst(S), *burst(2 * S), *burst(3 * S)]))
    assert [(i.seq, i.start_ns, i.end_ns, i.exact, i.written) for i in out] == [
        (0, S, S + 1, False, None), (1, 2 * S, 2 * S + 1, False, None),
        (2, 3 * S, 3 * S + 1, False, None)]  # the last one closed by the end


def test_a_histograms_parts_and_dist_metrics_are_series_of_their_own() -> None:
    recs = [Record("rezolus_cpu_usage_dist", S, 0, 1, {"cpu": 0, "metric": m})
            for m in ("user_ns", "system_ns")]
    recs += [Record("rezolus_agent_sampler", S + 1, 0, 1, {"sampler": "cpu", "part": p})
             for p in (0, 1)]
    assert len(list(split(recs))) == 1


def test_mixed_a_lost_tick_record_is_inferred_and_the_next_is_exact() -> None:
    recs = [*burst(S), tick(S + 5, 1, 2), *burst(2 * S), *burst(3 * S), tick(3 * S + 5, 3, 2)]
    out = list(split(recs))
    assert [(i.seq, i.exact, len(i.records)) for i in out] == [
        (1, True, 2), (2, False, 2), (3, True, 2)]


def test_lost_records_show_as_missing() -> None:
    (one,) = Intervals().feed([cpu(S, 0), tick(S + 5, 1, 3)])
    assert (one.written, one.missing) == (3, 2)


def test_a_tick_record_with_no_records_is_an_empty_exact_interval() -> None:
    (one,) = Intervals().feed([tick(S, 4, 0)])
    assert (one.seq, one.start_ns, one.end_ns, one.records, one.exact, one.missing) == (
        4, S, S, [], True, 0)


def test_applications_records_ride_along_but_never_split_nor_count_as_missing() -> None:
    app = Record(OTLP_EVENT, S + 1, 0, 99, {"pid": 99})
    (one,) = Intervals().feed([cpu(S, 0), app, app, tick(S + 5, 1, 1)])
    assert len(one.records) == 3 and one.missing == 0


def test_an_old_recording_reads_inferred_and_flush_closes_the_last() -> None:
    iv = Intervals(period_ns=S)
    assert iv.period_ns == S
    assert [i.exact for i in iv.feed([*burst(S), *burst(2 * S)])] == [False]
    assert iv.pending
    (last,) = iv.flush()
    assert last.start_ns == 2 * S and iv.flush() == []


def test_rates_are_reset_aware() -> None:
    r = Rates()
    assert r.rate("a", 100, S) is None
    assert r.rate("a", 300, 3 * S) == 100.0
    assert r.rate("a", 50, 4 * S) is None and r.resets == 1  # restarted
    assert r.rate("a", 150, 5 * S) == 100.0
    assert r.rate("a", 150, 5 * S) is None  # no time between
    r.forget("a")
    assert r.rate("a", 10, 6 * S) is None and len(r) == 1


def test_publishes_staleness() -> None:
    p = Publishes()
    assert p.publish(S) == 0 and p.publish(2 * S) == 1 and p.period_ns == S
    assert p.gone(0, 1) and not p.gone(1, 1)
    assert not p.silent(4 * S, 3) and p.silent(6 * S, 3)
    q = Publishes()
    assert not q.see("x", S) and not q.see("y", S) and q.see("x", 2 * S) and q.gen == 1
    assert not q.silent(4 * S, 3) and q.silent(6 * S, 3)  # its period: 1 s
    q.forget()
    assert q.seen_at_ns is None and not q.silent(99 * S, 1)
