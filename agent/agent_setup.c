/* SPDX-License-Identifier: MIT */
/* agent/agent_setup.c: before the first round: where the job's store is (hosted here, joined,
 * or etcd), whether its workers meet through it (the agent store), and the store's
 * configuration (token, TLS files, etcd settings) for this agent and its workers
 * (docs/agent.md, docs/security.md). */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>

#include "agent/agent_internal.h"
#include "agent/spawn.h"
#include "agent/agent_store.h"
#include "agent/logroute.h"
#include "agent/torch_probe.h"
#include "rendezvous/rdzv_keys.h"
#include "rendezvous/store/etcd_endpoint.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/fs.h"
#include "src/common/log.h"
#include "src/common/net.h"
#include "src/common/token.h"
#include "src/common/util.h"

/* ---- the store and addresses: the plan (rendezvous/rdzv_plan.h) carried out ---- */

/* How often group rank 0 asks the store it joined through before taking silence for a no. */
#define AGENT_STORE_ASK_TRIES 3

static int host_store(struct agent *a, const char *host, int port, struct crun_diag *d)
{
	struct store_server_opts so = {0};
	char listen[300];
	long nofile;
	int rc;

	net_join_hostport(listen, sizeof(listen), host, port);
	so.listen = listen;
	so.metrics_listen = a->spec->metrics_listen;
	store_conf_server_opts(&a->sc, &so);
	if (a->plan.tcpstore_refusal != NULL) {
		so.tcpstore_refusal = a->plan.tcpstore_refusal;
	} else {
		so.tcpstore_run = a->spec->rdzv_id;
	}
	/* The store's connection cap is a share of the soft fd limit: raise it to the hard one
	 * first, as crun-rdzvd, systemd and etcd do (a soft 1,024 left room for 857 connections,
	 * below what one job's workers and a flood of unauthenticated ones need). */
	nofile = store_server_raise_nofile();
	if (nofile < 0) {
		log_warn("open file limit: cannot raise the soft limit for the store: %s",
			 strerror((int)-nofile));
	}
	rc = store_server_thread_start(&so, &a->srv, d);
	if (rc < 0) {
		return rc;
	}
	net_join_hostport(a->endpoint, sizeof(a->endpoint), host, store_server_thread_port(a->srv));
	log_info("hosting the rendezvous store at %s", a->endpoint);
	rdzv_plan_hosted(&a->plan, true, store_server_thread_port(a->srv));
	return 0;
}

/* @host is loopback (127/8, ::1, a name for one): any process here may bind every 127.x.y.z,
 * though getifaddrs() lists only 127.0.0.1. torchrun treats such endpoints as local too. */
static bool is_loopback(const char *host)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL, *ai;
	bool loop = false;

	if (getaddrinfo(host, NULL, &hints, &res) != 0) {
		return false;
	}
	for (ai = res; ai != NULL && !loop; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			const struct sockaddr_in *in = (const struct sockaddr_in *)ai->ai_addr;

			loop = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
		} else if (ai->ai_family == AF_INET6) {
			const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ai->ai_addr;

			loop = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
		}
	}
	freeaddrinfo(res);
	return loop;
}

/*
 * The planning function's input, from the job spec (and, for c10d, this host's addresses and,
 * by the rule, the workers' torch, asked once here: the plan is made once).
 */
