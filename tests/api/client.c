/* SPDX-License-Identifier: MIT */
/* tests/api/client.c: an external C client of the installed libcrun-worker (CRUN_SINGLE=1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/crun.h>

#if CRUN_VERSION_NUMBER < CRUN_VERSION_CODE(0, 2, 0)
#error "crun/version.h: expected 0.2.0 or later"
#endif

static int failures;

#define CHECK(cond)                                                                            \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
			failures++;                                                            \
		}                                                                              \
	} while (0)

/* A caller built against a later header whose struct has grown: the library ignores the tail. */
struct newer_store_opts {
	struct crun_store_opts base;
	int added_later;
};

static void check_version(void)
{
	char want[32];

	CHECK(crun_version() == CRUN_VERSION_NUMBER);
	CHECK(CRUN_VERSION_NUMBER ==
	      CRUN_VERSION_CODE(CRUN_VERSION_MAJOR, CRUN_VERSION_MINOR, CRUN_VERSION_PATCH));
	CHECK(strcmp(crun_version_string(), CRUN_VERSION_STRING) == 0);
	snprintf(want, sizeof(want), "%d.%d.%d", CRUN_VERSION_MAJOR, CRUN_VERSION_MINOR,
		 CRUN_VERSION_PATCH);
	CHECK(strcmp(crun_version_string(), want) == 0);
}

static void check_names(void)
{
	CHECK(strstr(crun_strerror(CRUN_ENOTCRUN), "not started by crun") != NULL);
	CHECK(crun_strerror(-ETIMEDOUT)[0] != '\0');
	CHECK(crun_strerror(12345) != NULL);
	/* The 0.1 enumerator names stay as aliases of the prefixed ones. */
	CHECK(CRUN_FLOAT32 == CRUN_DTYPE_FLOAT32 && CRUN_FLOAT64 == CRUN_DTYPE_FLOAT64);
	CHECK(CRUN_SUM == CRUN_REDOP_SUM && CRUN_AVG == CRUN_REDOP_AVG);
}

/* Before crun_init(): a garbage struct_size is refused, never read as a layout. */
static void check_bad_sizes(void)
{
	struct crun_init_opts io = CRUN_INIT_OPTS_INIT;
	struct crun_store_opts so = CRUN_STORE_OPTS_INIT;
	struct crun_store *st = NULL;
	char err[256];

	io.struct_size = 3;
	CHECK(crun_init(&io, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "struct_size") != NULL);
	so.struct_size = 1;
	so.endpoint = "file:///nonexistent/crun-api-test";
	CHECK(crun_store_open(&so, &st, err, sizeof(err)) == -EINVAL);
	CHECK(st == NULL);
}

static void check_store(struct crun_store *st)
{
	void *val = NULL;
	size_t len = 0;

	CHECK(crun_store_set(st, "api/key", "value", 5) == 0);
	CHECK(crun_store_get(st, "api/key", &val, &len) == 0);
	CHECK(len == 5 && val != NULL && memcmp(val, "value", 5) == 0);
	free(val);
	CHECK(crun_store_get(st, "api/absent", &val, &len) == -ENOENT);
}

static void check_store_layouts(void)
{
	struct crun_store_opts zero = {0}; /* struct_size 0: the 0.2.0 layout */
	struct newer_store_opts newer = {.base = CRUN_STORE_OPTS_INIT, .added_later = 7};
	struct crun_store *st = NULL;
	char err[256];

	zero.endpoint = crun_store_endpoint();
	zero.prefix = crun_store_key_prefix();
	CHECK(crun_store_open(&zero, &st, err, sizeof(err)) == 0);
	if (st != NULL) {
		check_store(st);
	}
	crun_store_close(st);
	st = NULL;
	newer.base.struct_size = sizeof(newer);
	newer.base.endpoint = crun_store_endpoint();
	CHECK(crun_store_open(&newer.base, &st, err, sizeof(err)) == 0);
	crun_store_close(st);
}

static void check_comm(struct crun_store *st)
{
	struct crun_comm_opts co = CRUN_COMM_OPTS_INIT;
	struct crun_comm *comm = NULL;
	double v[3] = {1.0, 2.0, 3.0};
	int rc;

	co.struct_size = 2;
	CHECK(crun_comm_create(st, 0, 1, &co, &comm) == -EINVAL);
	co.struct_size = sizeof(co);
	co.backend = CRUN_BACKEND_CPU;
	co.timeout_ms = 10000;
	co.name = "api-c";
	rc = crun_comm_create(st, 0, 1, &co, &comm);
	CHECK(rc == 0);
	if (rc < 0) {
		fprintf(stderr, "crun_comm_create: %s\n", crun_strerror(rc));
		return;
	}
	CHECK(crun_comm_size(comm) == 1 && crun_comm_rank(comm) == 0);
	CHECK(crun_comm_backend(comm) == CRUN_BACKEND_CPU);
	CHECK(crun_comm_allreduce(comm, v, v, 3, CRUN_DTYPE_FLOAT64, CRUN_REDOP_SUM) == 0);
	CHECK(v[0] == 1.0 && v[1] == 2.0 && v[2] == 3.0);
	CHECK(crun_comm_barrier(comm) == 0);
	crun_comm_destroy(comm);
}

int main(void)
{
	struct crun_init_opts io = CRUN_INIT_OPTS_INIT;
	struct crun_store *st = NULL;
	char err[256];
	int rc;

	check_version();
	check_names();
	check_bad_sizes();
	io.store_timeout_ms = 10000;
	rc = crun_init(&io, err, sizeof(err)); /* single mode: CRUN_SINGLE=1 */
	if (rc < 0) {
		fprintf(stderr, "FAIL: crun_init: %s\n", err);
		return 1;
	}
	CHECK(crun_rank() == 0 && crun_world_size() == 1);
	rc = crun_worker_store_open(&st, err, sizeof(err));
	CHECK(rc == 0);
	if (rc == 0) {
		check_store(st);
		check_comm(st);
	} else {
		fprintf(stderr, "crun_worker_store_open: %s\n", err);
	}
	check_store_layouts();
	crun_store_close(st);
	crun_finish();
	if (failures > 0) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("C client: libcrun-worker %s OK\n", crun_version_string());
	return 0;
}
