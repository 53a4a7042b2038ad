/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu_ring.c: the cpu backend's streaming engine and the ring collectives. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/byteorder.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "worker_api/comm_cpu_internal.h"

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

/* Why a send socket failed (SO_ERROR), as a negative code; a broken pipe is a reset. */
static int sock_error(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err == 0) {
		return -ECONNRESET;
	}
	return err == EPIPE ? -ECONNRESET : -err;
}

int cpu_check_hdr(struct crun_comm *c, struct cpu *p, const struct xfer *x, const uint8_t *got)
{
	static const char *const names[] = {"?",	 "allreduce",	   "broadcast",
					    "allgather", "reduce_scatter", "barrier"};
	uint32_t op = got[4];

	if (memcmp(got, x->hdr, CPU_HDR_LEN) == 0) {
		return 0;
	}
	if (get_le32(got) != CPU_MAGIC) {
		return cpu_fail(c, -EPROTO, "%s: rank %d (%s) sent garbage", x->what,
				(c->rank + c->size - 1) % c->size, p->prev_addr);
	}
	if (get_le64(got + 24) != get_le64(x->hdr + 24)) {
		return cpu_fail(c, -EPROTO, "%s #%llu: rank %d is at collective #%llu", x->what,
				(unsigned long long)get_le64(x->hdr + 24),
				(c->rank + c->size - 1) % c->size,
				(unsigned long long)get_le64(got + 24));
	}
	return cpu_fail(c, -EPROTO,
			"%s of %llu elements (dtype %u, op %u, root %u): rank %d called %s of %llu "
			"elements (dtype %u, op %u, root %u)",
			x->what, (unsigned long long)get_le64(x->hdr + 16), x->hdr[5], x->hdr[6],
			get_le32(x->hdr + 8), (c->rank + c->size - 1) % c->size,
			names[op < 6 ? op : 0], (unsigned long long)get_le64(got + 16), got[5],
			got[6], get_le32(got + 8));
}

/* ---- the streaming engine ---- */

/*
 * run() moves one collective: the header and then the send segments out to rank + 1, the
 * header and then the receive segments in from rank - 1, each copied or reduced into place.
 * Sends may lead what has been received and processed by at most x->lag bytes (the pipeline).
 * Both directions are non-blocking; a round that moves nothing waits for the link.
 */

/* Totals of both streams and the deadline; a side with no segments has no header either. */
static void stream_init(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st)
{
	*st = (struct stream){
		.deadline =
			p->setup_deadline != 0 ? p->setup_deadline : crun_now_ms() + c->timeout_ms,
	};
	for (int i = 0; i < x->ns; i++) {
		st->send_total += x->s[i].len;
	}
	for (int i = 0; i < x->nr; i++) {
		st->recv_total += x->r[i].len;
	}
	if (x->ns == 0) {
		st->hs = CPU_HDR_LEN;
	}
	if (x->nr == 0) {
		st->hr = CPU_HDR_LEN;
	}
}

/* Step past the send and receive segments that are complete. */
static void stream_skip(const struct xfer *x, struct stream *st)
{
	while (st->si < x->ns && st->soff == x->s[st->si].len) {
		st->si++;
		st->soff = 0;
	}
	while (st->ri < x->nr && st->roff == x->r[st->ri].len) {
		st->ri++;
		st->roff = 0;
	}
}

/* Whether everything is sent and received and, with CMA, my successor is done reading mine. */
static bool stream_finished(const struct cpu *p, const struct xfer *x, const struct stream *st)
{
	if (st->hs < CPU_HDR_LEN || st->sent < st->send_total || st->hr < CPU_HDR_LEN ||
	    st->done < st->recv_total) {
		return false;
	}
	/* CMA: the successor may still be reading my buffers. */
	return !x->cma || atomic_load(&p->shm_me->tail) ==
				  atomic_load_explicit(&p->shm_me->head, memory_order_relaxed);
}

