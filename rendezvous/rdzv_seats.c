/* SPDX-License-Identifier: MIT */
/*
 * rendezvous/rdzv_seats.c: counting a round's nodes in ("r/<R>/joined"), two ways.
 *
 * On a store with an atomic add (crun's store, the file store) one add of
 * (1 << 32) | local_world_size gives a joiner its position and its cumulative worker count
 * at once. On etcd an add is a read and a compare-and-swap retried on conflict: N agents
 * joining at once cost O(N^2) transactions through raft (bench/notes/rdzv_scale.md). There
 * the count is a ticket (store_ticket(): one blind put, the key's version is the position)
 * that carries no sum, so the worker counts come from the node records instead, once: the
 * node that closes the round reads the records of its count (every joiner publishes its
 * record right after its ticket), writes their worker counts to "r/<R>/nprocs/<count>" and
 * closes with their sum as the world size; each member reads that one key for its rank
 * offset. The rules are those of the add: positions from 1 in the order of the counts, the
 * close value "<count> <world> <restarts>", the rank offset the sum of the counts before.
 * A closer that finds a counted seat without a record within close_timeout (its agent died
 * between its ticket and its record; records that keep coming, as from a store slow to
 * answer, are waited for until the join deadline) closes the round as never formed and marks
 * it failed, so that its members meet again in R + 1 without that seat.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/rdzv_internal.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"

/* The worker-count list of a count of up to this many seats fits the value ("N*K,..."). */
#define NPROCS_CAP (1024 * 1024)
/* read_batch(): a record did not come (@d says which); the store itself answered. */
#define RECORD_MISSING 1

int rdzv_count_in(struct rdzv *r, const char *key, int64_t *packed)
{
	int64_t n = 0;
	int rc;

	if (!store_has_tickets(r->st)) {
		return crun_store_add(r->st, key, ((int64_t)1 << 32) | r->conf.local_world_size,
				      packed);
	}
	rc = store_ticket(r->st, key, &n);
	*packed = rc == 0 ? n << 32 : 0;
	return rc;
}

int rdzv_count_read(struct rdzv *r, const char *key, int64_t *packed)
{
	int64_t n = 0;
	int rc;

	if (!store_has_tickets(r->st)) {
		return crun_store_add(r->st, key, 0, packed);
	}
	rc = store_ticket_count(r->st, key, &n);
	*packed = rc == 0 ? n << 32 : 0;
	return rc;
}

/*
 * Records @base..@base+@k-1 (@keys) into @vals: wait for all of them, saying every
 * progress_interval how many are here, until @wait_ms in all or @stall_ms with none new
 * (a store slow to answer under load is not an agent that died). Returns 0 (all in @vals),
 * RECORD_MISSING (@d names the first missing record), or the store's error (@d untouched).
 */
static int read_batch(struct rdzv *r, int R, int base, int k, const char **keys, void **vals,
		      size_t *lens, int64_t wait_ms, int64_t stall_ms, struct crun_diag *d)
{
	int64_t start = crun_now_ms(), end = start + wait_ms, last_new = start, now;
	int have = -1, here, missing, i, rc, w;

	for (;;) {
		now = crun_now_ms();
		w = crun_store_wait(r->st, keys, (size_t)k,
				    clamp_ms(min64(r->conf.progress_interval_ms,
						   min64(end, last_new + stall_ms) - now)));
		if (w != 0 && w != -ETIMEDOUT) {
			return w;
		}
		rc = crun_store_multi_get(r->st, keys, (size_t)k, vals, lens);
		if (rc < 0) {
			return rc;
		}
		for (i = 0, here = 0, missing = -1; i < k; i++) {
			here += vals[i] != NULL;
			missing = missing < 0 && vals[i] == NULL ? i : missing;
		}
		if (missing < 0) {
			return 0;
		}
		for (i = 0; i < k; i++) {
			free(vals[i]);
			vals[i] = NULL;
		}
		now = crun_now_ms();
		if (here > have) {
			have = here;
			last_new = now;
		}
		if (now >= end || now >= last_new + stall_ms) {
			diag_set(d, -ETIMEDOUT,
				 "rendezvous %s round %d: node record %d (position %d) still "
				 "absent after %" PRId64 " ms, none new for %" PRId64 " ms",
				 r->run_id, R, base + missing, base + missing + 1, now - start,
				 now - last_new);
			return RECORD_MISSING;
		}
		log_info("rendezvous %s round %d: waiting for node records: %d of %d here (%d to "
			 "%d); gives up after %" PRId64 " s with none new",
			 r->run_id, R, here, k, base, base + k - 1, (stall_ms + 999) / 1000);
	}
}

