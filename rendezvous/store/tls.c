/* SPDX-License-Identifier: MIT */
/* rendezvous/store/tls.c: OpenSSL (loaded when TLS is configured), contexts from PEM files,
 * peer names, and the error bridge. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>

#include "rendezvous/store/tls.h"
#include "rendezvous/store/tls_lib.h"
#include "src/common/fs.h"
#include "src/common/io.h"
#include "src/common/log.h"
#include "src/common/net.h"
#include "src/common/util.h"

#define KEY_FILE_MAX (64 * 1024)

/* What the verify callback saw of the first certificate it refused, for tls_describe(). */
struct tls_note {
	int err;            /* X509_V_ERR_*; 0: none refused */
	char subject[256];
	char not_after[64];
	char name[256];     /* the name the peer's certificate had to match ("" for none) */
};

struct tls_lib crun_tls_lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_err[512]; /* why loading failed; "" when it did not */

#define TLS_LIB_SYM(n) {#n, offsetof(struct tls_lib, p_##n)},
struct tls_sym {
	const char *name;
	size_t off;
};
static const struct tls_sym crypto_syms[] = {TLS_LIB_CRYPTO_FUNCS(TLS_LIB_SYM)};
static const struct tls_sym ssl_syms[] = {TLS_LIB_SSL_FUNCS(TLS_LIB_SYM)};
#undef TLS_LIB_SYM

/* dlopen @soname and resolve @n symbols of @syms from it into the table; 0 or -1 (lib_err). */
static int lib_open(const char *soname, const struct tls_sym *syms, size_t n)
{
	const char *err;
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL), *p;
	size_t i;

	if (h == NULL) {
		err = dlerror();
		snprintf(lib_err, sizeof(lib_err),
			 "TLS needs OpenSSL 3: cannot load %s: %s (Debian: apt-get install libssl3)",
			 soname, err != NULL ? err : "unknown error");
		return -1;
	}
	for (i = 0; i < n; i++) {
		p = dlsym(h, syms[i].name);
		if (p == NULL) {
			snprintf(lib_err, sizeof(lib_err), "TLS: %s: missing symbol %s", soname,
				 syms[i].name);
			return -1;
		}
		/* POSIX guarantees a function pointer survives the round trip through void *. */
		*(void **)((char *)&crun_tls_lib + syms[i].off) = p;
	}
	return 0;
}

static void lib_load(void)
{
	if (lib_open(TLS_LIB_SONAME_CRYPTO, crypto_syms, ARRAY_SIZE(crypto_syms)) == 0) {
		lib_open(TLS_LIB_SONAME_SSL, ssl_syms, ARRAY_SIZE(ssl_syms));
	}
}

int tls_lib_load(struct crun_diag *d)
{
	pthread_once(&lib_once, lib_load);
	if (lib_err[0] != '\0') {
		return diag_set(d, CRUN_ECONFIG, "%s", lib_err);
	}
	return 0;
}

void tls_ctx_free(SSL_CTX *ctx)
{
	if (ctx != NULL) {
		SSL_CTX_free(ctx);
	}
}

static int note_idx = -1;
static BIO_METHOD *sock_method;
static pthread_once_t note_once = PTHREAD_ONCE_INIT;

static void note_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
		      void *argp)
{
	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	free(ptr);
}

/*
 * A socket BIO that sends with MSG_NOSIGNAL: OpenSSL's own writes with write(2), and a peer
 * gone away would raise SIGPIPE in a process (a worker) that never asked for TLS's signals.
 */
static int sock_write(BIO *bio, const char *p, int n)
{
	ssize_t k = send((int)(intptr_t)BIO_get_data(bio), p, (size_t)n, MSG_NOSIGNAL);

	BIO_clear_retry_flags(bio);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		BIO_set_retry_write(bio);
	}
	return (int)k;
}

