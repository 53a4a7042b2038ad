/* SPDX-License-Identifier: MIT */
/* worker_api/env.c: read the worker environment the agent sets, once; single-process mode. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/worker.h>

#include "config.h"
#include "src/common/diag.h"
#include "src/common/fs.h"
#include "src/common/opts.h"
#include "src/common/parse.h"
#include "worker_api/gpu_device.h"
#include "worker_api/gpu_loader.h"
#include "worker_api/worker_internal.h"

static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;
static struct worker_env g_env;
static int g_ready; /* 1 once g_env is complete; read with acquire, written with release */
static struct crun_diag g_diag; /* the last failed crun_init() */

#define ENV_REQUIRED INT_MIN

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	diag_setv(&g_diag, code, fmt, ap);
	va_end(ap);
	return diag_copy_out(&g_diag, err, errlen);
}

/* Parse integer variable @name into *out: @def when unset. */
static int env_int(const char *name, int def, int lo, int hi, int *out, char *err, size_t errlen)
{
	const char *s = getenv(name);

	if (s == NULL || *s == '\0') {
		if (def == ENV_REQUIRED) {
			return fail(err, errlen, CRUN_ECONFIG,
				    "libcrun-worker: environment: %s is not set", name);
		}
		*out = def;
		return 0;
	}
	/*
	 * Decimal digits only, with an optional sign: Python's int(), which torch applies to
	 * these variables, also takes white space around them and "1_0", but crun and torchrun
	 * only ever write plain digits, so anything else was set by hand or by mistake (RANK=" 1"
	 * accepted on one rank and refused by another program on the next is worse than a clear
	 * error at the start).
	 */
	if (parse_int(s, lo, hi, out) != 0) {
		return fail(err, errlen, CRUN_ECONFIG,
			    "libcrun-worker: environment: %s: expected an integer in [%d, %d], "
			    "got \"%.64s\"",
			    name, lo, hi, s);
	}
	return 0;
}

static int env_str(const char *name, const char *def, char **out)
{
	const char *s = getenv(name);

	if (s == NULL || *s == '\0') {
		s = def;
	}
	if (s == NULL) {
		*out = NULL;
		return 0;
	}
	*out = strdup(s);
	return *out == NULL ? -ENOMEM : 0;
}

static void env_free(struct worker_env *e)
{
	free(e->run_id);
	free(e->master_addr);
	free(e->store_endpoint);
	free(e->store_prefix);
	free(e->store_token);
	free(e->store_token_file);
	free(e->store_tls_ca);
	free(e->store_tls_cert);
	free(e->store_tls_key);
	free(e->store_tls_server_name);
	free(e->error_file);
	free(e->single_dir);
	memset(e, 0, sizeof(*e));
}