static void plan_input(const struct job_spec *spec, struct rdzv_plan_in *in)
{
	static const enum rdzv_plan_backend backends[] = {
		[RDZV_KIND_C10D] = RDZV_PLAN_C10D,
		[RDZV_KIND_STATIC] = RDZV_PLAN_STATIC,
		[RDZV_KIND_FILE] = RDZV_PLAN_FILE,
		[RDZV_KIND_ETCD] = RDZV_PLAN_ETCD,
	};

	memset(in, 0, sizeof(*in));
	in->backend = (unsigned)spec->rdzv_kind < ARRAY_SIZE(backends) ? backends[spec->rdzv_kind]
								       : (enum rdzv_plan_backend)-1;
	in->endpoint_host = spec->rdzv_host;
	in->endpoint_port = spec->rdzv_port;
	in->standalone = spec->standalone;
	in->max_nodes = spec->max_nodes;
	in->node_rank = spec->node_rank;
	in->master_addr = spec->master_addr;
	in->master_port = spec->master_port;
	if (spec->no_agent_store) {
		in->agent_store = RDZV_AGENT_STORE_OFF;
	} else if (spec->agent_store) {
		in->agent_store = RDZV_AGENT_STORE_ON;
	} else {
		in->agent_store = RDZV_AGENT_STORE_RULE;
		in->torch_shares =
			spec->rdzv_kind == RDZV_KIND_C10D && torch_probe_shares_store(spec);
	}
	in->is_host = spec->is_host;
	in->tls = spec->tls_ca != NULL || spec->tls_cert != NULL;
	in->advertise_addr = spec->advertise_addr;
	/* Looked up only where it decides something. */
	in->endpoint_local = spec->rdzv_kind == RDZV_KIND_C10D && !spec->standalone &&
			     spec->rdzv_port != 0 && spec->is_host == -1 &&
			     spec->rdzv_host != NULL &&
			     (net_addr_is_local(spec->rdzv_host) || is_loopback(spec->rdzv_host));
}

/* Decide where the store is; host it in-process when this node is the one (docs/agent.md). */
int agent_setup_store(struct agent *a, struct crun_diag *d)
{
	const struct job_spec *spec = a->spec;
	struct rdzv_plan *p = &a->plan;
	struct rdzv_plan_in in;
	struct crun_diag hd = {0};
	int rc;

	plan_input(spec, &in);
	rc = rdzv_plan_make(&in, p, d);
	if (rc < 0) {
		return rc;
	}
	switch (p->host) {
	case RDZV_HOST_YES:
		rc = host_store(a, p->store_host, p->store_port, &hd);
		if (spec->rdzv_kind != RDZV_KIND_STATIC || p->store_port == 0) {
			return rc < 0 ? diag_set(d, rc, "%s", hd.msg) : 0;
		}
		if (rc < 0) {
			return agent_store_port_taken(&a->sc, p->store_host, p->store_port, rc,
						      hd.msg, d);
		}
		agent_store_claim_node0(&a->sc, a->endpoint, a->hostname);
		return 0;
	case RDZV_HOST_TRY:
		rc = host_store(a, p->store_host, p->store_port, &hd);
		if (rc == 0) {
			return 0;
		}
		if (rc != UV_EADDRINUSE) {
			return diag_set(d, rc, "%s", hd.msg);
		}
		/* Another agent on this machine (or crun-rdzvd) already hosts it. */
		log_info("store %s is already served here; joining it as a client",
			 spec->rdzv_endpoint);
		rdzv_plan_hosted(p, false, 0);
		break;
	case RDZV_HOST_NO:
	default:
		if (spec->rdzv_kind == RDZV_KIND_FILE || spec->rdzv_kind == RDZV_KIND_ETCD) {
			snprintf(a->endpoint, sizeof(a->endpoint), "%s", spec->rdzv_endpoint);
			if (spec->rdzv_kind == RDZV_KIND_ETCD) {
				log_info("rendezvous through etcd at %s, keys under the prefix %s",
					 a->endpoint, a->prefix);
			}
			return 0;
		}
		net_join_hostport(a->endpoint, sizeof(a->endpoint), p->store_host, p->store_port);
		if (spec->rdzv_kind == RDZV_KIND_C10D) {
			log_info("joining the rendezvous store at %s (hosted by another node)",
				 a->endpoint);
		}
		return 0;
	}
	net_join_hostport(a->endpoint, sizeof(a->endpoint), p->store_host, p->store_port);
	return 0;
}

/*
 * Group rank 0 asks the store it has just joined through whether it serves PyTorch's TCPStore
 * clients. It answered a moment ago, so no answer is worth a few more tries (each bounded).
 */