/* What may go out now into @iov: the header's rest, then the body up to done + lag. */
static int send_gather(struct xfer *x, const struct stream *st, struct iovec *iov)
{
	size_t limit = st->send_total, room;
	int niov = 0;

	if (x->lag != SIZE_MAX && st->done + x->lag < limit) {
		limit = st->done + x->lag;
	}
	room = limit - st->sent;
	if (st->hs < CPU_HDR_LEN) {
		iov[niov].iov_base = x->hdr + st->hs;
		iov[niov++].iov_len = CPU_HDR_LEN - st->hs;
	}
	for (int i = st->si; i < x->ns && room > 0 && niov < CPU_MAX_IOV; i++) {
		size_t off = i == st->si ? st->soff : 0;
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
	return niov;
}

/* Account @adv bytes handed to the link: the header first, then the body across segments. */
static void send_advance(const struct xfer *x, struct stream *st, size_t adv)
{
	st->progress = true;
	if (st->hs < CPU_HDR_LEN) {
		size_t h = CPU_HDR_LEN - st->hs < adv ? CPU_HDR_LEN - st->hs : adv;

		st->hs += h;
		adv -= h;
	}
	st->sent += adv;
	while (adv > 0) {
		size_t left = x->s[st->si].len - st->soff;

		if (adv < left) {
			st->soff += adv;
			adv = 0;
		} else {
			adv -= left;
			st->si++;
			st->soff = 0;
		}
	}
}

/* Send what the incoming stream has made ready, over the ring, as descriptors or on TCP. */
static int send_ready(struct crun_comm *c, struct cpu *p, struct xfer *x, struct stream *st)
{
	struct iovec iov[CPU_MAX_IOV];
	ssize_t n = 0;
	int niov, rc;

	if (!(st->hs < CPU_HDR_LEN || st->sent < st->send_total)) {
		return 0;
	}
	niov = send_gather(x, st, iov);
	if (niov > 0 && x->cma) {
		n = (ssize_t)cpu_shm_describe(p, iov, niov, st->hs == 0);
	} else if (niov > 0 && p->shm) {
		n = (ssize_t)cpu_shm_write(p, iov, niov, st->hs == 0);
	} else if (niov > 0) {
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};

		n = sendmsg(p->next, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			rc = errno == EPIPE ? -ECONNRESET : -errno;
			return cpu_fail(c, rc, "%s: send to rank %d (%s)", x->what,
					(c->rank + 1) % c->size, p->next_addr);
		}
		if (n < 0) {
			st->want_out = true;
			n = 0;
		}
	}
	if (n > 0) {
		send_advance(x, st, (size_t)n);
	}
	return 0;
}

/* TCP: account @adv bytes read: the header (checked once whole), then copied or staged bytes. */
static int tcp_took(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st,
		    const struct rseg *r, size_t adv)
{
	size_t es = comm_dtype_size(x->dt);
	int rc;

	st->progress = true;
	if (st->hr < CPU_HDR_LEN) {
		size_t h = CPU_HDR_LEN - st->hr < adv ? CPU_HDR_LEN - st->hr : adv;

		st->hr += h;
		adv -= h;
		if (st->hr == CPU_HDR_LEN) {
			rc = cpu_check_hdr(c, p, x, st->hin);
			if (rc < 0) {
				return rc;
			}
		}
	}
	if (adv > 0 && r != NULL && r->a == NULL) {
		st->roff += adv;
		st->done += adv;
	} else if (adv > 0 && r != NULL) {
		size_t whole;

		/* Reduce the whole elements staged; keep a partial one for the next read. */
		st->staged += adv;
		whole = st->staged - st->staged % es;
		if (whole > 0) {
			cpu_reduce(r->dst + st->roff, r->a + st->roff, p->stage, whole, x->dt,
				   r->scale, c->size);
			st->roff += whole;
			st->done += whole;
			st->staged -= whole;
			if (st->staged > 0) {
				memmove(p->stage, p->stage + whole, st->staged);
			}
		}
	}
	return 0;
}

/* TCP: one readv() of the header's rest and the current segment (in place, or the stage). */
static int tcp_recv(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st)
{
	struct rseg *r = st->ri < x->nr ? &x->r[st->ri] : NULL;
	struct iovec iov[CPU_MAX_IOV];
	ssize_t n;
	int niov = 0;

	if (st->hr < CPU_HDR_LEN) {
		iov[niov].iov_base = st->hin + st->hr;
		iov[niov++].iov_len = CPU_HDR_LEN - st->hr;
	}
	if (r != NULL && r->a == NULL) {
		iov[niov].iov_base = r->dst + st->roff;
		iov[niov++].iov_len = r->len - st->roff;
	} else if (r != NULL) {
		size_t want = r->len - st->roff - st->staged;

		iov[niov].iov_base = p->stage + st->staged;
		iov[niov++].iov_len = want < CPU_STAGE - st->staged ? want : CPU_STAGE - st->staged;
	}
	n = readv(p->prev, iov, niov);
	if (n == 0) {
		return cpu_fail(c, -ECONNRESET, "%s: receive from rank %d (%s)", x->what,
				(c->rank + c->size - 1) % c->size, p->prev_addr);
	}
	if (n < 0 && errno != EAGAIN && errno != EINTR) {
		return cpu_fail(c, -errno, "%s: receive from rank %d (%s)", x->what,
				(c->rank + c->size - 1) % c->size, p->prev_addr);
	}
	if (n < 0) {
		st->want_in = true;
		return 0;
	}
	return tcp_took(c, p, x, st, r, (size_t)n);
}

/* Receive: the header, then into place (copy) or reduced into place, by the link's kind. */
static int recv_ready(struct crun_comm *c, struct cpu *p, const struct xfer *x, struct stream *st)
{
	if (!(st->hr < CPU_HDR_LEN || st->done < st->recv_total)) {
		return 0;
	}
	if (x->cma) {
		return cpu_cma_recv(c, p, x, st);
	}
	if (p->shm) {
		return cpu_shm_recv(c, p, x, st);
	}
	return tcp_recv(c, p, x, st);
}

