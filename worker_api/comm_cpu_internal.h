/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu_internal.h: what the files of the cpu backend (comm_cpu*.c) share. */
#ifndef CRUN_WORKER_API_COMM_CPU_INTERNAL_H
#define CRUN_WORKER_API_COMM_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <crun/comm.h>
#include <crun/store.h>

#include "worker_api/comm_internal.h"

/*
 * The cpu backend, one file per job:
 *   comm_cpu.c         its state, setup order and ops table
 *   comm_cpu_net.c     transport: listen, connect, hello/ack, addresses through the store
 *   comm_cpu_shm.c     same-host links: shared segments, rings, process_vm_readv (CMA)
 *   comm_cpu_reduce.c  the reduction loops (baseline and AVX2) and their run-time choice
 *   comm_cpu_ring.c    the streaming engine and the ring collectives built on it
 *
 * Wire format between ring neighbours (host byte order for the data: every rank of a job runs
 * the same architecture).
 *
 * Setup: rank r connects to its successor r+1 and sends a hello; the successor checks it comes
 * from its predecessor, for the same comm name, size and generation, and answers with an ack.
 * Anything else is a stray connection: it is logged, closed, and the successor keeps waiting.
 *
 * Collectives: each one starts with a 32-byte header (op, dtype, reduction, root, count and a
 * per-comm sequence number) on every connection it uses, then the payload as one stream. A
 * rank that called a different collective, or with other arguments, gets -EPROTO.
 */
#define CPU_MAGIC 0x4d435243u /* "CRCM" little-endian */
#define CPU_VERSION 2	      /* 2: struct shm_seg has "failed" */
#define CPU_HELLO 1
#define CPU_ACK 2
#define CPU_HELLO_LEN 32
#define CPU_HDR_LEN 32
/*
 * TCP: incoming bytes staged before being reduced, at most this many per readv(). Measured on
 * loopback (2 ranks, CRUN_COMM_SHM=0, 64 and 256 MiB, A/B runs interleaved on the shared 2-core
 * box): 256 KiB gave 1.45-1.6 GB/s busbw, 1 MiB 1.6-1.8, 2 MiB 1.7-2.0, 4 MiB no better and
 * noisier. Fewer, larger reads; the staged data is reduced at once, while still in L2.
 */
#define CPU_STAGE (2048u << 10)
#define CMA_STAGE (256u << 10) /* shared memory: pulled from a peer per reduction */
#define CPU_SOCKBUF 0	       /* SO_SNDBUF/SO_RCVBUF; 0: kernel autotuning (see tune()) */
#define CPU_MAX_IOV 8
#define CPU_STRAY_MS 10000		/* longest wait for a hello from one accepted connection */
#define SHM_RING (1u << 20)		/* default ring size of a same-host link */
#define SHM_PIECE (128u << 10)		/* publish progress to the peer at least this often */
#define SHM_PROBE 0x6372756e2d636d61ull /* "crun-cma" */
#define CMA_PULL (1u << 20)		/* largest single pull into place */
#define CMA_MIN (256u << 10)		/* smaller collectives copy through the ring */
#define SHM_SLICE_MS 50			/* sleep slices: check for a dead peer between them */

enum cpu_op { OP_ALLREDUCE = 1, OP_BROADCAST, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BARRIER };

struct cpu {
	int next;		/* connected to rank + 1: we send on it */
	int prev;		/* accepted from rank - 1: we receive on it */
	uint64_t seq;		/* collectives issued on this comm */
	int64_t setup_deadline; /* during create: the deadline of the whole setup; else 0 */
	char *stage;		/* CPU_STAGE bytes */
	char *scratch;		/* reduce_scatter intermediates */
	size_t scratch_len;
	struct sseg *sseg; /* 2 * size entries */
	struct rseg *rseg;
	char next_addr[64]; /* "host:port" for messages */
	char prev_addr[64];
	uint64_t host;	    /* hash of hostname + boot id */
	uint64_t pred_host; /* the predecessor's, from its hello */
	/* Same-host path: when every rank is on one host, each link is a ring buffer in shared
	 * memory; the TCP connections stay open only to notice a peer's death. */
	bool shm;
	bool cma; /* shm rings carry (address, length) of the data; peers pull it directly */
	struct shm_seg *shm_me;	  /* mine: my bell, the ring I write to rank + 1 */
	struct shm_seg *shm_pred; /* rank - 1's: the ring I read, its bell */
	struct shm_seg *shm_succ; /* rank + 1's: its bell */
	size_t shm_len[3];
	char shm_name[64]; /* mine, until every peer has mapped it */
};

/* One rank's shared segment. The owner writes head, its successor writes tail. */
struct shm_seg {
	_Alignas(64) _Atomic uint32_t bell; /* bumped by a neighbour that made room or data */
	_Atomic uint32_t sleeping;	    /* the owner may be in futex_wait on bell */
	_Atomic uint32_t failed; /* set by the owner before it abandons a collective (CMA) */
	uint64_t ring_size;
	int64_t pid;	     /* the owner, for process_vm_readv */
	uint64_t probe_addr; /* where the owner keeps SHM_PROBE, to test that we may read it */
	_Alignas(64) _Atomic uint64_t head; /* bytes written to the ring, ever */
	_Alignas(64) _Atomic uint64_t tail; /* bytes consumed from it, ever */
	_Alignas(64) char data[];
};

/* Part of the outgoing stream. */
struct sseg {
	const char *src;
	size_t len;
};

/* Part of the incoming stream: copied to dst, or dst = a + incoming (a may equal dst). */
struct rseg {
	char *dst;
	const char *a;
	size_t len;
	bool scale; /* AVG: divide by size after adding */
};

