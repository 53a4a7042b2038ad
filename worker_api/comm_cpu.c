/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu.c: the cpu backend: a TCP ring with pipelined reduce-scatter + allgather. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <crun/comm.h>
#include <crun/error.h>
#include <crun/store.h>

#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"
#include "worker_api/comm_cpu_internal.h"

int cpu_fail(struct crun_comm *c, int rc, const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return diag_set(&c->diag, rc, "comm %s: rank %d: %s: %s", c->name, c->rank, what,
			crun_strerror(rc));
}

static void cpu_destroy(struct crun_comm *c)
{
	struct cpu *p = c->impl;

	if (p == NULL) {
		return;
	}
	if (p->next >= 0) {
		close(p->next);
	}
	if (p->prev >= 0) {
		close(p->prev);
	}
	cpu_shm_unmap(p);
	free(p->stage);
	free(p->scratch);
	free(p->sseg);
	free(p->rseg);
	free(p);
	c->impl = NULL;
}

static const struct comm_ops cpu_ops = {
	.allreduce = cpu_allreduce,
	.broadcast = cpu_broadcast,
	.allgather = cpu_allgather,
	.reduce_scatter = cpu_reduce_scatter,
	.barrier = cpu_barrier,
	.destroy = cpu_destroy,
};

int comm_cpu_init(struct crun_comm *c, struct crun_store *st)
{
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	struct cpu *p;
	int rc;
	bool shm;

	p = calloc(1, sizeof(*p));
	if (p == NULL) {
		return -ENOMEM;
	}
	p->next = p->prev = -1;
	p->host = cpu_host_id();
	c->impl = p;
	c->ops = &cpu_ops;
	if (c->size == 1) {
		return 0;
	}
	p->stage = malloc(CPU_STAGE);
	p->sseg = calloc(2 * (size_t)c->size, sizeof(*p->sseg));
	p->rseg = calloc(2 * (size_t)c->size, sizeof(*p->rseg));
	if (p->stage == NULL || p->sseg == NULL || p->rseg == NULL) {
		rc = -ENOMEM;
		goto err;
	}
	rc = cpu_net_link(c, p, st, deadline);
	if (rc < 0) {
		goto err;
	}
	/* A round through every rank: nobody returns (and may create the next generation of this
	 * name) before every rank has joined this one. It also counts the ranks whose
	 * predecessor is on their host: all of them means one host, and shared memory. */
	p->setup_deadline = deadline;
	rc = cpu_shm_agree(c, p, &shm);
	if (rc == 0 && shm) {
		rc = cpu_shm_setup(c, p, deadline);
	}
	if (rc == 0) {
		log_debug("comm %s: rank %d: links to rank %d and from rank %d: %s", c->name,
			  c->rank, (c->rank + 1) % c->size, (c->rank + c->size - 1) % c->size,
			  p->cma   ? "shared memory, single copy"
			  : p->shm ? "shared memory"
				   : "TCP");
	}
	p->setup_deadline = 0;
	if (rc < 0) {
		goto err;
	}
	return 0;
err:
	cpu_destroy(c);
	c->ops = NULL;
	return rc;
}