static int sock_read(BIO *bio, char *p, int n)
{
	ssize_t k = recv((int)(intptr_t)BIO_get_data(bio), p, (size_t)n, 0);

	BIO_clear_retry_flags(bio);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		BIO_set_retry_read(bio);
	}
	return (int)k;
}

static long sock_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	switch (cmd) {
	case BIO_CTRL_FLUSH:
	case BIO_CTRL_DUP:
		return 1;
	case BIO_C_GET_FD:
		return (long)(intptr_t)BIO_get_data(bio);
	default:
		return 0;
	}
}

static void note_init(void)
{
	note_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, note_free);
	sock_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "crun socket");
	if (sock_method != NULL) {
		BIO_meth_set_write(sock_method, sock_write);
		BIO_meth_set_read(sock_method, sock_read);
		BIO_meth_set_ctrl(sock_method, sock_ctrl);
	}
}

int tls_set_socket(SSL *ssl, int fd)
{
	BIO *bio = sock_method != NULL ? BIO_new(sock_method) : NULL;

	if (bio == NULL) {
		return -ENOMEM;
	}
	BIO_set_data(bio, (void *)(intptr_t)fd);
	BIO_set_init(bio, 1);
	SSL_set_bio(ssl, bio, bio);
	return 0;
}

static struct tls_note *note_of(const SSL *ssl)
{
	return note_idx < 0 ? NULL : SSL_get_ex_data(ssl, note_idx);
}

bool tls_files_any(const struct tls_files *f)
{
	return f != NULL && ((f->cert != NULL && f->cert[0] != '\0') ||
			     (f->key != NULL && f->key[0] != '\0') ||
			     (f->ca != NULL && f->ca[0] != '\0') ||
			     (f->server_name != NULL && f->server_name[0] != '\0'));
}

void tls_errors(char *buf, size_t len)
{
	unsigned long e;
	size_t off = 0;
	const char *r;

	if (len == 0) {
		return;
	}
	buf[0] = '\0';
	while ((e = ERR_get_error()) != 0) {
		r = ERR_reason_error_string(e);
		if (off < len) {
			off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "; " : "",
						r != NULL ? r : "unknown OpenSSL error");
		}
	}
}

static void name_print(X509_NAME *n, char *buf, size_t len)
{
	BIO *b = BIO_new(BIO_s_mem());
	int k;

	snprintf(buf, len, "?");
	if (b == NULL) {
		return;
	}
	if (X509_NAME_print_ex(b, n, 0, XN_FLAG_RFC2253) >= 0) {
		k = BIO_read(b, buf, (int)len - 1);
		buf[k > 0 ? k : 0] = '\0';
	}
	BIO_free(b);
}

static void time_print(const ASN1_TIME *t, char *buf, size_t len)
{
	BIO *b = BIO_new(BIO_s_mem());
	int k;

	buf[0] = '\0';
	if (b == NULL || t == NULL) {
		BIO_free(b);
		return;
	}
	if (ASN1_TIME_print(b, t) == 1) {
		k = BIO_read(b, buf, (int)len - 1);
		buf[k > 0 ? k : 0] = '\0';
	}
	BIO_free(b);
}

/* Let OpenSSL decide; only remember what the first refused certificate was. */
static int on_verify(int ok, X509_STORE_CTX *x)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct tls_note *n = ssl != NULL ? note_of(ssl) : NULL;
	X509 *cert = X509_STORE_CTX_get_current_cert(x);

	if (!ok && n != NULL && n->err == 0) {
		n->err = X509_STORE_CTX_get_error(x);
		if (cert != NULL) {
			name_print(X509_get_subject_name(cert), n->subject, sizeof(n->subject));
			time_print(X509_get0_notAfter(cert), n->not_after, sizeof(n->not_after));
		}
	}
	return ok;
}

/* "TLS FILE-KIND F: what" from the error queue, into @d. */
static int file_fail(struct crun_diag *d, const char *kind, const char *path, const char *what)
{
	char q[300];

	tls_errors(q, sizeof(q));
	return diag_set(d, CRUN_ECONFIG, "TLS %s %s: %s%s%s", kind, path, what, q[0] ? ": " : "",
			q);
}

