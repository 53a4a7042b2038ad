/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_tls.c: TLS on the server's connections, over memory BIOs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "rendezvous/store/tls.h"
#include "rendezvous/store/tls_lib.h"
#include "src/common/log.h"

/*
 * libuv owns the socket; OpenSSL sees two memory BIOs: what the peer sent is written into
 * the read BIO (srv_tls_read), and what OpenSSL wants sent (handshake records, replies
 * sealed by srv_tls_seal) is taken from the write BIO into conn->out, which srv_flush()
 * writes as it writes plain replies. A connection starts in the TLS handshake when the
 * server has a TLS context; the store's own HELLO/AUTH handshake then runs inside TLS.
 */

#define TLS_RECORD_TYPE_HANDSHAKE 0x16 /* the first byte of every TLS ClientHello */

int srv_tls_init(struct store_server *s, const struct store_server_opts *o,
		 struct crun_diag *d)
{
	struct tls_files f = {o->tls_cert, o->tls_key, o->tls_ca, NULL};
	int rc;

	if (!tls_files_any(&f)) {
		return 0;
	}
	rc = tls_server_ctx(&f, &s->tls_ctx, d);
	if (rc < 0) {
		return diag_prefix(d, "store");
	}
	s->tls_plain = malloc(READ_BUF_LEN);
	if (s->tls_plain == NULL) {
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	return 0;
}

void srv_tls_finish(struct store_server *s)
{
	tls_ctx_free(s->tls_ctx);
	s->tls_ctx = NULL;
	free(s->tls_plain);
	s->tls_plain = NULL;
}

bool srv_tls_conn_start(struct conn *c)
{
	BIO *rb, *wb;

	if (c->s->tls_ctx == NULL) {
		return true;
	}
	c->ssl = tls_new(c->s->tls_ctx, NULL);
	rb = BIO_new(BIO_s_mem());
	wb = BIO_new(BIO_s_mem());
	if (c->ssl == NULL || rb == NULL || wb == NULL) {
		SSL_free(c->ssl);
		c->ssl = NULL;
		BIO_free(rb);
		BIO_free(wb);
		log_warn("store %s: accept: out of memory for TLS", c->s->addr);
		srv_conn_close(c);
		return false;
	}
	/* An empty memory BIO says "retry", not "end of file". */
	BIO_set_mem_eof_return(rb, -1);
	SSL_set_bio(c->ssl, rb, wb);
	SSL_set_accept_state(c->ssl);
	return true;
}

void srv_tls_conn_free(struct conn *c)
{
	if (c->ssl != NULL) {
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
}

void srv_tls_seal(struct conn *c)
{
	BIO *wb = SSL_get_wbio(c->ssl);
	size_t off = 0, pending;
	int k;

	if (c->out.len > 0) {
		/* Before the TLS handshake is done nothing can be sent: a reply made then (a
		 * limit's refusal at accept) is dropped, and the connection closes anyway. */
		while (SSL_is_init_finished(c->ssl) && off < c->out.len) {
			k = SSL_write(c->ssl, c->out.p + off, (int)(c->out.len - off));
			if (k <= 0) {
				break;
			}
			off += (size_t)k;
		}
		ERR_clear_error();
		c->out.len = 0;
	}
	pending = BIO_ctrl_pending(wb);
	if (pending == 0) {
		return;
	}
	if (wire_buf_reserve(&c->out, pending) < 0) {
		return; /* out.oom: srv_flush() closes the connection */
	}
	k = BIO_read(wb, c->out.p, (int)pending);
	c->out.len = k > 0 ? (size_t)k : 0;
}

/* The handshake or a read failed: one log line naming the peer and why, then close. */
static void tls_drop(struct conn *c, int ret)
{
	char peer[96], why[400], what[420];

	tls_describe(c->ssl, ret, "the client", why, sizeof(why));
	srv_metric_refuse(c->s, SRV_REFUSE_TLS);
	snprintf(what, sizeof(what), "TLS: %s", why);
	if (c->pre) {
		srv_preauth_log(c, REFUSE_HANDSHAKE, what); /* once per source and interval */
	} else {
		srv_conn_peer(c, peer, sizeof(peer));
		log_info("store: dropping %s: %s", peer, what);
	}
	srv_flush(c); /* the alert that tells the client why, when the socket takes it now */
	srv_conn_close(c);
}

/* A first byte that cannot start TLS: a plain client. Tell it in its own protocol (the
 * reply's log line names the peer and the cause). A PyTorch TCPStore client has no error
 * reply (a crun frame would read as garbage to it): closed, and counted in the summary line. */
static void plain_client(struct conn *c, const uint8_t *p, size_t n)
{
	enum ts_proto proto = ts_sniff(p, n);
	char peer[96];

	srv_tls_conn_free(c);
	if (proto == TS_PROTO_V1 || proto == TS_PROTO_V2) {
		srv_preauth_refused(c->s, c, REFUSE_TCPSTORE_TLS);
		if (log_get_level() >= LOG_DEBUG) {
			srv_conn_peer(c, peer, sizeof(peer));
			log_debug("store: closing %s: a PyTorch TCPStore %s client, and this store "
				  "requires TLS, which TCPStore does not speak",
				  peer, ts_proto_name(proto));
		}
		srv_conn_close(c);
		return;
	}
	srv_conn_fail(c, WIRE_OP_HELLO, 0, WIRE_E_AUTH,
		      "this store requires TLS, and this client does not speak it (connect with "
		      "--tls-ca, and --tls-cert and --tls-key for mutual TLS)");
}

void srv_tls_read(struct conn *c, const uint8_t *p, size_t n)
{
	int k, e;

	if (n > 0 && !c->tls_seen) {
		c->tls_seen = true;
		if (p[0] != TLS_RECORD_TYPE_HANDSHAKE) {
			plain_client(c, p, n);
			return;
		}
	}
	if (n > 0 && BIO_write(SSL_get_rbio(c->ssl), p, (int)n) != (int)n) {
		srv_conn_fail(c, 0, 0, WIRE_E_NO_MEMORY, "out of memory");
		return;
	}
	if (!SSL_is_init_finished(c->ssl)) {
		ERR_clear_error();
		k = SSL_do_handshake(c->ssl);
		if (k <= 0 && SSL_get_error(c->ssl, k) != SSL_ERROR_WANT_READ) {
			tls_drop(c, k);
			return;
		}
		srv_flush(c); /* the server's handshake records */
		if (k <= 0) {
			return;
		}
	}
	while (!c->paused && !c->failing && !c->closing) {
		ERR_clear_error();
		k = SSL_read(c->ssl, c->s->tls_plain, READ_BUF_LEN);
		if (k <= 0) {
			e = SSL_get_error(c->ssl, k);
			if (e == SSL_ERROR_ZERO_RETURN) {
				srv_conn_close(c); /* the client's close_notify */
			} else if (e != SSL_ERROR_WANT_READ) {
				tls_drop(c, k);
			}
			return;
		}
		srv_conn_input(c, c->s->tls_plain, (size_t)k);
	}
}
