/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_members.c: who an open round has and who it lacks, for the progress and
 * join timeout lines (rdzv_join.c). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/store.h>

#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_internal.h"

enum { LIST_MAX = 64 }; /* node records read for one line; more are summarised */

/* Round @R's node records 0..@n-1 into @vals (NULL where absent; the caller frees each). */
static int read_records(struct rdzv *r, int R, int n, void **vals, size_t *lens)
{
	char keybuf[LIST_MAX][KEY_MAX];
	const char *keys[LIST_MAX];
	int i;

	for (i = 0; i < n; i++) {
		rdzv_node_key(keybuf[i], R, i);
		keys[i] = keybuf[i];
		vals[i] = NULL;
	}
	return crun_store_multi_get(r->st, keys, (size_t)n, vals, lens);
}

/* A node record's "ADDR HOST" (who it is) into @who, its host into @host; false if unreadable. */
static bool record_who(const void *val, char *who, size_t whocap, char *host, size_t hostcap)
{
	char naddr[256], nhost[256];
	unsigned np, cum, port;

	if (val == NULL ||
	    sscanf(val, "%u %u %u %255s %255s", &np, &cum, &port, naddr, nhost) < 5) {
		return false;
	}
	snprintf(who, whocap, "%s %s", naddr, nhost);
	snprintf(host, hostcap, "%s", nhost);
	return true;
}

void rdzv_describe_members(struct rdzv *r, int R, int joined, const char *label, char *out,
			   size_t cap)
{
	void *vals[LIST_MAX];
	size_t lens[LIST_MAX];
	size_t used = 0;
	int n, i, listed = 0;

	out[0] = '\0';
	n = is_static(r) ? r->conf.max_nodes : joined;
	if (n > LIST_MAX) {
		n = LIST_MAX;
	}
	if (n <= 0 || read_records(r, R, n, vals, lens) < 0) {
		return;
	}
	used = (size_t)snprintf(out, cap, "%s", label);
	for (i = 0; i < n; i++) {
		char who[520], nhost[256] = "?";

		if (is_static(r) && vals[i] == NULL && used < cap) {
			used += (size_t)snprintf(out + used, cap - used, "%s %d",
						 listed++ ? "," : "", i);
		} else if (!is_static(r) && vals[i] != NULL && used < cap) {
			if (!record_who(vals[i], who, sizeof(who), nhost, sizeof(nhost))) {
				snprintf(nhost, sizeof(nhost), "?");
			}
			used += (size_t)snprintf(out + used, cap - used, "%s %s",
						 listed++ ? "," : "", nhost);
		}
		free(vals[i]);
	}
	if (listed == 0) {
		out[0] = '\0';
	} else if (is_static(r) && r->conf.max_nodes > LIST_MAX && used < cap) {
		snprintf(out + used, cap - used, ", ... (first %d ranks shown)", LIST_MAX);
	}
}

/* How many nodes round @R closed with ("<count> <world> <rc>"), or -1. */
static int closed_count(struct rdzv *r, int R)
{
	char key[KEY_MAX], v[REC_MAX];
	int count;

	rdzv_rkey(key, R, "closed");
	if (rdzv_get_str(r->st, key, v, sizeof(v)) < 0 || sscanf(v, "%d", &count) != 1 ||
	    count < 0) {
		return -1;
	}
	return count > LIST_MAX ? LIST_MAX : count;
}

void rdzv_describe_absent(struct rdzv *r, int R, int joined, char *out, size_t cap)
{
	void *prev[LIST_MAX], *cur[LIST_MAX];
	size_t plens[LIST_MAX], clens[LIST_MAX], used = 0;
	bool taken[LIST_MAX] = {false};
	int np, i, k, listed = 0;

	out[0] = '\0';
	np = R > 0 && !is_static(r) ? closed_count(r, R - 1) : -1;
	joined = joined > LIST_MAX ? LIST_MAX : joined;
	if (np <= 0 || joined < 0 || read_records(r, R - 1, np, prev, plens) < 0) {
		return;
	}
	if (joined > 0 && read_records(r, R, joined, cur, clens) < 0) {
		for (i = 0; i < np; i++) {
			free(prev[i]);
		}
		return;
	}
	for (i = 0; i < np; i++) {
		char who[520], host[256], cwho[520], chost[256];
		bool back = false;

		if (!record_who(prev[i], who, sizeof(who), host, sizeof(host))) {
			continue;
		}
		/* Matched one to one: two nodes on one host are two. */
		for (k = 0; k < joined && !back; k++) {
			if (!taken[k] && record_who(cur[k], cwho, sizeof(cwho), chost, sizeof(chost)) &&
			    strcmp(who, cwho) == 0) {
				taken[k] = back = true;
			}
		}
		if (!back && used < cap) {
			if (listed++ == 0) {
				used += (size_t)snprintf(out + used, cap - used,
							 "; not back from round %d:", R - 1);
			}
			if (used < cap) {
				used += (size_t)snprintf(out + used, cap - used, "%s %s",
							 listed > 1 ? "," : "", host);
			}
		}
	}
	for (i = 0; i < np; i++) {
		free(prev[i]);
	}
	for (k = 0; k < joined; k++) {
		free(cur[k]);
	}
}
