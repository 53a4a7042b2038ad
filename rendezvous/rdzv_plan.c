/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_plan.c: where the job's store is and what the workers meet through; the
 * node record field that carries group rank 0's answer to every node. Pure: no I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "rendezvous/rdzv_plan.h"
#include "src/common/util.h"

static void set_str(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src != NULL ? src : "");
}

/*
 * c10d: torchrun 1.x to 2.3 gave its workers rank 0's own TCPStore; 2.4 and later share the
 * rendezvous store with them (TORCHELASTIC_USE_AGENT_STORE=True). With the variable True, torch
 * 1.x makes every rank a client of whatever port init_process_group is given, so a program
 * that picks its own (init_method="tcp://...", a setup() that sets MASTER_PORT) would hang:
 * follow the workers' torch unless told.
 */
static bool c10d_agent_store(const struct rdzv_plan_in *in)
{
	switch (in->agent_store) {
	case RDZV_AGENT_STORE_ON:
		return true;
	case RDZV_AGENT_STORE_OFF:
		return false;
	case RDZV_AGENT_STORE_RULE:
	default:
		return in->torch_shares;
	}
}

/* Static mode: the store sits on the master port, as torchrun 2.x's agent store does; with
 * --no-agent-store worker rank 0's own TCPStore takes that port and the store goes one up. */
static int plan_static(const struct rdzv_plan_in *in, struct rdzv_plan *p, struct crun_diag *d)
{
	p->master_fixed = true;
	set_str(p->master_addr, sizeof(p->master_addr), in->master_addr);
	p->master_port = in->master_port;
	p->workers = in->agent_store == RDZV_AGENT_STORE_OFF ? RDZV_WORKERS_RANK0
							     : RDZV_WORKERS_AGENT_STORE;
	if (in->max_nodes <= 1) {
		/* Nobody else needs to find it: a private port (the workers' too). */
		p->host = RDZV_HOST_YES;
		set_str(p->store_host, sizeof(p->store_host), "127.0.0.1");
		p->store_port = 0;
		p->advertise = in->advertise_addr != NULL ? RDZV_ADV_GIVEN : RDZV_ADV_FALLBACK;
		return 0;
	}
	if (p->workers == RDZV_WORKERS_RANK0 && in->master_port + 1 > 65535) {
		return diag_set(d, CRUN_ECONFIG,
				"--master-port: %d leaves no port for the store (--no-agent-store "
				"puts it one port up)",
				in->master_port);
	}
	set_str(p->store_host, sizeof(p->store_host), in->master_addr);
	p->store_port = in->master_port + (p->workers == RDZV_WORKERS_RANK0 ? 1 : 0);
	p->host = in->node_rank == 0 ? RDZV_HOST_YES : RDZV_HOST_NO;
	return 0;
}

static void plan_c10d(const struct rdzv_plan_in *in, struct rdzv_plan *p)
{
	set_str(p->store_host, sizeof(p->store_host), in->endpoint_host);
	p->store_port = in->endpoint_port;
	if (in->standalone || in->endpoint_port == 0) {
		p->host = RDZV_HOST_YES;
	} else if (in->is_host == 1) {
		p->host = RDZV_HOST_YES;
	} else if (in->is_host == -1 && in->endpoint_local) {
		/* One of this host's addresses, or any loopback one: the first agent here that
		 * binds it hosts the store, the others find it taken and join it. */
		p->host = RDZV_HOST_TRY;
	} else {
		p->host = RDZV_HOST_NO;
	}
	if (!c10d_agent_store(in)) {
		p->workers = RDZV_WORKERS_RANK0;
	} else {
		p->workers = p->host == RDZV_HOST_NO ? RDZV_WORKERS_ASK : RDZV_WORKERS_AGENT_STORE;
	}
	if (in->advertise_addr != NULL) {
		p->advertise = RDZV_ADV_GIVEN;
	} else {
		p->advertise = in->standalone ? RDZV_ADV_FALLBACK : RDZV_ADV_ROUTE;
	}
}

