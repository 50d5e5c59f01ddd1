"""The syscall-number -> family table (pure): families, both architectures' numbers, and
the u8 array the BPF program indexes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rezolus_ue.samplers.syscall import SYSCALL, SYSCALL_LATENCY
from rezolus_ue.samplers.syscall.sampler import table

#: (number, syscall name, family) spot checks, from the kernel's tables.
X86_64 = [
    (0, "read", "read"), (1, "write", "write"), (2, "open", "filesystem"),
    (7, "poll", "poll"), (9, "mmap", "memory"), (16, "ioctl", "other"),
    (17, "pread64", "read"), (20, "writev", "write"), (22, "pipe", "ipc"),
    (24, "sched_yield", "yield"), (35, "nanosleep", "sleep"), (37, "alarm", "timer"),
    (39, "getpid", "query"), (41, "socket", "socket"), (45, "recvfrom", "read"),
    (46, "sendmsg", "write"), (56, "clone", "process"), (60, "exit", "process"),
    (102, "getuid", "query"), (186, "gettid", "query"), (201, "time", "time"),
    (202, "futex", "lock"), (228, "clock_gettime", "time"),
    (230, "clock_nanosleep", "sleep"), (232, "epoll_wait", "poll"),
    (257, "openat", "filesystem"), (262, "newfstatat", "filesystem"),
    (283, "timerfd_create", "timer"), (290, "eventfd2", "event"),
    (302, "prlimit64", "query"), (321, "bpf", "other"), (332, "statx", "filesystem"),
    (334, "rseq", "other"), (336, "uprobe", "other"), (426, "io_uring_enter", "event"),
    (435, "clone3", "process"), (441, "epoll_pwait2", "poll"), (449, "futex_waitv", "lock"),
    (455, "futex_wait", "lock"), (469, "file_setattr", "other"),
]
ARM64 = [
    (0, "io_setup", "event"), (19, "eventfd2", "event"), (22, "epoll_pwait", "poll"),
    (25, "fcntl", "other"), (29, "ioctl", "other"), (35, "unlinkat", "filesystem"),
    (38, "renameat", "filesystem"), (56, "openat", "filesystem"),
    (57, "close", "filesystem"), (59, "pipe2", "ipc"), (62, "lseek", "filesystem"),
    (63, "read", "read"), (64, "write", "write"), (65, "readv", "read"),
    (73, "ppoll", "poll"), (79, "newfstatat", "filesystem"), (80, "fstat", "filesystem"),
    (85, "timerfd_create", "timer"), (93, "exit", "process"), (98, "futex", "lock"),
    (101, "nanosleep", "sleep"), (113, "clock_gettime", "time"),
    (115, "clock_nanosleep", "sleep"), (124, "sched_yield", "yield"),
    (163, "getrlimit", "query"), (169, "gettimeofday", "time"), (172, "getpid", "query"),
    (174, "getuid", "query"), (178, "gettid", "query"), (198, "socket", "socket"),
    (206, "sendto", "write"), (207, "recvfrom", "read"), (214, "brk", "memory"),
    (220, "clone", "process"), (221, "execve", "process"), (222, "mmap", "memory"),
    (242, "accept4", "socket"), (260, "wait4", "process"), (293, "rseq", "other"),
    (424, "pidfd_send_signal", "other"), (435, "clone3", "process"),
    (447, "memfd_secret", "other"), (462, "mseal", "other"),
]


def test_families_are_rezolus_sixteen_with_other_first() -> None:
    assert set(table.FAMILIES) == {
        "read", "write", "poll", "lock", "time", "sleep", "socket", "yield", "filesystem",
        "memory", "process", "query", "ipc", "timer", "event", "other"}
    assert len(table.FAMILIES) == 16 and table.FAMILIES[table.OTHER] == "other" == \
        table.FAMILIES[0]
    assert set(table.GROUPS) == set(table.FAMILIES) - {"other"}


def test_the_catalog_label_names_every_family() -> None:
    """The op label's description is the family list's only other copy."""
    for fam in (SYSCALL, SYSCALL_LATENCY):
        (op,) = fam.labels
        assert op.name == "op"
        named = set(re.findall(r"\w+", op.description.split(":", 1)[1])) - {"or"}
        assert named == set(table.FAMILIES)
        assert op.type.size > max(len(f) for f in table.FAMILIES)


def test_no_syscall_in_two_families() -> None:
    seen: dict[str, str] = {}
    for fam, names in table.GROUPS.items():
        for n in names:
            assert n not in seen, f"{n} in {seen[n]} and {fam}"
            seen[n] = fam


def test_every_grouped_name_is_a_syscall_of_some_table() -> None:
    """A misspelt member would silently count as other."""
    known = set(table.SYSCALLS["x86_64"].values()) | set(table.SYSCALLS["arm64"].values())
    assert set(table.FAMILY_OF) - known == set()


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_numbers_and_names_are_unique(arch: str) -> None:
    names = list(table.SYSCALLS[arch].values())
    assert len(names) == len(set(names))
    assert all(0 <= n < table.MAX_SYSCALL_ID for n in table.SYSCALLS[arch])


@pytest.mark.parametrize(("arch", "number", "name", "family"),
                         [("x86_64", *c) for c in X86_64] + [("arm64", *c) for c in ARM64])
def test_spot_checks(arch: str, number: int, name: str, family: str) -> None:
    assert table.SYSCALLS[arch][number] == name
    assert table.family_of_number(arch, number) == family
    assert table.FAMILIES[table.lookup_table(arch)[number]] == family


def test_table_sizes_and_gaps() -> None:
    x86, arm = table.SYSCALLS["x86_64"], table.SYSCALLS["arm64"]
    assert set(range(337)) <= set(x86) and set(range(424, 470)) <= set(x86)
    assert not set(range(337, 424)) & set(x86), "x86_64 leaves 337-423 unused"
    assert set(range(244)) <= set(arm) and set(range(260, 295)) <= set(arm)
    assert not set(range(244, 260)) & set(arm), "no arm64-specific syscalls"
    assert not set(range(295, 424)) & set(arm), "403-423 are 32-bit only"
    assert 512 not in x86, "x32 numbers are out of range for 64-bit processes"


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_lookup_table_classifies_every_number(arch: str) -> None:
    lut = table.lookup_table(arch)
    assert lut.dtype.itemsize == 1 and len(lut) == table.MAX_SYSCALL_ID
    assert int(lut.max()) < len(table.FAMILIES)
    for number in range(table.MAX_SYSCALL_ID):
        assert table.FAMILIES[lut[number]] == table.family_of_number(arch, number)
    unknown = [n for n in range(table.MAX_SYSCALL_ID) if n not in table.SYSCALLS[arch]]
    assert unknown and not lut[unknown].any(), "unknown numbers are other (0)"


def test_same_operation_same_family_on_both_architectures() -> None:
    for name in set(table.SYSCALLS["x86_64"].values()) & set(table.SYSCALLS["arm64"].values()):
        x86 = next(n for n, v in table.SYSCALLS["x86_64"].items() if v == name)
        arm = next(n for n, v in table.SYSCALLS["arm64"].items() if v == name)
        assert table.family_of_number("x86_64", x86) == table.family_of_number("arm64", arm)


def test_arch_of_machine() -> None:
    assert table.arch_of("x86_64") == table.arch_of("amd64") == "x86_64"
    assert table.arch_of("aarch64") == table.arch_of("arm64") == "arm64"
    assert table.arch_of("riscv64") is None


UNISTD_64 = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")


@pytest.mark.skipif(not UNISTD_64.exists(), reason="no x86_64 kernel headers (linux-libc-dev)")
def test_x86_64_agrees_with_the_installed_kernel_headers() -> None:
    """An independent copy of the numbers (the headers may be older: fewer syscalls)."""
    header = {int(n): name for name, n in
              re.findall(r"#define __NR_(\w+) (\d+)", UNISTD_64.read_text())}
    assert len(header) > 300
    x86 = table.SYSCALLS["x86_64"]
    assert {n: x86.get(n) for n in header} == header
