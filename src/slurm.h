/* SPDX-License-Identifier: MIT */
/* src/slurm.h: a Slurm job step as crun sees it: SLURM_* variables, hostlists, node addresses. */
#ifndef CRUN_SRC_SLURM_H
#define CRUN_SRC_SLURM_H

#include <stdbool.h>
#include <stddef.h>

#include "src/common/diag.h"

#define SLURM_NAME_MAX 256        /* a node name or address, with its NUL */
#define SLURM_HOSTLIST_MAX 1000000 /* names one hostlist may expand to: a typo beyond */

/*
 * Hostlists are Slurm's compressed node lists: names separated by commas, each with any number
 * of bracketed groups of numbers and ranges, "n[01-04,7]", "rack[1-2]-gpu[1-8]", "login".
 * A range keeps the zero padding of its first number ("n[08-10]": n08 n09 n10). Text after
 * the last group ("b[1-2]-ib") is accepted too, which Slurm 22.05's own parser refuses.
 */

/**
 * The @idx-th name (from 0) of @list (borrowed) into @out. Returns 0, -ENOENT when the list
 * has no more than @idx names, -EINVAL when it is not a hostlist (unbalanced or nested
 * brackets, a range that runs backwards, an empty name) or -ENAMETOOLONG.
 */
int slurm_hostlist_nth(const char *list, size_t idx, char *out, size_t len);
/** How many names @list expands to, or -EINVAL / -E2BIG (more than SLURM_HOSTLIST_MAX). */
long slurm_hostlist_count(const char *list);

/** Whether this process runs in a Slurm job step (srun): SLURM_JOB_ID and SLURM_STEP_ID. */
bool slurm_in_step(void);

/* What crun needs from the step, read from the SLURM_* variables slurmstepd sets. */
struct slurm_step {
	char job_id[32], step_id[32]; /* SLURM_JOB_ID, SLURM_STEP_ID (or SLURM_STEPID) */
	int nnodes;                   /* SLURM_STEP_NUM_NODES, else SLURM_NNODES */
	const char *nnodes_var;       /* which of the two it was */
	int node_id;                  /* SLURM_NODEID: this node's index in the step's list */
	int ntasks;                   /* SLURM_STEP_NUM_TASKS (else SLURM_NTASKS); 0 unknown */
	int local_id;                 /* SLURM_LOCALID: 0 for the first task on a node */
	int gpus_on_node;             /* SLURM_GPUS_ON_NODE; 0 when unset */
	int cpus_on_node;             /* SLURM_CPUS_ON_NODE; 0 when unset */
	char first_node[SLURM_NAME_MAX]; /* node 0 of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) */
	char this_node[SLURM_NAME_MAX];  /* SLURMD_NODENAME, else entry node_id of the list */
};

/**
 * Fill @s from the environment. Returns 0, or CRUN_ECONFIG with "what is missing or wrong"
 * in @d (e.g. "not inside a Slurm job step (SLURM_STEP_ID is not set): start crun with srun").
 */
int slurm_step_read(struct slurm_step *s, struct crun_diag *d);

/**
 * The NodeAddr= of node @name in `scontrol -o show node` output @text (borrowed), into @out.
 * Returns 0, or -ENOENT when @text has no record for @name or the record has no NodeAddr.
 */
int slurm_parse_node_addr(const char *text, const char *name, char *out, size_t len);

/**
 * Ask Slurm for the addresses of nodes @a and @b (either may be NULL): one `scontrol -o show
 * node A,B` (the scontrol first on PATH, at most @timeout_ms), NodeAddr= of each record into
 * @addr_a / @addr_b (SLURM_NAME_MAX bytes each). Returns 0, or a negative code with "scontrol
 * show node A,B: why" in @d.
 */
int slurm_node_addrs(const char *a, const char *b, char *addr_a, char *addr_b, int timeout_ms,
		     struct crun_diag *d);

/**
 * The rendezvous port of job @job_id step @step_id when the user gives none: 29500 +
 * 2 * ((8 * JOB + STEP) mod 1000), an even port in 29500..31498, so that steps running at once
 * on one first node rarely meet (crun's static store takes the port above).
 */
int slurm_default_port(const char *job_id, const char *step_id);

#endif
