/* SPDX-License-Identifier: MIT */
/* rendezvous/store/tls_lib.h: OpenSSL's functions, loaded (dlopen) when TLS is configured */
#ifndef CRUN_RENDEZVOUS_STORE_TLS_LIB_H
#define CRUN_RENDEZVOUS_STORE_TLS_LIB_H

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "src/common/diag.h"

/*
 * Only a TLS job needs OpenSSL, and libssl with libcrypto costs every process about 1.4 ms of
 * CPU to load and relocate (issue 23): so no program links them. The first TLS context of a
 * process (tls_server_ctx(), tls_client_ctx()) loads libcrypto.so.3 and libssl.so.3 and
 * resolves the functions below, once (tls_lib_load()). OpenSSL's headers still give the types
 * and macros (its ABI, stable within soname 3): a macro such as SSL_CTX_set_mode expands to
 * SSL_CTX_ctrl, which is in the table. OpenSSL initialises itself at the first SSL_CTX_new as
 * when linked, the system configuration (openssl.cnf) included.
 *
 * Include this header only in the TLS files (tls.c, server_tls.c, client_tcp_io.c), after
 * any other OpenSSL header: it turns each name below into a call through the table, which is
 * filled only once a context exists, so call none of them before (nor on a NULL object where
 * no context was made: tls_ctx_free() is the NULL-safe way to drop a context).
 */
#define TLS_LIB_SONAME_CRYPTO "libcrypto.so.3"
#define TLS_LIB_SONAME_SSL "libssl.so.3"

/* libcrypto's functions, then libssl's. */
#define TLS_LIB_CRYPTO_FUNCS(X) \
	X(ASN1_TIME_print) \
	X(BIO_clear_flags) \
	X(BIO_ctrl) \
	X(BIO_ctrl_pending) \
	X(BIO_free) \
	X(BIO_get_data) \
	X(BIO_get_new_index) \
	X(BIO_meth_new) \
	X(BIO_meth_set_ctrl) \
	X(BIO_meth_set_read) \
	X(BIO_meth_set_write) \
	X(BIO_new) \
	X(BIO_new_mem_buf) \
	X(BIO_read) \
	X(BIO_s_mem) \
	X(BIO_set_data) \
	X(BIO_set_flags) \
	X(BIO_set_init) \
	X(BIO_write) \
	X(CRYPTO_get_ex_new_index) \
	X(ERR_clear_error) \
	X(ERR_get_error) \
	X(ERR_peek_error) \
	X(ERR_reason_error_string) \
	X(EVP_PKEY_free) \
	X(OPENSSL_cleanse) \
	X(PEM_read_bio_PrivateKey) \
	X(X509_NAME_print_ex) \
	X(X509_STORE_CTX_get_current_cert) \
	X(X509_STORE_CTX_get_error) \
	X(X509_STORE_CTX_get_ex_data) \
	X(X509_VERIFY_PARAM_set1_ip_asc) \
	X(X509_VERIFY_PARAM_set_hostflags) \
	X(X509_cmp_current_time) \
	X(X509_get0_notAfter) \
	X(X509_get_subject_name) \
	X(X509_verify_cert_error_string)

#define TLS_LIB_SSL_FUNCS(X) \
	X(SSL_CTX_check_private_key) \
	X(SSL_CTX_ctrl) \
	X(SSL_CTX_free) \
	X(SSL_CTX_get0_certificate) \
	X(SSL_CTX_load_verify_file) \
	X(SSL_CTX_new) \
	X(SSL_CTX_set_client_CA_list) \
	X(SSL_CTX_set_num_tickets) \
	X(SSL_CTX_set_options) \
	X(SSL_CTX_set_verify) \
	X(SSL_CTX_use_PrivateKey) \
	X(SSL_CTX_use_certificate_chain_file) \
	X(SSL_connect) \
	X(SSL_ctrl) \
	X(SSL_do_handshake) \
	X(SSL_free) \
	X(SSL_get0_param) \
	X(SSL_get_error) \
	X(SSL_get_ex_data) \
	X(SSL_get_ex_data_X509_STORE_CTX_idx) \
	X(SSL_get_rbio) \
	X(SSL_get_wbio) \
	X(SSL_is_init_finished) \
	X(SSL_load_client_CA_file) \
	X(SSL_new) \
	X(SSL_read) \
	X(SSL_set1_host) \
	X(SSL_set_accept_state) \
	X(SSL_set_bio) \
	X(SSL_set_ex_data) \
	X(SSL_write) \
	X(TLS_client_method) \
	X(TLS_server_method)

