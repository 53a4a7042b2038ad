/* SPDX-License-Identifier: MIT */
/* worker_api/checkpoint_resume.c: every rank resumes from the one checkpoint rank 0 chose. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/ddp.h>
#include <crun/error.h>
#include <crun/store.h>
#include <crun/worker.h>

#include "worker_api/worker_internal.h"

/*
 * The keys of one resume, under the job's (per-round) store prefix: "crun/ckpt/<gen>/choice",
 * set by rank 0 to "load <file name>", "none" or "fail <code> <message>"; and
 * "crun/ckpt/<gen>/fail", "rank R: <path>: <why>" from a rank that could not load the choice.
 * <gen> counts resumes in this process; every rank calls them in the same order.
 */
static atomic_uint_fast64_t resume_gen;

static void set_err(char *err, size_t errlen, const char *msg)
{
	if (err != NULL && errlen > 0) {
		snprintf(err, errlen, "%s", msg);
	}
}

/* "<dir>/<name>" into @p; false when it does not fit or @name is not a checkpoint's name. */
static bool join_path(char *p, size_t len, const char *dir, const char *name)
{
	if (strchr(name, '/') != NULL || strncmp(name, "ckpt-", 5) != 0) {
		return false;
	}
	return (size_t)snprintf(p, len, "%s/%s", dir, name) < len;
}

/* Rank 0: choose (and load) the newest checkpoint it can validate; publish the choice. */
static int choose(struct crun_store *st, const char *key, const char *dir, uint64_t *epoch,
		  uint64_t *step, const struct crun_ckpt_seg *segs, size_t nsegs, char *path,
		  size_t pathlen, char *msg, size_t msglen)
{
	char p[PATH_MAX], val[PATH_MAX + 300];
	const char *base;
	int rc, src;

	rc = crun_checkpoint_load_latest(dir, epoch, step, segs, nsegs, p, sizeof(p));
	if (rc == 0) {
		base = strrchr(p, '/');
		base = base != NULL ? base + 1 : p;
		snprintf(val, sizeof(val), "load %s", base);
		if (path != NULL && pathlen > 0) {
			snprintf(path, pathlen, "%s", p);
		}
	} else if (rc == -ENOENT) {
		snprintf(val, sizeof(val), "none");
	} else {
		snprintf(msg, msglen, "checkpoint resume: rank 0: %s: %s", dir, crun_strerror(rc));
		snprintf(val, sizeof(val), "fail %d %s", rc, msg);
	}
	src = crun_store_set(st, key, val, strlen(val));
	if (src < 0) {
		snprintf(msg, msglen, "checkpoint resume: rank 0: publishing the choice: %s",
			 crun_strerror(src));
		return src;
	}
	return rc;
}

/* Any other rank: load exactly what rank 0 chose. *@own: the failure is this rank's own. */
static int follow(struct crun_store *st, const char *key, const char *dir, int rank,
		  int timeout_ms, uint64_t *epoch, uint64_t *step, const struct crun_ckpt_seg *segs,
		  size_t nsegs, char *path, size_t pathlen, char *msg, size_t msglen, bool *own)
{
	char p[PATH_MAX], *end;
	size_t len;
	void *v = NULL;
	const char *val;
	long code;
	int rc;

	rc = crun_store_wait_get(st, key, &v, &len, timeout_ms);
	if (rc < 0) {
		snprintf(msg, msglen, "checkpoint resume: rank %d: waiting for rank 0's choice: %s",
			 rank, crun_strerror(rc));
		return rc;
	}
	val = v;
	*own = true;
	if (strcmp(val, "none") == 0) {
		rc = -ENOENT;
	} else if (strncmp(val, "fail ", 5) == 0) {
		code = strtol(val + 5, &end, 10);
		snprintf(msg, msglen, "%s", *end == ' ' ? end + 1 : val);
		*own = false;
		rc = code < 0 && code > INT_MIN ? (int)code : CRUN_EPEERFAIL;
	} else if (strncmp(val, "load ", 5) != 0 || !join_path(p, sizeof(p), dir, val + 5)) {
		snprintf(msg, msglen, "checkpoint resume: rank %d: rank 0's choice \"%.64s\" is not "
				      "a checkpoint name", rank, val);
		rc = -EPROTO;
	} else {
		rc = crun_checkpoint_load(p, epoch, step, segs, nsegs);
		if (rc < 0) {
			snprintf(msg, msglen,
				 "checkpoint resume: rank %d cannot load %s (chosen by rank 0): %s",
				 rank, p, crun_strerror(rc));
			/* Never -ENOENT: to the caller that means "no checkpoint, start fresh". */
			if (rc == -ENOENT) {
				rc = CRUN_EPEERFAIL;
			}
		} else if (path != NULL && pathlen > 0) {
			snprintf(path, pathlen, "%s", p);
		}
	}
	free(v);
	return rc;
}

