/* SPDX-License-Identifier: MIT */
/* src/crun.c: the crun command: parse the command line, then run the node agent. */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/jobspec.h"
#include "agent/spawn.h"
#include "rendezvous/log.h"
#include "src/cli.h"

int main(int argc, char **argv)
{
	struct job_spec spec;
	int rc;

	/* A worker's pre-exec step (agent/spawn.c): never parsed as a command line. */
	if (argc > 1 && strcmp(argv[1], SPAWN_SHIM_FLAG) == 0) {
		return spawn_shim_main(argc, argv);
	}
	log_set_ident("crun");
	rc = cli_parse(argc, argv, &spec);
	if (rc != CLI_OK) {
		jobspec_finish(&spec);
		return rc == CLI_EXIT ? 0 : 2;
	}
	rc = agent_run(&spec);
	jobspec_finish(&spec);
	return rc;
}
