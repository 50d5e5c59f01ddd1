"""Event encoding: field types, the EventSchema type, its packer and decoder.

An event is a name plus an ordered list of typed fields with units. From that one
declaration come the user_events ``name_args`` string, a precompiled packer and a decoder.
The events themselves are in ``rezolus_ue.schema`` (derived from the metric catalog).

Wire layout (what a consumer sees after the 8-byte common trace header): fixed-size fields
in declaration order with no padding, native byte order; then the bytes of any ``__rel_loc``
fields, in declaration order. A ``__rel_loc`` field is a u32 ``len << 16 | offset`` where
``offset`` counts from the end of that 4-byte field. ``char[]`` data ends with a NUL, which
user_events verifies.
"""

from __future__ import annotations

import re
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

#: Largest payload we write. ftrace and perf silently drop records that do not fit one
#: 4 KiB ring-buffer page (page header, event header and the 8-byte common fields come off
#: the top), so stay well below: a sampler splits its records instead.
MAX_PAYLOAD = 4032

#: The kernel copies at most 512 bytes of the registration string (MAX_EVENT_DESC in
#: kernel/trace/trace_events_user.c, NUL included) and rejects longer ones with EINVAL.
MAX_NAME_ARGS = 511

#: perf rejects event names with '.', '-' or ':'; keep to one safe alphabet.
NAME_RE = re.compile(r"rezolus_[a-z0-9_]+")
#: The same alphabet for an event another project declared (``EventSchema.foreign``).
FOREIGN_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
FIELD_RE = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class FieldType:
    """A user_events field type: its declaration text, wire size and struct code."""

    decl: str
    size: int
    code: str
    signed: bool = False
    dynamic: bool = False
    text: bool = False


U8 = FieldType("u8", 1, "B")
U16 = FieldType("u16", 2, "H")
U32 = FieldType("u32", 4, "I")
U64 = FieldType("u64", 8, "Q")
S8 = FieldType("s8", 1, "b", signed=True)
S16 = FieldType("s16", 2, "h", signed=True)
S32 = FieldType("s32", 4, "i", signed=True)
S64 = FieldType("s64", 8, "q", signed=True)
#: Variable-length byte array stored after the fixed fields.
REL_BYTES = FieldType("__rel_loc u8[]", 4, "I", dynamic=True)
#: Variable-length NUL-terminated string stored after the fixed fields.
REL_STR = FieldType("__rel_loc char[]", 4, "I", dynamic=True, text=True)


def char_array(n: int) -> FieldType:
    """Return a fixed ``char[n]`` type (NUL-padded text)."""
    if not 1 <= n <= 256:
        raise ValueError(f"char[{n}]: size must be 1..256")
    return FieldType(f"char[{n}]", n, f"{n}s", text=True)


@dataclass(frozen=True)
class Field:
    """One field of an event: name, type, unit and what it means."""

    name: str
    type: FieldType
    unit: str
    description: str
    #: Upper bound in bytes for a dynamic field's data (NUL included), used for the 4 KiB check.
    max_len: int = 0
    #: For a binary dynamic field: its text form on the uprobe transport (fetch arguments
    #: have no variable-length binary type) and that text's longest length, NUL included.
    #: For a ``char[N]`` field, a ``text_len`` of N + 1 moves it to a region of its own on
    #: the uprobe transport, so a value of exactly N bytes shows whole.
    to_text: Callable[[bytes], bytes] | None = None
    text_len: int = 0


