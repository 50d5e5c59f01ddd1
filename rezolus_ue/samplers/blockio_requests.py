"""Block IO requests measured by BPF: latency and size histograms, completed requests, bytes
and errors, each by operation (Rezolus's blockio requests, latency and errors samplers).

BPF: ``bpf/blockio_requests.bpf.c`` (shared struct: ``bpf/blockio_requests.h``), built by
``python -m rezolus_ue.bpf.build``. Hooks: ``block:block_rq_issue`` (remember when the
driver got the request) and ``block:block_rq_complete`` (count it, time it), each as
tp_btf, raw_tp or classic tracepoint: the best one the kernel supports is loaded (option
``attach`` forces one). In-flight requests are keyed by their ``struct request`` pointer
(tp_btf, raw_tp) or by device and start sector (tracepoint; two flushes in flight on one
device share a key, so one of them is timed from the later issue). Needs kernel BTF and
CAP_BPF + CAP_PERFMON (or root). Only request-based (blk-mq) devices fire these
tracepoints: NVMe, SCSI, virtio-blk, loop, null_blk; bio-based ones (zram, device-mapper
above its disks) do not, but their disks' requests count.

Operations: read, write, flush, discard (secure erase included) and other (write zeroes,
zone management, driver-private requests), from the request's ``REQ_OP`` (the record's
``rwbs`` on the classic tracepoint). A completion counts its bytes; the request counts
(``operations``, the size and latency histograms) when its last part completes: drivers
may complete a request in parts, which the classic tracepoint cannot tell apart (there,
each part counts as a request). Errors are counted by kind from the completion's status:
a ``blk_status_t`` (Linux 6.x) or the errno earlier kernels passed, grouped as Rezolus's
blockio_errors (io, timeout, nospc, target, protection, unsupported, other).

Events, one record per operation seen since the programs were first loaded (so an idle
machine's unused operations stay silent): ``rezolus_blockio_latency`` (``latency_ns``,
issue to completion) and ``rezolus_blockio_size`` (``size_bytes``): H2 histograms of the
interval, each with ``attached_ns`` (the attached part of the interval, less than a
publish interval on the first record after a consumer arrives);
``rezolus_blockio_requests``: totals of requests, bytes and errors by kind.

Lifecycle (``BpfSampler``): loaded at start to verify, then unloaded; attached only while a
consumer has one of the events enabled. Histograms and per-CPU counters are kept
``BPF_F_MMAPABLE`` arrays, cumulative across unloads, read through mmap; the in-flight map
is not kept, so a request issued before an attach is not timed.

Measured cost (2-vCPU VM, Linux 6.18; kernel.bpf_stats_enabled run_time_ns / run_cnt over
6000 4 KiB O_DIRECT IOs on a loop device): block_rq_issue 350-470 ns (tp_btf), 450-480 ns
(raw_tp), 410-460 ns (tracepoint), mostly the in-flight LRU hash insert; block_rq_complete
210-300 ns (tp_btf), 330-350 ns (raw_tp), ~310 ns (tracepoint): under 1 us per request.
Activation (load, verify, attach) 35-55 ms; the in-flight map locks 1.4 MB while loaded.
One publish of the three events with four operations seen: median 0.5 ms of CPU. The
kernel skips a BPF program that would nest in another on the same CPU: with the classic
tracepoint about one completion in a thousand was missed so (its request is then neither
counted nor timed); none with tp_btf or raw_tp.
"""

from __future__ import annotations

import numpy as np

from ..bpf.loader import BpfObject
from ..metrics import h2
from ..metrics.catalog import (
    BLOCKIO_ERROR_KINDS,
    BLOCKIO_LATENCY,
    BLOCKIO_OPS,
    BLOCKIO_REQUESTS,
    BLOCKIO_SIZE,
)
from ..metrics.family import histogram_records
from .bpf_sampler import BpfSampler

NOPS, NERRORS = len(BLOCKIO_OPS), len(BLOCKIO_ERROR_KINDS)

#: struct blockio_requests_cpu (bpf/blockio_requests.h): one per CPU, six cache lines.
COUNTERS_DTYPE = np.dtype({
    "names": ["ops", "bytes", "errors"],
    "formats": [("=u8", (NOPS,)), ("=u8", (NOPS,)), ("=u8", (NOPS, NERRORS))],
    "offsets": [0, 8 * NOPS, 16 * NOPS],
    "itemsize": 384,
})
#: C struct name -> its mirror here (tests check both against the object's BTF).
SHARED_STRUCTS = {"blockio_requests_cpu": COUNTERS_DTYPE}


def counter_records(counters: np.ndarray) -> list[tuple]:
    """Return BLOCKIO_REQUESTS records (op, operations, bytes, errors by kind...) from the
    per-CPU counters: one per operation with anything counted."""
    ops = counters["ops"].sum(axis=0, dtype=np.uint64)
    nbytes = counters["bytes"].sum(axis=0, dtype=np.uint64)
    errors = counters["errors"].sum(axis=0, dtype=np.uint64)
    out = []
    for i, op in enumerate(BLOCKIO_OPS):
        if ops[i] or nbytes[i] or errors[i].any():
            out.append((op, int(ops[i]), int(nbytes[i]), *(int(e) for e in errors[i])))
    return out


class BlockioRequests(BpfSampler):
    """Block IO request latency and size histograms, requests, bytes, errors by op (BPF)."""

    name = "blockio_requests"
    families = (BLOCKIO_LATENCY, BLOCKIO_SIZE, BLOCKIO_REQUESTS)
    bpf_object = "blockio_requests"
    per_cpu_maps = ("counters",)
    #: Each map holds one H2 row per operation (BLOCKIO_OPS x H2 buckets).
    histograms = ((BLOCKIO_LATENCY, "latency"), (BLOCKIO_SIZE, "size"))
    keep_maps = ("latency", "size", "counters")

    def setup(self, bpf: BpfObject) -> None:
        self._counters = bpf.array("counters", COUNTERS_DTYPE)

    def publish(self, t_ns: int) -> None:
        window = self.window()
        for fam, view in self._hists.items():
            # Close every interval even when unwatched: the next record covers one.
            cur = view.copy().reshape(NOPS, h2.BUCKETS)
            prev = self._prev[fam]
            self._prev[fam] = cur
            h = self.handles.get(fam.schema.name)
            if h is None or not h.word.value:
                continue
            for i, op in enumerate(BLOCKIO_OPS):
                if not cur[i].any():
                    continue  # never seen: no record
                counts, _reset = h2.delta(cur[i], None if prev is None else
                                          prev.reshape(NOPS, h2.BUCKETS)[i])
                for rec in histogram_records(fam.schema, (op,), (window,), counts):
                    h.write(fam.schema.pack(*rec))
        h = self.handles.get(BLOCKIO_REQUESTS.schema.name)
        if h is not None and h.word.value:
            pack = BLOCKIO_REQUESTS.schema.pack
            for rec in counter_records(self._counters):
                h.write(pack(*rec))

    def close(self) -> None:
        self._counters = None  # type: ignore[assignment]
        super().close()