/* The key after the permission check, read from the same open file. */
static int load_key(SSL_CTX *ctx, const char *path, struct crun_diag *d)
{
	char *buf = malloc(KEY_FILE_MAX);
	EVP_PKEY *pk = NULL;
	BIO *mem = NULL;
	ssize_t n;
	int fd, rc;

	if (buf == NULL) {
		return diag_set(d, -ENOMEM, "TLS key file %s: out of memory", path);
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		diag_set(d, rc, "TLS key file %s: %s", path, strerror(-rc));
		goto out;
	}
	rc = fs_check_private(fd, "TLS key file", path, d);
	if (rc < 0) {
		close(fd);
		goto out;
	}
	n = io_read_full(fd, buf, KEY_FILE_MAX);
	close(fd);
	if (n < 0 || n == KEY_FILE_MAX) {
		rc = diag_set(d, n < 0 ? (int)n : -EFBIG, "TLS key file %s: %s", path,
			      n < 0 ? crun_strerror((int)n) : "larger than 64 KiB");
		goto out;
	}
	mem = BIO_new_mem_buf(buf, (int)n);
	pk = mem != NULL ? PEM_read_bio_PrivateKey(mem, NULL, NULL, NULL) : NULL;
	if (pk == NULL) {
		rc = file_fail(d, "key file", path, "not a PEM private key (or it has a passphrase)");
		goto out;
	}
	if (SSL_CTX_use_PrivateKey(ctx, pk) != 1) {
		rc = file_fail(d, "key file", path, "cannot use this key");
		goto out;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		rc = file_fail(d, "key file", path, "does not match the certificate");
		goto out;
	}
	rc = 0;
out:
	EVP_PKEY_free(pk);
	BIO_free(mem);
	OPENSSL_cleanse(buf, KEY_FILE_MAX);
	free(buf);
	return rc;
}

/* Our own certificate: loaded, and a warning when it has expired or is not valid yet. */
static int load_cert(SSL_CTX *ctx, const char *path, struct crun_diag *d)
{
	X509 *x;
	char when[64], subj[256];

	if (SSL_CTX_use_certificate_chain_file(ctx, path) != 1) {
		return file_fail(d, "certificate file", path, "cannot load a PEM certificate");
	}
	x = SSL_CTX_get0_certificate(ctx);
	if (x != NULL && X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
		time_print(X509_get0_notAfter(x), when, sizeof(when));
		name_print(X509_get_subject_name(x), subj, sizeof(subj));
		log_warn("TLS certificate file %s (subject %s) expired on %s: peers will refuse it",
			 path, subj, when);
	}
	return 0;
}

static int ctx_create(const struct tls_files *f, bool server, SSL_CTX **out,
		      struct crun_diag *d)
{
	SSL_CTX *ctx;
	int rc, mode = SSL_VERIFY_NONE;
	long floor;

