/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu.c: the cpu backend: a TCP ring with pipelined reduce-scatter + allgather. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <unistd.h>

#include <crun/comm.h>
#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/clock.h"
#include "src/common/net.h"
#include "worker_api/comm_internal.h"

/*
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
#define CPU_VERSION 2 /* 2: struct shm_seg has "failed" */
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

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

static int remaining_ms(int64_t deadline)
{
	int64_t left = deadline - crun_now_ms();

	if (left <= 0) {
		return 0;
	}
	return left > INT32_MAX ? INT32_MAX : (int)left;
}

/* ---- reductions ---- */

/*
 * The reduction loops, built twice: for the baseline x86-64 ISA (SSE2) and for AVX2, picked at
 * run time (the project builds with -O2 and no -march, so gcc alone never emits AVX2). -O3 for
 * these loops only: at -O2 gcc 12 barely vectorizes. The loops are memory-bound; AVX2 halves
 * the instruction count per byte, which matters when the data is still in cache.
 */
#define HOT __attribute__((optimize("O3")))

#define REDUCE_LOOPS(sfx, attr)                                                                    \
	HOT attr static void add_f32_##sfx(float *restrict d, const float *restrict a,           \
					   const float *restrict b, size_t n)                      \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] = a[i] + b[i];                                                        \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void acc_f32_##sfx(float *restrict d, const float *restrict b, size_t n)  \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] += b[i];                                                              \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void add_f64_##sfx(double *restrict d, const double *restrict a,         \
					   const double *restrict b, size_t n)                     \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] = a[i] + b[i];                                                        \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void acc_f64_##sfx(double *restrict d, const double *restrict b,         \
					   size_t n)                                               \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] += b[i];                                                              \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void div_f32_##sfx(float *d, size_t n, float by)                          \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] /= by;                                                                \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void div_f64_##sfx(double *d, size_t n, double by)                        \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] /= by;                                                                \
		}                                                                                  \
	}

struct reducers {
	void (*add_f32)(float *restrict, const float *restrict, const float *restrict, size_t);
	void (*acc_f32)(float *restrict, const float *restrict, size_t);
	void (*add_f64)(double *restrict, const double *restrict, const double *restrict, size_t);
	void (*acc_f64)(double *restrict, const double *restrict, size_t);
	void (*div_f32)(float *, size_t, float);
	void (*div_f64)(double *, size_t, double);
};

#define REDUCERS(sfx)                                                                              \
	{                                                                                          \
		add_f32_##sfx, acc_f32_##sfx, add_f64_##sfx, acc_f64_##sfx, div_f32_##sfx,         \
			div_f64_##sfx                                                              \
	}

REDUCE_LOOPS(base, )
static const struct reducers reducers_base = REDUCERS(base);

#if defined(__x86_64__) && defined(__GNUC__)
REDUCE_LOOPS(avx2, __attribute__((target("avx2"))))
static const struct reducers reducers_avx2 = REDUCERS(avx2);
#endif

/* The loops for this CPU; CRUN_COMM_SIMD=base forces the baseline (for tests and comparison). */
static const struct reducers *reducers(void)
{
	static const struct reducers *_Atomic chosen;
	const struct reducers *r = atomic_load_explicit(&chosen, memory_order_relaxed);

	if (r == NULL) {
		const char *env = getenv("CRUN_COMM_SIMD");

		r = &reducers_base;
#if defined(__x86_64__) && defined(__GNUC__)
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2") && (env == NULL || strcmp(env, "base") != 0)) {
			r = &reducers_avx2;
		}
#else
		(void)env;
#endif
		atomic_store_explicit(&chosen, r, memory_order_relaxed);
	}
	return r;
}

/* dst = a + in over @bytes (whole elements); dst == a is allowed, other overlaps are not. */
static void reduce(char *dst, const char *a, const char *in, size_t bytes, enum crun_dtype dt,
		   bool scale, int size)
{
	const struct reducers *f = reducers();

	if (dt == CRUN_FLOAT32) {
		size_t n = bytes / sizeof(float);

		if (dst == a) {
			f->acc_f32((float *)dst, (const float *)in, n);
		} else {
			f->add_f32((float *)dst, (const float *)a, (const float *)in, n);
		}
		if (scale) {
			f->div_f32((float *)dst, n, (float)size);
		}
	} else {
		size_t n = bytes / sizeof(double);

		if (dst == a) {
			f->acc_f64((double *)dst, (const double *)in, n);
		} else {
			f->add_f64((double *)dst, (const double *)a, (const double *)in, n);
		}
		if (scale) {
			f->div_f64((double *)dst, n, (double)size);
		}
	}
}

/* ---- the streaming engine ---- */

static int fail(struct crun_comm *c, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct crun_comm *c, int rc, const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return diag_set(&c->diag, rc, "comm %s: rank %d: %s: %s", c->name, c->rank, what,
			crun_strerror(rc));
}

/* Stop using both connections so the neighbours see the failure now, not at their deadline. */
static void cpu_poison(struct cpu *p)
{
	if (p->next >= 0) {
		shutdown(p->next, SHUT_RDWR);
	}
	if (p->prev >= 0) {
		shutdown(p->prev, SHUT_RDWR);
	}
}

static int sock_error(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err == 0) {
		return -ECONNRESET;
	}
	return err == EPIPE ? -ECONNRESET : -err;
}

static int check_hdr(struct crun_comm *c, struct cpu *p, const struct xfer *x, const uint8_t *got)
{
	static const char *const names[] = {"?",	 "allreduce",	   "broadcast",
					    "allgather", "reduce_scatter", "barrier"};
	uint32_t op = got[4];

	if (memcmp(got, x->hdr, CPU_HDR_LEN) == 0) {
		return 0;
	}
	if (get32(got) != CPU_MAGIC) {
		return fail(c, -EPROTO, "%s: rank %d (%s) sent garbage", x->what,
			    (c->rank + c->size - 1) % c->size, p->prev_addr);
	}
	if (get64(got + 24) != get64(x->hdr + 24)) {
		return fail(c, -EPROTO, "%s #%llu: rank %d is at collective #%llu", x->what,
			    (unsigned long long)get64(x->hdr + 24),
			    (c->rank + c->size - 1) % c->size, (unsigned long long)get64(got + 24));
	}
	return fail(c, -EPROTO,
		    "%s of %llu elements (dtype %u, op %u, root %u): rank %d called %s of %llu "
		    "elements (dtype %u, op %u, root %u)",
		    x->what, (unsigned long long)get64(x->hdr + 16), x->hdr[5], x->hdr[6],
		    get32(x->hdr + 8), (c->rank + c->size - 1) % c->size, names[op < 6 ? op : 0],
		    (unsigned long long)get64(got + 16), got[5], got[6], get32(got + 8));
}