@dataclass(frozen=True)
class EventSchema:
    """A tracepoint published under ``user_events:<name>``."""

    name: str
    description: str
    fields: tuple[Field, ...]
    #: The sampler (config section) that publishes it.
    sampler: str
    #: When records are written, for the event reference.
    cadence: str = "once per interval"
    #: Declared by another project (OpenTelemetry's ``otlp_metrics``): its name keeps that
    #: project's spelling, ``name_args`` its separators, and its records are bounded by
    #: its fields' ``max_len`` instead of MAX_PAYLOAD.
    foreign: bool = False

    def __post_init__(self) -> None:
        name_re = FOREIGN_NAME_RE if self.foreign else NAME_RE
        if not name_re.fullmatch(self.name):
            raise ValueError(f"event name {self.name!r} must match {name_re.pattern}")
        seen: set[str] = set()
        for f in self.fields:
            if not FIELD_RE.fullmatch(f.name) or f.name.startswith("common_"):
                raise ValueError(f"{self.name}: bad field name {f.name!r}")
            if f.name in seen:
                raise ValueError(f"{self.name}: duplicate field {f.name!r}")
            seen.add(f.name)
            if f.type.dynamic and f.max_len <= 0:
                raise ValueError(f"{self.name}.{f.name}: dynamic fields need max_len")
        if len(self.name_args.encode()) > MAX_NAME_ARGS:
            raise ValueError(
                f"{self.name}: registration string of {len(self.name_args.encode())} bytes"
                f" exceeds the kernel's {MAX_NAME_ARGS}; use fewer or shorter fields"
            )
        if self.max_payload > self.limit:
            raise ValueError(
                f"{self.name}: up to {self.max_payload} bytes per record exceeds {MAX_PAYLOAD};"
                " split it into several records"
            )

    @property
    def fixed_size(self) -> int:
        """Return the size of the fixed part of the payload."""
        return sum(f.type.size for f in self.fields)

    @property
    def limit(self) -> int:
        """Return the largest payload the packer accepts."""
        return self.max_payload if self.foreign else MAX_PAYLOAD

    @property
    def max_payload(self) -> int:
        """Return the largest payload this event can produce."""
        return self.fixed_size + sum(f.max_len for f in self.fields if f.type.dynamic)

    @property
    def name_args(self) -> str:
        """Return the user_events registration string (fields separated by ``"; "``, or as
        a foreign event's declarers spell it)."""
        if not self.fields:
            return self.name
        sep = ";" if self.foreign else "; "
        return self.name + " " + sep.join(f"{f.type.decl} {f.name}" for f in self.fields)

    @property
    def field_names(self) -> tuple[str, ...]:
        """Return the field names in wire order."""
        return tuple(f.name for f in self.fields)

    @cached_property
    def pack(self) -> Callable[..., bytes]:
        """Return a packer taking one positional value per field, in declaration order."""
        return _make_packer(self)

    def unpack(self, payload: bytes) -> dict[str, object]:
        """Return the field values of a payload (as written, without the common header)."""
        return _unpack(self, payload)

    @cached_property
    def uprobe(self) -> UprobeLayout:
        """Return how this event travels on the uprobe transport."""
        return _uprobe_layout(self)


@dataclass(frozen=True)
class UprobeLayout:
    """One event on the uprobe transport: the record its stub receives and the fetch
    arguments that turn it into the same named fields.

    The record is the payload's fixed part at the same offsets, followed by one region
    per dynamic field at a fixed offset (fetch arguments have fixed offsets): text as it
    is, a binary field (a histogram's ``__rel_loc u8[]`` buckets) in its ``to_text``
    form. Every text field is fetched as ``:string`` (perf prints it; a ``char[N]``
    label's last byte is kept NUL, so one of exactly N bytes shows N-1, unless its
    ``text_len`` gives it a region of its own). Scalars keep their types and names.
    """

    #: Fetch arguments, ``name=+OFFSET({reg}):TYPE``, in field order.
    args: tuple[str, ...]
    #: Size of the record buffer (the fixed part plus every dynamic region).
    size: int
    #: payload (as packed for user_events) -> record for the stub.
    record: Callable[[bytes], bytes]

    def fetch_args(self, register: str) -> str:
        """Return the fetch arguments for a first-argument ``register`` (``%di``)."""
        return " ".join(a.format(reg=register) for a in self.args)