	*out = NULL;
	rc = tls_lib_load(d);
	if (rc < 0) {
		return rc;
	}
	pthread_once(&note_once, note_init);
	ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (ctx == NULL || note_idx < 0 || sock_method == NULL) {
		SSL_CTX_free(ctx);
		return file_fail(d, "context", "", "cannot create");
	}
	/* TLS 1.2 at least, but never below the system policy's floor (openssl.cnf's
	 * MinProtocol, applied by SSL_CTX_new): 0 is "no floor". */
	floor = SSL_CTX_get_min_proto_version(ctx);
	if (floor == 0 || floor < TLS1_2_VERSION) {
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	}
	/* No session tickets to hand out: every connection is authenticated afresh. A close
	 * without close_notify is a lost connection (-ECONNRESET, retried), not a TLS error:
	 * the store's frames carry their own lengths, so a cut cannot pass for a whole reply. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
					 SSL_OP_IGNORE_UNEXPECTED_EOF);
	if (server) {
		SSL_CTX_set_num_tickets(ctx, 0);
	}
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (f->cert != NULL && f->cert[0] != '\0') {
		rc = load_cert(ctx, f->cert, d);
		if (rc < 0) {
			goto err;
		}
	}
	if (f->key != NULL && f->key[0] != '\0') {
		rc = load_key(ctx, f->key, d);
		if (rc < 0) {
			goto err;
		}
	}
	if (f->ca != NULL && f->ca[0] != '\0') {
		if (SSL_CTX_load_verify_file(ctx, f->ca) != 1) {
			rc = file_fail(d, "CA file", f->ca, "cannot load PEM certificates");
			goto err;
		}
		mode = server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER;
		if (server) {
			STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(f->ca);

			if (names != NULL) {
				SSL_CTX_set_client_CA_list(ctx, names);
			}
		}
	}
	SSL_CTX_set_verify(ctx, mode, on_verify);
	ERR_clear_error();
	*out = ctx;
	return 0;
err:
	SSL_CTX_free(ctx);
	return rc;
}

int tls_server_ctx(const struct tls_files *f, SSL_CTX **out, struct crun_diag *d)
{
	if (f->cert == NULL || f->cert[0] == '\0' || f->key == NULL || f->key[0] == '\0') {
		return diag_set(d, CRUN_ECONFIG,
				"TLS: a store serving TLS needs both --tls-cert and --tls-key");
	}
	return ctx_create(f, true, out, d);
}

int tls_client_ctx(const struct tls_files *f, SSL_CTX **out, struct crun_diag *d)
{
	bool cert = f->cert != NULL && f->cert[0] != '\0', key = f->key != NULL && f->key[0];

	if (f->ca == NULL || f->ca[0] == '\0') {
		return diag_set(d, CRUN_ECONFIG,
				"TLS: a client needs --tls-ca, the CA that signed the store's "
				"certificate (without it the store cannot be verified)");
	}
	if (cert != key) {
		return diag_set(d, CRUN_ECONFIG,
				"TLS: --tls-cert and --tls-key go together (mutual TLS)");
	}
	return ctx_create(f, false, out, d);
}

SSL *tls_new(SSL_CTX *ctx, const char *peer_name)
{
	struct tls_note *n = calloc(1, sizeof(*n));
	SSL *ssl = n != NULL ? SSL_new(ctx) : NULL;
	X509_VERIFY_PARAM *vp;
	char ip[64];
	size_t l;

	if (ssl == NULL || SSL_set_ex_data(ssl, note_idx, n) != 1) {
		SSL_free(ssl);
		free(n);
		return NULL;
	}
	if (peer_name == NULL || peer_name[0] == '\0') {
		return ssl;
	}
	snprintf(n->name, sizeof(n->name), "%s", peer_name);
	/* "[::1]" names the address ::1. */
	l = strlen(peer_name);
	if (peer_name[0] == '[' && l > 2 && l - 2 < sizeof(ip) && peer_name[l - 1] == ']') {
		memcpy(ip, peer_name + 1, l - 2);
		ip[l - 2] = '\0';
	} else {
		snprintf(ip, sizeof(ip), "%s", peer_name);
	}
	vp = SSL_get0_param(ssl);
	/* An IP address is checked against the certificate's IP entries, a name against its
	 * DNS names (X509_check_ip_asc / X509_check_host during verification). */
	if (X509_VERIFY_PARAM_set1_ip_asc(vp, ip) != 1) {
		ERR_clear_error();
		X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (SSL_set1_host(ssl, peer_name) != 1 ||
		    SSL_set_tlsext_host_name(ssl, peer_name) != 1) {
			SSL_free(ssl);
			return NULL;
		}
	}
	return ssl;
}

