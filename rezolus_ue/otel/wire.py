"""The ``otlp_metrics`` tracepoint of the OpenTelemetry user_events exporters.

The Rust (``opentelemetry-user-events-metrics``) and .NET (Geneva) exporters register
``otlp_metrics u32 protocol;char[8] version;__rel_loc u8[] buffer``: ``protocol`` 0 is
OTLP protobuf, ``version`` the eight bytes ``v0.19.00`` (no NUL), ``buffer`` one serialized
``ExportMetricsServiceRequest`` holding one data point. A buffer over ``MAX_BUFFER`` bytes is
dropped by the writer. This module is that declaration, pure (no OpenTelemetry import), for
the exporter and the readers alike.

On the uprobe transport the same fields travel as text: ``buffer`` as base64 (fetch
arguments have no variable-length binary type), ``version`` whole; the kernel builds a
uprobe event in one page, which bounds the buffer to ``UPROBE_MAX_BUFFER`` bytes.
"""

from __future__ import annotations

import base64
import binascii
import struct
from typing import NamedTuple

from ..encoding import REL_BYTES, U32, EventSchema, Field, char_array

EVENT = "otlp_metrics"
PROTOCOL_OTLP = 0
VERSION = b"v0.19.00"
#: The Rust exporter's MAX_EVENT_SIZE: a larger buffer is dropped, not written.
MAX_BUFFER = 65360

#: Room for a uprobe event's fields: one 4 KiB page (the kernel's per-CPU uprobe buffer and
#: an ftrace ring-buffer page) less the common header, ``__probe_ip`` and a margin for the
#: ring buffer's own headers, as for every event on that transport.
_UPROBE_ROOM = 4096 - 8 - 8 - 64
#: The base64 text's region, NUL included: the room less ``protocol``, two ``__data_loc``
#: words and the ``version`` region (8 bytes and a NUL).
UPROBE_TEXT_LEN = _UPROBE_ROOM - 4 - 2 * 4 - (len(VERSION) + 1)
#: The largest buffer the uprobe transport carries: what base64 fits in UPROBE_TEXT_LEN.
UPROBE_MAX_BUFFER = (UPROBE_TEXT_LEN - 1) // 4 * 3


def buffer_to_text(buffer: bytes) -> bytes:
    """Return the uprobe transport's text form of ``buffer`` (base64, no NUL)."""
    return base64.b64encode(buffer)


def buffer_from_text(text: str | bytes) -> bytes:
    """Return the buffer from its uprobe text form; raise ValueError if it is not base64."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"otlp_metrics buffer is not base64: {text[:40]!r}") from None


SCHEMA = EventSchema(
    EVENT,
    "OpenTelemetry metrics from an application: one data point per record, as an OTLP"
    " ExportMetricsServiceRequest (the Rust and .NET user_events exporters' event)",
    (
        Field("protocol", U32, "", "payload encoding: 0 = OTLP protobuf"),
        Field("version", char_array(len(VERSION)), "", "OTLP protobuf definition version",
              text_len=len(VERSION) + 1),
        Field("buffer", REL_BYTES, "", "one serialized ExportMetricsServiceRequest (base64"
              " on the uprobe transport)", max_len=MAX_BUFFER, to_text=buffer_to_text,
              text_len=UPROBE_TEXT_LEN),
    ),
    sampler="",
    cadence="one record per data point per export",
    foreign=True,
)


class Wire(NamedTuple):
    """One ``otlp_metrics`` record's fields."""

    protocol: int
    version: bytes
    buffer: bytes


#: The fixed part (protocol, version, the buffer's __rel_loc word), from the schema.
_HEAD = struct.Struct("=" + "".join(f.type.code for f in SCHEMA.fields))


def payload(buffer: bytes) -> bytes:
    """Return the record as written after the write index: protocol, version, the buffer's
    ``__rel_loc`` word (length << 16, offset 0) and the buffer."""
    return SCHEMA.pack(PROTOCOL_OTLP, VERSION, buffer)


def decode(data: bytes) -> Wire:
    """Return the fields of a user_events payload; raise ValueError if it is truncated."""
    if len(data) < _HEAD.size:
        raise ValueError(f"otlp_metrics: payload of {len(data)} bytes < {_HEAD.size}")
    protocol, version, loc = _HEAD.unpack_from(data)
    start, length = _HEAD.size + (loc & 0xFFFF), loc >> 16
    buffer = bytes(data[start:start + length])
    if len(buffer) != length:
        raise ValueError("otlp_metrics: buffer runs past the payload")
    return Wire(protocol, version, buffer)
