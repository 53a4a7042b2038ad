/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_plan.h: where the job's store is, and what the workers meet through: decided
 * once, by pure functions (docs/agent.md, "Where the store is"). */
#ifndef CRUN_RENDEZVOUS_RDZV_PLAN_H
#define CRUN_RENDEZVOUS_RDZV_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "rendezvous/rdzv.h"
#include "src/common/diag.h"

/*
 * Two decisions, made in two places:
 *  - rdzv_plan_make(), on every node, before anything starts: does this node host the store,
 *    where does it listen, which address does it advertise, and how its workers meet when this
 *    node alone could tell (static mode; --no-agent-store; c10d without --agent-store when
 *    the workers' torch is older than 2.4; a store it hosts itself);
 *  - rdzv_plan_master(), on group rank 0 only, once it has joined the round through the store:
 *    what EVERY node hands its workers (agent store or not, MASTER_ADDR, MASTER_PORT). The round
 *    carries that answer in rank 0's node record (struct rdzv_master), so every node gives the
 *    same whatever order the nodes started in.
 */

enum rdzv_plan_backend {
	RDZV_PLAN_C10D,
	RDZV_PLAN_STATIC,
	RDZV_PLAN_FILE,
	RDZV_PLAN_ETCD,
};

/* Whether workers meet through the job's store (TORCHELASTIC_USE_AGENT_STORE=True). */
enum rdzv_agent_store {
	RDZV_AGENT_STORE_RULE = 0, /* by the rule (docs/agent.md, "The agent store"): static yes;
				    * c10d only when the workers' torch shares its store (2.4+) */
	RDZV_AGENT_STORE_ON,	   /* --agent-store */
	RDZV_AGENT_STORE_OFF,	   /* --no-agent-store (also implied by TLS) */
};

/* The job's settings the plan reads. Strings are borrowed. */
struct rdzv_plan_in {
	enum rdzv_plan_backend backend;
	const char *endpoint_host; /* c10d: --rdzv-endpoint's host */
	int endpoint_port;	   /* c10d: its port; 0: none (a store of this node's own) */
	bool standalone;
	int max_nodes;
	int node_rank;		 /* static: --node-rank */
	const char *master_addr; /* static: --master-addr, --master-port */
	int master_port;
	enum rdzv_agent_store agent_store;
	bool torch_shares; /* c10d: the workers' torch is 2.4 or later, whose torchrun shares
			    * its c10d store with its workers (asked once, at set-up:
			    * agent/torch_probe.h) */
	int is_host;		    /* --rdzv-conf is_host: 1, 0, or -1 (by address) */
	bool endpoint_local;	    /* endpoint_host is this node's address or a loopback one */
	bool tls;		    /* the store requires TLS (--tls-*) */
	const char *advertise_addr; /* --local-addr; NULL: by the rule in struct rdzv_plan */
};

enum rdzv_plan_hosting {
	RDZV_HOST_NO,  /* a client of the store */
	RDZV_HOST_YES, /* host it; a taken port is an error */
	RDZV_HOST_TRY, /* host it; when another process here already serves it, join that one */
};

enum rdzv_plan_advertise {
	RDZV_ADV_GIVEN,	   /* --local-addr */
	RDZV_ADV_ROUTE,	   /* the route's source address toward endpoint_host, else fallback */
	RDZV_ADV_FALLBACK, /* 127.0.0.1 for a one-node job, else the host name */
};

enum rdzv_plan_workers {
	RDZV_WORKERS_AGENT_STORE, /* the job's store at store_host:store_port */
	RDZV_WORKERS_RANK0,	  /* worker rank 0's own TCPStore (master_addr, or rank 0's) */
	RDZV_WORKERS_ASK,	  /* the store is not this node's: group rank 0 asks it */
};

struct rdzv_plan {
	enum rdzv_plan_hosting host;
	char store_host[256];	      /* where the store listens (hosted) or is reached */
	int store_port;		      /* 0: any port (a store only this node uses) */
	const char *tcpstore_refusal; /* hosted without TCPStore clients: what they are told */
	enum rdzv_plan_advertise advertise;
	enum rdzv_plan_workers workers;
	bool master_fixed; /* static mode: MASTER_ADDR/PORT are master_addr:master_port */
	char master_addr[256];
	int master_port;
};

/** Decide from @in alone (no I/O). Returns 0, or CRUN_ECONFIG with the reason in @d. */
int rdzv_plan_make(const struct rdzv_plan_in *in, struct rdzv_plan *p, struct crun_diag *d);

/**
 * What hosting gave (RDZV_HOST_YES/TRY): @hosted, at @port (the port bound, for port 0); or not
 * hosted because another process here already serves the endpoint, which is then asked.
 */
void rdzv_plan_hosted(struct rdzv_plan *p, bool hosted, int port);

/**
 * Group rank 0's answer for every node's workers, from the plan, rank 0's advertised @addr and
 * a @free_port on it, and, where the plan says ask, whether the store serves PyTorch's TCPStore
 * clients (@served: 1 yes, 0 no, < 0 no answer).
 */
void rdzv_plan_master(const struct rdzv_plan *p, const char *addr, int free_port, int served,
		      struct rdzv_master *m);

/* ---- the record field that carries it (docs/rendezvous.md, "node records") ---- */

/** Append " master=<how>,<port>,<addr>" for @m to the node record in @buf (@cap bytes). */
int rdzv_master_format(const struct rdzv_master *m, char *buf, size_t cap);
/**
 * Find the master field in the node record @rec. Returns true and fills @m; false for a record
 * without one (an older crun's) or a malformed one.
 */
bool rdzv_master_parse(const char *rec, struct rdzv_master *m);
/** The word for @how in a record: "agent", "rank0", "rank0-unserved". */
const char *rdzv_boot_name(enum rdzv_boot how);

#endif
