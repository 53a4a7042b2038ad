/* SPDX-License-Identifier: MIT */
/* agent/agent_store.h: does a store serve PyTorch TCPStore clients? (the agent store) */
#ifndef CRUN_AGENT_AGENT_STORE_H
#define CRUN_AGENT_AGENT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "src/common/diag.h"

#define AGENT_STORE_PROBE_MS 3000

/**
 * Ask the store at @host:@port, as a PyTorch 2.x TCPStore client would (VALIDATE, then PING),
 * whether it serves TCPStore clients: 1 yes, 0 no (it closed the connection or answered
 * otherwise), or a negative errno when it could not be reached within @timeout_ms.
 */
int agent_store_probe(const char *host, int port, int timeout_ms);

/** agent_store_probe() for AGENT_STORE_PROBE_MS; logs why when the answer is no. */
bool agent_store_serves(const char *host, int port);

struct store_conf;

/**
 * Static mode, node rank 0, once its store is up at @endpoint: record "host @hostname" in it,
 * so that a second node rank 0 can name this one. @sc (borrowed) is the agent's store
 * configuration: its credential and TLS files reach the store as the agent's own do.
 */
void agent_store_claim_node0(const struct store_conf *sc, const char *endpoint,
			     const char *hostname);

/**
 * Static mode, node rank 0 could not host the store on @host:@port (@rc, @msg). When the
 * port is in use and a crun store answers there, another node claimed rank 0: say so (with
 * its host, from agent_store_claim_node0()), else name the port's other user. Returns the
 * code set in @d.
 */
int agent_store_port_taken(const struct store_conf *sc, const char *host, int port, int rc,
			   const char *msg, struct crun_diag *d);

/**
 * The job is over for every node and this node was a member of its last round (@members
 * nodes; @left_rc: what the wait for the others to leave said): where the store outlives its
 * agents (etcd), the last member deletes the job's keys (store_forget_job()). Each request
 * takes at most @timeout_ms; a failure is logged with the command that deletes them by hand.
 */
void agent_store_forget(const struct store_conf *sc, int members, int left_rc,
			int64_t timeout_ms);

/**
 * Before this node spawns round @round's workers, when they meet through the agent store:
 * raise run @run's TCPStore generation (rdzv_key_tcpstore_gen()) to @round, never lower it,
 * so that the store gives them a key space of their own (rendezvous/store/server_tcpstore.c).
 * With @round < 0, set it to "end": the job is over, the store closes its TCPStore clients.
 * Each request takes at most @timeout_ms (0: @sc's). Returns 0, or a negative code with @d
 * saying what failed.
 */
int agent_store_generation(const struct store_conf *sc, const char *run, int round,
			   int timeout_ms, struct crun_diag *d);

#endif
