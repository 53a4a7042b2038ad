/* SPDX-License-Identifier: MIT */
/* src/crun.c: the crun command: parse the command line, then run the node agent. */
#include <stdio.h>

#include "agent/agent.h"
#include "agent/jobspec.h"
#include "src/common/log.h"
#include "src/cli.h"

int main(int argc, char **argv)
{
	struct job_spec spec;
	int rc;

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