static void ring_bell(struct shm_seg *s)
{
	atomic_fetch_add(&s->bell, 1);
	if (atomic_load(&s->sleeping)) {
		syscall(SYS_futex, &s->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
	}
}

/*
 * Copy up to the free space of my outbound ring from @iov; returns the bytes taken. Each
 * collective (@start: its header's first byte) begins 16-byte aligned in the ring, so
 * elements and descriptors are always aligned and never wrap; the reader skips the padding.
 */
static size_t shm_write(struct cpu *p, const struct iovec *iov, int niov, bool start)
{
	struct shm_seg *s = p->shm_me;
	uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
	size_t ring = s->ring_size, space = ring - (size_t)(head - tail), total = 0, piece = 0;
	size_t pad = start ? (size_t)(-head & 15) : 0;

	if (space < pad) {
		return 0;
	}
	head += pad;
	space -= pad;
	piece = pad;

	for (int i = 0; i < niov && space > 0; i++) {
		const char *src = iov[i].iov_base;
		size_t len = iov[i].iov_len < space ? iov[i].iov_len : space;

		while (len > 0) {
			size_t off = (size_t)(head % ring), n = ring - off < len ? ring - off : len;

			if (n > SHM_PIECE) {
				n = SHM_PIECE;
			}
			memcpy(s->data + off, src, n);
			src += n;
			len -= n;
			space -= n;
			head += n;
			total += n;
			piece += n;
			if (piece >= SHM_PIECE) {
				atomic_store_explicit(&s->head, head, memory_order_release);
				ring_bell(p->shm_succ);
				piece = 0;
			}
		}
	}
	if (piece > 0) {
		atomic_store_explicit(&s->head, head, memory_order_release);
		ring_bell(p->shm_succ);
	}
	return total;
}

/* CMA mode: describe the pieces of @iov in my outbound ring; returns the bytes described. */
static size_t shm_describe(struct cpu *p, const struct iovec *iov, int niov, bool start)
{
	struct shm_seg *s = p->shm_me;
	uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
	size_t ring = s->ring_size, total = 0, pad = start ? (size_t)(-head & 15) : 0;

	if (ring - (size_t)(head - tail) < pad + 16) {
		return 0;
	}
	head += pad;

	for (int i = 0; i < niov && ring - (size_t)(head - tail) >= 16; i++) {
		uint64_t d[2] = {(uint64_t)(uintptr_t)iov[i].iov_base, iov[i].iov_len};

		memcpy(s->data + head % ring, d, sizeof(d));
		head += 16;
		total += iov[i].iov_len;
	}
	if (total > 0) {
		atomic_store_explicit(&s->head, head, memory_order_release);
		ring_bell(p->shm_succ);
	}
	return total;
}

/* Sleep until a neighbour rings my bell (it was @seen), a slice passes, or the deadline. */
static int shm_wait(struct crun_comm *c, struct cpu *p, uint32_t seen, int64_t deadline,
		    const struct xfer *x)
{
	struct timespec ts;
	struct pollfd pf[2] = {{.fd = p->prev, .events = POLLIN},
			       {.fd = p->next, .events = POLLIN}};
	int ms = remaining_ms(deadline);
	long rc;

	if (ms == 0) {
		return fail(c, -ETIMEDOUT, "%s: no progress from rank %d / to rank %d within %d ms",
			    x->what, (c->rank + c->size - 1) % c->size, (c->rank + 1) % c->size,
			    c->timeout_ms);
	}
	ms = ms < SHM_SLICE_MS ? ms : SHM_SLICE_MS;
	ts.tv_sec = 0;
	ts.tv_nsec = (long)ms * 1000000;
	atomic_store(&p->shm_me->sleeping, 1);
	rc = syscall(SYS_futex, &p->shm_me->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
	atomic_store(&p->shm_me->sleeping, 0);
	if (rc == 0 || errno != ETIMEDOUT) {
		return 0;
	}
	/* Nothing is sent on the sockets in shm mode: anything readable is a peer's end. */
	if (poll(pf, 2, 0) > 0) {
		int who =
			pf[0].revents ? (c->rank + c->size - 1) % c->size : (c->rank + 1) % c->size;

		return fail(c, -ECONNRESET, "%s: rank %d (%s) is gone", x->what, who,
			    pf[0].revents ? p->prev_addr : p->next_addr);
	}
	return 0;
}

static int run(struct crun_comm *c, struct cpu *p, struct xfer *x)
{
	size_t es = comm_dtype_size(x->dt);
	size_t send_total = 0, recv_total = 0, sent = 0, done = 0, staged = 0;
	size_t hs = 0, hr = 0, soff = 0, roff = 0, dpos = 0;
	uint8_t hin[CPU_HDR_LEN];
	int64_t deadline =
		p->setup_deadline != 0 ? p->setup_deadline : crun_now_ms() + c->timeout_ms;
	int si = 0, ri = 0, rc;

	for (int i = 0; i < x->ns; i++) {
		send_total += x->s[i].len;
	}
	for (int i = 0; i < x->nr; i++) {
		recv_total += x->r[i].len;
	}
	if (x->ns == 0) {
		hs = CPU_HDR_LEN;
	}
	if (x->nr == 0) {
		hr = CPU_HDR_LEN;
	}
	for (;;) {
		bool progress = false, want_out = false, want_in = false;
		struct iovec iov[CPU_MAX_IOV];
		uint32_t bell = 0;
		ssize_t n;
		int niov;

		while (si < x->ns && soff == x->s[si].len) {
			si++;
			soff = 0;
		}
		while (ri < x->nr && roff == x->r[ri].len) {
			ri++;
			roff = 0;
		}
		if (hs == CPU_HDR_LEN && sent == send_total && hr == CPU_HDR_LEN &&
		    done == recv_total) {
			/* CMA: the successor may still be reading my buffers. */
			if (!x->cma ||
			    atomic_load(&p->shm_me->tail) ==
				    atomic_load_explicit(&p->shm_me->head, memory_order_relaxed)) {
				return 0;
			}
		}
		if (p->shm) {
			/* Read before looking at the rings: a later ring of it then cannot be lost.
			 */
			bell = atomic_load(&p->shm_me->bell);
		}

		/* Send what the incoming stream has made ready. */
		if (hs < CPU_HDR_LEN || sent < send_total) {
			size_t limit = send_total, room;

			if (x->lag != SIZE_MAX && done + x->lag < limit) {
				limit = done + x->lag;
			}
			room = limit - sent;
			niov = 0;
			if (hs < CPU_HDR_LEN) {
				iov[niov].iov_base = x->hdr + hs;
				iov[niov++].iov_len = CPU_HDR_LEN - hs;
			}
			for (int i = si; i < x->ns && room > 0 && niov < CPU_MAX_IOV; i++) {
				size_t off = i == si ? soff : 0;
				size_t len = x->s[i].len - off;

				if (len == 0) {
					continue;
				}
				if (len > room) {
					len = room;
				}
				iov[niov].iov_base = (void *)(x->s[i].src + off);
				iov[niov++].iov_len = len;
				room -= len;
			}
			n = 0;
			if (niov > 0 && x->cma) {
				n = (ssize_t)shm_describe(p, iov, niov, hs == 0);
			} else if (niov > 0 && p->shm) {
				n = (ssize_t)shm_write(p, iov, niov, hs == 0);
			} else if (niov > 0) {
				struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};

				n = sendmsg(p->next, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
				if (n < 0 && errno != EAGAIN && errno != EINTR) {
					rc = errno == EPIPE ? -ECONNRESET : -errno;
					return fail(c, rc, "%s: send to rank %d (%s)", x->what,
						    (c->rank + 1) % c->size, p->next_addr);
				}
				if (n < 0) {
					want_out = true;
					n = 0;
				}
			}
			if (n > 0) {
				size_t adv = (size_t)n;

				progress = true;
				if (hs < CPU_HDR_LEN) {
					size_t h = CPU_HDR_LEN - hs < adv ? CPU_HDR_LEN - hs : adv;

					hs += h;
					adv -= h;
				}
				sent += adv;
				while (adv > 0) {
					size_t left = x->s[si].len - soff;

					if (adv < left) {
						soff += adv;
						adv = 0;
					} else {
						adv -= left;
						si++;
						soff = 0;
					}
				}
			}
		}

		/* Receive: the header, then into place (copy) or reduced into place. */
		if ((hr < CPU_HDR_LEN || done < recv_total) && x->cma) {
			struct shm_seg *s = p->shm_pred;
			uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
			uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
			size_t ring = s->ring_size;
			bool freed = false;

			if (hr == 0 && dpos == 0 && (size_t)(head - tail) > (size_t)(-tail & 15)) {
				tail += -tail & 15; /* the writer's padding before the header */
			}
			while (head != tail && (hr < CPU_HDR_LEN || done < recv_total)) {
				uint64_t d[2];
				struct iovec lo, re;
				struct rseg *r = NULL;
				size_t k;
				ssize_t got;

				if (hr == 0 && (tail & 15) != 0) {
					break; /* padding not written yet */
				}

				memcpy(d, s->data + tail % ring, sizeof(d));
				k = (size_t)d[1] - dpos;
				re.iov_base = (void *)(uintptr_t)(d[0] + dpos);
				if (hr < CPU_HDR_LEN) {
					k = k < CPU_HDR_LEN - hr ? k : CPU_HDR_LEN - hr;
					lo.iov_base = hin + hr;
				} else {
					while (ri < x->nr && roff == x->r[ri].len) {
						ri++;
						roff = 0;
					}
					if (ri == x->nr) {
						break;
					}
					r = &x->r[ri];
					k = k < r->len - roff ? k : r->len - roff;
					k = k < (r->a == NULL ? CMA_PULL : CMA_STAGE)
						    ? k
						    : (r->a == NULL ? CMA_PULL : CMA_STAGE);
					lo.iov_base = r->a == NULL ? r->dst + roff : p->stage;
				}
				lo.iov_len = re.iov_len = k;
				got = k == 0 ? 0
					     : process_vm_readv((pid_t)s->pid, &lo, 1, &re, 1, 0);
				if (got != (ssize_t)k) {
					/* Reading was allowed at setup (probe) and the peer keeps
					 * the range valid until we ack it: failing now means it is
					 * dying or gone (ESRCH, or EFAULT while it exits). */
					return fail(c, -ECONNRESET, "%s: read from rank %d: %s",
						    x->what, (c->rank + c->size - 1) % c->size,
						    got < 0 ? strerror(errno) : "short read");
				}
				/*
				 * A peer that gave up on this collective no longer keeps the
				 * described ranges (its header is on its stack, its buffers are
				 * the program's again), so what we just read may be garbage. It
				 * sets "failed" (then a fence) before it returns, so a read that
				 * completed before we see the flag clear read valid data.
				 */
				atomic_thread_fence(memory_order_seq_cst);
				if (atomic_load(&s->failed) != 0) {
					return fail(c, -ECONNRESET, "%s: rank %d gave up",
						    x->what, (c->rank + c->size - 1) % c->size);
				}
				if (r == NULL) {
					hr += k;
					if (hr == CPU_HDR_LEN) {
						rc = check_hdr(c, p, x, hin);
						if (rc < 0) {
							return rc;
						}
					}
				} else {
					if (r->a != NULL) {
						reduce(r->dst + roff, r->a + roff, p->stage, k,
						       x->dt, r->scale, c->size);
					}
					roff += k;
					done += k;
				}
				dpos += k;
				progress = true;
				if (dpos == d[1]) {
					dpos = 0;
					tail += 16;
					atomic_store_explicit(&s->tail, tail, memory_order_release);
					freed = true;
				}
				if (r != NULL && k >= CMA_STAGE) {
					break; /* let the sends catch up with what is now done */
				}
			}
			if (freed) {
				ring_bell(p->shm_pred);
			}
		} else if ((hr < CPU_HDR_LEN || done < recv_total) && p->shm) {
			struct shm_seg *s = p->shm_pred;
			uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
			uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
			size_t ring = s->ring_size, freed = 0;

			if (hr == 0 && (size_t)(head - tail) > (size_t)(-tail & 15)) {
				/* The writer's padding before this collective's header. */
				freed = (size_t)(-tail & 15);
				tail += freed;
			}
			while (head != tail && (hr < CPU_HDR_LEN || done < recv_total)) {
				size_t off = (size_t)(tail % ring), avail = (size_t)(head - tail);
				size_t take = ring - off < avail ? ring - off : avail;
				struct rseg *r;

				if (hr == 0 && (tail & 15) != 0) {
					break; /* padding not written yet */
				}
				if (hr < CPU_HDR_LEN) {
					take = take < CPU_HDR_LEN - hr ? take : CPU_HDR_LEN - hr;
					memcpy(hin + hr, s->data + off, take);
					hr += take;
					if (hr == CPU_HDR_LEN) {
						rc = check_hdr(c, p, x, hin);
						if (rc < 0) {
							return rc;
						}
					}
				} else {
					while (ri < x->nr && roff == x->r[ri].len) {
						ri++;
						roff = 0;
					}
					if (ri == x->nr) {
						break;
					}
					r = &x->r[ri];
					take = take < r->len - roff ? take : r->len - roff;
					if (take > SHM_PIECE) {
						take = SHM_PIECE;
					}
					if (r->a == NULL) {
						memcpy(r->dst + roff, s->data + off, take);
					} else if (take >= es) {
						take -= take % es;
						reduce(r->dst + roff, r->a + roff, s->data + off,
						       take, x->dt, r->scale, c->size);
					} else if (avail >= es) {
						/* One element wraps around the end of the ring. */
						_Alignas(8) char el[8];

						memcpy(el, s->data + off, take);
						memcpy(el + take, s->data, es - take);
						take = es;
						reduce(r->dst + roff, r->a + roff, el, es, x->dt,
						       r->scale, c->size);
					} else {
						break; /* part of an element so far */
					}
					roff += take;
					done += take;
				}
				tail += take;
				freed += take;
				progress = true;
				if (freed >= SHM_PIECE) {
					atomic_store_explicit(&s->tail, tail, memory_order_release);
					ring_bell(p->shm_pred);
					freed = 0;
				}
			}
			if (freed > 0) {
				atomic_store_explicit(&s->tail, tail, memory_order_release);
				ring_bell(p->shm_pred);
			}
		} else if (hr < CPU_HDR_LEN || done < recv_total) {
			struct rseg *r = ri < x->nr ? &x->r[ri] : NULL;

			niov = 0;
			if (hr < CPU_HDR_LEN) {
				iov[niov].iov_base = hin + hr;
				iov[niov++].iov_len = CPU_HDR_LEN - hr;
			}
			if (r != NULL && r->a == NULL) {
				iov[niov].iov_base = r->dst + roff;
				iov[niov++].iov_len = r->len - roff;
			} else if (r != NULL) {
				size_t want = r->len - roff - staged;

				iov[niov].iov_base = p->stage + staged;
				iov[niov++].iov_len =
					want < CPU_STAGE - staged ? want : CPU_STAGE - staged;
			}
			n = readv(p->prev, iov, niov);
			if (n == 0) {
				return fail(c, -ECONNRESET, "%s: receive from rank %d (%s)",
					    x->what, (c->rank + c->size - 1) % c->size,
					    p->prev_addr);
			}
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				return fail(c, -errno, "%s: receive from rank %d (%s)", x->what,
					    (c->rank + c->size - 1) % c->size, p->prev_addr);
			}
			if (n < 0) {
				want_in = true;
			} else {
				size_t adv = (size_t)n;

				progress = true;
				if (hr < CPU_HDR_LEN) {
					size_t h = CPU_HDR_LEN - hr < adv ? CPU_HDR_LEN - hr : adv;

					hr += h;
					adv -= h;
					if (hr == CPU_HDR_LEN) {
						rc = check_hdr(c, p, x, hin);
						if (rc < 0) {
							return rc;
						}
					}
				}
				if (adv > 0 && r != NULL && r->a == NULL) {
					roff += adv;
					done += adv;
				} else if (adv > 0 && r != NULL) {
					size_t whole;

					staged += adv;
					whole = staged - staged % es;
					if (whole > 0) {
						reduce(r->dst + roff, r->a + roff, p->stage, whole,
						       x->dt, r->scale, c->size);
						roff += whole;
						done += whole;
						staged -= whole;
						if (staged > 0) {
							memmove(p->stage, p->stage + whole, staged);
						}
					}
				}
			}
		}

		if (!progress && p->shm) {
			rc = shm_wait(c, p, bell, deadline, x);
			if (rc < 0) {
				return rc;
			}
		} else if (!progress) {
			struct pollfd pf[2];
			int np = 0, ms;

			if (want_out) {
				pf[np].fd = p->next;
				pf[np++].events = POLLOUT;
			}
			if (want_in) {
				pf[np].fd = p->prev;
				pf[np++].events = POLLIN;
			}
			ms = remaining_ms(deadline);
			if (np == 0) {
				continue;
			}
			if (ms == 0) {
				return fail(c, -ETIMEDOUT,
					    "%s: no progress from rank %d (%s) / to rank %d (%s) "
					    "within %d ms",
					    x->what, (c->rank + c->size - 1) % c->size,
					    p->prev_addr, (c->rank + 1) % c->size, p->next_addr,
					    c->timeout_ms);
			}
			rc = poll(pf, (nfds_t)np, ms);
			if (rc < 0 && errno != EINTR) {
				return fail(c, -errno, "%s: poll", x->what);
			}
			for (int i = 0; i < np && rc > 0; i++) {
				/* Readable EOF is reported by readv; a failed send socket here. */
				if (pf[i].fd == p->next && (pf[i].revents & (POLLERR | POLLHUP))) {
					return fail(c, sock_error(p->next),
						    "%s: send to rank %d (%s)", x->what,
						    (c->rank + 1) % c->size, p->next_addr);
				}
			}
		}
	}
}

static void make_hdr(struct crun_comm *c, struct cpu *p, struct xfer *x, enum cpu_op op,
		     size_t count, int root)
{
	memset(x->hdr, 0, sizeof(x->hdr));
	put32(x->hdr, CPU_MAGIC);
	x->hdr[4] = (uint8_t)op;
	x->hdr[5] = (uint8_t)x->dt;
	x->hdr[6] = (uint8_t)x->op;
	put32(x->hdr + 8, (uint32_t)root);
	put64(x->hdr + 16, (uint64_t)count);
	put64(x->hdr + 24, ++p->seq);
	/* Every rank sees the same count, so every link agrees on the mode. */
	x->cma = p->cma && count * comm_dtype_size(x->dt) >= CMA_MIN;
	(void)c;
}

static int finish(struct crun_comm *c, struct cpu *p, int rc)
{
	if (rc < 0) {
		/* CMA: my successor may still be reading what I described; tell it first. */
		if (p->shm_me != NULL) {
			atomic_store(&p->shm_me->failed, 1);
			atomic_thread_fence(memory_order_seq_cst);
		}
		cpu_poison(p);
	}
	return rc;
}

/* Segment i of @count elements split @size ways: the first count % size get one more. */
static void seg_of(size_t count, int size, int i, size_t *off, size_t *len)
{
	size_t base = count / (size_t)size, rem = count % (size_t)size, ui = (size_t)i;

	*off = ui * base + (ui < rem ? ui : rem);
	*len = base + (ui < rem ? 1 : 0);
}

static int mod(int a, int n)
{
	return ((a % n) + n) % n;
}

static int ring_allreduce(struct crun_comm *c, const char *what, enum cpu_op opc, const void *send,
			  void *recv, size_t count, enum crun_dtype dt, enum crun_redop op)
{
	struct cpu *p = c->impl;
	size_t es = comm_dtype_size(dt), off, len;
	const char *in = send;
	char *out = recv;
	struct xfer x = {.what = what, .s = p->sseg, .r = p->rseg, .dt = dt, .op = op};
	int n = c->size, r = c->rank;

	if (n == 1) {
		if (send != recv) {
			memcpy(recv, send, count * es);
		}
		return 0;
	}
	make_hdr(c, p, &x, opc, count, 0);
	/* Reduce-scatter: at step t send segment r - t, receive and reduce segment r - t - 1. */
	for (int t = 0; t < n - 1; t++) {
		int ss = mod(r - t, n), rs = mod(r - t - 1, n);

		seg_of(count, n, ss, &off, &len);
		p->sseg[t].src = (t == 0 ? in : out) + off * es;
		p->sseg[t].len = len * es;
		if (t == 0) {
			x.lag = len * es;
		}
		seg_of(count, n, rs, &off, &len);
		p->rseg[t].dst = out + off * es;
		p->rseg[t].a = in + off * es;
		p->rseg[t].len = len * es;
		p->rseg[t].scale = op == CRUN_AVG && t == n - 2;
	}
	/* Allgather: at step s send segment r + 1 - s (now final), receive segment r - s. */
	for (int s = 0; s < n - 1; s++) {
		int t = n - 1 + s;

		seg_of(count, n, mod(r + 1 - s, n), &off, &len);
		p->sseg[t].src = out + off * es;
		p->sseg[t].len = len * es;
		seg_of(count, n, mod(r - s, n), &off, &len);
		p->rseg[t].dst = out + off * es;
		p->rseg[t].a = NULL;
		p->rseg[t].len = len * es;
		p->rseg[t].scale = false;
	}
	x.ns = x.nr = 2 * (n - 1);
	return finish(c, p, run(c, p, &x));
}

static int cpu_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
			 enum crun_dtype dt, enum crun_redop op)
{
	return ring_allreduce(c, "allreduce", OP_ALLREDUCE, send, recv, count, dt, op);
}