int rdzv_read_nprocs(struct rdzv *r, int R, int n, int64_t wait_ms, int64_t stall_ms, unsigned *np,
		     bool *missing, struct crun_diag *d)
{
	int m = n < CRUN_STORE_MAX_KEYS ? n : CRUN_STORE_MAX_KEYS;
	const char **keys = calloc((size_t)m + 1, sizeof(*keys));
	char *kb = malloc(((size_t)m + 1) * KEY_MAX);
	void **vals = calloc((size_t)m + 1, sizeof(*vals));
	size_t *lens = calloc((size_t)m + 1, sizeof(*lens));
	int base, k = 0, i, rc = 0;

	if (keys == NULL || kb == NULL || vals == NULL || lens == NULL) {
		rc = diag_set(d, -ENOMEM, "rendezvous: out of memory");
		goto out;
	}
	for (base = 0; base < n && rc == 0; base += k) {
		k = n - base < m ? n - base : m;
		for (i = 0; i < k; i++) {
			keys[i] = kb + (size_t)i * KEY_MAX;
			rdzv_node_key(kb + (size_t)i * KEY_MAX, R, base + i);
		}
		rc = read_batch(r, R, base, k, keys, vals, lens, wait_ms, stall_ms, d);
		if (rc == RECORD_MISSING) {
			rc = -ETIMEDOUT; /* @d says which record */
			if (missing != NULL) {
				*missing = true;
			}
			goto out;
		}
		if (rc < 0) {
			diag_set(d, rc, "rendezvous %s round %d: read node records %d-%d: %s",
				 r->run_id, R, base, base + k - 1, rdzv_why(r->st, rc));
			goto out;
		}
		for (i = 0; i < k; i++) {
			if (rc == 0 &&
			    (vals[i] == NULL || sscanf(vals[i], "%u", &np[base + i]) != 1)) {
				rc = diag_set(d, -EPROTO,
					      "rendezvous %s round %d: node record %d is malformed",
					      r->run_id, R, base + i);
			}
			free(vals[i]);
			vals[i] = NULL;
		}
	}
out:
	free(keys);
	free(kb);
	free(vals);
	free(lens);
	return rc;
}

/* @np[0..n-1] as "V*K,V*K,...": runs of equal counts (one run when every node is alike). */
static char *nprocs_format(const unsigned *np, int n)
{
	size_t cap = 64, len = 0;
	char *s = malloc(cap), *t;
	int i = 0, j;

	while (s != NULL && i < n) {
		for (j = i; j < n && np[j] == np[i]; j++) {
		}
		if (cap - len < 32) {
			cap *= 2;
			t = realloc(s, cap);
			if (t == NULL) {
				free(s);
				return NULL;
			}
			s = t;
		}
		len += (size_t)snprintf(s + len, cap - len, "%s%u*%d", i > 0 ? "," : "", np[i],
					j - i);
		i = j;
	}
	if (s != NULL && n == 0) {
		s[0] = '\0';
	}
	return s;
}

/*
 * The sum of the first @p counts of the list @s ("V*K,..."), of @count in all, into *@cum
 * and *@world. Returns 0 or -EPROTO.
 */
static int nprocs_sum(const char *s, int p, int count, int64_t *cum, int64_t *world)
{
	int64_t seen = 0;
	unsigned v;
	int k, used;

	*cum = *world = 0;
	while (*s != '\0') {
		if (sscanf(s, "%u*%d%n", &v, &k, &used) != 2 || k <= 0 || seen + k > count) {
			return -EPROTO;
		}
		if (seen < p) {
			*cum += (int64_t)v * (p - seen < k ? p - seen : k);
		}
		*world += (int64_t)v * k;
		seen += k;
		s += used;
		if (*s == ',') {
			s++;
		} else if (*s != '\0') {
			return -EPROTO;
		}
	}
	return seen == count ? 0 : -EPROTO;
}

/* A counted seat has no record: close R as never formed and mark it failed (if first). */
static int close_seatless(struct rdzv *r, int R, int rcount, const char *why, int64_t *packed)
{
	char key[KEY_MAX], rec[REC_MAX];
	bool won;
	int rc;

	log_warn("rendezvous %s round %d: %s; the round re-forms without it", r->run_id, R, why);
	snprintf(rec, sizeof(rec), "0 0 %d", rcount);
	rdzv_rkey(key, R, "closed");
	rc = rdzv_cas_str(r->st, key, rec, NULL, 0, &won);
	if (rc == 0 && won) {
		snprintf(rec, sizeof(rec), "%c %d %.200s %.300s", KIND_LOST, -1, r->host, why);
		rdzv_rkey(key, R, "failed");
		rc = rdzv_cas_str(r->st, key, rec, NULL, 0, &won);
	}
	*packed = 0;
	return rc;
}

