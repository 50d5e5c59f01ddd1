// SPDX-License-Identifier: GPL-2.0
/*
 * blockio_requests: block IO request latency and size histograms, completed requests,
 * bytes and errors, each by operation (Rezolus's blockio requests/latency/errors
 * samplers). User space: rezolus_ue/samplers/blockio_requests/.
 *
 * Hooks, each in three variants of which user space loads one, chosen by probing the
 * kernel: tp_btf (blk_btf_*) > raw_tp (blk_raw_*) > tracepoint (blk_tp_*):
 *   block_rq_issue     the driver got the request: remember when
 *   block_rq_complete  the device completed (part of) it: count it, time it
 * In-flight requests are keyed by the struct request pointer (tp_btf, raw_tp) or by
 * device and start sector (tracepoint, whose records carry no pointer).
 *
 * Maps (BPF_F_MMAPABLE arrays, read by user space through mmap):
 *   latency   BLOCKIO_OPS H2 histograms (one row of H2_BUCKETS per op), ns: issue to
 *             completion
 *   size      BLOCKIO_OPS H2 histograms, bytes: size of each completed request
 *   counters  per CPU: ops, bytes, errors by kind, per op (struct blockio_requests_cpu)
 * The in-flight map is not kept across unloads: a load starts with none in flight.
 *
 * Kernel differences handled (CO-RE; no version checks):
 *   block_rq_issue lost its request_queue argument in 5.11 (struct hd_struct went in the
 *   same release, so its presence says "two arguments");
 *   block_rq_complete's error is an errno (int, < 0) on older kernels and a blk_status_t
 *   (u8, > 0) on newer ones (6.12 and 6.18 checked): the sign tells them apart;
 *   the classic records' struct is trace_event_raw_block_rq_complete before block_rq_error
 *   joined it in the block_rq_completion class, and gained ioprio (rwbs moved).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "h2.bpf.h"
#include "maps.bpf.h"
#include "blockio_requests.h"

char LICENSE[] SEC("license") = "GPL";

/* The operation is the low byte of cmd_flags (REQ_OP_BITS is 8 since Linux 4.10). */
#define REQ_OP_MASK_ 0xff

_Static_assert(sizeof(struct blockio_requests_cpu) % CACHE_LINE_SIZE == 0,
	       "per-CPU counters must fill whole cache lines");

struct inflight_key {
	__u64 id;	/* struct request pointer, or dev_t (tracepoint) */
	__u64 sector;	/* 0, or the start sector (tracepoint) */
};

H2_HISTOGRAMS(latency, BLOCKIO_OPS);
H2_HISTOGRAMS(size, BLOCKIO_OPS);

/*
 * One struct per CPU (user space sizes it to the possible CPUs), written only by the
 * completion program on its CPU; the kernel never nests a program in itself on one CPU,
 * so plain increments suffice.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct blockio_requests_cpu);
	__uint(max_entries, MAX_CPUS);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct inflight_key);
	__type(value, __u64);
	__uint(max_entries, BLOCKIO_MAX_INFLIGHT);
} inflight SEC(".maps");

/* Before 5.11 (see the header comment). */
struct hd_struct___rez {
	int partno;
} __attribute__((preserve_access_index));

/* The classic records, in both generations of the completion struct. */
struct trace_event_raw_block_rq___rez {
	dev_t dev;
	sector_t sector;
	char rwbs[8];
} __attribute__((preserve_access_index));

struct trace_event_raw_block_rq_completion___rez {
	dev_t dev;
	sector_t sector;
	unsigned int nr_sector;
	int error;
	char rwbs[8];
} __attribute__((preserve_access_index));

struct trace_event_raw_block_rq_complete___rez {
	dev_t dev;
	sector_t sector;
	unsigned int nr_sector;
	int error;
	char rwbs[8];
} __attribute__((preserve_access_index));

static __always_inline __u32 op_of_flags(__u32 cmd_flags)
{
	switch (cmd_flags & REQ_OP_MASK_) {
	case 0: /* REQ_OP_READ */
		return BLOCKIO_OP_READ;
	case 1: /* REQ_OP_WRITE */
		return BLOCKIO_OP_WRITE;
	case 2: /* REQ_OP_FLUSH */
		return BLOCKIO_OP_FLUSH;
	case 3: /* REQ_OP_DISCARD */
	case 5: /* REQ_OP_SECURE_ERASE */
		return BLOCKIO_OP_DISCARD;
	default:
		return BLOCKIO_OP_OTHER;
	}
}

/*
 * The operation from a classic record's rwbs (blk_fill_rwbs): an optional 'F' (preflush),
 * then W, D (DE: secure erase), F (flush), R or N (anything else), then flag letters.
 * Its first two characters are passed, each read on its own: CO-RE relocates an access
 * only when its size is the field's (a char of the array, not the array).
 */
static __always_inline __u32 op_of_rwbs(char c, char next)
{
	if (c == 'F' && (next == 'W' || next == 'R' || next == 'D' || next == 'N'))
		c = next;
	switch (c) {
	case 'R':
		return BLOCKIO_OP_READ;
	case 'W':
		return BLOCKIO_OP_WRITE;
	case 'F':
		return BLOCKIO_OP_FLUSH;
	case 'D':
		return BLOCKIO_OP_DISCARD;
	default:
		return BLOCKIO_OP_OTHER;
	}
}