static int ask_store(const struct rdzv_plan *p)
{
	const struct timespec pause = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000};
	int rc = -ETIMEDOUT, i;

	for (i = 0; i < AGENT_STORE_ASK_TRIES; i++) {
		rc = agent_store_probe(p->store_host, p->store_port, AGENT_STORE_PROBE_MS);
		if (rc >= 0) {
			break;
		}
		nanosleep(&pause, NULL);
	}
	if (rc < 0) {
		log_warn("the store at %s:%d gave no answer to a TCPStore request (%s)",
			 p->store_host, p->store_port, crun_strerror(rc));
	}
	return rc;
}

void agent_decide_master(void *arg, const char *addr, int free_port, struct rdzv_master *m)
{
	struct agent *a = arg;
	int served = -1;

	if (a->plan.workers == RDZV_WORKERS_ASK) {
		if (a->store_served < 0) {
			a->store_served = ask_store(&a->plan);
		}
		served = a->store_served;
	}
	rdzv_plan_master(&a->plan, addr, free_port, served, m);
}

void agent_workers_master(struct agent *a, const struct rdzv_assignment *as)
{
	const struct rdzv_plan *p = &a->plan;
	struct rdzv_master m;
	int served = -1;

	if (as->master_agreed) {
		m.how = as->boot;
		snprintf(m.addr, sizeof(m.addr), "%s", as->master_addr);
		m.port = as->master_port;
		if (m.how == RDZV_BOOT_AGENT_STORE && a->spec->no_agent_store && !a->workers_set) {
			/* Every node's workers must meet in one place: rank 0's answer wins. */
			log_warn("--no-agent-store: group rank 0 runs without it, so this node's "
				 "workers meet through the agent store too; give every node the "
				 "same --no-agent-store");
		} else if (m.how == RDZV_BOOT_RANK0 && a->spec->agent_store && !a->workers_set) {
			log_warn("--agent-store: group rank 0 runs without it, so this node's "
				 "workers meet on rank 0's own TCPStore too; give every node the "
				 "same --agent-store");
		}
	} else {
		/* Group rank 0 runs an older crun that does not say: decide here, as it did. */
		if (p->workers == RDZV_WORKERS_ASK) {
			served = agent_store_serves(p->store_host, p->store_port) ? 1 : 0;
		}
		rdzv_plan_master(p, as->master_addr, as->master_port, served, &m);
	}
	if (a->workers_set && m.how == a->workers.how && m.port == a->workers.port &&
	    strcmp(m.addr, a->workers.addr) == 0) {
		return;
	}
	a->workers = m;
	a->workers_set = true;
	switch (m.how) {
	case RDZV_BOOT_AGENT_STORE:
		log_info("workers meet through the agent store: MASTER_ADDR=%s MASTER_PORT=%d, "
			 "TORCHELASTIC_USE_AGENT_STORE=True",
			 m.addr, m.port);
		break;
	case RDZV_BOOT_RANK0_UNSERVED:
		log_info("the store at %s:%d does not serve PyTorch's TCPStore clients: rank 0 "
			 "hosts their TCPStore at MASTER_ADDR=%s MASTER_PORT=%d "
			 "(TORCHELASTIC_USE_AGENT_STORE=False)",
			 p->store_host, p->store_port, m.addr, m.port);
		break;
	case RDZV_BOOT_RANK0:
	default:
		log_info("workers' rank 0 hosts their TCPStore at MASTER_ADDR=%s MASTER_PORT=%d",
			 m.addr, m.port);
		break;
	}
	if (m.how != RDZV_BOOT_AGENT_STORE &&
	    (a->spec->tls_ca != NULL || a->spec->tls_cert != NULL)) {
		/* MASTER_ADDR is the rank-0 node's advertised address; what torch binds is not
		 * ours to choose (torch 1.13's TCPStore server listens on every interface). */
		log_warn("TLS covers crun's store, not PyTorch's: the workers' TCPStore on rank 0 "
			 "(MASTER_ADDR=%s MASTER_PORT=%d) has no TLS and no token, torch listens for "
			 "it on every interface of that node, and gloo/NCCL traffic is plain too: "
			 "run the job on a private network or firewall those ports "
			 "(docs/security.md, \"What TLS covers\")",
			 m.addr, m.port);
	}
}

