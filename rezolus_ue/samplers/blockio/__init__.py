"""Per block device IO: operations, bytes, time spent, busy time and IOs in flight.

Source: ``/proc/diskstats``, one line per device: ``major minor name`` then reads completed,
reads merged, sectors read, ms reading, writes completed, writes merged, sectors written,
ms writing, IOs in flight, ms doing IO, weighted ms; since Linux 4.18 discards completed,
merged, sectors, ms discarding; since 5.5 flushes completed, ms flushing. Fields an older
kernel lacks read as 0, and so do the times of the 4-field partition lines of Linux
2.6.0-2.6.24 (reads, sectors read, writes, sectors written). Sectors are 512 bytes whatever
the device's block size; times are published in ns.

The kernel prints the ms fields as 32-bit values, which wrap after 2**32 ms (49.7 days of
accumulated time: for ms reading/writing, which add up the time of concurrent IOs, that
can be a day on a busy device). The sampler unwraps them while it runs (a field that goes
back while the device's IO counts do not is a wrap), so they stay monotonic counters; a
wrap missed while nothing was read (over 49.7 days between reads) shows as a smaller
total, and counts restart when a device is re-created.

Devices: partitions (``/sys/class/block/<name>/partition`` exists; without sysfs, a name
that is another listed device's name plus a number, e.g. sda1, nvme0n1p2) are skipped
unless ``include_partitions``: their IO is already counted in the whole disk's. Devices
whose counters are all zero (unused loop, ram, zram devices) are skipped unless
``include_idle``. ``devices`` restricts to names matching any of its globs. Names longer
than the 31 bytes of the ``device`` label are truncated (kernel names are shorter).

Events: ``rezolus_blockio_device`` (+ ``_dist``), one record per device.
"""

from __future__ import annotations

from ...config import Option
from ...encoding import char_array
from ...metrics.family import Family, Label, counter, gauge

DEVICE = Label("device", char_array(32), "block device name, e.g. nvme0n1")

BLOCKIO = Family(
    "rezolus_blockio_device", __name__,
    "Per block device IO (/proc/diskstats; discards since 4.18, flushes since 5.5).",
    (DEVICE,),
    (
        counter("reads", "ops", "reads completed"),
        counter("writes", "ops", "writes completed"),
        counter("discards", "ops", "discards completed"),
        counter("flushes", "ops", "flushes completed"),
        counter("read_bytes", "bytes", "bytes read"),
        counter("write_bytes", "bytes", "bytes written"),
        counter("discard_bytes", "bytes", "bytes discarded"),
        counter("read_time_ns", "ns", "time spent reading", dist=False),
        counter("write_time_ns", "ns", "time spent writing", dist=False),
        counter("busy_ns", "ns", "time the device had IO in flight"),
        gauge("in_flight", "ops", "IOs in flight"),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (BLOCKIO,)

#: This sampler's options (beyond the common ones): key, type, default, help.
OPTIONS: tuple[Option, ...] = (
    Option("devices", "strings", (),
           "Publish only block devices whose name matches one of these shell globs"
           " (e.g. [\"nvme*\", \"sd?\"]); empty: all devices."),
    Option("include_partitions", "bool", False,
           "Also publish partitions (e.g. sda1, nvme0n1p2); their IO is already counted"
           " in their disk's."),
    Option("include_idle", "bool", False,
           "Also publish devices that have done no IO since they appeared (unused loop,"
           " ram and zram devices)."),
)
