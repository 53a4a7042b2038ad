/* SPDX-License-Identifier: MIT */
/* rendezvous/store/tls.h: the one bridge to OpenSSL TLS: contexts from files, peer names, errors */
/* (OpenSSL is loaded when the first context is made: rendezvous/store/tls_lib.h.) */
#ifndef CRUN_RENDEZVOUS_STORE_TLS_H
#define CRUN_RENDEZVOUS_STORE_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h> /* types only */

#include "src/common/diag.h"

/*
 * TLS 1.2+ on a store connection (docs/security.md, "TLS"). Both ends load PEM files: the
 * server its certificate and key, and a CA when it verifies clients (mutual TLS); the client
 * the CA that signed the server's certificate, and its own certificate and key for mutual
 * TLS. Key files pass the same permission check as token files (fs_check_private()). The
 * token handshake still runs inside the TLS channel: TLS does not replace it.
 *
 * Every OpenSSL failure becomes one line through tls_describe(): the file or the peer it is
 * about, the certificate's subject and the verification error where there is one.
 */
struct tls_files {
	const char *cert;        /* PEM certificate (chain); NULL: none */
	const char *key;         /* PEM private key; NULL: none */
	const char *ca;          /* PEM CA certificates the peer is verified against; NULL: none */
	const char *server_name; /* client: the name the server's certificate must carry (NULL:
				  * the endpoint's host) */
};

/** Whether any TLS file (or a server name) is named: then the connection uses TLS. */
bool tls_files_any(const struct tls_files *f);

/**
 * A server context: @f->cert and @f->key required; with @f->ca, every client must present a
 * certificate signed by it. Errors name the file ("TLS key file F: ..."). 0 or a negative code.
 */
int tls_server_ctx(const struct tls_files *f, SSL_CTX **out, struct crun_diag *d);
/** A client context: @f->ca required; @f->cert with @f->key for mutual TLS. */
int tls_client_ctx(const struct tls_files *f, SSL_CTX **out, struct crun_diag *d);
/** Free a context from tls_server_ctx() or tls_client_ctx(); NULL (plain TCP) is a no-op. */
void tls_ctx_free(SSL_CTX *ctx);

/**
 * A connection object on @ctx with room for the verification note tls_describe() reads.
 * @peer_name (client only, else NULL): the host name or IP address the server's certificate
 * must match. NULL when out of memory.
 */
SSL *tls_new(SSL_CTX *ctx, const char *peer_name);

/** Run @ssl over socket @fd (borrowed), sending with MSG_NOSIGNAL. 0 or -ENOMEM. */
int tls_set_socket(SSL *ssl, int fd);

/**
 * Why the TLS call on @ssl that returned @ret failed, as one phrase into @buf: the
 * certificate verification error with the subject and the expected name, the alert the peer
 * sent, "the peer does not speak TLS", or the OpenSSL error queue (which is emptied). @who
 * names the peer in the phrase ("the store", "the client"). Returns the code to report:
 * CRUN_EAUTH for a refused certificate or a TLS alert, -EPROTO for what is not TLS,
 * -ECONNRESET when the peer closed, -errno for a system error.
 */
int tls_describe(SSL *ssl, int ret, const char *who, char *buf, size_t len);

/** The OpenSSL error queue as "; "-separated reasons into @buf (emptied); "" when empty. */
void tls_errors(char *buf, size_t len);

#endif