static int read_single(struct worker_env *e, char *err, size_t errlen)
{
	char tmpl[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	int rc;

	if (tmp == NULL || *tmp == '\0') {
		tmp = "/tmp";
	}
	if ((size_t)snprintf(tmpl, sizeof(tmpl), "%s/crun-single-XXXXXX", tmp) >= sizeof(tmpl)) {
		return fail(err, errlen, -ENAMETOOLONG,
			    "libcrun-worker: single mode: TMPDIR is too long");
	}
	if (mkdtemp(tmpl) == NULL) {
		rc = -errno;
		return fail(err, errlen, rc, "libcrun-worker: single mode: mkdtemp %s: %s", tmpl,
			    strerror(-rc));
	}
	e->single = true;
	e->world_size = 1;
	e->local_world_size = 1;
	e->node_count = 1;
	e->master_port = -ENOENT;
	e->single_dir = strdup(tmpl);
	if (asprintf(&e->store_endpoint, "file://%s/store", tmpl) < 0) {
		e->store_endpoint = NULL;
	}
	if (e->single_dir == NULL || e->store_endpoint == NULL ||
	    env_str("TORCHELASTIC_RUN_ID", "single", &e->run_id) < 0 ||
	    env_str("CRUN_STORE_PREFIX", "single/", &e->store_prefix) < 0 ||
	    env_str("TORCHELASTIC_ERROR_FILE", NULL, &e->error_file) < 0) {
		rmdir(tmpl);
		return fail(err, errlen, -ENOMEM, "libcrun-worker: single mode: out of memory");
	}
	return 0;
}

/*
 * Where a node's rank and size come from: torchrun's and crun's names, else what mpirun
 * (Open MPI) and srun (Slurm) set for a program they start themselves with only RANK and
 * WORLD_SIZE given (a launcher script's RANK=$SLURM_PROCID), else rank % size of one node.
 */
#define LOCAL_SIZE_NAMES "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"
#define LOCAL_RANK_NAMES "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"

/* The first of the three names that is set and not empty, else the first. */
static const char *env_first(const char *a, const char *b, const char *c)
{
	const char *names[3] = {a, b, c};

	for (int i = 0; i < 3; i++) {
		const char *v = getenv(names[i]);

		if (v != NULL && *v != '\0') {
			return names[i];
		}
	}
	return a;
}

static int read_env(struct worker_env *e, char *err, size_t errlen)
{
	int rc;

	if (getenv("RANK") == NULL || getenv("WORLD_SIZE") == NULL) {
		return fail(err, errlen, CRUN_ENOTCRUN,
			    "libcrun-worker: environment: RANK and WORLD_SIZE are not set: start "
			    "this program under crun, or set CRUN_SINGLE=1 for a single-process run");
	}
	if ((rc = env_int("WORLD_SIZE", ENV_REQUIRED, 1, 1 << 24, &e->world_size, err, errlen)) < 0 ||
	    (rc = env_int("RANK", ENV_REQUIRED, 0, e->world_size - 1, &e->rank, err, errlen)) < 0 ||
	    (rc = env_int(env_first(LOCAL_SIZE_NAMES), e->world_size, 1, e->world_size,
			  &e->local_world_size, err, errlen)) < 0 ||
	    (rc = env_int(env_first(LOCAL_RANK_NAMES), e->rank % e->local_world_size, 0,
			  e->local_world_size - 1, &e->local_rank, err, errlen)) < 0 ||
	    (rc = env_int("GROUP_WORLD_SIZE", 1, 1, e->world_size, &e->node_count, err,
			  errlen)) < 0 ||
	    (rc = env_int("GROUP_RANK", 0, 0, e->node_count - 1, &e->node_rank, err, errlen)) <
		    0 ||
	    (rc = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, INT_MAX, &e->restart_count, err,
			  errlen)) < 0 ||
	    (rc = env_int("TORCHELASTIC_MAX_RESTARTS", 0, 0, INT_MAX, &e->max_restarts, err,
			  errlen)) < 0 ||
	    (rc = env_int("MASTER_PORT", -ENOENT, 1, 65535, &e->master_port, err, errlen)) < 0) {
		return rc;
	}
	if (env_str("TORCHELASTIC_RUN_ID", "none", &e->run_id) < 0 ||
	    env_str("MASTER_ADDR", NULL, &e->master_addr) < 0 ||
	    env_str("CRUN_STORE_ENDPOINT", NULL, &e->store_endpoint) < 0 ||
	    env_str("CRUN_STORE_PREFIX", "", &e->store_prefix) < 0 ||
	    env_str("TORCHELASTIC_ERROR_FILE", NULL, &e->error_file) < 0) {
		return fail(err, errlen, -ENOMEM, "libcrun-worker: environment: out of memory");
	}
	return 0;
}

/* struct crun_init_opts as crun 0.2.0 laid it out (struct_size 0): store_timeout_ms ended it. */
#define INIT_OPTS_SIZE_0_2 (offsetof(struct crun_init_opts, store_timeout_ms) + sizeof(int))

CRUN_EXPORT int crun_init(const struct crun_init_opts *opts, char *err, size_t errlen)
{
	struct worker_env e;
	struct crun_init_opts o;
	const char *single = getenv("CRUN_SINGLE");
	bool want_single;
	int rc;

	if (__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE)) {
		return 0;
	}
	pthread_mutex_lock(&env_lock);
	if (g_ready) {
		pthread_mutex_unlock(&env_lock);
		return 0;
	}
	if (opts_copy(&o, sizeof(o), opts, INIT_OPTS_SIZE_0_2) < 0) {
		rc = fail(err, errlen, -EINVAL, "libcrun-worker: init: options: bad struct_size %zu",
			  opts->struct_size);
		goto out;
	}
	want_single = o.single;
	memset(&e, 0, sizeof(e));
	if (single != NULL && *single != '\0') {
		if (strcmp(single, "1") == 0) {
			want_single = true;
		} else if (strcmp(single, "0") != 0) {
			rc = fail(err, errlen, CRUN_ECONFIG,
				  "libcrun-worker: environment: CRUN_SINGLE: expected 0 or 1, "
				  "got \"%.32s\"",
				  single);
			goto out;
		}
	}
	rc = want_single ? read_single(&e, err, errlen) : read_env(&e, err, errlen);
	if (rc < 0) {
		env_free(&e);
		goto out;
	}
	if (env_str("CRUN_STORE_TOKEN", NULL, &e.store_token) < 0 ||
	    env_str("CRUN_STORE_TOKEN_FILE", NULL, &e.store_token_file) < 0 ||
	    env_str("CRUN_STORE_TLS_CA", NULL, &e.store_tls_ca) < 0 ||
	    env_str("CRUN_STORE_TLS_CERT", NULL, &e.store_tls_cert) < 0 ||
	    env_str("CRUN_STORE_TLS_KEY", NULL, &e.store_tls_key) < 0 ||
	    env_str("CRUN_STORE_TLS_SERVER_NAME", NULL, &e.store_tls_server_name) < 0) {
		env_free(&e);
		rc = fail(err, errlen, -ENOMEM, "libcrun-worker: environment: out of memory");
		goto out;
	}
	e.store_timeout_ms = o.store_timeout_ms > 0 ? o.store_timeout_ms : 300000;
	g_env = e;
	diag_clear(&g_diag);
	__atomic_store_n(&g_ready, 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&env_lock);
	return rc;
}