def _uprobe_layout(schema: EventSchema) -> UprobeLayout:
    args: list[str] = []
    chars: list[int] = []  # offset of each char[N] label's last byte
    # (loc word end, region, cap, text form or None for text)
    dyn: list[tuple[int, int, int, Callable[[bytes], bytes] | None]] = []
    moved: list[tuple[int, int, int]] = []  # char[N] with a region: (offset, N, region)
    pos, region = 0, schema.fixed_size
    for f in schema.fields:
        if f.type.dynamic:
            if not f.type.text and f.to_text is None:
                raise ValueError(f"{schema.name}.{f.name}: a binary field needs to_text for"
                                 " the uprobe transport")
            cap = f.max_len if f.type.text else f.text_len
            dyn.append((pos + f.type.size, region, cap, None if f.type.text else f.to_text))
            args.append(f"{f.name}=+{region}({{reg}}):string")
            region += cap
        elif f.type.text and f.text_len:
            if f.text_len <= f.type.size:
                raise ValueError(f"{schema.name}.{f.name}: text_len must leave room for a NUL")
            moved.append((pos, f.type.size, region))
            args.append(f"{f.name}=+{region}({{reg}}):string")
            region += f.text_len
        elif f.type.text:
            chars.append(pos + f.type.size - 1)
            args.append(f"{f.name}=+{pos}({{reg}}):string")
        else:
            args.append(f"{f.name}=+{pos}({{reg}}):{f.type.decl}")
        pos += f.type.size
    fixed, size = schema.fixed_size, region

    if not dyn and not chars and not moved:
        def record(payload: bytes) -> bytes:
            return payload
    elif not dyn and not moved:
        def record(payload: bytes) -> bytes:
            for at in chars:
                if payload[at]:
                    buf = bytearray(payload)
                    for j in chars:
                        buf[j] = 0
                    return bytes(buf)
            return payload
    else:
        def record(payload: bytes) -> bytes:
            buf = bytearray(size)
            buf[:fixed] = payload[:fixed]
            for end, at, cap, to_text in dyn:
                loc = int.from_bytes(payload[end - 4:end], sys.byteorder)
                start = end + (loc & 0xFFFF)
                data = payload[start:start + (loc >> 16)]
                data = (data.rstrip(b"\0") if to_text is None else to_text(data))[:cap - 1]
                buf[at:at + len(data)] = data
            for off, n, to in moved:
                text = payload[off:off + n].split(b"\0", 1)[0]
                buf[to:to + len(text)] = text
            for j in chars:
                buf[j] = 0
            return bytes(buf)

    return UprobeLayout(tuple(args), size, record)


def _make_packer(schema: EventSchema) -> Callable[..., bytes]:
    fixed = struct.Struct("=" + "".join(f.type.code for f in schema.fields))
    dyn = [(i, f) for i, f in enumerate(schema.fields) if f.type.dynamic]
    chars = [i for i, f in enumerate(schema.fields) if f.type.text and not f.type.dynamic]
    if not dyn and not chars:
        return fixed.pack
    if not dyn:  # char[N] text only (every _dist event): no tail to build
        fixed_pack = fixed.pack

        def pack_chars(*values: object) -> bytes:
            for i in chars:
                if isinstance(values[i], str):
                    vals = list(values)
                    for j in chars:
                        v = vals[j]
                        if isinstance(v, str):
                            vals[j] = v.encode()
                    return fixed_pack(*vals)
            return fixed_pack(*values)

        return pack_chars
    # Offset of the end of each dynamic field's 4-byte loc word, for the relative offsets.
    ends: list[int] = []
    pos = 0
    for f in schema.fields:
        pos += f.type.size
        if f.type.dynamic:
            ends.append(pos)
    size = fixed.size
    name, limit = schema.name, schema.limit

    def pack(*values: object) -> bytes:
        vals = list(values)
        for i in chars:
            v = vals[i]
            if isinstance(v, str):
                vals[i] = v.encode()
        tail = []
        at = size
        for (i, f), end in zip(dyn, ends, strict=True):
            v = vals[i]
            data = v.encode() + b"\0" if isinstance(v, str) else bytes(v)  # type: ignore[arg-type]
            if f.type.text and not data.endswith(b"\0"):
                data += b"\0"
            if len(data) > 0xFFFF:
                raise ValueError(f"{name}.{f.name}: {len(data)} bytes exceeds 65535")
            vals[i] = (len(data) << 16) | (at - end)
            tail.append(data)
            at += len(data)
        if at > limit:
            raise ValueError(f"{name}: payload of {at} bytes exceeds {limit}; split it")
        return fixed.pack(*vals) + b"".join(tail)

    return pack


def _unpack(schema: EventSchema, payload: bytes) -> dict[str, object]:
    fixed = struct.Struct("=" + "".join(f.type.code for f in schema.fields))
    if len(payload) < fixed.size:
        raise ValueError(f"{schema.name}: payload of {len(payload)} bytes < {fixed.size}")
    out: dict[str, object] = {}
    pos = 0
    for f, v in zip(schema.fields, fixed.unpack_from(payload), strict=True):
        pos += f.type.size
        if f.type.dynamic:
            assert isinstance(v, int)
            start, length = pos + (v & 0xFFFF), v >> 16
            data = bytes(payload[start : start + length])
            if len(data) != length:
                raise ValueError(f"{schema.name}.{f.name}: data runs past the payload")
            out[f.name] = data.rstrip(b"\0").decode(errors="replace") if f.type.text else data
        elif isinstance(v, bytes):
            out[f.name] = v.split(b"\0", 1)[0].decode(errors="replace")
        else:
            out[f.name] = v
    return out