int rdzv_plan_make(const struct rdzv_plan_in *in, struct rdzv_plan *p, struct crun_diag *d)
{
	int rc;

	memset(p, 0, sizeof(*p));
	p->advertise = in->advertise_addr != NULL ? RDZV_ADV_GIVEN : RDZV_ADV_ROUTE;
	switch (in->backend) {
	case RDZV_PLAN_FILE:
		/* The file is the store; workers meet on rank 0's TCPStore. */
		p->host = RDZV_HOST_NO;
		p->workers = RDZV_WORKERS_RANK0;
		if (in->advertise_addr == NULL) {
			p->advertise = RDZV_ADV_FALLBACK;
		}
		return 0;
	case RDZV_PLAN_ETCD:
		/* etcd is the store, replicated: no agent hosts one. */
		p->host = RDZV_HOST_NO;
		p->workers = RDZV_WORKERS_RANK0;
		return 0;
	case RDZV_PLAN_STATIC:
		rc = plan_static(in, p, d);
		if (rc < 0) {
			return rc;
		}
		break;
	case RDZV_PLAN_C10D:
		if (in->endpoint_host == NULL || in->endpoint_host[0] == '\0') {
			return diag_set(d, CRUN_ECONFIG,
					"--rdzv-endpoint: no host for the c10d store");
		}
		plan_c10d(in, p);
		break;
	default:
		return diag_set(d, CRUN_ECONFIG, "--rdzv-backend: unknown backend %d",
				(int)in->backend);
	}
	/* A store whose job's workers do not meet through it serves no TCPStore client. */
	if (p->host != RDZV_HOST_NO && p->workers == RDZV_WORKERS_RANK0) {
		if (in->tls) {
			p->tcpstore_refusal = "the store requires TLS, which TCPStore clients "
					      "cannot speak";
		} else if (in->agent_store == RDZV_AGENT_STORE_OFF) {
			p->tcpstore_refusal = "the job runs with --no-agent-store";
		} else {
			p->tcpstore_refusal = "the job's workers use rank 0's own TCPStore (c10d "
					      "without --agent-store, as torchrun before 2.4)";
		}
	}
	return 0;
}

void rdzv_plan_hosted(struct rdzv_plan *p, bool hosted, int port)
{
	if (hosted) {
		p->host = RDZV_HOST_YES;
		p->store_port = port;
		return;
	}
	/* Another agent on this machine (or crun-rdzvd) already serves the endpoint. */
	p->host = RDZV_HOST_NO;
	p->tcpstore_refusal = NULL;
	if (p->workers == RDZV_WORKERS_AGENT_STORE) {
		p->workers = RDZV_WORKERS_ASK;
	}
}

void rdzv_plan_master(const struct rdzv_plan *p, const char *addr, int free_port, int served,
		      struct rdzv_master *m)
{
	memset(m, 0, sizeof(*m));
	if (p->workers == RDZV_WORKERS_AGENT_STORE ||
	    (p->workers == RDZV_WORKERS_ASK && served == 1)) {
		m->how = RDZV_BOOT_AGENT_STORE;
		set_str(m->addr, sizeof(m->addr), p->store_host);
		m->port = p->store_port;
		return;
	}
	m->how = p->workers == RDZV_WORKERS_ASK ? RDZV_BOOT_RANK0_UNSERVED : RDZV_BOOT_RANK0;
	if (p->master_fixed) {
		set_str(m->addr, sizeof(m->addr), p->master_addr);
		m->port = p->master_port;
	} else {
		set_str(m->addr, sizeof(m->addr), addr);
		m->port = free_port;
	}
}

/* ---- the record field ---- */

#define MASTER_TAG " master="

static const char *const boot_names[] = {
	[RDZV_BOOT_AGENT_STORE] = "agent",
	[RDZV_BOOT_RANK0] = "rank0",
	[RDZV_BOOT_RANK0_UNSERVED] = "rank0-unserved",
};

const char *rdzv_boot_name(enum rdzv_boot how)
{
	return (unsigned)how < ARRAY_SIZE(boot_names) ? boot_names[how] : "?";
}

int rdzv_master_format(const struct rdzv_master *m, char *buf, size_t cap)
{
	size_t len = strnlen(buf, cap);
	int n;

	if (len >= cap || m->addr[0] == '\0' || strpbrk(m->addr, " ,\t\n") != NULL) {
		return -1;
	}
	n = snprintf(buf + len, cap - len, MASTER_TAG "%s,%d,%s", rdzv_boot_name(m->how), m->port,
		     m->addr);
	if (n < 0 || (size_t)n >= cap - len) {
		buf[len] = '\0';
		return -1;
	}
	return 0;
}

bool rdzv_master_parse(const char *rec, struct rdzv_master *m)
{
	const char *f = strstr(rec, MASTER_TAG), *how, *port, *addr;
	size_t hl, al;
	char *end;
	long pn;
	int i;

	memset(m, 0, sizeof(*m));
	if (f == NULL) {
		return false;
	}
	how = f + strlen(MASTER_TAG);
	port = strchr(how, ',');
	if (port == NULL) {
		return false;
	}
	hl = (size_t)(port - how);
	port++;
	pn = strtol(port, &end, 10);
	if (end == port || *end != ',' || pn < 0 || pn > 65535) {
		return false;
	}
	addr = end + 1;
	al = strcspn(addr, " \t\n");
	if (al == 0 || al >= sizeof(m->addr)) {
		return false;
	}
	for (i = 0; i < (int)ARRAY_SIZE(boot_names); i++) {
		if (strlen(boot_names[i]) == hl && memcmp(boot_names[i], how, hl) == 0) {
			break;
		}
	}
	if (i == (int)ARRAY_SIZE(boot_names)) {
		return false;
	}
	m->how = (enum rdzv_boot)i;
	m->port = (int)pn;
	memcpy(m->addr, addr, al);
	m->addr[al] = '\0';
	return true;
}