/* The first queued error of the TLS library: its reason code (0: none). */
static int first_ssl_reason(void)
{
	unsigned long e = ERR_peek_error();

	return e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL ? ERR_GET_REASON(e) : 0;
}

static int verify_describe(const struct tls_note *n, const char *who, char *buf, size_t len)
{
	switch (n->err) {
	case X509_V_ERR_HOSTNAME_MISMATCH:
	case X509_V_ERR_IP_ADDRESS_MISMATCH:
		snprintf(buf, len,
			 "%s's certificate (subject %s) does not match the name \"%s\" (connect by a "
			 "name it carries, or give --tls-server-name)",
			 who, n->subject, n->name);
		break;
	case X509_V_ERR_CERT_HAS_EXPIRED:
		snprintf(buf, len, "%s's certificate has expired (subject %s, not valid after %s)",
			 who, n->subject, n->not_after);
		break;
	case X509_V_ERR_CERT_NOT_YET_VALID:
		snprintf(buf, len, "%s's certificate is not valid yet (subject %s)", who,
			 n->subject);
		break;
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
		snprintf(buf, len,
			 "%s's certificate (subject %s) is not signed by a CA in --tls-ca: %s", who,
			 n->subject, X509_verify_cert_error_string(n->err));
		break;
	default:
		snprintf(buf, len, "%s's certificate (subject %s) was refused: %s", who,
			 n->subject, X509_verify_cert_error_string(n->err));
		break;
	}
	ERR_clear_error();
	return CRUN_EAUTH;
}

int tls_describe(SSL *ssl, int ret, const char *who, char *buf, size_t len)
{
	int e = SSL_get_error(ssl, ret), saved = errno, reason;
	const struct tls_note *n = note_of(ssl);
	char q[300];

	if (n != NULL && n->err != 0) {
		return verify_describe(n, who, buf, len);
	}
	if (e == SSL_ERROR_ZERO_RETURN) {
		snprintf(buf, len, "%s closed the TLS connection", who);
		return -ECONNRESET;
	}
	if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
		if (saved == 0 || saved == EPIPE || saved == ECONNRESET) {
			snprintf(buf, len, "%s closed the connection%s", who,
				 SSL_is_init_finished(ssl) ? "" : " during the TLS handshake");
			return saved == EPIPE ? -EPIPE : -ECONNRESET;
		}
		snprintf(buf, len, "%s", strerror(saved));
		return -saved;
	}
	reason = first_ssl_reason();
	switch (reason) {
	case SSL_R_UNEXPECTED_EOF_WHILE_READING:
		snprintf(buf, len, "%s closed the connection", who);
		ERR_clear_error();
		return -ECONNRESET;
	case SSL_R_WRONG_VERSION_NUMBER:
	case SSL_R_PACKET_LENGTH_TOO_LONG:
	case SSL_R_UNKNOWN_PROTOCOL:
	case SSL_R_HTTP_REQUEST:
		snprintf(buf, len, "%s does not speak TLS (a store or client without --tls-*?)",
			 who);
		ERR_clear_error();
		return -EPROTO;
	case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
		snprintf(buf, len,
			 "%s sent no certificate, and mutual TLS requires one (--tls-cert and "
			 "--tls-key)", who);
		ERR_clear_error();
		return CRUN_EAUTH;
	case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
		snprintf(buf, len,
			 "%s requires a client certificate (mutual TLS): give --tls-cert and "
			 "--tls-key", who);
		ERR_clear_error();
		return CRUN_EAUTH;
	default:
		break;
	}
	tls_errors(q, sizeof(q));
	if (strstr(q, "alert") != NULL) {
		/* The peer refused us: "tlsv1 alert unknown ca", "sslv3 alert certificate expired" */
		snprintf(buf, len, "%s refused the TLS handshake (%s)", who, q);
		return CRUN_EAUTH;
	}
	snprintf(buf, len, "TLS error with %s: %s", who, q[0] ? q : "unknown");
	return CRUN_EAUTH;
}
