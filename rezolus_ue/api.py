"""The public API for local agents: rezolus-ue's records, live or from a recording.

A local agent is a program on the host that reads our tracepoints and acts on them::

    import rezolus_ue

    for r in rezolus_ue.subscribe(["rezolus_scheduler_runqueue_latency"]):
        h = r.histogram()                   # the interval's H2 buckets
        print(r.meta.time_ns, h.percentile(99))

``subscribe`` yields ``Record``s: ``r["field"]`` (``r.fields``) is the event's payload,
``r.meta`` (time, writing CPU, writing pid) is the record's own, and ``r.histogram()``
gives a histogram event's buckets with percentile helpers. ``source`` None subscribes to
the live tracepoints (perf_event_open, beside any other consumer); a path replays a
recording (``rezolus-ue record`` / ``dump`` output, a ring directory, Parquet). The
commands ``tail``, ``top``, ``record`` and ``exporter`` read through ``open_source``, the
batch form of the same thing. docs/api.md has an example agent.

Applications' OpenTelemetry metrics come the same way: ``subscribe("otlp_metrics")``
yields a record per data point from every process that publishes them (its ``buffer``,
the publisher's ``pid`` and ``comm``), and a ``Decoder`` turns each into ``DataPoint``s::

    from rezolus_ue.api import Decoder, subscribe

    points = Decoder()
    for r in subscribe("otlp_metrics"):
        for p in points.points(r):
            print(p.comm, p.metric, p.attributes, p.value or p.histogram)

(needs the ``otel`` extra: ``pip install 'rezolus-ue[otel]'``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from .consume.otlp import DataPoint, Decoder, MalformedPayload
from .consume.records import Histogram, Meta, Record, record_from_json
from .consume.source import Source, open_source
from .consume.subscription import resolve_events

#: Longest wait for records in one poll of ``subscribe``.
POLL_MS = 1000
#: Once a record arrived, wait this much longer: a publish's burst comes in one batch.
SETTLE_MS = 50


def subscribe(patterns: str | Iterable[str] | None = None,
              source: str | os.PathLike[str] | None = None, *,
              wait: bool = True, costly: bool = False) -> Iterator[Record]:
    """Yield the records of the events matching ``patterns`` (names or shell globs; None:
    every cheap rezolus-ue event, and the costly ones too with ``costly``, then
    ``otlp_metrics`` if its decoder is installed, as ``resolve_events``), in time order.
    A recording's events all cost nothing to read.

    ``source`` None: the live tracepoints, until the caller stops iterating (closing the
    generator releases the perf events); waits for the agent unless ``wait`` is false.
    A path: the records of that recording, then the iteration ends. Raise ConfigError
    for a pattern that matches no event, RezolusError subclasses for what the kernel or
    the file refuses (each with a one-line message).
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    events = resolve_events(patterns, costly=costly or source is not None)
    # The live subscription adds the agent's interval ticks for its own use: hand over
    # only what was asked for.
    wanted = set(events)
    with open_source(source, events, wait=wait, asked=bool(patterns)) as src:
        while not src.exhausted:
            yield from (r for r in src.poll(POLL_MS, SETTLE_MS) if r.event in wanted)


__all__ = ["DataPoint", "Decoder", "Histogram", "MalformedPayload", "Meta", "Record",
           "Source", "open_source", "record_from_json", "resolve_events", "subscribe"]
