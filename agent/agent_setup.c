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
#include <unistd.h>

#include <crun/error.h>

#include "agent/agent_internal.h"
#include "agent/spawn.h"
#include "agent/agent_store.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/fs.h"
#include "src/common/log.h"
#include "src/common/net.h"
#include "src/common/token.h"

/* ---- the store and addresses ---- */

/* The keys PyTorch TCPStore clients (the workers, through the agent store) may use. */
#define AGENT_STORE_SUFFIX "/tcpstore/"

/* Workers meet through the store at @host:@port (MASTER_ADDR, MASTER_PORT). */
static void use_agent_store(struct agent *a, const char *host, int port)
{
	a->agent_store = true;
	snprintf(a->store_host, sizeof(a->store_host), "%s", host);
	a->store_port = port;
}

static int host_store(struct agent *a, const char *host, int port, struct crun_diag *d)
{
	struct store_server_opts so = {0};
	char listen[300], prefix[STORE_TCPSTORE_MAX_PREFIX + 1];
	int rc;

	net_join_hostport(listen, sizeof(listen), host, port);
	so.listen = listen;
	so.token = a->sc.token;
	if (a->spec->no_agent_store) {
		so.tcpstore_refusal = a->spec->tls_ca != NULL || a->spec->tls_cert != NULL
					      ? "the store requires TLS, which TCPStore clients "
						"cannot speak"
					      : "the job runs with --no-agent-store";
	} else if (snprintf(prefix, sizeof(prefix), "%s" AGENT_STORE_SUFFIX,
			    a->spec->rdzv_id) < (int)sizeof(prefix)) {
		so.tcpstore_prefix = prefix;
	}
	so.tls_cert = a->spec->tls_cert;
	so.tls_key = a->spec->tls_key;
	so.tls_ca = a->spec->tls_ca;
	rc = store_server_thread_start(&so, &a->srv, d);
	if (rc < 0) {
		return rc;
	}
	net_join_hostport(a->endpoint, sizeof(a->endpoint), host, store_server_thread_port(a->srv));
	log_info("hosting the rendezvous store at %s", a->endpoint);
	if (so.tcpstore_prefix != NULL) {
		use_agent_store(a, host, store_server_thread_port(a->srv));
	}
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

/* Decide where the store is; host it in-process when this node is the one (docs/agent.md). */
int agent_setup_store(struct agent *a, struct crun_diag *d)
{
	const struct job_spec *spec = a->spec;
	struct crun_diag hd = {0};
	bool host_it;
	int rc, port;

	switch (spec->rdzv_kind) {
	case RDZV_KIND_FILE:
		snprintf(a->endpoint, sizeof(a->endpoint), "%s", spec->rdzv_endpoint);
		return 0;
	case RDZV_KIND_STATIC:
		if (spec->max_nodes <= 1) {
			/* Nobody else needs to find it: a private port (the workers' too). */
			return host_store(a, "127.0.0.1", 0, d);
		}
		/* The agent store sits on the master port, as torchrun 2.x's; without it, rank
		 * 0's own TCPStore takes that port and the store goes one port up. */
		port = spec->master_port;
		if (spec->no_agent_store) {
			if (spec->master_port + 1 > 65535) {
				return diag_set(d, CRUN_ECONFIG,
						"--master-port: %d leaves no port for the store "
						"(--no-agent-store puts it one port up)",
						spec->master_port);
			}
			port++;
		}
		if (spec->node_rank == 0) {
			rc = host_store(a, spec->master_addr, port, &hd);
			if (rc < 0) {
				return agent_store_port_taken(&a->sc, spec->master_addr, port,
							      rc, hd.msg, d);
			}
			agent_store_claim_node0(&a->sc, a->endpoint, a->hostname);
			return 0;
		}
		net_join_hostport(a->endpoint, sizeof(a->endpoint), spec->master_addr, port);
		if (!spec->no_agent_store) {
			/* Node 0 hosts the store that serves them: no need to ask. */
			use_agent_store(a, spec->master_addr, port);
		}
		return 0;
	case RDZV_KIND_C10D:
		if (spec->standalone || spec->rdzv_port == 0) {
			return host_store(a, spec->rdzv_host, spec->rdzv_port, d);
		}
		/* One of this host's addresses, or any loopback address: the first agent here
		 * that binds it hosts the store, the others find it taken and join it. */
		host_it = spec->is_host == 1 ||
			  (spec->is_host == -1 &&
			   (net_addr_is_local(spec->rdzv_host) || is_loopback(spec->rdzv_host)));
		if (host_it) {
			rc = host_store(a, spec->rdzv_host, spec->rdzv_port, &hd);
			if (rc == 0) {
				return 0;
			}
			if (spec->is_host == 1 || rc != UV_EADDRINUSE) {
				return diag_set(d, rc, "%s", hd.msg);
			}
			/* Another agent on this machine (or crun-rdzvd) already hosts it. */
			log_info("store %s is already served here; joining it as a client",
				 spec->rdzv_endpoint);
		}
		net_join_hostport(a->endpoint, sizeof(a->endpoint), spec->rdzv_host, spec->rdzv_port);
		if (!host_it) {
			log_info("joining the rendezvous store at %s (hosted by another node)",
				 a->endpoint);
		}
		/* An agent's store serves the workers; crun-rdzvd does with --tcpstore-run. */
		if (!spec->no_agent_store && agent_store_serves(spec->rdzv_host, spec->rdzv_port)) {
			use_agent_store(a, spec->rdzv_host, spec->rdzv_port);
		}
		return 0;
	case RDZV_KIND_ETCD:
		/* etcd is the store, replicated: no agent hosts one. */
		snprintf(a->endpoint, sizeof(a->endpoint), "%s", spec->rdzv_endpoint);
		log_info("rendezvous through etcd at %s, keys under the prefix %s", a->endpoint,
			 a->prefix);
		return 0;
	default:
		return diag_set(d, CRUN_ECONFIG, "--rdzv-backend: unknown backend %d",
				(int)spec->rdzv_kind);
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
