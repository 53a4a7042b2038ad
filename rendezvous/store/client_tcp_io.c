/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_tcp_io.c: the TCP client's transport: plain sockets, or TLS over them. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>


#include <crun/error.h>

#include "rendezvous/store/client_tcp_internal.h"
#include "rendezvous/store/tls.h"
#include "rendezvous/store/tls_lib.h"
#include "src/common/clock.h"

void tcp_io_disconnect(struct store_backend *b)
{
	if (b->ssl != NULL) {
		/* No close_notify: the peer learns of the close from the socket, and a dead peer
		 * cannot hold us here. */
		SSL_free(b->ssl);
		b->ssl = NULL;
	}
	if (b->fd >= 0) {
		close(b->fd);
		b->fd = -1;
	}
	b->rcvtimeo_ms = 0;
	b->rb_off = b->rb_len = 0;
}

/* Wait for @events on the socket until @deadline. Returns 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = {fd, events, 0};
	int rc;

	for (;;) {
		rc = poll(&p, 1, crun_ms_until(deadline));
		if (rc > 0) {
			return 0;
		}
		if (rc == 0) {
			return -ETIMEDOUT;
		}
		if (errno != EINTR) {
			return -errno;
		}
	}
}

/*
 * One TLS call's outcome @ret: > 0 done; 0 when it wants the socket (waited for, until
 * @deadline: call again); < 0 a failure, its words in b->io_msg.
 */
static int tls_step(struct store_backend *b, int ret, int64_t deadline)
{
	int e;

	if (ret > 0) {
		return ret;
	}
	e = SSL_get_error(b->ssl, ret);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		ERR_clear_error();
		e = wait_fd(b->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
		if (e == -ETIMEDOUT) {
			snprintf(b->io_msg, sizeof(b->io_msg), "%s",
				 SSL_is_init_finished(b->ssl) ? "timed out"
							      : "no TLS handshake in time");
		}
		return e;
	}
	return tls_describe(b->ssl, ret, "the store", b->io_msg, sizeof(b->io_msg));
}

int tcp_io_tls_start(struct store_backend *b, int64_t deadline)
{
	int rc;

	b->io_msg[0] = '\0';
	if (b->tls_ctx == NULL) {
		return 0;
	}
	b->ssl = tls_new(b->tls_ctx, b->tls_name);
	if (b->ssl == NULL || tls_set_socket(b->ssl, b->fd) < 0) {
		snprintf(b->io_msg, sizeof(b->io_msg), "out of memory");
		return -ENOMEM;
	}
	/* TLS needs the socket non-blocking: every wait is a poll() bounded by the deadline. */
	rc = fcntl(b->fd, F_GETFL);
	if (rc < 0 || fcntl(b->fd, F_SETFL, rc | O_NONBLOCK) < 0) {
		return -errno;
	}
	do {
		ERR_clear_error();
		rc = tls_step(b, SSL_connect(b->ssl), deadline);
	} while (rc == 0);
	return rc < 0 ? rc : 0;
}