/* One collective's traffic on this rank. */
struct xfer {
	const char *what;
	struct sseg *s;
	int ns;
	struct rseg *r;
	int nr;
	size_t lag; /* sent body may lead processed incoming body by this; SIZE_MAX: no limit */
	enum crun_dtype dt;
	enum crun_redop op;
	bool cma; /* this collective moves (address, length) descriptors, not data */
	uint8_t hdr[CPU_HDR_LEN];
};

/* Where one collective's two streams stand on this rank: the streaming engine's cursors. */
struct stream {
	size_t send_total, recv_total; /* body bytes to send, to receive */
	size_t sent;		       /* body bytes handed to the link */
	size_t done;		       /* body bytes received and copied or reduced into place */
	size_t staged;		       /* TCP: received bytes in p->stage, not yet reduced */
	size_t hs, hr;		       /* header bytes sent, received */
	int si, ri;		       /* the current send / receive segment */
	size_t soff, roff;	       /* bytes of x->s[si] sent, of x->r[ri] done */
	size_t dpos;		       /* CMA: bytes of the current descriptor pulled */
	int64_t deadline;	       /* no progress by then: -ETIMEDOUT */
	bool progress;		       /* this round moved bytes */
	bool want_out, want_in;	       /* TCP: this round saw EAGAIN sending / receiving */
	uint8_t hin[CPU_HDR_LEN];      /* the header received */
};

/* The receive segment to work on (past those already complete), or NULL when all are done. */
static inline struct rseg *stream_rseg(const struct xfer *x, struct stream *st)
{
	while (st->ri < x->nr && st->roff == x->r[st->ri].len) {
		st->ri++;
		st->roff = 0;
	}
	return st->ri < x->nr ? &x->r[st->ri] : NULL;
}

/* comm_cpu.c */

/** Record "comm NAME: rank R: <fmt>: <strerror(rc)>" in c->diag; returns @rc. */
int cpu_fail(struct crun_comm *c, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* comm_cpu_net.c */

/** This host: a 48-bit hash of hostname + boot id (containers may share a hostname). */
uint64_t cpu_host_id(void);
/**
 * Link the ring: listen and publish my address in @st (borrowed), connect to rank + 1 and
 * send a hello, accept rank - 1 (rejecting strays), ack it, and read rank + 1's ack. Sets
 * p->next, p->prev and their addresses. Returns 0 or a negative code (message in c->diag).
 */
int cpu_net_link(struct crun_comm *c, struct cpu *p, struct crun_store *st, int64_t deadline);
/** Move @len bytes over non-blocking socket @fd (@out: send) before @deadline. 0 or -errno. */
int cpu_sock_full(int fd, void *buf, size_t len, bool out, int64_t deadline);

/* comm_cpu_shm.c */

/** Vote with every rank on a same-host ring; *@shm is the outcome. Returns 0 or an error. */
int cpu_shm_agree(struct crun_comm *c, struct cpu *p, bool *shm);
/**
 * Map the same-host rings (and test CMA) if every rank can; else stay on TCP. Only a failure
 * to talk to a neighbour is an error.
 */
int cpu_shm_setup(struct crun_comm *c, struct cpu *p, int64_t deadline);
/** Unmap every segment and unlink mine if still named. */
void cpu_shm_unmap(struct cpu *p);
/** Copy what fits of @iov into my outbound ring; returns the bytes taken. */
size_t cpu_shm_write(struct cpu *p, const struct iovec *iov, int niov, bool start);
/** CMA: describe what fits of @iov in my outbound ring; returns the bytes described. */
size_t cpu_shm_describe(struct cpu *p, const struct iovec *iov, int niov, bool start);
/** Receive from rank - 1's ring (copy mode): header, then copy or reduce into place. */
int cpu_shm_recv(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st);
/** Receive by pulling the ranges rank - 1 describes (process_vm_readv). */
int cpu_cma_recv(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st);
/** Sleep until a neighbour rings my bell (it was @seen), a slice passes, or the deadline; a
 * closed socket of a neighbour still needed (@need_prev, @need_next) fails the transfer. */
int cpu_shm_wait(struct crun_comm *c, struct cpu *p, uint32_t seen, int64_t deadline,
		 const struct xfer *x, bool need_prev, bool need_next);

/* comm_cpu_reduce.c */

/**
 * dst = a + in over @bytes (whole elements of @dt); dst == a is allowed, other overlaps are
 * not. @scale: then divide by @size (AVG). Called once per chunk, never per element.
 */
void cpu_reduce(char *dst, const char *a, const char *in, size_t bytes, enum crun_dtype dt,
		bool scale, int size);

/* comm_cpu_ring.c */

/** -EPROTO (with which difference, in c->diag) unless @got is the header @x expects. */
int cpu_check_hdr(struct crun_comm *c, struct cpu *p, const struct xfer *x, const uint8_t *got);
/** A ring allreduce named @what (messages) with header op @opc; setup uses it too. */
int cpu_ring_allreduce(struct crun_comm *c, const char *what, enum cpu_op opc, const void *send,
		       void *recv, size_t count, enum crun_dtype dt, enum crun_redop op);
/* The collectives of struct comm_ops (comm_internal.h), over the ring. */
int cpu_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
		  enum crun_dtype dt, enum crun_redop op);
int cpu_broadcast(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt, int root);
int cpu_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
		  enum crun_dtype dt);
int cpu_reduce_scatter(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
		       enum crun_dtype dt, enum crun_redop op);
int cpu_barrier(struct crun_comm *c);

#endif
