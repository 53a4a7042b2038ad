/* SPDX-License-Identifier: MIT */
/* agent/agent_store.h: does a store serve PyTorch TCPStore clients? (the agent store) */
#ifndef CRUN_AGENT_AGENT_STORE_H
#define CRUN_AGENT_AGENT_STORE_H

#include <stdbool.h>

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

/**
 * Static mode, node rank 0, once its store is up at @endpoint: record "host @hostname" in it,
 * so that a second node rank 0 can name this one.
 */
void agent_store_claim_node0(const char *endpoint, const char *token, const char *hostname);

/**
 * Static mode, node rank 0 could not host the store on @host:@port (@rc, @msg). When the
 * port is in use and a crun store answers there, another node claimed rank 0: say so (with
 * its host, from agent_store_claim_node0()), else name the port's other user. Returns the
 * code set in @d.
 */
int agent_store_port_taken(const char *host, int port, const char *token, int rc,
			   const char *msg, struct crun_diag *d);

#endif