static int cpu_barrier(struct crun_comm *c)
{
	float token = 0;

	/* An allreduce of one element: its value passes through every rank twice. */
	return ring_allreduce(c, "barrier", OP_BARRIER, &token, &token, 1, CRUN_FLOAT32, CRUN_SUM);
}

/* A pipelined chain root -> root+1 -> ... -> root-1; each rank forwards what it has received. */
static int cpu_broadcast(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt, int root)
{
	struct cpu *p = c->impl;
	size_t bytes = count * comm_dtype_size(dt);
	struct xfer x = {.what = "broadcast", .s = p->sseg, .r = p->rseg, .dt = dt};
	int d = mod(c->rank - root, c->size);

	if (c->size == 1) {
		return 0;
	}
	make_hdr(c, p, &x, OP_BROADCAST, count, root);
	if (d < c->size - 1) {
		p->sseg[0].src = buf;
		p->sseg[0].len = bytes;
		x.ns = 1;
	}
	if (d > 0) {
		p->rseg[0].dst = buf;
		p->rseg[0].a = NULL;
		p->rseg[0].len = bytes;
		p->rseg[0].scale = false;
		x.nr = 1;
	}
	x.lag = d == 0 ? SIZE_MAX : 0;
	return finish(c, p, run(c, p, &x));
}

