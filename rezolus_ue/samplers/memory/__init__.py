"""Memory use, paging and NUMA activity, and pressure stall information (PSI).

Sources:

* ``/proc/meminfo`` (kB, published in bytes): MemTotal, MemFree, MemAvailable, Buffers,
  Cached, Dirty, Writeback, Slab, SwapTotal, SwapFree. MemAvailable exists since Linux 3.14;
  on older kernels it is estimated as MemFree + Buffers + Cached, which overstates it (the
  kernel's own estimate keeps the low watermarks free and counts only part of the page
  cache and reclaimable slab as available). A missing field reads as 0.
* ``/proc/vmstat``: pgfault, pgmajfault; pages scanned = the sum of the ``pgscan_*`` lines
  that count scanned pages by reclaimer (``pgscan_kswapd``, ``pgscan_direct``, and on newer
  kernels ``pgscan_khugepaged`` and ``pgscan_proactive``; before 4.8 per zone, e.g.
  ``pgscan_kswapd_normal``), pages stolen likewise from ``pgsteal_*`` (per zone only on
  old kernels, e.g. ``pgsteal_normal``). ``pgscan_anon``/``pgscan_file`` and
  ``pgsteal_anon``/``pgsteal_file`` (since 5.8) split the same pages by LRU type and
  ``pgscan_direct_throttle`` counts throttling events, not pages: they are left out, or the
  sums would count pages twice. numa_hit, numa_miss, numa_foreign, numa_local, numa_other,
  numa_interleave (only with CONFIG_NUMA; 0 without).
* ``/proc/pressure/{cpu,memory,io,irq}`` (Linux >= 4.20 with CONFIG_PSI): ``some`` and
  ``full`` lines of ``avg10=<percent> avg60=... avg300=... total=<us>``; avg10 is
  published in ppm (percent x 10000). cpu has a ``full`` line since 5.13, irq exists
  since 6.1 with CONFIG_IRQ_TIME_ACCOUNTING and has only a ``full`` line; a missing line
  reads as 0. Without PSI (CONFIG_PSI=n: no directory; ``psi=0`` on the kernel command
  line: no directory, or on older kernels reads fail with EOPNOTSUPP) the pressure event
  is unavailable and the sampler's detail says why.

Events: ``rezolus_memory`` (+ ``_dist``), ``rezolus_memory_vmstat`` (+ ``_dist``),
``rezolus_pressure`` (+ ``_dist``; one record per resource).
"""

from __future__ import annotations

from ...encoding import char_array
from ...metrics.family import Family, Label, counter, gauge

RESOURCE = Label("resource", char_array(8), "pressure resource: cpu, memory, io or irq")

MEMORY = Family(
    "rezolus_memory", __name__,
    "Memory use (/proc/meminfo).",
    (),
    (
        gauge("total_bytes", "bytes", "usable RAM", dist=False),
        gauge("free_bytes", "bytes", "unused RAM"),
        gauge("available_bytes", "bytes", "RAM available for new work without swapping"),
        gauge("buffers_bytes", "bytes", "block device buffers"),
        gauge("cached_bytes", "bytes", "page cache (excluding swap cache)"),
        gauge("dirty_bytes", "bytes", "waiting to be written back"),
        gauge("writeback_bytes", "bytes", "being written back"),
        gauge("slab_bytes", "bytes", "kernel slab allocations"),
        gauge("swap_total_bytes", "bytes", "swap space", dist=False),
        gauge("swap_free_bytes", "bytes", "unused swap space"),
    ),
)

MEMORY_VMSTAT = Family(
    "rezolus_memory_vmstat", __name__,
    "Paging and NUMA activity (/proc/vmstat).",
    (),
    (
        counter("page_faults", "faults", "page faults (pgfault)"),
        counter("major_page_faults", "faults", "faults that needed IO (pgmajfault)"),
        counter("pages_scanned", "pages", "pages scanned for reclaim (pgscan_kswapd, _direct,"
                " _khugepaged, _proactive; not the anon/file split)"),
        counter("pages_stolen", "pages", "pages reclaimed (pgsteal_kswapd, _direct,"
                " _khugepaged, _proactive)"),
        counter("numa_hit", "pages", "allocations on the intended node"),
        counter("numa_miss", "pages", "allocations on another node than intended"),
        counter("numa_foreign", "pages", "allocations intended here, placed elsewhere"),
        counter("numa_local", "pages", "allocations on the local node"),
        counter("numa_other", "pages", "allocations on a remote node"),
        counter("numa_interleave", "pages", "interleave-policy allocations"),
    ),
)

MEMORY_PRESSURE = Family(
    "rezolus_pressure", __name__,
    "Pressure stall information (/proc/pressure/*; Linux >= 4.20 with CONFIG_PSI).",
    (RESOURCE,),
    (
        # The kernel's own 10 s averages: oversampling them adds nothing; the stall
        # totals' rates are the fine-grained view.
        gauge("some_avg10_ppm", "ppm", "share of time some task stalled, 10 s average",
              dist=False),
        gauge("full_avg10_ppm", "ppm", "share of time all tasks stalled, 10 s average",
              dist=False),
        counter("some_stall_us", "us", "total time some task stalled"),
        counter("full_stall_us", "us", "total time all non-idle tasks stalled"),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (MEMORY, MEMORY_VMSTAT, MEMORY_PRESSURE,)
