/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu_shm.c: same-host links: shared segments, rings, process_vm_readv (CMA). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"
#include "src/common/parse.h"
#include "worker_api/comm_cpu_internal.h"

/* ---- segments ---- */

/* Whether to use shared memory: every rank's predecessor on its host, and nobody opted out. */
int cpu_shm_agree(struct crun_comm *c, struct cpu *p, bool *shm)
{
	const char *env = getenv("CRUN_COMM_SHM");
	float votes = p->pred_host == p->host && (env == NULL || strcmp(env, "0") != 0) ? 1 : 0;
	int rc;

	rc = cpu_ring_allreduce(c, "setup", OP_BARRIER, &votes, &votes, 1, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
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
		return cpu_fail(c, -errno, "shared memory %s", name);
	}
	if (create && ftruncate(fd, (off_t)(sizeof(struct shm_seg) + ring)) < 0) {
		rc = cpu_fail(c, -errno, "shared memory %s: %zu bytes", name, ring);
		goto out;
	}
	if (fstat(fd, &sb) < 0 || (size_t)sb.st_size < sizeof(struct shm_seg) + 64) {
		rc = cpu_fail(c, -EPROTO, "shared memory %s: too small", name);
		goto out;
	}
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		rc = cpu_fail(c, -errno, "shared memory %s: mmap", name);
		goto out;
	}
	*out = m;
	*len = (size_t)sb.st_size;
	if (create) {
		(*out)->ring_size = ring;
	} else if ((*out)->ring_size == 0 || (*out)->ring_size % 64 != 0 ||
		   (*out)->ring_size > *len - sizeof(struct shm_seg)) {
		rc = cpu_fail(c, -EPROTO, "shared memory %s: bad ring size", name);
	}
out:
	close(fd);
	return rc;
}

void cpu_shm_unmap(struct cpu *p)
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
int cpu_shm_setup(struct crun_comm *c, struct cpu *p, int64_t deadline)
{
	static _Atomic unsigned counter;
	const char *env = getenv("CRUN_COMM_SHM_RING");
	size_t ring = SHM_RING;
	char mine[64], pred[64], succ[64];
	static const uint64_t probe = SHM_PROBE;
	struct crun_diag saved = c->diag;
	const char *cma_env = getenv("CRUN_COMM_CMA");
	double votes[2] = {1, 0};
	int rc, want;

	/* CRUN_COMM_SHM_RING: bytes, at least 4096, rounded down to 64; anything else: default. */
	if (env != NULL) {
		if (parse_int(env, 4096, INT32_MAX, &want) == 0) {
			ring = (size_t)want & ~(size_t)63;
		} else {
			log_warn("comm %s: CRUN_COMM_SHM_RING=\"%.32s\" is not a byte count in "
				 "[4096, %d]; using the default",
				 c->name, env, INT32_MAX);
		}
	}
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
	rc = cpu_sock_full(p->next, mine, sizeof(mine), true, deadline);
	if (rc == 0) {
		rc = cpu_sock_full(p->prev, mine, sizeof(mine), true, deadline);
	}
	if (rc == 0) {
		rc = cpu_sock_full(p->prev, pred, sizeof(pred), false, deadline);
	}
	if (rc == 0) {
		rc = cpu_sock_full(p->next, succ, sizeof(succ), false, deadline);
	}
	if (rc < 0) {
		return cpu_fail(c, rc, "exchanging shared memory names");
	}
	pred[sizeof(pred) - 1] = succ[sizeof(succ) - 1] = '\0';
	if (votes[0] == 1 &&
	    (strncmp(pred, "/crun-comm-", 11) != 0 || strncmp(succ, "/crun-comm-", 11) != 0 ||
	     shm_map(c, pred, false, 0, &p->shm_pred, &p->shm_len[1]) < 0 ||
	     shm_map(c, succ, false, 0, &p->shm_succ, &p->shm_len[2]) < 0)) {
		votes[0] = 0;
	}
	if (cma_env != NULL && strcmp(cma_env, "0") != 0 && strcmp(cma_env, "1") != 0) {
		log_warn("comm %s: CRUN_COMM_CMA=\"%.32s\" is not 0 or 1; copying through the rings",
			 c->name, cma_env);
	}
	/*
	 * Single copy (process_vm_readv) only when asked for with CRUN_COMM_CMA=1. Copying
	 * through the rings won every size it applies to (256 KiB to 64 MiB, 2 and 4 ranks)
	 * on the 2-core guest of issue 23, in time and in CPU: at 16 MiB, 2 ranks, 9.5-12.4 ms
	 * against 12.5-29.8 ms; 4 ranks, 30-34 ms against 77-145 ms, where the readv's page
	 * pinning (pin_user_pages_remote, follow_page_pte: 18-20% of the ranks' CPU in `perf
	 * record`) and the reader doing every hop's copy alone left the ranks waiting on the
	 * run queue (bench/notes/allreduce.md).
	 */
	if (votes[0] == 1 && cma_env != NULL && strcmp(cma_env, "1") == 0) {
		/* May I read my predecessor's memory (same pid namespace, ptrace allowed)?
		 * Everyone must say yes. */
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
	rc = cpu_ring_allreduce(c, "setup", OP_BARRIER, votes, votes, 2, CRUN_DTYPE_FLOAT64, CRUN_REDOP_SUM);
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
		cpu_shm_unmap(p);
	}
	return 0;
}