#define TLS_LIB_MEMBER(n) __typeof__(n) *p_##n;
struct tls_lib {
	TLS_LIB_CRYPTO_FUNCS(TLS_LIB_MEMBER)
	TLS_LIB_SSL_FUNCS(TLS_LIB_MEMBER)
};
#undef TLS_LIB_MEMBER

/** The table (rendezvous/store/tls.c); filled by tls_lib_load(). */
extern struct tls_lib crun_tls_lib;

/**
 * Load libcrypto.so.3 and libssl.so.3 and resolve the table, once per process (thread-safe).
 * 0, or CRUN_ECONFIG with @d naming the library that could not be loaded (and why) or the
 * symbol it lacks; a failure is remembered and reported again.
 */
int tls_lib_load(struct crun_diag *d);

/* Every call below goes through the table. */
#define ASN1_TIME_print (crun_tls_lib.p_ASN1_TIME_print)
#define BIO_clear_flags (crun_tls_lib.p_BIO_clear_flags)
#define BIO_ctrl (crun_tls_lib.p_BIO_ctrl)
#define BIO_ctrl_pending (crun_tls_lib.p_BIO_ctrl_pending)
#define BIO_free (crun_tls_lib.p_BIO_free)
#define BIO_get_data (crun_tls_lib.p_BIO_get_data)
#define BIO_get_new_index (crun_tls_lib.p_BIO_get_new_index)
#define BIO_meth_new (crun_tls_lib.p_BIO_meth_new)
#define BIO_meth_set_ctrl (crun_tls_lib.p_BIO_meth_set_ctrl)
#define BIO_meth_set_read (crun_tls_lib.p_BIO_meth_set_read)
#define BIO_meth_set_write (crun_tls_lib.p_BIO_meth_set_write)
#define BIO_new (crun_tls_lib.p_BIO_new)
#define BIO_new_mem_buf (crun_tls_lib.p_BIO_new_mem_buf)
#define BIO_read (crun_tls_lib.p_BIO_read)
#define BIO_s_mem (crun_tls_lib.p_BIO_s_mem)
#define BIO_set_data (crun_tls_lib.p_BIO_set_data)
#define BIO_set_flags (crun_tls_lib.p_BIO_set_flags)
#define BIO_set_init (crun_tls_lib.p_BIO_set_init)
#define BIO_write (crun_tls_lib.p_BIO_write)
#define CRYPTO_get_ex_new_index (crun_tls_lib.p_CRYPTO_get_ex_new_index)
#define ERR_clear_error (crun_tls_lib.p_ERR_clear_error)
#define ERR_get_error (crun_tls_lib.p_ERR_get_error)
#define ERR_peek_error (crun_tls_lib.p_ERR_peek_error)
#define ERR_reason_error_string (crun_tls_lib.p_ERR_reason_error_string)
#define EVP_PKEY_free (crun_tls_lib.p_EVP_PKEY_free)
#define OPENSSL_cleanse (crun_tls_lib.p_OPENSSL_cleanse)
#define PEM_read_bio_PrivateKey (crun_tls_lib.p_PEM_read_bio_PrivateKey)
#define X509_NAME_print_ex (crun_tls_lib.p_X509_NAME_print_ex)
#define X509_STORE_CTX_get_current_cert (crun_tls_lib.p_X509_STORE_CTX_get_current_cert)
#define X509_STORE_CTX_get_error (crun_tls_lib.p_X509_STORE_CTX_get_error)
#define X509_STORE_CTX_get_ex_data (crun_tls_lib.p_X509_STORE_CTX_get_ex_data)
#define X509_VERIFY_PARAM_set1_ip_asc (crun_tls_lib.p_X509_VERIFY_PARAM_set1_ip_asc)
#define X509_VERIFY_PARAM_set_hostflags (crun_tls_lib.p_X509_VERIFY_PARAM_set_hostflags)
#define X509_cmp_current_time (crun_tls_lib.p_X509_cmp_current_time)
#define X509_get0_notAfter (crun_tls_lib.p_X509_get0_notAfter)
#define X509_get_subject_name (crun_tls_lib.p_X509_get_subject_name)
#define X509_verify_cert_error_string (crun_tls_lib.p_X509_verify_cert_error_string)
#define SSL_CTX_check_private_key (crun_tls_lib.p_SSL_CTX_check_private_key)
#define SSL_CTX_ctrl (crun_tls_lib.p_SSL_CTX_ctrl)
#define SSL_CTX_free (crun_tls_lib.p_SSL_CTX_free)
#define SSL_CTX_get0_certificate (crun_tls_lib.p_SSL_CTX_get0_certificate)
#define SSL_CTX_load_verify_file (crun_tls_lib.p_SSL_CTX_load_verify_file)
#define SSL_CTX_new (crun_tls_lib.p_SSL_CTX_new)
#define SSL_CTX_set_client_CA_list (crun_tls_lib.p_SSL_CTX_set_client_CA_list)
#define SSL_CTX_set_num_tickets (crun_tls_lib.p_SSL_CTX_set_num_tickets)
#define SSL_CTX_set_options (crun_tls_lib.p_SSL_CTX_set_options)
#define SSL_CTX_set_verify (crun_tls_lib.p_SSL_CTX_set_verify)
#define SSL_CTX_use_PrivateKey (crun_tls_lib.p_SSL_CTX_use_PrivateKey)
#define SSL_CTX_use_certificate_chain_file (crun_tls_lib.p_SSL_CTX_use_certificate_chain_file)
#define SSL_connect (crun_tls_lib.p_SSL_connect)
#define SSL_ctrl (crun_tls_lib.p_SSL_ctrl)
#define SSL_do_handshake (crun_tls_lib.p_SSL_do_handshake)
#define SSL_free (crun_tls_lib.p_SSL_free)
#define SSL_get0_param (crun_tls_lib.p_SSL_get0_param)
#define SSL_get_error (crun_tls_lib.p_SSL_get_error)
#define SSL_get_ex_data (crun_tls_lib.p_SSL_get_ex_data)
#define SSL_get_ex_data_X509_STORE_CTX_idx (crun_tls_lib.p_SSL_get_ex_data_X509_STORE_CTX_idx)
#define SSL_get_rbio (crun_tls_lib.p_SSL_get_rbio)
#define SSL_get_wbio (crun_tls_lib.p_SSL_get_wbio)
#define SSL_is_init_finished (crun_tls_lib.p_SSL_is_init_finished)
#define SSL_load_client_CA_file (crun_tls_lib.p_SSL_load_client_CA_file)
#define SSL_new (crun_tls_lib.p_SSL_new)
#define SSL_read (crun_tls_lib.p_SSL_read)
#define SSL_set1_host (crun_tls_lib.p_SSL_set1_host)
#define SSL_set_accept_state (crun_tls_lib.p_SSL_set_accept_state)
#define SSL_set_bio (crun_tls_lib.p_SSL_set_bio)
#define SSL_set_ex_data (crun_tls_lib.p_SSL_set_ex_data)
#define SSL_write (crun_tls_lib.p_SSL_write)
#define TLS_client_method (crun_tls_lib.p_TLS_client_method)
#define TLS_server_method (crun_tls_lib.p_TLS_server_method)

#endif
