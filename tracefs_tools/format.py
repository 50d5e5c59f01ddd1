"""Parse an event's tracefs `format` file and decode raw records with it.

The layout is what `f_show()` in kernel/trace/trace_events.c prints: a header (`name:`,
`ID:`, `format:`), the common fields, a blank line, the event's own fields, a blank line
and `print fmt:`. One field per line:

    field:<type> <name>[<dim>];	offset:<n>;	size:<n>;	signed:<0|1>;

Quirks handled here:
- the kernel moves an array's brackets behind the name (`char prev_comm[16]`) except for
  `__data_loc` types (`__data_loc char[] name`); `__rel_loc` ones are moved
  (`__rel_loc char msg[]`). `FormatField.type` puts the brackets back on the type.
- user_events print fixed arrays without a length (`char name[];` with `size:16`), so the
  length comes from `size` when the brackets are empty and `size` is not 0.
- `size:0` arrays (`char buf[]`) are flexible: they run to the end of the record.
- kernels before 2.6.33 printed no `signed:`; very old ones wrote `field special:`.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EventFormat", "FormatField", "parse_format"]

_FIELD_RE = re.compile(
    r"^\s*field(?: special)?:(?P<decl>[^;]+);"
    r"\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
    r"(?:\s*signed:(?P<signed>\d+);)?"
)
# Type, then the name, then an optional array dimension that the kernel moved behind it.
_DECL_RE = re.compile(r"^(?P<type>.*?)\s*(?P<name>[A-Za-z_]\w*)\s*(?P<dim>\[[^\]]*\])?$")
_DIM_RE = re.compile(r"\[([^\]]*)\]$")

# Element sizes for arrays printed without a length (user_events: `char name[]`, size:16).
_ELEM_SIZES = {
    "char": 1, "signed char": 1, "unsigned char": 1, "u8": 1, "s8": 1, "__u8": 1, "__s8": 1,
    "short": 2, "unsigned short": 2, "u16": 2, "s16": 2, "__u16": 2, "__s16": 2,
    "int": 4, "unsigned int": 4, "u32": 4, "s32": 4, "__u32": 4, "__s32": 4,
    "long long": 8, "unsigned long long": 8, "u64": 8, "s64": 8, "__u64": 8, "__s64": 8,
}  # fmt: skip
_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_LOC_PREFIXES = {"__data_loc": "data_loc", "__rel_loc": "rel_loc"}


@dataclass(frozen=True)
class FormatField:
    """One field of an event record, as described by the `format` file.

    `type` is the C type as the kernel knows it, array brackets included and the name left
    out: `unsigned short`, `char[16]`, `__data_loc char[]`, `__rel_loc u8[]`.
    """

    name: str
    type: str
    offset: int
    size: int
    signed: bool
    loc: str | None = None  # "data_loc" | "rel_loc" | None
    array_len: int | None = None  # element count of a fixed-size array
    is_common: bool = False

    @property
    def element_type(self) -> str:
        """Return the type without `__data_loc`/`__rel_loc`, `const` and brackets."""
        t = self.type
        if self.loc:
            t = t.split(None, 1)[1] if " " in t else ""
        t = _DIM_RE.sub("", t).strip()
        return t.removeprefix("const ").strip()

    @property
    def is_array(self) -> bool:
        """Return True for fixed, flexible and dynamic (`__data_loc`/`__rel_loc`) arrays."""
        return self.loc is not None or self.type.endswith("]")


def _parse_field(line: str) -> FormatField | None:
    """Return the FormatField of one `field:` line, or None if the line is not one."""
    m = _FIELD_RE.match(line)
    if not m:
        return None
    decl = m["decl"].strip()
    d = _DECL_RE.match(decl)
    if not d or not d["type"]:
        raise ValueError(f"cannot split field declaration {decl!r} into type and name")
    type_ = d["type"].strip() + (d["dim"] or "")
    size = int(m["size"])
    loc = next((v for k, v in _LOC_PREFIXES.items() if type_.startswith(k + " ")), None)
    array_len = None
    dim = _DIM_RE.search(type_)
    if dim and loc is None:
        if dim[1].strip().isdigit():
            array_len = int(dim[1])
        elif size:
            elem = _DIM_RE.sub("", type_).removeprefix("const ").strip()
            elem_size = _ELEM_SIZES.get(elem)
            if elem_size:
                array_len = size // elem_size
    return FormatField(
        name=d["name"],
        type=type_,
        offset=int(m["offset"]),
        size=size,
        signed=m["signed"] == "1",
        loc=loc,
        array_len=array_len,
        is_common=d["name"].startswith("common_"),
    )


def _c_string(data: bytes) -> str:
    """Return the bytes up to the first NUL as text."""
    return data.split(b"\0", 1)[0].decode("utf-8", errors="replace")


_Decoder = Callable[[bytes], dict[str, object]]
_FieldDecoder = Callable[[bytes, dict[str, object]], None]
_U32 = struct.Struct("=I")


def _build_decoder(fmt_name: str, payload: tuple[FormatField, ...], fixed_end: int) -> _Decoder:
    """Return a function that decodes the payload fields of a raw record."""
    # Plain integers go through one Struct; "=" is native byte order (sys.byteorder) without
    # alignment, so explicit pad bytes place each value at its offset.
    ints = sorted(
        (f for f in payload if not f.is_array and f.size in _INT_CODES), key=lambda f: f.offset
    )
    read_ints = _int_reader(ints)

    others = []
    for f in payload:
        if f.is_array or f.size not in _INT_CODES:
            as_text = f.element_type == "char"
            if f.loc:
                others.append(_loc_decoder(fmt_name, f, as_text))
            else:
                # A size-0 array is a flexible array member: it runs to the end of the record.
                end = None if f.size == 0 and f.is_array else f.offset + f.size
                others.append(_slice_decoder(f, end, as_text))

    def decode(raw: bytes) -> dict[str, object]:
        if len(raw) < fixed_end:
            raise ValueError(
                f"truncated {fmt_name} record: {len(raw)} bytes, the format needs {fixed_end}"
            )
        out = read_ints(raw)
        for fn in others:
            fn(raw, out)
        # Keep the format's field order, as callers print these.
        return {f.name: out[f.name] for f in payload}

    return decode


def _int_code(f: FormatField) -> str:
    """Return the struct code for an integer field."""
    code = _INT_CODES[f.size]
    return code if f.signed else code.upper()


def _int_reader(ints: list[FormatField]) -> Callable[[bytes], dict[str, object]]:
    """Return a function reading the integer fields `ints` (sorted by offset) of a record."""
    layout, pos = ["="], 0
    for f in ints:
        if f.offset < pos:
            # Overlapping fields (a union) cannot share one Struct: read them one by one.
            singles = [(f.name, f.offset, struct.Struct("=" + _int_code(f))) for f in ints]
            return lambda raw: {n: s.unpack_from(raw, o)[0] for n, o, s in singles}
        layout.append(f"{f.offset - pos}x{_int_code(f)}")
        pos = f.offset + f.size
    whole = struct.Struct("".join(layout))
    names = tuple(f.name for f in ints)
    return lambda raw: dict(zip(names, whole.unpack_from(raw), strict=True))


def _slice_decoder(f: FormatField, end: int | None, as_text: bool) -> _FieldDecoder:
    """Return a decoder for a field stored inline at raw[f.offset:end]."""

    def decode_slice(raw: bytes, out: dict[str, object]) -> None:
        data = raw[f.offset : end]
        out[f.name] = _c_string(data) if as_text else bytes(data)

    return decode_slice


def _loc_decoder(fmt_name: str, f: FormatField, as_text: bool) -> _FieldDecoder:
    """Return a decoder for one `__data_loc`/`__rel_loc` field.

    The u32 holds the length in its high 16 bits and an offset in the low 16 bits. The
    offset counts from the record start for `__data_loc`, and from the end of the u32
    itself for `__rel_loc` (kernel 5.18+, used by user_events).
    """
    base = f.offset + 4 if f.loc == "rel_loc" else 0

    def decode_loc(raw: bytes, out: dict[str, object]) -> None:
        (loc,) = _U32.unpack_from(raw, f.offset)
        length, start = loc >> 16, base + (loc & 0xFFFF)
        if start + length > len(raw):
            raise ValueError(
                f"truncated {fmt_name} record: {f.name} needs bytes {start}..{start + length}"
                f" but the record has {len(raw)}"
            )
        data = raw[start : start + length]
        out[f.name] = _c_string(data) if as_text else bytes(data)

    return decode_loc


@dataclass(frozen=True)
class EventFormat:
    """The layout of one trace event, with a precomputed decoder for its raw records."""

    name: str
    id: int
    fields: tuple[FormatField, ...]
    print_fmt: str = ""
    common_fields: tuple[FormatField, ...] = dataclasses.field(init=False)
    payload_fields: tuple[FormatField, ...] = dataclasses.field(init=False)
    _decode: _Decoder = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        common = tuple(f for f in self.fields if f.is_common)
        payload = tuple(f for f in self.fields if not f.is_common)
        fixed_end = max((f.offset + f.size for f in self.fields), default=0)
        object.__setattr__(self, "common_fields", common)
        object.__setattr__(self, "payload_fields", payload)
        object.__setattr__(self, "_decode", _build_decoder(self.name, payload, fixed_end))

    def field(self, name: str) -> FormatField:
        """Return the field called `name`; raise KeyError if there is none."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"event {self.name} has no field {name!r}")

    def decode(self, raw: bytes) -> dict[str, object]:
        """Return {field: value} for the payload fields of one raw record.

        `raw` starts at the common header, as PERF_SAMPLE_RAW data does; bytes past the
        last field (perf's alignment padding) are ignored.
        Integers are native-endian; `char` arrays become str (up to the first NUL), other
        arrays bytes. Raise ValueError if `raw` is too short.
        """
        return self._decode(raw)


def parse_format(text: str) -> EventFormat:
    """Return the EventFormat described by the text of a tracefs `format` file."""
    name: str | None = None
    event_id: int | None = None
    print_fmt = ""
    fields: list[FormatField] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("name:") and name is None:
            name = stripped.removeprefix("name:").strip()
        elif stripped.startswith("ID:") and event_id is None:
            event_id = int(stripped.removeprefix("ID:").strip())
        elif stripped.startswith("print fmt:"):
            print_fmt = stripped.removeprefix("print fmt:").strip()
        elif stripped.startswith("field"):
            parsed = _parse_field(line)
            if parsed is not None:
                fields.append(parsed)
    if name is None or event_id is None:
        raise ValueError("not a tracefs event format: missing 'name:' or 'ID:' line")
    return EventFormat(name=name, id=event_id, fields=tuple(fields), print_fmt=print_fmt)