/* ---- rings ---- */

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
size_t cpu_shm_write(struct cpu *p, const struct iovec *iov, int niov, bool start)
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
size_t cpu_shm_describe(struct cpu *p, const struct iovec *iov, int niov, bool start)
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
int cpu_shm_wait(struct crun_comm *c, struct cpu *p, uint32_t seen, int64_t deadline,
		 const struct xfer *x, bool need_prev, bool need_next)
{
	struct timespec ts;
	/* A peer this transfer no longer needs may have finished and exited: only the ends
	 * still owed bytes are watched (a negative fd is ignored by poll). */
	struct pollfd pf[2] = {{.fd = need_prev ? p->prev : -1, .events = POLLIN},
			       {.fd = need_next ? p->next : -1, .events = POLLIN}};
	int ms = crun_ms_until(deadline);
	long rc;

	if (ms == 0) {
		return cpu_fail(c, -ETIMEDOUT,
				"%s: no progress from rank %d / to rank %d within %d ms", x->what,
				(c->rank + c->size - 1) % c->size, (c->rank + 1) % c->size,
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

		return cpu_fail(c, -ECONNRESET, "%s: rank %d (%s) is gone", x->what, who,
				pf[0].revents ? p->prev_addr : p->next_addr);
	}
	return 0;
}

/* ---- receiving from rank - 1 ---- */

int cpu_cma_recv(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st)
{
	struct shm_seg *s = p->shm_pred;
	uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
	size_t ring = s->ring_size;
	bool freed = false;
	int rc;

	if (st->hr == 0 && st->dpos == 0 && (size_t)(head - tail) > (size_t)(-tail & 15)) {
		tail += -tail & 15; /* the writer's padding before the header */
	}
	while (head != tail && (st->hr < CPU_HDR_LEN || st->done < st->recv_total)) {
		uint64_t d[2];
		struct iovec lo, re;
		struct rseg *r = NULL;
		size_t k, cap;
		ssize_t got;

		if (st->hr == 0 && (tail & 15) != 0) {
			break; /* padding not written yet */
		}

		memcpy(d, s->data + tail % ring, sizeof(d));
		k = (size_t)d[1] - st->dpos;
		re.iov_base = (void *)(uintptr_t)(d[0] + st->dpos);
		if (st->hr < CPU_HDR_LEN) {
			k = k < CPU_HDR_LEN - st->hr ? k : CPU_HDR_LEN - st->hr;
			lo.iov_base = st->hin + st->hr;
		} else {
			r = stream_rseg(x, st);
			if (r == NULL) {
				break;
			}
			cap = r->a == NULL ? CMA_PULL : CMA_STAGE;
			k = k < r->len - st->roff ? k : r->len - st->roff;
			k = k < cap ? k : cap;
			lo.iov_base = r->a == NULL ? r->dst + st->roff : p->stage;
		}
		lo.iov_len = re.iov_len = k;
		got = k == 0 ? 0 : process_vm_readv((pid_t)s->pid, &lo, 1, &re, 1, 0);
		if (got != (ssize_t)k) {
			/* Reading was allowed at setup (probe) and the peer keeps the range valid
			 * until we ack it: failing now means it is dying or gone (ESRCH, or EFAULT
			 * while it exits). */
			return cpu_fail(c, -ECONNRESET, "%s: read from rank %d: %s", x->what,
					(c->rank + c->size - 1) % c->size,
					got < 0 ? strerror(errno) : "short read");
		}
		/*
		 * A peer that gave up on this collective no longer keeps the described ranges (its
		 * header is on its stack, its buffers are the program's again), so what we just
		 * read may be garbage. It sets "failed" (then a fence) before it returns, so a read
		 * that completed before we see the flag clear read valid data.
		 */
		atomic_thread_fence(memory_order_seq_cst);
		if (atomic_load(&s->failed) != 0) {
			return cpu_fail(c, -ECONNRESET, "%s: rank %d gave up", x->what,
					(c->rank + c->size - 1) % c->size);
		}
		if (r == NULL) {
			st->hr += k;
			if (st->hr == CPU_HDR_LEN) {
				rc = cpu_check_hdr(c, p, x, st->hin);
				if (rc < 0) {
					return rc;
				}
			}
		} else {
			if (r->a != NULL) {
				cpu_reduce(r->dst + st->roff, r->a + st->roff, p->stage, k, x->dt,
					   r->scale, c->size);
			}
			st->roff += k;
			st->done += k;
		}
		st->dpos += k;
		st->progress = true;
		if (st->dpos == d[1]) {
			st->dpos = 0;
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
	return 0;
}

/*
 * Copy or reduce up to SHM_PIECE bytes at ring offset @off (@take contiguous, @avail in all)
 * into receive segment @r; returns the bytes consumed, 0 when only part of an element is in.
 */
static size_t shm_take(struct crun_comm *c, const struct xfer *x, struct stream *st,
		       const struct shm_seg *s, const struct rseg *r, size_t off, size_t take,
		       size_t avail)
{
	size_t es = comm_dtype_size(x->dt);

	take = take < r->len - st->roff ? take : r->len - st->roff;
	if (take > SHM_PIECE) {
		take = SHM_PIECE;
	}
	if (r->a == NULL) {
		memcpy(r->dst + st->roff, s->data + off, take);
	} else if (take >= es) {
		take -= take % es;
		cpu_reduce(r->dst + st->roff, r->a + st->roff, s->data + off, take, x->dt, r->scale,
			   c->size);
	} else if (avail >= es) {
		/* One element wraps around the end of the ring. */
		_Alignas(8) char el[8];

		memcpy(el, s->data + off, take);
		memcpy(el + take, s->data, es - take);
		take = es;
		cpu_reduce(r->dst + st->roff, r->a + st->roff, el, es, x->dt, r->scale, c->size);
	} else {
		return 0; /* part of an element so far */
	}
	st->roff += take;
	st->done += take;
	return take;
}

int cpu_shm_recv(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st)
{
	struct shm_seg *s = p->shm_pred;
	uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
	size_t ring = s->ring_size, freed = 0;
	int rc;

	if (st->hr == 0 && (size_t)(head - tail) > (size_t)(-tail & 15)) {
		/* The writer's padding before this collective's header. */
		freed = (size_t)(-tail & 15);
		tail += freed;
	}
	while (head != tail && (st->hr < CPU_HDR_LEN || st->done < st->recv_total)) {
		size_t off = (size_t)(tail % ring), avail = (size_t)(head - tail);
		size_t take = ring - off < avail ? ring - off : avail;
		struct rseg *r;

		if (st->hr == 0 && (tail & 15) != 0) {
			break; /* padding not written yet */
		}
		if (st->hr < CPU_HDR_LEN) {
			take = take < CPU_HDR_LEN - st->hr ? take : CPU_HDR_LEN - st->hr;
			memcpy(st->hin + st->hr, s->data + off, take);
			st->hr += take;
			if (st->hr == CPU_HDR_LEN) {
				rc = cpu_check_hdr(c, p, x, st->hin);
				if (rc < 0) {
					return rc;
				}
			}
		} else {
			r = stream_rseg(x, st);
			if (r == NULL) {
				break;
			}
			take = shm_take(c, x, st, s, r, off, take, avail);
			if (take == 0) {
				break;
			}
		}
		tail += take;
		freed += take;
		st->progress = true;
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
	return 0;
}