/*
 * An etcd password sent over plain http: anyone on the path reads it and can log in as that
 * user. Said once, naming the members that are not https (the endpoint as the store reads it).
 */
static void warn_plain_etcd(const struct store_conf *c)
{
	struct crun_diag d = {0};
	struct etcd_ep *eps = NULL;
	char plain[512] = "";
	size_t n = 0, i, used = 0;

	if (c->etcd_user == NULL || c->etcd_password_file == NULL ||
	    etcd_parse_endpoints(c->endpoint, &eps, &n, &d) < 0) {
		return; /* no password, or an endpoint open will name */
	}
	for (i = 0; i < n && used < sizeof(plain); i++) {
		if (!eps[i].tls) {
			used += (size_t)snprintf(plain + used, sizeof(plain) - used, "%s%s",
						 used > 0 ? ", " : "", eps[i].url);
		}
	}
	free(eps);
	if (plain[0] != '\0') {
		log_warn("etcd: the password of user %s (%s) goes to %s over plain http: anyone on "
			 "the path can read it and log in as that user; use https "
			 "(etcd+https://, --rdzv-conf cacert=...)",
			 c->etcd_user, c->etcd_password_file, plain);
	}
}

/* ---- the store's token (docs/security.md) ---- */

/* This agent hosts the store for itself alone: a fresh token nobody else needs. */
static bool private_store(const struct job_spec *spec)
{
	return spec->standalone ||
	       (spec->rdzv_kind == RDZV_KIND_STATIC && spec->max_nodes <= 1) ||
	       (spec->rdzv_kind == RDZV_KIND_C10D && spec->rdzv_port == 0 && spec->max_nodes <= 1);
}

/*
 * The store's configuration, one value (rendezvous/store/store_conf.h), from the job's flags:
 * its TLS files, etcd settings (else the CRUN_ETCD_* the user exported), the job's key prefix
 * on etcd, and the token by the one policy (docs/security.md): --insecure (none, warned),
 * --token-file, $CRUN_STORE_TOKEN (taken out of the environment so that workers do not
 * inherit it), a fresh random one for a store only this agent uses, else the per-user default
 * token file, created on first use. File and etcd stores have their own access control: no
 * token. The endpoint is known once agent_setup_store() has run. Call before any thread.
 */
int agent_store_conf(struct agent *a, struct crun_diag *d)
{
	const struct job_spec *spec = a->spec;
	bool tcp = spec->rdzv_kind == RDZV_KIND_C10D || spec->rdzv_kind == RDZV_KIND_STATIC;
	struct store_settings s = {
		.insecure = tcp && spec->insecure,
		.token_file = tcp ? spec->token_file : NULL,
		.tls_ca = spec->tls_ca,
		.tls_cert = spec->tls_cert,
		.tls_key = spec->tls_key,
		.tls_server_name = spec->tls_server_name,
		.etcd_user = spec->etcd_user,
		.etcd_password_file = spec->etcd_password_file,
		.etcd_cacert = spec->etcd_cacert,
		.etcd_cert = spec->etcd_cert,
		.etcd_key = spec->etcd_key,
	};
	unsigned policy = STORE_TOKEN_DROP_ENV;
	int rc;

	if (spec->rdzv_kind == RDZV_KIND_ETCD) {
		if (spec->etcd_v2_name) {
			log_info("--rdzv-backend etcd-v2: crun speaks etcd's v3 API (etcd 3.4 and "
				 "later), the same as --rdzv-backend etcd");
		}
		/* Every key of the job lives under "<run_id>/". */
		snprintf(a->prefix, sizeof(a->prefix), "%s/", spec->rdzv_id);
		s.prefix = a->prefix;
		s.endpoint = spec->rdzv_endpoint;
		store_settings_etcd_env(&s);
	}
	if (tcp) {
		policy = STORE_TOKEN_ENV | STORE_TOKEN_DEFAULT | STORE_TOKEN_CREATE | STORE_TOKEN_READ;
		if (private_store(spec)) {
			policy |= STORE_TOKEN_FRESH;
		}
	}
	if (s.insecure) {
		log_warn("--insecure: the store has no authentication: anyone who can reach it can "
			 "change this job's rendezvous and stop it");
	}
	rc = store_conf_init(&a->sc, &s, policy, d);
	if (rc == 0 && spec->rdzv_kind == RDZV_KIND_ETCD) {
		warn_plain_etcd(&a->sc);
	}
	if (rc == 0 && a->sc.env_token_dropped && spec->rdzv_kind == RDZV_KIND_ETCD) {
		log_warn("CRUN_STORE_TOKEN is not used with etcd (etcd checks its own users and "
			 "TLS: --rdzv-conf user=,password_file=,cacert=,cert=,key=); workers do "
			 "not get it");
	}
	if (rc == 0 && a->sc.token_created) {
		log_info("created the token file %s (0600): give every node the same file",
			 a->sc.token_file);
	}
	return rc;
}