int rdzv_seats_close(struct rdzv *r, int R, int rcount, int64_t deadline, int64_t *packed,
		     struct crun_diag *d)
{
	int count = (int)PACK_POS(*packed), rc;
	int64_t cum, world;
	char key[KEY_MAX], why[REC_MAX];
	bool missing = false;
	unsigned *np;
	char *list;

	if (!store_has_tickets(r->st) || count <= 0) {
		return 0;
	}
	np = calloc((size_t)count, sizeof(*np));
	if (np == NULL) {
		return diag_set(d, -ENOMEM, "rendezvous: out of memory");
	}
	/* Until the join deadline while records keep coming; close_timeout with none new. */
	rc = rdzv_read_nprocs(r, R, count,
			      max64(deadline - crun_now_ms(), r->conf.close_timeout_ms),
			      r->conf.close_timeout_ms, np, &missing, d);
	if (missing) {
		free(np);
		snprintf(why, sizeof(why),
			 "%.300s: its agent died while joining (a node counted in must publish its "
			 "record within close_timeout)",
			 d != NULL ? d->msg : "a node record is missing");
		diag_clear(d); /* handled here: the round re-forms */
		rc = close_seatless(r, R, rcount, why, packed);
		return rc < 0 ? diag_set(d, rc, "rendezvous %s round %d: close: %s", r->run_id, R,
					 rdzv_why(r->st, rc))
			      : 0;
	}
	list = rc == 0 ? nprocs_format(np, count) : NULL;
	free(np);
	if (rc < 0) {
		return rc;
	}
	if (list == NULL || strlen(list) >= NPROCS_CAP) {
		free(list);
		return diag_set(d, -ENOMEM, "rendezvous: out of memory");
	}
	rdzv_rkey(key, R, "nprocs/%d", count);
	rc = crun_store_set(r->st, key, list, strlen(list));
	if (rc == 0 && nprocs_sum(list, count, count, &cum, &world) != 0) {
		rc = -EPROTO;
	}
	free(list);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: write the worker counts: %s",
				r->run_id, R, rdzv_why(r->st, rc));
	}
	*packed = ((int64_t)count << 32) | world;
	return 0;
}

int rdzv_seats_place(struct rdzv *r, int R, int p, int count, int64_t *packed, char *rec0,
		     size_t cap, struct crun_diag *d)
{
	char key[KEY_MAX], k0[KEY_MAX];
	const char *keys[2] = {key, k0};
	void *vals[2] = {NULL, NULL}, *v;
	size_t lens[2] = {0, 0}, len;
	int64_t cum, world;
	char *s;
	int rc;

	if (rec0 != NULL && cap > 0) {
		rec0[0] = '\0';
	}
	if (!store_has_tickets(r->st) || is_static(r)) {
		return 0;
	}
	/* A member other than rank 0 reads rank 0's record too (its master): in the same round
	 * trip. The closer read every record before it closed, so it is there. */
	rdzv_rkey(key, R, "nprocs/%d", count);
	rdzv_node_key(k0, R, 0);
	rc = crun_store_multi_get(r->st, keys, p > 1 && rec0 != NULL ? 2 : 1, vals, lens);
	if (rc == 0 && vals[0] == NULL) {
		rc = -ENOENT;
	}
	if (rc == 0 && vals[1] != NULL && cap > 0) {
		rdzv_value_str(rec0, cap, vals[1], lens[1]);
	}
	free(vals[1]);
	v = vals[0];
	len = lens[0];
	if (rc < 0) {
		free(v);
		return diag_set(d, rc, "rendezvous %s round %d: read the worker counts: %s",
				r->run_id, R, rdzv_why(r->st, rc));
	}
	s = malloc(len + 1);
	if (s == NULL) {
		free(v);
		return diag_set(d, -ENOMEM, "rendezvous: out of memory");
	}
	memcpy(s, v, len);
	s[len] = '\0';
	free(v);
	rc = nprocs_sum(s, p, count, &cum, &world);
	free(s);
	if (rc < 0) {
		return diag_set(d, -EPROTO,
				"rendezvous %s round %d: the worker counts of its %d nodes (%s) "
				"are malformed",
				r->run_id, R, count, key);
	}
	*packed = ((int64_t)p << 32) | cum;
	return 0;
}
