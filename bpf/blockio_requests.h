/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Structs shared by blockio_requests.bpf.c and rezolus_ue/samplers/blockio_requests/, which
 * reads their layout from the compiled object's BTF (no mirror in Python;
 * tests/test_bpf_structs.py checks the derived layout against bpftool's).
 */
#ifndef REZOLUS_UE_BLOCKIO_REQUESTS_H
#define REZOLUS_UE_BLOCKIO_REQUESTS_H

/* Request operations, the index of every per-op array and histogram row. */
#define BLOCKIO_OP_READ 0
#define BLOCKIO_OP_WRITE 1
#define BLOCKIO_OP_FLUSH 2
#define BLOCKIO_OP_DISCARD 3	/* secure erase included */
#define BLOCKIO_OP_OTHER 4	/* write zeroes, zone management, driver private... */
#define BLOCKIO_OPS 5

/* Error kinds (coarse groups of blk_status_t, as Rezolus's blockio_errors). */
#define BLOCKIO_ERR_IO 0		/* BLK_STS_IOERR, BLK_STS_MEDIUM */
#define BLOCKIO_ERR_TIMEOUT 1		/* BLK_STS_TIMEOUT */
#define BLOCKIO_ERR_NOSPC 2		/* BLK_STS_NOSPC */
#define BLOCKIO_ERR_TARGET 3		/* BLK_STS_TARGET, BLK_STS_RESV_CONFLICT (NEXUS) */
#define BLOCKIO_ERR_PROTECTION 4	/* BLK_STS_PROTECTION */
#define BLOCKIO_ERR_UNSUPPORTED 5	/* BLK_STS_NOTSUPP */
#define BLOCKIO_ERR_OTHER 6		/* transport, resource, offline, zone, ... */
#define BLOCKIO_ERRORS 7

/* Most requests in flight tracked at once (LRU: the oldest are forgotten first). */
#define BLOCKIO_MAX_INFLIGHT 16384

/*
 * One CPU's completion counters (cumulative), a whole number of cache lines; written only
 * by the completion program on its own CPU. ops and bytes, the hot part, share the first
 * two lines.
 */
struct blockio_requests_cpu {
	__u64 ops[BLOCKIO_OPS];				/* requests completed */
	__u64 bytes[BLOCKIO_OPS];			/* bytes completed */
	__u64 errors[BLOCKIO_OPS][BLOCKIO_ERRORS];	/* completions with an error, by kind */
	__u64 __pad[3];
};

#endif /* REZOLUS_UE_BLOCKIO_REQUESTS_H */
