/* SPDX-License-Identifier: MIT */
/* rendezvous/store/curl_lib.h: the one bridge to libcurl, loaded (dlopen) when etcd is used */
#ifndef CRUN_RENDEZVOUS_STORE_CURL_LIB_H
#define CRUN_RENDEZVOUS_STORE_CURL_LIB_H

#include <curl/curl.h>

#include "src/common/diag.h"

/*
 * Only the etcd backend speaks HTTP, and libcurl with its dependencies (gnutls, krb5, ldap,
 * ssh2, ...) costs several milliseconds of CPU to load: so no program links it. The first
 * etcd handle of a process loads libcurl.so.4 and resolves the few functions below, once;
 * curl_global_init() runs then too. The headers still come from libcurl's -dev package
 * (types and option numbers are its ABI, stable within soname 4).
 */
struct curl_lib {
	CURLcode (*easy_setopt)(CURL *c, CURLoption opt, ...);
	CURLcode (*easy_getinfo)(CURL *c, CURLINFO info, ...);
	CURL *(*easy_init)(void);
	CURLcode (*easy_perform)(CURL *c);
	void (*easy_cleanup)(CURL *c);
	const char *(*easy_strerror)(CURLcode code);
	CURLSH *(*share_init)(void);
	CURLSHcode (*share_setopt)(CURLSH *s, CURLSHoption opt, ...);
	CURLSHcode (*share_cleanup)(CURLSH *s);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
};

/** The soname loaded; error messages name it. */
#define CURL_LIB_SONAME "libcurl.so.4"

/**
 * libcurl, loaded and initialised once per process (thread-safe). The table, or NULL with
 * @d set (CRUN_EBACKEND): the library that could not be loaded and why, a symbol it lacks,
 * or curl_global_init()'s failure. A failure is remembered: later calls report it again.
 */
const struct curl_lib *curl_lib_get(struct crun_diag *d);

#endif
