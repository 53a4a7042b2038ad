/* SPDX-License-Identifier: MIT */
/* agent/agent_store.h: does a store serve PyTorch TCPStore clients? (the agent store) */
#ifndef CRUN_AGENT_AGENT_STORE_H
#define CRUN_AGENT_AGENT_STORE_H

/**
 * Ask the store at @host:@port, as a PyTorch 2.x TCPStore client would (VALIDATE, then PING),
 * whether it serves TCPStore clients: 1 yes, 0 no (it closed the connection or answered
 * otherwise), or a negative errno when it could not be reached within @timeout_ms.
 */
int agent_store_probe(const char *host, int port, int timeout_ms);

#endif