static int cpu_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
			 enum crun_dtype dt)
{
	struct cpu *p = c->impl;
	size_t bl = count * comm_dtype_size(dt);
	char *out = recv;
	struct xfer x = {.what = "allgather", .s = p->sseg, .r = p->rseg, .dt = dt, .lag = bl};
	int n = c->size, r = c->rank;

	if (out + (size_t)r * bl != (const char *)send) {
		memmove(out + (size_t)r * bl, send, bl);
	}
	if (n == 1) {
		return 0;
	}
	make_hdr(c, p, &x, OP_ALLGATHER, count, 0);
	for (int t = 0; t < n - 1; t++) {
		p->sseg[t].src = out + (size_t)mod(r - t, n) * bl;
		p->sseg[t].len = bl;
		p->rseg[t].dst = out + (size_t)mod(r - t - 1, n) * bl;
		p->rseg[t].a = NULL;
		p->rseg[t].len = bl;
		p->rseg[t].scale = false;
	}
	x.ns = x.nr = n - 1;
	return finish(c, p, run(c, p, &x));
}

static int cpu_reduce_scatter(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
			      enum crun_dtype dt, enum crun_redop op)
{
	struct cpu *p = c->impl;
	size_t bl = recvcount * comm_dtype_size(dt), need;
	const char *in = send;
	struct xfer x = {.what = "reduce_scatter",
			 .s = p->sseg,
			 .r = p->rseg,
			 .dt = dt,
			 .op = op,
			 .lag = bl};
	int n = c->size, r = c->rank;