CRUN_EXPORT int crun_checkpoint_resume(const char *dir, uint64_t *epoch, uint64_t *step,
				       const struct crun_ckpt_seg *segs, size_t nsegs, char *path,
				       size_t pathlen, char *err, size_t errlen, int timeout_ms)
{
	char key[64], fkey[64], msg[PATH_MAX + 300] = "";
	struct crun_store *st = NULL;
	const struct worker_env *e;
	void *v = NULL;
	size_t len;
	bool own = false;
	uint64_t gen;
	int rc, brc, frc;

	if (dir == NULL || (segs == NULL && nsegs > 0)) {
		return -EINVAL;
	}
	e = worker_env_get(&rc);
	if (e == NULL) {
		set_err(err, errlen, crun_init_error());
		return rc;
	}
	if (e->single || e->world_size <= 1) {
		rc = crun_checkpoint_load_latest(dir, epoch, step, segs, nsegs, path, pathlen);
		if (rc < 0 && rc != -ENOENT) {
			snprintf(msg, sizeof(msg), "checkpoint resume: %s: %s", dir,
				 crun_strerror(rc));
			set_err(err, errlen, msg);
		}
		return rc;
	}
	rc = crun_worker_store_open(&st, msg, sizeof(msg));
	if (rc < 0) {
		set_err(err, errlen, msg);
		return rc;
	}
	gen = atomic_fetch_add(&resume_gen, 1) + 1;
	snprintf(key, sizeof(key), "crun/ckpt/%" PRIu64 "/choice", gen);
	snprintf(fkey, sizeof(fkey), "crun/ckpt/%" PRIu64 "/fail", gen);
	if (e->rank == 0) {
		rc = choose(st, key, dir, epoch, step, segs, nsegs, path, pathlen, msg,
			    sizeof(msg));
	} else {
		rc = follow(st, key, dir, e->rank, timeout_ms, epoch, step, segs, nsegs, path,
			    pathlen, msg, sizeof(msg), &own);
		if (rc < 0 && rc != -ENOENT && own) {
			/* This rank's own failure: the others learn of it after the barrier. */
			crun_store_set(st, fkey, msg, strlen(msg));
			fprintf(stderr, "libcrun-worker: %s\n", msg);
		}
	}
	/* Whatever happened here, meet the others, so nobody trains on while a rank failed. */
	brc = crun_barrier(timeout_ms);
	if (brc < 0 && (rc == 0 || rc == -ENOENT)) {
		snprintf(msg, sizeof(msg), "checkpoint resume: rank %d: barrier: %s", e->rank,
			 crun_strerror(brc));
		rc = brc;
	} else if (rc == 0 || rc == -ENOENT) {
		frc = crun_store_get(st, fkey, &v, &len);
		if (frc == 0) {
			snprintf(msg, sizeof(msg), "%s", (const char *)v);
			rc = CRUN_EPEERFAIL;
			free(v);
		}
	}
	crun_store_close(st);
	if (rc < 0 && rc != -ENOENT) {
		set_err(err, errlen, msg);
	}
	return rc;
}
