"""Pure tests of the perf_event binding: ABI layouts, ioctl numbers, parsers, ring decoding.

Expected numbers are copied from include/uapi/linux/perf_event.h, not from the module.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from pathlib import Path

import pytest

from rezolus_ue.errors import KernelFeatureMissing, PermissionDenied, RezolusError
from rezolus_ue.linux import perf_event as pe
from rezolus_ue.linux import perf_ring as pr
from rezolus_ue.linux import procfs

# (field, offset, size) of struct perf_event_attr, PERF_ATTR_SIZE_VER8.
ATTR_LAYOUT = [
    ("type", 0, 4),
    ("size", 4, 4),
    ("config", 8, 8),
    ("sample_period", 16, 8),
    ("sample_type", 24, 8),
    ("read_format", 32, 8),
    ("flags", 40, 8),
    ("wakeup_events", 48, 4),
    ("bp_type", 52, 4),
    ("config1", 56, 8),
    ("config2", 64, 8),  # PERF_ATTR_SIZE_VER0 ends here + 8 = 72 (VER1)
    ("branch_sample_type", 72, 8),
    ("sample_regs_user", 80, 8),
    ("sample_stack_user", 88, 4),
    ("clockid", 92, 4),
    ("sample_regs_intr", 96, 8),
    ("aux_watermark", 104, 4),
    ("sample_max_stack", 108, 2),
    ("_reserved_2", 110, 2),
    ("aux_sample_size", 112, 4),
    ("aux_action", 116, 4),
    ("sig_data", 120, 8),
    ("config3", 128, 8),
]


def test_attr_size_is_ver8() -> None:
    assert ctypes.sizeof(pe.PerfEventAttr) == pe.PERF_ATTR_SIZE_VER8 == 136
    assert pe.PerfEventAttr().size == 136


@pytest.mark.parametrize(("name", "offset", "size"), ATTR_LAYOUT)
def test_attr_field_offsets(name: str, offset: int, size: int) -> None:
    field = getattr(pe.PerfEventAttr, name)
    assert (field.offset, field.size) == (offset, size)


def test_attr_version_boundaries() -> None:
    # Each PERF_ATTR_SIZE_VERn is the end offset of the field that version added.
    ends = {name: off + size for name, off, size in ATTR_LAYOUT}
    assert ends["config1"] == pe.PERF_ATTR_SIZE_VER0
    assert ends["config2"] == pe.PERF_ATTR_SIZE_VER1
    assert ends["branch_sample_type"] == pe.PERF_ATTR_SIZE_VER2
    assert ends["clockid"] == pe.PERF_ATTR_SIZE_VER3
    assert ends["sample_regs_intr"] == pe.PERF_ATTR_SIZE_VER4
    assert ends["_reserved_2"] == pe.PERF_ATTR_SIZE_VER5
    assert ends["aux_action"] == pe.PERF_ATTR_SIZE_VER6
    assert ends["sig_data"] == pe.PERF_ATTR_SIZE_VER7
    assert ends["config3"] == pe.PERF_ATTR_SIZE_VER8


# Bit positions in the bitfield word, counted in header declaration order.
FLAG_BITS = {
    "disabled": 0,
    "inherit": 1,
    "pinned": 2,
    "exclusive": 3,
    "exclude_user": 4,
    "exclude_kernel": 5,
    "exclude_hv": 6,
    "exclude_idle": 7,
    "mmap": 8,
    "comm": 9,
    "freq": 10,
    "inherit_stat": 11,
    "enable_on_exec": 12,
    "task": 13,
    "watermark": 14,
    # precise_ip: bits 15-16
    "mmap_data": 17,
    "sample_id_all": 18,
    "exclude_host": 19,
    "exclude_guest": 20,
    "exclude_callchain_kernel": 21,
    "exclude_callchain_user": 22,
    "mmap2": 23,
    "comm_exec": 24,
    "use_clockid": 25,
    "context_switch": 26,
    "write_backward": 27,
    "namespaces": 28,
    "ksymbol": 29,
    "bpf_event": 30,
    "aux_output": 31,
    "cgroup": 32,
    "text_poke": 33,
    "build_id": 34,
    "inherit_thread": 35,
    "remove_on_exec": 36,
    "sigtrap": 37,
    "aux_start_paused": 38,
}


def test_flag_bits_match_header() -> None:
    assert {n: m.bit_length() - 1 for n, m in pe.ATTR_FLAGS.items()} == FLAG_BITS
    assert pe.ATTR_PRECISE_IP_MASK == 0b11 << 15


def test_flag_helpers_write_the_flags_word() -> None:
    attr = pe.PerfEventAttr()
    attr.set_flags(disabled=True, watermark=True, sample_id_all=True)
    assert attr.flags == (1 << 0) | (1 << 14) | (1 << 18)
    attr.precise_ip = 2
    assert attr.flags == (1 << 0) | (1 << 14) | (1 << 16) | (1 << 18)
    assert attr.precise_ip == 2
    attr.set_flags(disabled=False)
    assert not attr.flag("disabled")
    assert attr.flag("watermark")
    raw = bytes(attr)
    assert struct.unpack_from("=Q", raw, 40)[0] == attr.flags
    with pytest.raises(ValueError):
        attr.set_flags(no_such_flag=True)
    with pytest.raises(ValueError):
        attr.precise_ip = 4


def test_union_aliases() -> None:
    attr = pe.PerfEventAttr()
    attr.sample_freq = 99
    attr.wakeup_watermark = 4096
    assert (attr.sample_period, attr.wakeup_events) == (99, 4096)


def test_constants_match_header() -> None:
    assert (pe.PERF_TYPE_HARDWARE, pe.PERF_TYPE_SOFTWARE, pe.PERF_TYPE_TRACEPOINT) == (0, 1, 2)
    assert (pe.PERF_TYPE_HW_CACHE, pe.PERF_TYPE_RAW, pe.PERF_TYPE_BREAKPOINT) == (3, 4, 5)
    assert pe.PERF_COUNT_SW_CONTEXT_SWITCHES == 3
    assert pe.PERF_COUNT_SW_CPU_MIGRATIONS == 4
    assert pe.PERF_COUNT_HW_BRANCH_MISSES == 5
    assert pe.PERF_SAMPLE_RAW == 0x400
    assert pe.PERF_SAMPLE_IDENTIFIER == 0x10000
    assert (pr.PERF_RECORD_LOST, pr.PERF_RECORD_SAMPLE, pr.PERF_RECORD_LOST_SAMPLES) == (2, 9, 13)
    assert pe.PERF_FLAG_FD_CLOEXEC == 8


def test_ioctl_numbers() -> None:
    assert pe.PERF_EVENT_IOC_ENABLE == 0x2400
    assert pe.PERF_EVENT_IOC_DISABLE == 0x2401
    assert pe.PERF_EVENT_IOC_REFRESH == 0x2402
    assert pe.PERF_EVENT_IOC_RESET == 0x2403
    assert pe.PERF_EVENT_IOC_PERIOD == 0x40082404
    assert pe.PERF_EVENT_IOC_ID == 0x80082407


def test_mmap_page_control_offsets() -> None:
    # struct perf_event_mmap_page pads its self-monitoring part to 1 KiB.
    assert (pr.MMAP_PAGE_DATA_HEAD, pr.MMAP_PAGE_DATA_TAIL) == (1024, 1032)
    assert (pr.MMAP_PAGE_DATA_OFFSET, pr.MMAP_PAGE_DATA_SIZE) == (1040, 1048)


@pytest.mark.parametrize(
    ("machine", "nr"), [("x86_64", 298), ("aarch64", 241), ("arm64", 241), ("riscv64", 241)]
)
def test_syscall_number(monkeypatch: pytest.MonkeyPatch, machine: str, nr: int) -> None:
    monkeypatch.setattr(pe.platform, "machine", lambda: machine)
    assert pe._syscall_nr() == nr


def test_unknown_arch_is_a_missing_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pe.platform, "machine", lambda: "pdp11")
    with pytest.raises(KernelFeatureMissing, match="pdp11"):
        pe._syscall_nr()


# --- errno translation -------------------------------------------------------------------
def _attr(type_: int) -> pe.PerfEventAttr:
    return pe.PerfEventAttr(type=type_, config=3)


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM])
def test_permission_errors_name_the_remedy(err: int) -> None:
    exc = pe._open_error(err, _attr(pe.PERF_TYPE_TRACEPOINT), -1, 0)
    assert isinstance(exc, PermissionDenied)
    assert "perf_event_paranoid" in str(exc)
    assert "CAP_PERFMON" in str(exc)


@pytest.mark.parametrize("err", [errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV])
def test_missing_pmu_is_a_missing_feature(err: int) -> None:
    exc = pe._open_error(err, _attr(pe.PERF_TYPE_HARDWARE), 0, -1)
    assert isinstance(exc, KernelFeatureMissing)
    assert exc.feature == "hardware perf counters"
    assert "PMU" in exc.hint


def test_enoent_for_software_is_not_a_pmu_problem() -> None:
    exc = pe._open_error(errno.ENOENT, _attr(pe.PERF_TYPE_SOFTWARE), 0, -1)
    assert type(exc) is RezolusError
    assert "No such file" in str(exc)


def test_einval_carries_the_attr_summary() -> None:
    attr = _attr(pe.PERF_TYPE_SOFTWARE).set_flags(disabled=True, exclude_hv=True)
    exc = pe._open_error(errno.EINVAL, attr, 0, -1)
    assert type(exc) is RezolusError
    assert "type=1 config=0x3" in str(exc)
    assert "disabled,exclude_hv" in str(exc)


# --- CPU lists ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0\n", [0]),
        ("0-3", [0, 1, 2, 3]),
        ("0-3,5,7-8\n", [0, 1, 2, 3, 5, 7, 8]),
        ("2,0-1", [0, 1, 2]),
        ("0-1,1-2", [0, 1, 2]),
        ("", []),
        ("\n", []),
        ("12-13", [12, 13]),
    ],
)
def test_parse_cpu_list(text: str, cpus: list[int]) -> None:
    assert procfs.parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "0-x"])
def test_parse_cpu_list_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        procfs.parse_cpu_list(text)


def test_online_cpus_reads_injected_sysfs(tmp_path: Path) -> None:
    d = tmp_path / "devices/system/cpu"
    d.mkdir(parents=True)
    (d / "online").write_text("0-1,4\n")
    assert pr.online_cpus(str(tmp_path)) == [0, 1, 4]


def test_online_cpus_missing_file_is_a_rezolus_error(tmp_path: Path) -> None:
    with pytest.raises(RezolusError, match="online"):
        pr.online_cpus(str(tmp_path))


# --- ring buffer decoding ----------------------------------------------------------------
PAGE = 4096
DATA_SIZE = 256  # small, so records wrap quickly


class FakeRing:
    """A bytearray laid out like a perf mmap: control page, then the data area."""

    def __init__(self, data_size: int = DATA_SIZE, *, advertise_layout: bool = True) -> None:
        self.buf = bytearray(PAGE + data_size)
        self.data_size = data_size
        self.head = 0
        if advertise_layout:
            struct.pack_into("=QQ", self.buf, 1040, PAGE, data_size)

    def write(self, record: bytes) -> None:
        """Append a record as the kernel would, wrapping at the end of the data area."""
        for i, b in enumerate(record):
            self.buf[PAGE + (self.head + i) % self.data_size] = b
        self.head += len(record)
        struct.pack_into("=Q", self.buf, 1024, self.head)

    @property
    def tail(self) -> int:
        return struct.unpack_from("=Q", self.buf, 1032)[0]


def record(rtype: int, body: bytes, misc: int = 0) -> bytes:
    assert len(body) % 8 == 0
    return struct.pack("=IHH", rtype, misc, 8 + len(body)) + body


def raw_field(payload: bytes) -> bytes:
    """Return a PERF_SAMPLE_RAW field padded so the record stays 8-byte aligned."""
    field = struct.pack("=I", len(payload)) + payload
    return field + b"\0" * (-len(field) % 8)


TP_SAMPLE_TYPE = pe.PERF_SAMPLE_TID | pe.PERF_SAMPLE_TIME | pe.PERF_SAMPLE_CPU | pe.PERF_SAMPLE_RAW


def tp_sample(pid: int, time: int, cpu: int, payload: bytes) -> bytes:
    body = struct.pack("=IIQII", pid, pid + 1, time, cpu, 0) + raw_field(payload)
    return record(pr.PERF_RECORD_SAMPLE, body)


def test_ring_decodes_samples_and_writes_back_tail() -> None:
    ring = FakeRing()
    ring.write(tp_sample(100, 5000, 1, b"\x31\x01abcd"))
    ring.write(tp_sample(200, 6000, 0, b"xy"))
    rb = pr.RingBuffer(ring.buf, TP_SAMPLE_TYPE, page_size=PAGE)
    samples = rb.read()
    assert samples == [
        pr.Sample(time=5000, cpu=1, pid=100, tid=101, raw=b"\x31\x01abcd"),
        pr.Sample(time=6000, cpu=0, pid=200, tid=201, raw=b"xy"),
    ]
    assert ring.tail == ring.head
    assert rb.read() == []
    assert (rb.lost, rb.skipped, rb.malformed) == (0, 0, 0)


def test_ring_record_wrapping_the_end_of_the_data_area() -> None:
    ring = FakeRing()
    rb = pr.RingBuffer(ring.buf, TP_SAMPLE_TYPE, page_size=PAGE)
    filler = tp_sample(1, 1, 0, b"f" * 180)  # 8 + 24 + 184 = 216 bytes
    ring.write(filler)
    assert len(rb.read()) == 1
    payload = bytes(range(60))
    wrapping = tp_sample(7, 42, 1, payload)  # 96 bytes starting at 216: wraps at 256
    assert ring.head % DATA_SIZE + len(wrapping) > DATA_SIZE
    ring.write(wrapping)
    ring.write(tp_sample(8, 43, 0, b"after"))
    samples = rb.read()
    assert [s.raw for s in samples] == [payload, b"after"]
    assert [(s.pid, s.tid, s.time, s.cpu) for s in samples] == [(7, 8, 42, 1), (8, 9, 43, 0)]
    assert ring.tail == ring.head > DATA_SIZE


def test_ring_header_wrapping_exactly_at_the_end() -> None:
    ring = FakeRing()
    rb = pr.RingBuffer(ring.buf, TP_SAMPLE_TYPE, page_size=PAGE)
    ring.write(tp_sample(1, 1, 0, b"f" * 220))  # 8 + 24 + 224 = 256: fills the ring
    assert len(rb.read()) == 1
    ring.write(tp_sample(2, 2, 0, b"next"))  # starts at offset 0 again
    assert [s.raw for s in rb.read()] == [b"next"]


def test_ring_counts_lost_and_skips_other_records() -> None:
    ring = FakeRing()
    rb = pr.RingBuffer(ring.buf, TP_SAMPLE_TYPE, page_size=PAGE)
    ring.write(tp_sample(1, 10, 0, b"a"))
    ring.write(record(pr.PERF_RECORD_LOST, struct.pack("=QQ", 77, 5)))
    ring.write(record(pr.PERF_RECORD_THROTTLE, struct.pack("=QQQ", 1, 2, 3)))
    ring.write(record(pr.PERF_RECORD_LOST_SAMPLES, struct.pack("=Q", 2)))
    ring.write(tp_sample(2, 20, 1, b"b"))
    samples = rb.read()
    assert [s.raw for s in samples] == [b"a", b"b"]
    assert rb.lost == 7
    assert rb.skipped == 1
    ring.write(record(pr.PERF_RECORD_LOST, struct.pack("=QQ", 77, 1)))
    assert rb.read() == []
    assert rb.lost == 8


def test_ring_without_advertised_layout_uses_page_one() -> None:
    # Kernels before 4.1 leave data_offset/data_size zero: data starts at page 1.
    ring = FakeRing(advertise_layout=False)
    ring.write(tp_sample(3, 30, 0, b"old"))
    rb = pr.RingBuffer(ring.buf, TP_SAMPLE_TYPE, page_size=PAGE)
    assert (rb.data_offset, rb.data_size) == (PAGE, DATA_SIZE)
    assert [s.raw for s in rb.read()] == [b"old"]


def test_ring_counts_malformed_samples_and_moves_on() -> None:
    ring = FakeRing()
    rb = pr.RingBuffer(ring.buf, TP_SAMPLE_TYPE, page_size=PAGE)
    ring.write(record(pr.PERF_RECORD_SAMPLE, struct.pack("=Q", 1)))  # too short
    ring.write(tp_sample(4, 40, 0, b"ok"))
    assert [s.raw for s in rb.read()] == [b"ok"]
    assert rb.malformed == 1
    assert ring.tail == ring.head


def test_ring_rejects_a_bad_layout() -> None:
    buf = bytearray(PAGE + 300)
    struct.pack_into("=QQ", buf, 1040, PAGE, 300)  # not a power of two
    with pytest.raises(ValueError):
        pr.RingBuffer(buf, TP_SAMPLE_TYPE, page_size=PAGE)


def test_decoder_all_fixed_fields_in_abi_order() -> None:
    st = (
        pe.PERF_SAMPLE_IDENTIFIER
        | pe.PERF_SAMPLE_IP
        | pe.PERF_SAMPLE_TID
        | pe.PERF_SAMPLE_TIME
        | pe.PERF_SAMPLE_ADDR
        | pe.PERF_SAMPLE_STREAM_ID
        | pe.PERF_SAMPLE_CPU
        | pe.PERF_SAMPLE_PERIOD
        | pe.PERF_SAMPLE_CALLCHAIN
        | pe.PERF_SAMPLE_RAW
    )
    body = struct.pack("=QQIIQQQIIQ", 9, 0xFFFF1234, 10, 11, 12, 0xADD, 13, 3, 0xDEAD, 1)
    body += struct.pack("=QQQ", 2, 0xA, 0xB) + raw_field(b"raw!")
    s = pr.SampleDecoder(st).decode(body)
    assert (s.id, s.ip, s.pid, s.tid, s.time, s.addr) == (9, 0xFFFF1234, 10, 11, 12, 0xADD)
    assert (s.stream_id, s.cpu, s.period, s.callchain, s.raw) == (13, 3, 1, (0xA, 0xB), b"raw!")


def test_decoder_id_and_period() -> None:
    st = pe.PERF_SAMPLE_TIME | pe.PERF_SAMPLE_ID | pe.PERF_SAMPLE_PERIOD
    s = pr.SampleDecoder(st).decode(struct.pack("=QQQ", 100, 5, 1))
    assert (s.time, s.id, s.period, s.cpu, s.raw) == (100, 5, 1, None, None)


@pytest.mark.parametrize(
    ("read_format", "read_words"),
    [
        (0, [123]),
        (pe.PERF_FORMAT_TOTAL_TIME_ENABLED | pe.PERF_FORMAT_TOTAL_TIME_RUNNING, [1, 2, 3]),
        (pe.PERF_FORMAT_ID | pe.PERF_FORMAT_LOST, [1, 2, 3]),
        # group: nr=2, enabled, then (value, id) x 2
        (
            pe.PERF_FORMAT_GROUP | pe.PERF_FORMAT_TOTAL_TIME_ENABLED | pe.PERF_FORMAT_ID,
            [2, 50, 1, 11, 2, 22],
        ),
    ],
)
def test_decoder_skips_read_values(read_format: int, read_words: list[int]) -> None:
    st = pe.PERF_SAMPLE_TIME | pe.PERF_SAMPLE_READ | pe.PERF_SAMPLE_RAW
    body = struct.pack("=Q", 77) + struct.pack(f"={len(read_words)}Q", *read_words)
    body += raw_field(b"after-read")
    s = pr.SampleDecoder(st, read_format).decode(body)
    assert (s.time, s.raw) == (77, b"after-read")


def test_counter_value_scaling() -> None:
    assert pe.CounterValue(100, None, None).scaled == 100
    assert pe.CounterValue(100, 1000, 1000).scaled == 100
    assert pe.CounterValue(100, 1000, 250).scaled == 400
    assert pe.CounterValue(0, 1000, 0).scaled == 0


def test_tracepoint_rejects_non_power_of_two_ring() -> None:
    with pytest.raises(ValueError, match="power of two"):
        pr.RingEvent.tracepoint(1, 0, ring_pages=3)


def test_group_read_format_is_refused_before_opening(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_syscall(*args: object) -> int:
        raise AssertionError("perf_event_open must not be called")

    monkeypatch.setattr(pe, "perf_event_open", no_syscall)
    attr = pe.PerfEventAttr(type=pe.PERF_TYPE_SOFTWARE,
                            read_format=pe.PERF_FORMAT_GROUP | pe.PERF_FORMAT_ID)
    with pytest.raises(ValueError, match="GROUP"):
        pe.PerfEvent.open(attr, 0, -1)