/* The error kind of a completion's error: an errno (< 0) or a blk_status_t (> 0). */
static __always_inline __u32 error_kind(int error)
{
	if (error < 0) {
		switch (-error) {
		case 5:		/* EIO: BLK_STS_IOERR */
		case 61:	/* ENODATA: BLK_STS_MEDIUM */
			return BLOCKIO_ERR_IO;
		case 110:	/* ETIMEDOUT */
			return BLOCKIO_ERR_TIMEOUT;
		case 28:	/* ENOSPC */
			return BLOCKIO_ERR_NOSPC;
		case 121:	/* EREMOTEIO: BLK_STS_TARGET */
		case 52:	/* EBADE: BLK_STS_NEXUS, BLK_STS_RESV_CONFLICT */
			return BLOCKIO_ERR_TARGET;
		case 84:	/* EILSEQ: BLK_STS_PROTECTION */
			return BLOCKIO_ERR_PROTECTION;
		case 95:	/* EOPNOTSUPP */
			return BLOCKIO_ERR_UNSUPPORTED;
		default:
			return BLOCKIO_ERR_OTHER;
		}
	}
	switch (error) {
	case 10:	/* BLK_STS_IOERR */
	case 7:		/* BLK_STS_MEDIUM */
		return BLOCKIO_ERR_IO;
	case 2:		/* BLK_STS_TIMEOUT */
		return BLOCKIO_ERR_TIMEOUT;
	case 3:		/* BLK_STS_NOSPC */
		return BLOCKIO_ERR_NOSPC;
	case 5:		/* BLK_STS_TARGET */
	case 6:		/* BLK_STS_RESV_CONFLICT */
		return BLOCKIO_ERR_TARGET;
	case 8:		/* BLK_STS_PROTECTION */
		return BLOCKIO_ERR_PROTECTION;
	case 1:		/* BLK_STS_NOTSUPP */
		return BLOCKIO_ERR_UNSUPPORTED;
	default:
		return BLOCKIO_ERR_OTHER;
	}
}

static __always_inline void on_issue(__u64 id, __u64 sector)
{
	struct inflight_key key = {.id = id, .sector = sector};
	__u64 now = bpf_ktime_get_ns();

	/* A requeued request is issued again: its latency counts from the last issue. */
	bpf_map_update_elem(&inflight, &key, &now, BPF_ANY);
}

/*
 * A completion of nr_bytes; ``last``: the request is done (not a partial completion,
 * after which it stays in flight for the rest).
 */
static __always_inline void on_complete(__u64 id, __u64 sector, __u32 op, int error,
					__u32 nr_bytes, bool last)
{
	struct inflight_key key = {.id = id, .sector = sector};
	struct blockio_requests_cpu *c = this_cpu_line(&counters);
	__u64 *issued, now;
	__u32 kind;

	if (!c || op >= BLOCKIO_OPS)
		return;
	c->bytes[op] += nr_bytes;
	if (error) {
		kind = error_kind(error);
		if (kind < BLOCKIO_ERRORS)
			c->errors[op][kind]++;
	}
	if (!last)
		return;
	c->ops[op]++;
	h2_record_row(&size, op, nr_bytes);
	issued = bpf_map_lookup_elem(&inflight, &key);
	if (!issued)
		return; /* issued before we attached, or forgotten */
	now = bpf_ktime_get_ns();
	if (now > *issued)
		h2_record_row(&latency, op, now - *issued);
	bpf_map_delete_elem(&inflight, &key);
}

/* The request of a block_rq_issue call: its first argument, or its second before 5.11. */
static __always_inline struct request *issued_request(__u64 *ctx)
{
	if (bpf_core_type_exists(struct hd_struct___rez))
		return (struct request *)ctx[1];
	return (struct request *)ctx[0];
}

/* tp_btf: BTF-typed arguments, direct access to the request. */

SEC("tp_btf/block_rq_issue")
int BPF_PROG(blk_btf_issue)
{
	on_issue((__u64)issued_request(ctx), 0);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(blk_btf_done, struct request *rq, int error, unsigned int nr_bytes)
{
	on_complete((__u64)rq, 0, op_of_flags(rq->cmd_flags), error, nr_bytes,
		    nr_bytes >= rq->__data_len);
	return 0;
}

/* raw_tp: the same arguments, read with CO-RE probe reads. */

SEC("raw_tp/block_rq_issue")
int BPF_PROG(blk_raw_issue)
{
	on_issue((__u64)issued_request(ctx), 0);
	return 0;
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(blk_raw_done, struct request *rq, int error, unsigned int nr_bytes)
{
	on_complete((__u64)rq, 0, op_of_flags(BPF_CORE_READ(rq, cmd_flags)), error, nr_bytes,
		    nr_bytes >= BPF_CORE_READ(rq, __data_len));
	return 0;
}

/*
 * tracepoint: the classic formatted records. A partial completion is not told from a
 * whole one here: each counts as a request (drivers rarely complete in parts).
 */

SEC("tp/block/block_rq_issue")
int blk_tp_issue(struct trace_event_raw_block_rq___rez *ctx)
{
	on_issue(ctx->dev, ctx->sector);
	return 0;
}

SEC("tp/block/block_rq_complete")
int blk_tp_done(void *ctx)
{
	struct trace_event_raw_block_rq_completion___rez *n = ctx;
	struct trace_event_raw_block_rq_complete___rez *o = ctx;

	if (bpf_core_type_exists(struct trace_event_raw_block_rq_completion___rez))
		on_complete(n->dev, n->sector, op_of_rwbs(n->rwbs[0], n->rwbs[1]), n->error,
			    n->nr_sector << 9, true);
	else
		on_complete(o->dev, o->sector, op_of_rwbs(o->rwbs[0], o->rwbs[1]), o->error,
			    o->nr_sector << 9, true);
	return 0;
}