	if (n == 1) {
		if (send != recv) {
			memmove(recv, send, bl);
		}
		return 0;
	}
	/* Intermediate sums of steps 0 .. n-3 each get their own slot of the scratch buffer. */
	need = (size_t)(n - 2) * bl;
	if (need > p->scratch_len) {
		char *s = realloc(p->scratch, need);

		if (s == NULL) {
			return diag_set(&c->diag, -ENOMEM, "comm %s: reduce_scatter: %zu bytes",
					c->name, need);
		}
		p->scratch = s;
		p->scratch_len = need;
	}
	make_hdr(c, p, &x, OP_REDUCE_SCATTER, recvcount, 0);
	/* At step t send block r - t - 1, receive and reduce block r - t - 2; the last is ours. */
	for (int t = 0; t < n - 1; t++) {
		int ss = mod(r - t - 1, n), rs = mod(r - t - 2, n);

		p->sseg[t].src = t == 0 ? in + (size_t)ss * bl : p->scratch + (size_t)(t - 1) * bl;
		p->sseg[t].len = bl;
		p->rseg[t].dst = t == n - 2 ? (char *)recv : p->scratch + (size_t)t * bl;
		p->rseg[t].a = in + (size_t)rs * bl;
		p->rseg[t].len = bl;
		p->rseg[t].scale = op == CRUN_AVG && t == n - 2;
	}
	x.ns = x.nr = n - 1;
	return finish(c, p, run(c, p, &x));
}

static void shm_unmap(struct cpu *p);

static void cpu_destroy(struct crun_comm *c)
{
	struct cpu *p = c->impl;

	if (p == NULL) {
		return;
	}
	if (p->next >= 0) {
		close(p->next);
	}
	if (p->prev >= 0) {
		close(p->prev);
	}
	shm_unmap(p);
	free(p->stage);
	free(p->scratch);
	free(p->sseg);
	free(p->rseg);
	free(p);
	c->impl = NULL;
}

static const struct comm_ops cpu_ops = {
	.allreduce = cpu_allreduce,
	.broadcast = cpu_broadcast,
	.allgather = cpu_allgather,
	.reduce_scatter = cpu_reduce_scatter,
	.barrier = cpu_barrier,
	.destroy = cpu_destroy,
};

/* ---- setup ---- */

static void fmt_addr(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
		snprintf(buf, len, "%s:%d", host, port);
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		snprintf(buf, len, "[%s]:%d", host, port);
	}
}

static int resolve(const char *host, int port, bool numeric, struct sockaddr_storage *ss,
		   socklen_t *sl)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	char ps[16];
	int rc;

	hints.ai_flags = numeric ? AI_NUMERICHOST : 0;
	snprintf(ps, sizeof(ps), "%d", port);
	rc = getaddrinfo(host, ps, &hints, &ai);
	if (rc != 0) {
		return rc == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*sl = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/*
 * The address to listen on: CRUN_COMM_ADDR if set; else the local address the kernel would use
 * to reach MASTER_ADDR (a UDP connect sends nothing); else 127.0.0.1.
 */
static int local_addr(struct crun_comm *c, struct sockaddr_storage *ss, socklen_t *sl)
{
	const char *env = getenv("CRUN_COMM_ADDR"), *master = getenv("MASTER_ADDR");
	const char *port = getenv("MASTER_PORT");
	struct sockaddr_storage ms;
	socklen_t ml;
	int rc, fd;

	if (env != NULL && *env != '\0') {
		rc = resolve(env, 0, false, ss, sl);
		if (rc < 0) {
			return diag_set(
				&c->diag, CRUN_ECONFIG,
				"comm %s: CRUN_COMM_ADDR \"%s\": does not resolve to an address",
				c->name, env);
		}
		return 0;
	}
	if (master != NULL && *master != '\0' &&
	    resolve(master, port != NULL ? atoi(port) : 29500, false, &ms, &ml) == 0) {
		fd = socket(ms.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&ms, ml) == 0) {
			*sl = sizeof(*ss);
			rc = getsockname(fd, (struct sockaddr *)ss, sl);
			close(fd);
			if (rc == 0) {
				return 0;
			}
		} else if (fd >= 0) {
			close(fd);
		}
		log_warn("comm %s: no route to MASTER_ADDR %s; listening on 127.0.0.1", c->name,
			 master);
	}
	return resolve("127.0.0.1", 0, true, ss, sl);
}