/* Write the workers' credential into the private temp dir: the key for this run only. */
int agent_worker_token_write(struct agent *a, struct crun_diag *d)
{
	const char *run = a->spec->rdzv_id;
	struct token_cred c;
	struct fs_chunk ch;
	int rc;

	if (a->sc.token == NULL) {
		return 0;
	}
	snprintf(a->worker_token, sizeof(a->worker_token), "%s/store-token", a->tmpbase);
	if (token_scope_valid(run)) {
		rc = token_cred_from_token(&c, a->sc.token, run, a->sc.token_src, d);
		if (rc == 0) {
			rc = token_cred_write(a->worker_token, &c, d);
		}
		memset(&c, 0, sizeof(c));
	} else {
		/* A run id that cannot be a scope: the workers get the token itself. */
		log_warn("run id \"%s\" cannot confine the workers' store access (it has a '/' or "
			 "a space, or is \"rdzv\"): they get the job's full token", run);
		ch.data = a->sc.token;
		ch.len = strlen(a->sc.token);
		rc = fs_write_atomic(a->worker_token, &ch, 1, 0600, NULL);
		if (rc < 0) {
			diag_set(d, rc, "%s: %s", a->worker_token, crun_strerror(rc));
		}
	}
	if (rc < 0) {
		a->worker_token[0] = '\0';
		return diag_prefix(d, "agent: workers' token file");
	}
	return 0;
}

/* rdzv_agree()'s proposal: a folder name (made only past the rerun names: then undone). */
struct log_claim {
	const struct job_spec *spec;
	char name[256];
	bool made;
};

static int propose_log_folder(void *arg, char *val, size_t cap, struct crun_diag *d)
{
	struct log_claim *c = arg;
	int rc;

	rc = logroute_claim_run_dir(c->spec->log_dir, c->spec->rdzv_id, c->name, sizeof(c->name),
				    &c->made, d);
	if (rc < 0) {
		return rc;
	}
	return (size_t)snprintf(val, cap, "%s", c->name) < cap ? 0 : -ENAMETOOLONG;
}

int agent_log_folder(struct agent *a, struct crun_diag *d)
{
	struct log_claim c = {.spec = a->spec};
	char name[256];
	int rc;

	rc = rdzv_agree(a->r, "logdir", propose_log_folder, &c, name, sizeof(name), d);
	if (rc < 0) {
		return rc;
	}
	if (c.made && strcmp(c.name, name) != 0) {
		logroute_drop_run_dir(a->spec->log_dir, c.name);
	}
	rc = logroute_join_run_dir(a->spec->log_dir, name, a->logrun, sizeof(a->logrun), d);
	if (rc < 0) {
		a->logrun[0] = '\0';
		return rc;
	}
	log_info("worker logs go to %s", a->logrun);
	return 0;
}
