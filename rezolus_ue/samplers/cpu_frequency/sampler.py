"""The cpu_frequency sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import FamilySampler
from . import CPU_FREQUENCY, FAMILIES

#: How often CPUs without a cpufreq file are looked for again.
RESCAN_NS = 1_000_000_000
_CPU_DIR = re.compile(r"cpu(\d+)")
#: Matched after a newline, not with ^ and MULTILINE: a literal start is 6x faster.
_CPUINFO = re.compile(rb"\n(processor|cpu MHz)[ \t]*:[ \t]*([0-9.]+)")


def parse_cpufreq_khz(text: bytes | str) -> int:
    """Return the frequency in Hz of a cpufreq ``*_freq`` file's text (kHz)."""
    return int(text) * 1000


def parse_cpuinfo_mhz(data: bytes) -> list[tuple[int, int]]:
    """Return (cpu, frequency_hz) per processor of /proc/cpuinfo with a ``cpu MHz`` line."""
    rows = []
    cpu = -1
    for key, value in _CPUINFO.findall(b"\n" + data):
        if key == b"processor":
            cpu = int(value) if value.isdigit() else -1
        elif cpu >= 0:
            try:
                hz = round(float(value) * 1_000_000)
            except ValueError:
                continue
            rows.append((cpu, hz))
            cpu = -1  # one frequency per processor block
    return rows


def cpu_numbers(sysfs: Path) -> list[int]:
    """Return the CPU numbers with a directory under ``<sysfs>/devices/system/cpu``."""
    try:
        names = os.listdir(sysfs / "devices/system/cpu")
    except OSError:
        return []
    return sorted(int(m[1]) for n in names if (m := _CPU_DIR.fullmatch(n)))


class CpuFrequency(FamilySampler):
    """Current frequency per CPU (cpufreq, else /proc/cpuinfo)."""

    name = "cpu_frequency"
    families = FAMILIES

    def start(self) -> None:
        self._files: dict[int, KeptOpen] = {}
        self._missing: list[int] = []
        self._cpuinfo: KeptOpen | None = None
        self._next_scan = 0
        cpus = cpu_numbers(self.ctx.roots.sysfs)
        for cpu in cpus:
            self._open(cpu)
        if self._files:
            self._missing = [c for c in cpus if c not in self._files]
            self._next_scan = time.monotonic_ns() + RESCAN_NS
            return
        why = ("no cpufreq scaling_cur_freq under "
               f"{self.ctx.roots.sysfs / 'devices/system/cpu'}")
        try:
            self._cpuinfo = KeptOpen(self.ctx.roots.procfs / "cpuinfo")
        except (OSError, RezolusError) as e:
            raise SamplerUnavailable(self.name, f"{why}, and {e}") from None
        if not parse_cpuinfo_mhz(self._cpuinfo.read()):
            self._cpuinfo.close()
            raise SamplerUnavailable(self.name, f"{why}, and no 'cpu MHz' in"
                                     f" {self._cpuinfo.path}")
        self.detail = "no cpufreq: frequencies from /proc/cpuinfo 'cpu MHz'"

    def _open(self, cpu: int) -> bool:
        path = self.ctx.roots.sysfs / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
        try:
            self._files[cpu] = KeptOpen(path)
        except (OSError, RezolusError):
            return False
        return True

    def _rescan(self) -> None:
        now = time.monotonic_ns()
        if now < self._next_scan:
            return
        self._next_scan = now + RESCAN_NS
        still = [c for c in self._missing if not self._open(c)]
        if len(still) < len(self._missing):
            self._files = dict(sorted(self._files.items()))
        self._missing = still

    def capture(self) -> bytes | list[tuple[int, bytes]] | None:
        """/proc/cpuinfo's text, or each CPU's cpufreq file's."""
        if not self.family_wanted(CPU_FREQUENCY):
            return None
        if self._cpuinfo is not None:
            return self._cpuinfo.read()
        if self._missing:
            self._rescan()
        out = []
        failed = []
        for cpu, f in self._files.items():
            try:
                data = f.read()
            except OSError:
                data = b""
            if not data.strip().isdigit():
                # Offline CPU: sysfs answers ENODEV (file removed) or EBUSY (policy
                # inactive). Reopen it later: a removed file's fd never reads again.
                failed.append(cpu)
                continue
            out.append((cpu, data))
        for cpu in failed:
            self._files.pop(cpu).close()
            self._missing.append(cpu)
        if failed:
            self._next_scan = time.monotonic_ns() + RESCAN_NS
        return out

    def parse(self, raw: bytes | list[tuple[int, bytes]] | None,
              ) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        if isinstance(raw, bytes):
            return {CPU_FREQUENCY: {(cpu,): (hz,) for cpu, hz in parse_cpuinfo_mhz(raw)}}
        return {CPU_FREQUENCY: {(cpu,): (parse_cpufreq_khz(data),) for cpu, data in raw}}

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        if self._cpuinfo is not None:
            self._cpuinfo.close()