static void tune(int fd)
{
	const char *env = getenv("CRUN_COMM_SOCKBUF");
	int one = 1, sz = env != NULL ? atoi(env) : CPU_SOCKBUF;

	/*
	 * 0 keeps the kernel's autotuning. Measured on loopback (2 ranks, 64-256 MiB): fixed
	 * 4 MiB buffers gave 0.75 GB/s, 1 MiB 0.93, autotuning 1.3; large fixed buffers push the
	 * data out of cache between the two copies. Autotuning also grows to the kernel's
	 * maximum (tcp_rmem) on a long, fast network path.
	 */
	if (sz > 0) {
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Move @len bytes over a non-blocking socket before @deadline. */
static int io_full(int fd, void *buf, size_t len, bool out, int64_t deadline)
{
	char *b = buf;

	while (len > 0) {
		struct pollfd pf = {.fd = fd, .events = out ? POLLOUT : POLLIN};
		ssize_t n;

		n = out ? send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, b, len, 0);
		if (n == 0 && !out) {
			return -ECONNRESET;
		}
		if (n > 0) {
			b += n;
			len -= (size_t)n;
			continue;
		}
		if (errno != EAGAIN && errno != EINTR) {
			return errno == EPIPE ? -ECONNRESET : -errno;
		}
		if (remaining_ms(deadline) == 0) {
			return -ETIMEDOUT;
		}
		if (poll(&pf, 1, remaining_ms(deadline)) < 0 && errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

static void make_hello(const struct crun_comm *c, uint8_t *h, int kind)
{
	memset(h, 0, CPU_HELLO_LEN);
	put32(h, CPU_MAGIC);
	h[4] = CPU_VERSION;
	h[6] = (uint8_t)kind;
	put32(h + 8, (uint32_t)c->rank);
	put32(h + 12, (uint32_t)c->size);
	put64(h + 16, c->generation);
	h[24] = (uint8_t)strlen(c->name);
	for (int i = 0; i < 6; i++) {
		h[26 + i] = (uint8_t)(((const struct cpu *)c->impl)->host >> (8 * i));
	}
}

static uint64_t hello_host(const uint8_t *h)
{
	uint64_t v = 0;

	for (int i = 5; i >= 0; i--) {
		v = (v << 8) | h[26 + i];
	}
	return v;
}

/* This host: hostname + boot id (containers may share a hostname, never a boot id), 48 bits. */
static uint64_t host_id(void)
{
	char buf[256 + 64] = "";
	uint64_t h = 14695981039346656037ull;
	FILE *f;

	gethostname(buf, 256);
	buf[255] = '\0';
	f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f != NULL) {
		size_t l = strlen(buf);

		if (fgets(buf + l, (int)(sizeof(buf) - l), f) == NULL) {
			buf[l] = '\0';
		}
		fclose(f);
	}
	for (const char *q = buf; *q != '\0'; q++) {
		h = (h ^ (uint8_t)*q) * 1099511628211ull;
	}
	return h & 0xffffffffffffull;
}

/* Why hello @h (+ @name) is not from our predecessor, or NULL when it is. */
static const char *hello_mismatch(const struct crun_comm *c, const uint8_t *h, const char *name,
				  int kind, int from)
{
	if (get32(h) != CPU_MAGIC) {
		return "bad magic";
	}
	if (h[4] != CPU_VERSION) {
		return "unsupported version";
	}
	if (h[6] != kind) {
		return "unexpected message";
	}
	if (get32(h + 12) != (uint32_t)c->size) {
		return "different world size";
	}
	if (get64(h + 16) != c->generation) {
		return "different generation";
	}
	if (h[24] != strlen(c->name) || memcmp(name, c->name, h[24]) != 0) {
		return "different comm name";
	}
	if (get32(h + 8) != (uint32_t)from) {
		return "not the expected rank";
	}
	return NULL;
}

/* Read a hello or ack (header + name) from @fd before @deadline. */
static int read_hello(int fd, uint8_t *h, char *name, int64_t deadline)
{
	int rc;

	rc = io_full(fd, h, CPU_HELLO_LEN, false, deadline);
	if (rc < 0) {
		return rc;
	}
	if (get32(h) != CPU_MAGIC || h[4] != CPU_VERSION) {
		return 0; /* hello_mismatch() says which */
	}
	return io_full(fd, name, h[24], false, deadline);
}

static int connect_next(struct crun_comm *c, struct cpu *p, struct crun_store *st, int64_t deadline)
{
	int succ = (c->rank + 1) % c->size, rc, fd;
	char key[COMM_MAX_NAME + 64], host[64], name[256];
	struct sockaddr_storage ss;
	const char *keys[1] = {key};
	uint8_t h[CPU_HELLO_LEN];
	socklen_t sl;
	size_t len;
	void *val;
	int port;

	snprintf(name, sizeof(name), "addr/%d", succ);
	rc = comm_key(c, key, sizeof(key), name);
	if (rc < 0) {
		return rc;
	}
	rc = crun_store_wait(st, keys, 1, remaining_ms(deadline) > 0 ? remaining_ms(deadline) : 1);
	if (rc < 0) {
		return diag_set(&c->diag, rc,
				"comm %s: rank %d: waiting for rank %d's address (%s): %s", c->name,
				c->rank, succ, key, crun_strerror(rc));
	}
	rc = crun_store_get(st, key, &val, &len);
	if (rc < 0) {
		return diag_set(&c->diag, rc, "comm %s: rank %d: store get %s: %s", c->name,
				c->rank, key, crun_strerror(rc));
	}
	snprintf(p->next_addr, sizeof(p->next_addr), "%.*s", (int)len, (const char *)val);
	free(val);
	if (net_parse_hostport(p->next_addr, -1, host, sizeof(host), &port) < 0 ||
	    resolve(host, port, true, &ss, &sl) < 0) {
		return diag_set(&c->diag, -EPROTO,
				"comm %s: rank %d: rank %d's address \"%s\" (%s)", c->name, c->rank,
				succ, p->next_addr, "not HOST:PORT");
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return fail(c, -errno, "socket");
	}
	p->next = fd;
	tune(fd);
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		return fail(c, -errno, "connect to rank %d (%s)", succ, p->next_addr);
	}
	{
		struct pollfd pf = {.fd = fd, .events = POLLOUT};

		int err = 0;
		socklen_t el = sizeof(err);

		do {
			rc = poll(&pf, 1, remaining_ms(deadline));
		} while (rc < 0 && errno == EINTR);
		if (rc == 0) {
			return fail(c, -ETIMEDOUT, "connect to rank %d (%s)", succ, p->next_addr);
		}
		if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0) {
			return fail(c, -errno, "connect to rank %d (%s)", succ, p->next_addr);
		}
		if (err != 0) {
			return fail(c, -err, "connect to rank %d (%s)", succ, p->next_addr);
		}
	}
	make_hello(c, h, CPU_HELLO);
	rc = io_full(fd, h, CPU_HELLO_LEN, true, deadline);
	if (rc == 0) {
		rc = io_full(fd, c->name, strlen(c->name), true, deadline);
	}
	if (rc < 0) {
		return fail(c, rc, "hello to rank %d (%s)", succ, p->next_addr);
	}
	return 0;
}

static int accept_prev(struct crun_comm *c, struct cpu *p, int lfd, int64_t deadline)
{
	int pred = (c->rank + c->size - 1) % c->size, rc, fd;
	uint8_t h[CPU_HELLO_LEN];
	char name[256], from[64];
	const char *why;

	for (;;) {
		struct pollfd pf = {.fd = lfd, .events = POLLIN};
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int64_t cand;

		rc = poll(&pf, 1, remaining_ms(deadline));
		if (rc < 0 && errno == EINTR) {
			continue;
		}
		if (rc <= 0) {
			return fail(c, rc == 0 ? -ETIMEDOUT : -errno,
				    "waiting for rank %d to connect", pred);
		}
		fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)) {
			continue;
		}
		if (fd < 0) {
			return fail(c, -errno, "accept");
		}
		fmt_addr((struct sockaddr *)&ss, from, sizeof(from));
		cand = crun_now_ms() + CPU_STRAY_MS;
		rc = read_hello(fd, h, name, cand < deadline ? cand : deadline);
		why = rc < 0 ? crun_strerror(rc) : hello_mismatch(c, h, name, CPU_HELLO, pred);
		if (why == NULL) {
			break;
		}
		log_warn("comm %s: rank %d: rejected connection from %s: %s", c->name, c->rank,
			 from, why);
		close(fd);
	}
	p->prev = fd;
	p->pred_host = hello_host(h);
	snprintf(p->prev_addr, sizeof(p->prev_addr), "%s", from);
	tune(fd);
	make_hello(c, h, CPU_ACK);
	rc = io_full(fd, h, CPU_HELLO_LEN, true, deadline);
	if (rc == 0) {
		rc = io_full(fd, c->name, strlen(c->name), true, deadline);
	}
	if (rc < 0) {
		return fail(c, rc, "ack to rank %d (%s)", pred, from);
	}
	return 0;
}

