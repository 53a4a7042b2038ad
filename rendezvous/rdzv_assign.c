/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_assign.c: what a node takes from a closed round: rank offset, master address. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_internal.h"
#include "rendezvous/rdzv_keys.h"
#include "rendezvous/rdzv_plan.h"
#include "src/common/diag.h"
#include "src/common/net.h"
#include "src/common/clock.h"

/* Bind port 0 on @addr, read the port back and close: a port free on this node right now. */
int rdzv_find_free_port(const char *addr, int *port, struct crun_diag *d)
{
	struct addrinfo hints, *ai = NULL;
	struct sockaddr_storage ss, any;
	socklen_t sl = sizeof(ss);
	int fd = -1, rc, gai;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	gai = getaddrinfo(addr, "0", &hints, &ai);
	if (gai != 0) {
		return diag_set(d, -EADDRNOTAVAIL, "rendezvous: master port: resolve %s: %s", addr,
				gai_strerror(gai));
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = diag_set(d, -errno, "rendezvous: master port: socket: %s", strerror(errno));
		goto out;
	}
	rc = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
	if (rc == -EADDRNOTAVAIL) {
		/* Not an address of this host (NAT, a name for a VIP): any local port will do. */
		log_warn("rendezvous: master port: %s is not an address of this node; checking the "
			 "port on all interfaces",
			 addr);
		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)ai->ai_family;
		rc = bind(fd, (struct sockaddr *)&any, ai->ai_addrlen) == 0 ? 0 : -errno;
	}
	if (rc < 0) {
		diag_set(d, rc, "rendezvous: master port: bind %s: %s", addr, strerror(-rc));
		goto out;
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
		rc = diag_set(d, -errno, "rendezvous: master port: getsockname: %s",
			      strerror(errno));
		goto out;
	}
	*port = net_sockaddr_port((struct sockaddr *)&ss);
	rc = 0;
out:
	if (fd >= 0) {
		close(fd);
	}
	freeaddrinfo(ai);
	return rc;
}

/* Static ranks join in any order: sum the worker counts in the records of ranks 0..g-1. */
static int static_rank_offset(struct rdzv *r, int R, int g, int64_t deadline, int *offset,
			      struct crun_diag *d)
{
	unsigned *np = calloc((size_t)g, sizeof(*np));
	int64_t off = 0, wait_ms = max64(deadline - crun_now_ms(), r->conf.close_timeout_ms);
	int i, rc;

	if (np == NULL) {
		return diag_set(d, -ENOMEM, "rendezvous: out of memory");
	}
	rc = rdzv_read_nprocs(r, R, g, wait_ms, wait_ms, np, NULL, d);
	for (i = 0; rc == 0 && i < g; i++) {
		off += np[i];
	}
	free(np);
	*offset = (int)off;
	return rc;
}

/*
 * Group rank 0 decides what every node's workers get, now that it has joined through the store
 * (so a store it asks is known to be up), and says so in its node record.
 */
int rdzv_publish_master(struct rdzv *r, int port, char *rec, struct crun_diag *d)
{
	struct rdzv_master *m = &r->master;

	if (r->conf.master_fn != NULL) {
		r->conf.master_fn(r->conf.master_arg, r->addr, port, m);
	} else {
		memset(m, 0, sizeof(*m));
		m->how = RDZV_BOOT_RANK0;
		snprintf(m->addr, sizeof(m->addr), "%s", r->addr);
		m->port = port;
	}
	if (rdzv_master_format(m, rec, REC_MAX) < 0) {
		return diag_set(d, CRUN_ECONFIG,
				"rendezvous %s: the workers' master address \"%s\" cannot go in a "
				"node record (it is empty, too long, or has a space or a comma)",
				r->run_id, m->addr);
	}
	return 0;
}

/* Fill @a once round @R closed with this node at group rank @g. */
int rdzv_fill_assignment(struct rdzv *r, int R, int g, int64_t my_packed, int count, int world,
			 int rc_count, int64_t deadline, const char *rec0,
			 struct rdzv_assignment *a, struct crun_diag *d)
{
	char key[KEY_MAX], rec[REC_MAX], maddr[256], mhost[256];
	const char *keys[1] = {key};
	struct rdzv_master m;
	unsigned np, cum, mport;
	int rc;

	memset(a, 0, sizeof(*a));
	a->round = R;
	a->group_rank = g;
	a->group_world_size = count;
	a->world_size = world;
	a->restart_count = rc_count;
	if (!is_static(r)) {
		a->rank_offset = (int)(PACK_CUM(my_packed) - r->conf.local_world_size);
	} else if (g > 0) {
		rc = static_rank_offset(r, R, g, deadline, &a->rank_offset, d);
		if (rc < 0) {
			return rc;
		}
	}
	if (rdzv_key_workers(a->worker_prefix, sizeof(a->worker_prefix), r->worker_base,
			     r->run_id, R) < 0) {
		return diag_set(d, -ENAMETOOLONG,
				"rendezvous %s: the workers' key prefix is too long", r->run_id);
	}
	if (g == 0) {
		/* This node decided: its own record says what the others read. */
		a->boot = r->master.how;
		snprintf(a->master_addr, sizeof(a->master_addr), "%s", r->master.addr);
		a->master_port = r->master.port;
		a->master_agreed = true;
		return 0;
	}
	/* Rank 0's record names the master; it wrote it right after joining, so it is almost
	 * always there already (read with the worker counts on etcd): get first, wait only when
	 * it is not. */
	rdzv_node_key(key, R, 0);
	if (rec0 != NULL && rec0[0] != '\0') {
		snprintf(rec, sizeof(rec), "%s", rec0);
		rc = 0;
	} else {
		rc = rdzv_get_str(r->st, key, rec, sizeof(rec));
	}
	if (rc == -ENOENT) {
		rc = crun_store_wait(
			r->st, keys, 1,
			clamp_ms(max64(deadline - crun_now_ms(), r->conf.close_timeout_ms)));
		if (rc == 0) {
			rc = rdzv_get_str(r->st, key, rec, sizeof(rec));
		}
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read rank 0's record: %s",
				r->run_id, R, rdzv_why(r->st, rc));
	}
	if (sscanf(rec, "%u %u %u %255s %255s", &np, &cum, &mport, maddr, mhost) != 5) {
		return diag_set(d, -EPROTO, "rendezvous %s round %d: rank 0's record is malformed",
				r->run_id, R);
	}
	if (rdzv_master_parse(rec, &m)) {
		a->boot = m.how;
		snprintf(a->master_addr, sizeof(a->master_addr), "%s", m.addr);
		a->master_port = m.port;
		a->master_agreed = true;
		return 0;
	}
	/* An older crun's record: its address and the port it found free, as before. */
	a->boot = RDZV_BOOT_RANK0;
	snprintf(a->master_addr, sizeof(a->master_addr), "%s", maddr);
	a->master_port = (int)mport;
	return 0;
}
