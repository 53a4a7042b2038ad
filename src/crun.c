/* SPDX-License-Identifier: MIT */
/* src/crun.c: the crun command: `crun status`, or parse the command line and run the agent. */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/jobspec.h"
#include "src/common/log.h"
#include "src/cli.h"
#include "src/status.h"

int main(int argc, char **argv)
{
	struct job_spec spec;
	int rc;

	log_set_ident("crun");
	/* Subcommands; anything else is the node agent's command line (a program named "status"
	 * runs as ./status or with --no-python and a path). */
	if (argc > 1 && strcmp(argv[1], "status") == 0) {
		return status_main(argc - 1, argv + 1);
	}
	rc = cli_parse(argc, argv, &spec);
	if (rc != CLI_OK) {
		jobspec_finish(&spec);
		return rc == CLI_EXIT ? 0 : 2;
	}
	rc = agent_run(&spec);
	jobspec_finish(&spec);
	return rc;
}
