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

The kernel skips a BPF program that would nest in another on the same CPU: with the
classic tracepoint about one completion in a thousand was missed so (its request is then
neither counted nor timed); none with tp_btf or raw_tp. The in-flight map locks 1.4 MB
while loaded. Cost: docs/PERFORMANCE.md (measured by ``bench/``).
"""

from __future__ import annotations

from ...encoding import char_array
from ...linux.capabilities import BPF_PROGRAMS, Need
from ...metrics.family import COSTLY, Family, Label, counter, histogram
from ...metrics.labels import ATTACHED

BLOCKIO_OPS = ("read", "write", "flush", "discard", "other")
BLOCKIO_ERROR_KINDS = ("io", "timeout", "nospc", "target", "protection", "unsupported",
                       "other")
BLOCKIO_OP = Label("op", char_array(8), "request operation: read, write, flush, discard"
                   " (secure erase included) or other (write zeroes, zone management,"
                   " driver private)")

BLOCKIO_LATENCY = Family(
    "rezolus_blockio_latency", __name__,
    "Block IO request latency by operation, every device together: from the request's"
    " issue to the driver (block:block_rq_issue) to its completion (block_rq_complete),"
    " BPF. Operations seen since the agent loaded the programs have a record each interval.",
    (BLOCKIO_OP,),
    (ATTACHED, histogram("latency_ns", "ns", "time from issue to completion")),
    cost=COSTLY,
)

BLOCKIO_SIZE = Family(
    "rezolus_blockio_size", __name__,
    "Block IO request size by operation, every device together, at completion"
    " (block:block_rq_complete, BPF; flushes are 0 bytes).",
    (BLOCKIO_OP,),
    (ATTACHED, histogram("size_bytes", "bytes", "bytes of each completed request")),
    cost=COSTLY,
)

BLOCKIO_REQUESTS = Family(
    "rezolus_blockio_requests", __name__,
    "Completed block IO requests, bytes and errors by operation, every device together,"
    " counted by BPF on block:block_rq_complete while a consumer is attached (totals since"
    " the agent loaded the programs). Errors are blk_status_t codes grouped by kind, as"
    " Rezolus's blockio_errors.",
    (BLOCKIO_OP,),
    (
        counter("operations", "requests", "requests completed", dist=False),
        counter("bytes", "bytes", "bytes completed (partial completions included)",
                dist=False),
        counter("errors_io", "requests", "IO or medium errors (BLK_STS_IOERR, _MEDIUM)",
                dist=False),
        counter("errors_timeout", "requests", "timeouts (BLK_STS_TIMEOUT)", dist=False),
        counter("errors_nospc", "requests", "out of space (BLK_STS_NOSPC)", dist=False),
        counter("errors_target", "requests", "target or reservation errors"
                " (BLK_STS_TARGET, _RESV_CONFLICT)", dist=False),
        counter("errors_protection", "requests", "integrity check failures"
                " (BLK_STS_PROTECTION)", dist=False),
        counter("errors_unsupported", "requests", "operation not supported"
                " (BLK_STS_NOTSUPP)", dist=False),
        counter("errors_other", "requests", "any other error (transport, resource,"
                " offline, zone...)", dist=False),
    ),
    cost=COSTLY,
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (BLOCKIO_LATENCY, BLOCKIO_SIZE, BLOCKIO_REQUESTS,)

#: Capabilities this sampler needs after the agent's privilege drop (rezolus_ue.privilege).
CAPABILITIES: tuple[Need, ...] = BPF_PROGRAMS