CRUN_EXPORT void crun_finish(void)
{
	worker_store_finish();
	pthread_mutex_lock(&env_lock);
	if (g_ready) {
		if (g_env.single_dir != NULL) {
			/* The store backend may leave files beside its own. */
			fs_rm_rf(g_env.single_dir);
		}
		env_free(&g_env);
		__atomic_store_n(&g_ready, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&env_lock);
}

CRUN_EXPORT const char *crun_init_error(void)
{
	return g_diag.msg;
}

const struct worker_env *worker_env_get(int *rc)
{
	int r = crun_init(NULL, NULL, 0);

	if (rc != NULL) {
		*rc = r;
	}
	return r < 0 ? NULL : &g_env;
}

#define QUERY_INT(fn, field)                                                                   \
	CRUN_EXPORT int fn(void)                                                               \
	{                                                                                      \
		int rc;                                                                        \
		const struct worker_env *e = worker_env_get(&rc);                              \
		return e == NULL ? rc : e->field;                                              \
	}

QUERY_INT(crun_rank, rank)
QUERY_INT(crun_local_rank, local_rank)
QUERY_INT(crun_world_size, world_size)
QUERY_INT(crun_local_world_size, local_world_size)
QUERY_INT(crun_node_rank, node_rank)
QUERY_INT(crun_node_count, node_count)
QUERY_INT(crun_restart_count, restart_count)
QUERY_INT(crun_max_restarts, max_restarts)
QUERY_INT(crun_master_port, master_port)

#define QUERY_STR(fn, field)                                                                   \
	CRUN_EXPORT const char *fn(void)                                                       \
	{                                                                                      \
		const struct worker_env *e = worker_env_get(NULL);                             \
		return e == NULL ? NULL : e->field;                                            \
	}

QUERY_STR(crun_run_id, run_id)
QUERY_STR(crun_master_addr, master_addr)
QUERY_STR(crun_store_endpoint, store_endpoint)
QUERY_STR(crun_store_key_prefix, store_prefix)

int worker_cuda_device(int ndev, int *dev, struct crun_diag *d)
{
	const struct worker_env *e;
	bool sharing, virt;
	int rc;

	e = worker_env_get(&rc);
	if (e == NULL) {
		return diag_set(d, rc, "%s", g_diag.msg[0] != '\0' ? g_diag.msg : crun_strerror(rc));
	}
	rc = gpu_sharing_parse(getenv("CRUN_GPU_SHARING"), &sharing, d);
	if (rc == 0) {
		rc = gpu_virtual_parse(getenv("CRUN_VIRTUAL_LOCAL_RANK"), &virt, d);
	}
	if (rc < 0) {
		return rc;
	}
	/* --virtual-local-rank: the agent narrowed CUDA_VISIBLE_DEVICES to this worker's GPU. */
	rc = gpu_device_pick(virt ? 0 : e->local_rank, virt ? 1 : e->local_world_size, ndev,
			     sharing, getenv("CUDA_VISIBLE_DEVICES"), dev, d);
	if (rc < 0) {
		diag_prefix(d, "local rank %d", e->local_rank);
	}
	return rc;
}

CRUN_EXPORT int crun_cuda_device(char *err, size_t errlen)
{
	struct crun_diag d = {0};
#if CRUN_HAVE_NCCL
	const struct gpu_cuda *cu;
	int n, dev = 0, rc;

	rc = gpu_cuda_load(&cu, &d);
	if (rc == 0) {
		n = gpu_cuda_device_count(cu, &d);
		rc = n < 0 ? n : worker_cuda_device(n, &dev, &d);
	}
	if (rc == 0) {
		return dev;
	}
	diag_prefix(&d, "libcrun-worker: CUDA device");
#else
	diag_set(&d, CRUN_EBACKEND,
		 "libcrun-worker: CUDA device: this libcrun-worker was built without CUDA");
#endif
	return diag_copy_out(&d, err, errlen);
}
