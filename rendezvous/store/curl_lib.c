/* SPDX-License-Identifier: MIT */
/* rendezvous/store/curl_lib.c: load libcurl.so.4 once, resolve the functions crun uses. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include <crun/error.h>

#include "rendezvous/store/curl_lib.h"
#include "src/common/diag.h"
#include "src/common/util.h"

static struct curl_lib lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_err[512]; /* why loading failed; "" when it did not */

/* The table's pointers by name, in the order of struct curl_lib. */
static const struct {
	const char *name;
	size_t off;
} syms[] = {
	{"curl_easy_setopt", offsetof(struct curl_lib, easy_setopt)},
	{"curl_easy_getinfo", offsetof(struct curl_lib, easy_getinfo)},
	{"curl_easy_init", offsetof(struct curl_lib, easy_init)},
	{"curl_easy_perform", offsetof(struct curl_lib, easy_perform)},
	{"curl_easy_cleanup", offsetof(struct curl_lib, easy_cleanup)},
	{"curl_easy_strerror", offsetof(struct curl_lib, easy_strerror)},
	{"curl_share_init", offsetof(struct curl_lib, share_init)},
	{"curl_share_setopt", offsetof(struct curl_lib, share_setopt)},
	{"curl_share_cleanup", offsetof(struct curl_lib, share_cleanup)},
	{"curl_slist_append", offsetof(struct curl_lib, slist_append)},
	{"curl_slist_free_all", offsetof(struct curl_lib, slist_free_all)},
};

static void load(void)
{
	CURLcode (*global_init)(long flags);
	const char *err;
	CURLcode rc;
	size_t i;
	void *h, *p;

	h = dlopen(CURL_LIB_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		err = dlerror();
		snprintf(load_err, sizeof(load_err),
			 "the etcd backend needs libcurl: cannot load %s: %s (Debian: apt-get "
			 "install libcurl4)",
			 CURL_LIB_SONAME, err != NULL ? err : "unknown error");
		return;
	}
	for (i = 0; i < ARRAY_SIZE(syms); i++) {
		p = dlsym(h, syms[i].name);
		if (p == NULL) {
			snprintf(load_err, sizeof(load_err), "%s: missing symbol %s",
				 CURL_LIB_SONAME, syms[i].name);
			return;
		}
		/* POSIX guarantees a function pointer survives the round trip through void *. */
		*(void **)((char *)&lib + syms[i].off) = p;
	}
	*(void **)&global_init = dlsym(h, "curl_global_init");
	if (global_init == NULL) {
		snprintf(load_err, sizeof(load_err), "%s: missing symbol curl_global_init",
			 CURL_LIB_SONAME);
		return;
	}
	rc = global_init(CURL_GLOBAL_DEFAULT);
	if (rc != CURLE_OK) {
		snprintf(load_err, sizeof(load_err), "%s: curl_global_init: %s", CURL_LIB_SONAME,
			 lib.easy_strerror(rc));
	}
	/* The library stays loaded for the life of the process: its handles may be anywhere. */
}

const struct curl_lib *curl_lib_get(struct crun_diag *d)
{
	pthread_once(&once, load);
	if (load_err[0] != '\0') {
		diag_set(d, CRUN_EBACKEND, "%s", load_err);
		return NULL;
	}
	return &lib;
}