static int await_ack(struct crun_comm *c, struct cpu *p, int64_t deadline)
{
	int succ = (c->rank + 1) % c->size, rc;
	uint8_t h[CPU_HELLO_LEN];
	char name[256];
	const char *why;

	rc = read_hello(p->next, h, name, deadline);
	if (rc < 0) {
		return fail(c, rc, "handshake with rank %d (%s)", succ, p->next_addr);
	}
	why = hello_mismatch(c, h, name, CPU_ACK, succ);
	if (why != NULL) {
		return diag_set(&c->diag, -EPROTO,
				"comm %s: rank %d: handshake with rank %d (%s): %s", c->name,
				c->rank, succ, p->next_addr, why);
	}
	return 0;
}

static int listen_and_publish(struct crun_comm *c, struct crun_store *st, int *lfd_out)
{
	char key[COMM_MAX_NAME + 64], suffix[32], addr[80];
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd, rc;

	rc = local_addr(c, &ss, &sl);
	if (rc < 0) {
		return rc;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return fail(c, -errno, "socket");
	}
	tune(fd);
	if (ss.ss_family == AF_INET) {
		((struct sockaddr_in *)&ss)->sin_port = 0;
	} else {
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	}
	fmt_addr((struct sockaddr *)&ss, addr, sizeof(addr));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		rc = fail(c, -errno, "bind %s", addr);
		goto err;
	}
	if (listen(fd, 64) < 0) {
		rc = fail(c, -errno, "listen %s", addr);
		goto err;
	}
	sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = fail(c, -errno, "getsockname");
		goto err;
	}
	fmt_addr((struct sockaddr *)&ss, addr, sizeof(addr));
	snprintf(suffix, sizeof(suffix), "addr/%d", c->rank);
	rc = comm_key(c, key, sizeof(key), suffix);
	if (rc == 0) {
		rc = crun_store_set(st, key, addr, strlen(addr));
	}
	if (rc < 0) {
		diag_set(&c->diag, rc, "comm %s: rank %d: publish %s: %s", c->name, c->rank, key,
			 crun_strerror(rc));
		goto err;
	}
	*lfd_out = fd;
	return 0;
err:
	close(fd);
	return rc;
}

/* Whether to use shared memory: every rank's predecessor on its host, and nobody opted out. */
static int agree_on_shm(struct crun_comm *c, struct cpu *p, bool *shm)
{
	const char *env = getenv("CRUN_COMM_SHM");
	float votes = p->pred_host == p->host && (env == NULL || strcmp(env, "0") != 0) ? 1 : 0;
	int rc;

	rc = ring_allreduce(c, "setup", OP_BARRIER, &votes, &votes, 1, CRUN_FLOAT32, CRUN_SUM);
	*shm = rc == 0 && votes == (float)c->size;
	return rc;
}

static int shm_map(struct crun_comm *c, const char *name, bool create, size_t ring,
		   struct shm_seg **out, size_t *len)
{
	struct stat sb;
	void *m;
	int fd, rc = 0;

	fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC : O_RDWR | O_CLOEXEC,
		      0600);
	if (fd < 0) {
		return fail(c, -errno, "shared memory %s", name);
	}
	if (create && ftruncate(fd, (off_t)(sizeof(struct shm_seg) + ring)) < 0) {
		rc = fail(c, -errno, "shared memory %s: %zu bytes", name, ring);
		goto out;
	}
	if (fstat(fd, &sb) < 0 || (size_t)sb.st_size < sizeof(struct shm_seg) + 64) {
		rc = fail(c, -EPROTO, "shared memory %s: too small", name);
		goto out;
	}
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		rc = fail(c, -errno, "shared memory %s: mmap", name);
		goto out;
	}
	*out = m;
	*len = (size_t)sb.st_size;
	if (create) {
		(*out)->ring_size = ring;
	} else if ((*out)->ring_size == 0 || (*out)->ring_size % 64 != 0 ||
		   (*out)->ring_size > *len - sizeof(struct shm_seg)) {
		rc = fail(c, -EPROTO, "shared memory %s: bad ring size", name);
	}