/* A round that moved nothing: sleep on my bell (shared memory) or poll the blocked sockets. */
static int stream_wait(struct crun_comm *c, struct cpu *p, const struct xfer *x,
		       const struct stream *st, uint32_t bell)
{
	struct pollfd pf[2];
	int np = 0, ms, rc;

	if (p->shm) {
		/* A neighbour owed nothing more may have finished and exited (issue 18: a
		 * "rank N is gone" for a successor that had read all it needed). */
		bool need_prev = st->hr < CPU_HDR_LEN || st->done < st->recv_total;
		bool need_next = st->hs < CPU_HDR_LEN || st->sent < st->send_total ||
				 (x->cma && atomic_load(&p->shm_me->tail) !=
						    atomic_load_explicit(&p->shm_me->head,
									 memory_order_relaxed));

		return cpu_shm_wait(c, p, bell, st->deadline, x, need_prev, need_next);
	}
	if (st->want_out) {
		pf[np].fd = p->next;
		pf[np++].events = POLLOUT;
	}
	if (st->want_in) {
		pf[np].fd = p->prev;
		pf[np++].events = POLLIN;
	}
	ms = crun_ms_until(st->deadline);
	if (np == 0) {
		return 0;
	}
	if (ms == 0) {
		return cpu_fail(c, -ETIMEDOUT,
				"%s: no progress from rank %d (%s) / to rank %d (%s) within %d ms",
				x->what, (c->rank + c->size - 1) % c->size, p->prev_addr,
				(c->rank + 1) % c->size, p->next_addr, c->timeout_ms);
	}
	rc = poll(pf, (nfds_t)np, ms);
	if (rc < 0 && errno != EINTR) {
		return cpu_fail(c, -errno, "%s: poll", x->what);
	}
	for (int i = 0; i < np && rc > 0; i++) {
		/* Readable EOF is reported by readv; a failed send socket here. */
		if (pf[i].fd == p->next && (pf[i].revents & (POLLERR | POLLHUP))) {
			return cpu_fail(c, sock_error(p->next), "%s: send to rank %d (%s)", x->what,
					(c->rank + 1) % c->size, p->next_addr);
		}
	}
	return 0;
}

/* Move collective @x through both links until done, or fail with the reason in c->diag. */
static int run(struct crun_comm *c, struct cpu *p, struct xfer *x)
{
	struct stream st;
	int rc;

	stream_init(c, p, x, &st);
	for (;;) {
		uint32_t bell = 0;

		stream_skip(x, &st);
		if (stream_finished(p, x, &st)) {
			return 0;
		}
		if (p->shm) {
			/* Read before looking at the rings: a later ring of it then cannot be lost.
			 */
			bell = atomic_load(&p->shm_me->bell);
		}
		st.progress = st.want_out = st.want_in = false;
		rc = send_ready(c, p, x, &st);
		if (rc == 0) {
			rc = recv_ready(c, p, x, &st);
		}
		if (rc == 0 && !st.progress) {
			rc = stream_wait(c, p, x, &st, bell);
		}
		if (rc < 0) {
			return rc;
		}
	}
}

/* ---- the collectives ---- */

static void make_hdr(struct crun_comm *c, struct cpu *p, struct xfer *x, enum cpu_op op,
		     size_t count, int root)
{
	memset(x->hdr, 0, sizeof(x->hdr));
	put_le32(x->hdr, CPU_MAGIC);
	x->hdr[4] = (uint8_t)op;
	x->hdr[5] = (uint8_t)x->dt;
	x->hdr[6] = (uint8_t)x->op;
	put_le32(x->hdr + 8, (uint32_t)root);
	put_le64(x->hdr + 16, (uint64_t)count);
	put_le64(x->hdr + 24, ++p->seq);
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

int cpu_ring_allreduce(struct crun_comm *c, const char *what, enum cpu_op opc, const void *send,
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
		p->rseg[t].scale = op == CRUN_REDOP_AVG && t == n - 2;
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

int cpu_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
		  enum crun_dtype dt, enum crun_redop op)
{
	return cpu_ring_allreduce(c, "allreduce", OP_ALLREDUCE, send, recv, count, dt, op);
}

int cpu_barrier(struct crun_comm *c)
{
	float token = 0;

	/* An allreduce of one element: its value passes through every rank twice. */
	return cpu_ring_allreduce(c, "barrier", OP_BARRIER, &token, &token, 1, CRUN_DTYPE_FLOAT32,
				  CRUN_REDOP_SUM);
}

/* A pipelined chain root -> root+1 -> ... -> root-1; each rank forwards what it has received. */
int cpu_broadcast(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt, int root)
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

int cpu_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
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

int cpu_reduce_scatter(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
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
		p->rseg[t].scale = op == CRUN_REDOP_AVG && t == n - 2;
	}
	x.ns = x.nr = n - 1;
	return finish(c, p, run(c, p, &x));
}
