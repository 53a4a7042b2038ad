/* SPDX-License-Identifier: MIT */
/* agent/agent.h: the node agent: rendezvous, run the worker group, restart, report. */
#ifndef CRUN_AGENT_AGENT_H
#define CRUN_AGENT_AGENT_H

#include "agent/jobspec.h"

/**
 * Run the job described by @spec (borrowed; parsed and validated by the command line) on this
 * node until it succeeds, fails for good, or a signal stops it. Returns crun's exit status:
 * 0; the first failed worker's exit code (128+signal when a signal killed it); 1 for a
 * rendezvous, store or infrastructure failure; 128+signal when the agent itself was signalled.
 * Call with no other thread running (it forks the process-group guard first).
 */
int agent_run(const struct job_spec *spec);

#endif