out:
	close(fd);
	return rc;
}

static void shm_unmap(struct cpu *p)
{
	struct shm_seg **segs[3] = {&p->shm_me, &p->shm_pred, &p->shm_succ};

	for (int i = 0; i < 3; i++) {
		if (*segs[i] != NULL) {
			munmap(*segs[i], p->shm_len[i]);
			*segs[i] = NULL;
		}
	}
	if (p->shm_name[0] != '\0') {
		shm_unlink(p->shm_name);
		p->shm_name[0] = '\0';
	}
}

/*
 * Create my segment, tell both neighbours its name, map theirs, and vote: shared memory only
 * if it worked for every rank (containers may share a boot id but not /dev/shm), else TCP.
 * Only a failure to talk to a neighbour is an error.
 */
static int shm_setup(struct crun_comm *c, struct cpu *p, int64_t deadline)
{
	static _Atomic unsigned counter;
	const char *env = getenv("CRUN_COMM_SHM_RING");
	size_t ring = env != NULL && atoi(env) >= 4096 ? (size_t)atoi(env) & ~(size_t)63 : SHM_RING;
	char mine[64], pred[64], succ[64];
	static const uint64_t probe = SHM_PROBE;
	struct crun_diag saved = c->diag;
	const char *cma_env = getenv("CRUN_COMM_CMA");
	double votes[2] = {1, 0};
	int rc;

	snprintf(p->shm_name, sizeof(p->shm_name), "/crun-comm-%d-%u", (int)getpid(),
		 atomic_fetch_add(&counter, 1));
	memset(mine, 0, sizeof(mine));
	if (shm_map(c, p->shm_name, true, ring, &p->shm_me, &p->shm_len[0]) == 0) {
		memcpy(mine, p->shm_name, sizeof(mine));
		p->shm_me->pid = getpid();
		p->shm_me->probe_addr = (uint64_t)(uintptr_t)&probe;
	} else {
		p->shm_name[0] = '\0'; /* not ours to unlink */
		votes[0] = 0;
	}
	rc = io_full(p->next, mine, sizeof(mine), true, deadline);
	if (rc == 0) {
		rc = io_full(p->prev, mine, sizeof(mine), true, deadline);
	}
	if (rc == 0) {
		rc = io_full(p->prev, pred, sizeof(pred), false, deadline);
	}
	if (rc == 0) {
		rc = io_full(p->next, succ, sizeof(succ), false, deadline);
	}
	if (rc < 0) {
		return fail(c, rc, "exchanging shared memory names");
	}
	pred[sizeof(pred) - 1] = succ[sizeof(succ) - 1] = '\0';
	if (votes[0] == 1 &&
	    (strncmp(pred, "/crun-comm-", 11) != 0 || strncmp(succ, "/crun-comm-", 11) != 0 ||
	     shm_map(c, pred, false, 0, &p->shm_pred, &p->shm_len[1]) < 0 ||
	     shm_map(c, succ, false, 0, &p->shm_succ, &p->shm_len[2]) < 0)) {
		votes[0] = 0;
	}
	if (votes[0] == 1 && (cma_env == NULL || strcmp(cma_env, "0") != 0)) {
		/* Single copy: may I read my predecessor's memory (same pid namespace, ptrace
		 * allowed)? Everyone must say yes. */
		uint64_t v = 0;
		struct iovec lo = {&v, sizeof(v)};
		struct iovec re = {(void *)(uintptr_t)p->shm_pred->probe_addr, sizeof(v)};

		if (process_vm_readv((pid_t)p->shm_pred->pid, &lo, 1, &re, 1, 0) == sizeof(v) &&
		    v == SHM_PROBE) {
			votes[1] = 1;
		}
	}
	if (votes[0] == 0) {
		log_warn("%s",
			 c->diag.msg[0] != '\0' ? c->diag.msg : "comm: shared memory: no peer");
	}
	c->diag = saved;
	/* Everybody has mapped its neighbours' segments (or said it could not): names can go. */
	rc = ring_allreduce(c, "setup", OP_BARRIER, votes, votes, 2, CRUN_FLOAT64, CRUN_SUM);
	if (rc < 0) {
		return rc;
	}
	if (votes[0] == c->size) {
		shm_unlink(p->shm_name);
		p->shm_name[0] = '\0';
		p->shm = true;
		p->cma = votes[1] == c->size;
	} else {
		if (c->rank == 0) {
			log_warn("comm %s: shared memory unavailable on some rank: using TCP",
				 c->name);
		}
		shm_unmap(p);
	}
	return 0;
}

int comm_cpu_init(struct crun_comm *c, struct crun_store *st)
{
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	struct cpu *p;
	int lfd = -1, rc;
	bool shm;

	p = calloc(1, sizeof(*p));
	if (p == NULL) {
		return -ENOMEM;
	}
	p->next = p->prev = -1;
	p->host = host_id();
	c->impl = p;
	c->ops = &cpu_ops;
	if (c->size == 1) {
		return 0;
	}
	p->stage = malloc(CPU_STAGE);
	p->sseg = calloc(2 * (size_t)c->size, sizeof(*p->sseg));
	p->rseg = calloc(2 * (size_t)c->size, sizeof(*p->rseg));
	if (p->stage == NULL || p->sseg == NULL || p->rseg == NULL) {
		rc = -ENOMEM;
		goto err;
	}
	/* Listen before publishing, and connect before accepting: the kernel completes the
	 * connection from its backlog, so no rank waits on another's accept. */
	rc = listen_and_publish(c, st, &lfd);
	if (rc < 0) {
		goto err;
	}
	rc = connect_next(c, p, st, deadline);
	if (rc < 0) {
		goto err;
	}
	rc = accept_prev(c, p, lfd, deadline);
	if (rc < 0) {
		goto err;
	}
	rc = await_ack(c, p, deadline);
	if (rc < 0) {
		goto err;
	}
	close(lfd);
	lfd = -1;
	/* A round through every rank: nobody returns (and may create the next generation of this
	 * name) before every rank has joined this one. It also counts the ranks whose
	 * predecessor is on their host: all of them means one host, and shared memory. */
	p->setup_deadline = deadline;
	rc = agree_on_shm(c, p, &shm);
	if (rc == 0 && shm) {
		rc = shm_setup(c, p, deadline);
	}
	if (rc == 0) {
		log_debug("comm %s: rank %d: links to rank %d and from rank %d: %s", c->name,
			  c->rank, (c->rank + 1) % c->size, (c->rank + c->size - 1) % c->size,
			  p->cma   ? "shared memory, single copy"
			  : p->shm ? "shared memory"
				   : "TCP");
	}
	p->setup_deadline = 0;
	if (rc < 0) {
		goto err;
	}
	return 0;
err:
	if (lfd >= 0) {
		close(lfd);
	}
	cpu_destroy(c);
	c->ops = NULL;
	return rc;
}