int tcp_io_send(struct store_backend *b, const uint8_t *p, size_t n, int64_t deadline)
{
	ssize_t k;
	int rc;

	b->io_msg[0] = '\0';
	while (n > 0) {
		if (b->ssl != NULL) {
			ERR_clear_error();
			rc = tls_step(b, SSL_write(b->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n),
				      deadline);
			if (rc < 0) {
				return rc;
			}
			p += rc;
			n -= (size_t)rc;
			continue;
		}
		k = send(b->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k < 0 && errno != EAGAIN) {
			return -errno;
		}
		rc = wait_fd(b->fd, POLLOUT, deadline);
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

/* One TLS read into @p before @deadline. Returns the bytes read (> 0) or a negative code. */
static ssize_t tls_recv(struct store_backend *b, void *p, size_t n, int64_t deadline)
{
	int rc;

	do {
		if (crun_ms_until(deadline) == 0) {
			return -ETIMEDOUT;
		}
		ERR_clear_error();
		rc = tls_step(b, SSL_read(b->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n),
			      deadline);
	} while (rc == 0);
	return rc;
}

/*
 * The reply spin. A client that sleeps until its reply comes pays for two wake-ups a round
 * trip when it and the server sit on different CPUs: the server's, then its own, each an
 * interrupt to a CPU that had gone idle. On this project's 2-core guest each costs about
 * 20 us, and they were most of a request's time: 50-60 us a round trip against 11 us with
 * both processes pinned to one CPU (bench/store's add, one client, crun-rdzvd on the unix
 * socket; bench/notes/store_spin.md). So before it sleeps, a client polls its socket without
 * blocking for up to spin_ns, yielding the CPU at each pass (a runnable server on this CPU
 * goes first); a reply that comes in that window is read with no wake-up of this process.
 *
 * A spin that sees no reply was CPU spent for nothing: the server is far (another host), busy,
 * or the request is one that waits (WAIT, a barrier). Each such spin makes the next ones
 * rarer: the waits after it skip the spin 1, 2, 4 ... up to SPIN_BACKOFF_MAX times, and one
 * reply caught in a spin starts over. With more clients than cores the spins fail (the
 * server needs the CPU they hold) and stop by themselves; over a network, whose round trip
 * is longer than the window, likewise. TLS connections do not spin: their reads go through
 * OpenSSL (tls_recv).
 *
 * Returns what recv() gave (> 0), -ECONNRESET, -errno, or -EAGAIN: nothing yet, go to sleep.
 */
#define SPIN_BACKOFF_MAX 1024u

static ssize_t recv_spin(struct store_backend *b, void *p, size_t n)
{
	int64_t until;
	ssize_t k;

	if (b->spin_ns == 0) {
		return -EAGAIN;
	}
	if (b->spin_skip > 0) {
		b->spin_skip--;
		return -EAGAIN;
	}
	until = crun_now_ns() + b->spin_ns;
	do {
		k = recv(b->fd, p, n, MSG_DONTWAIT);
		if (k > 0) {
			b->spin_backoff = 0;
			return k;
		}
		if (k == 0) {
			return -ECONNRESET;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			return -errno;
		}
		sched_yield();
	} while (crun_now_ns() < until);
	b->spin_backoff = b->spin_backoff == 0 ? 1 : b->spin_backoff * 2;
	if (b->spin_backoff > SPIN_BACKOFF_MAX) {
		b->spin_backoff = SPIN_BACKOFF_MAX;
	}
	b->spin_skip = b->spin_backoff;
	return -EAGAIN;
}

/*
 * One blocking recv into @p that returns no later than @deadline: the socket is blocking
 * (sends use MSG_DONTWAIT) and SO_RCVTIMEO bounds each recv. The timeout is set only when the
 * cached one would outlast the deadline or is far shorter than it, so a run of operations
 * with the same timeout costs one recv per reply instead of poll + recv. A recv that times
 * out early just loops: crun_ms_until() alone decides when the deadline has passed.
 * Returns the bytes read (> 0), -ETIMEDOUT, -ECONNRESET (peer closed) or -errno.
 */
static ssize_t recv_deadline(struct store_backend *b, void *p, size_t n, int64_t deadline)
{
	struct timeval tv;
	ssize_t k;
	int left;

	if (b->ssl != NULL) {
		return tls_recv(b, p, n, deadline);
	}
	for (;;) {
		left = crun_ms_until(deadline);
		if (left == 0) {
			return -ETIMEDOUT;
		}
		if (b->rcvtimeo_ms == 0 || b->rcvtimeo_ms > left || b->rcvtimeo_ms < left / 2) {
			tv.tv_sec = left / 1000;
			tv.tv_usec = (left % 1000) * 1000;
			if (setsockopt(b->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
				return -errno;
			}
			b->rcvtimeo_ms = left;
		}
		k = recv_spin(b, p, n); /* a quick reply is read here, with no sleep */
		if (k != -EAGAIN) {
			return k;
		}
		/*
		 * AF_UNIX: wait in poll(POLLIN), not in recv(). A reader blocked in a unix
		 * socket's recv() sleeps on a wait entry that every wake-up of the socket rouses,
		 * and the server's read of our request is one (the write-space wake-up of
		 * unix_write_space): each round trip then woke this process twice and cost the
		 * server a wake-up in read() (16% of crun-rdzvd's samples at 10,000 connections,
		 * bench/notes/scale.md). poll()'s entry only wakes for the events it asked for.
		 */
		if (b->unix_path[0] != '\0' && (k = wait_fd(b->fd, POLLIN, deadline)) < 0) {
			return k;
		}
		k = recv(b->fd, p, n, 0);
		if (k > 0) {
			return k;
		}
		if (k == 0) {
			return -ECONNRESET;
		}
		if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
			return -errno;
		}
	}
}

int tcp_io_fill(struct store_backend *b, size_t need, int64_t deadline)
{
	size_t cap;
	uint8_t *p;
	ssize_t k;

	b->io_msg[0] = '\0';
	while (b->rb_len < need) {
		if (b->rb_off + need > b->rb_cap) {
			if (b->rb_off > 0) {
				memmove(b->rb, b->rb + b->rb_off, b->rb_len);
				b->rb_off = 0;
			}
			if (need > b->rb_cap) {
				cap = b->rb_cap ? b->rb_cap : 4096;
				while (cap < need) {
					cap *= 2;
				}
				p = realloc(b->rb, cap);
				if (p == NULL) {
					return -ENOMEM;
				}
				b->rb = p;
				b->rb_cap = cap;
			}
		}
		k = recv_deadline(b, b->rb + b->rb_off + b->rb_len,
				  b->rb_cap - b->rb_off - b->rb_len, deadline);
		if (k < 0) {
			return (int)k;
		}
		b->rb_len += (size_t)k;
	}
	return 0;
}

const char *tcp_io_strerror(const struct store_backend *b, int rc)
{
	return b->io_msg[0] != '\0' ? b->io_msg : crun_strerror(rc);
}

int tcp_io_connect(struct store_backend *b, const struct addrinfo *ai, int64_t deadline)
{
	int fd, rc, one = 1, soerr = 0;
	socklen_t sl = sizeof(soerr);

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		return -errno;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			rc = -errno;
			close(fd);
			return rc;
		}
		rc = wait_fd(fd, POLLOUT, deadline);
		if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
		    soerr != 0) {
			rc = -soerr;
		}
		if (rc < 0) {
			close(fd);
			return rc;
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Blocking from here on: recv_deadline() bounds reads with SO_RCVTIMEO, and sends
	 * pass MSG_DONTWAIT. (TLS makes it non-blocking again: tcp_io_tls_start().) */
	rc = fcntl(fd, F_GETFL);
	if (rc < 0 || fcntl(fd, F_SETFL, rc & ~O_NONBLOCK) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	b->fd = fd;
	b->rcvtimeo_ms = 0;
	return 0;
}

/* ---- frames (client_tcp.c builds them; these move them) ---- */

bool tcp_out_ok(struct store_backend *b)
{
	if (b->out.oom) {
		wire_buf_finish(&b->out);
		tcp_fail(b, -ENOMEM, "out of memory");
		return false;
	}
	/* Only MULTI_SET can outgrow a frame (4096 values of 16 MiB). Refuse it here: the server
	 * would drop the connection, and past 2^32 the length field would wrap and the values
	 * would be read as frames. Nothing was sent, so the connection stays in sync. */
	if (b->out.len - 4 > WIRE_MAX_FRAME) {
		tcp_fail(b, -EMSGSIZE, "%s: request of %zu bytes exceeds the frame limit %u",
			 wire_op_name(b->out.p[4]), b->out.len - 4, (unsigned)WIRE_MAX_FRAME);
		return false;
	}
	return true;
}

int tcp_send_out(struct store_backend *b, int64_t deadline)
{
	int rc;

	if (!tcp_out_ok(b)) {
		return b->diag.code;
	}
	rc = tcp_io_send(b, b->out.p, b->out.len, deadline);
	if (rc < 0) {
		tcp_fail(b, rc, "send: %s", tcp_io_strerror(b, rc));
		tcp_disconnect(b);
		/* Sets sent without waiting went with the connection: that is the news. */
		return b->pipe.err.code != 0 ? tcp_pipe_take_error(b) : rc;
	}
	return 0;
}

int tcp_recv_frame(struct store_backend *b, int64_t deadline, size_t *plen_out)
{
	size_t plen = 0;
	int rc;

	rc = tcp_io_fill(b, WIRE_HDR_LEN, deadline);
	if (rc == 0) {
		rc = wire_hdr_decode(b->rb + b->rb_off, WIRE_MAX_FRAME, &b->rh);
		if (rc < 0) {
			b->junk_len = b->rb_len < sizeof(b->junk) ? b->rb_len : sizeof(b->junk);
			memcpy(b->junk, b->rb + b->rb_off, b->junk_len);
			tcp_fail(b, -EPROTO, "reply: bad frame length %u", b->rh.len);
			tcp_disconnect(b);
			return -EPROTO;
		}
		plen = b->rh.len - 8;
		rc = tcp_io_fill(b, WIRE_HDR_LEN + plen, deadline);
	}
	if (rc < 0) {
		if (rc == -ETIMEDOUT) {
			tcp_fail(b, rc, "no reply in time");
		} else {
			tcp_fail(b, rc, "receive: %s", tcp_io_strerror(b, rc));
		}
		tcp_disconnect(b);
		return rc;
	}
	b->in = b->rb + b->rb_off + WIRE_HDR_LEN;
	b->rb_off += WIRE_HDR_LEN + plen;
	b->rb_len -= WIRE_HDR_LEN + plen;
	if (b->rb_len == 0) {
		b->rb_off = 0; /* b->in stays valid: nothing is read before it is parsed */
	}
	*plen_out = plen;
	return 0;
}
