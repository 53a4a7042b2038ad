/* SPDX-License-Identifier: MIT */
/* src/cli_slurm.c: --rdzv-backend slurm: the job shape and addresses of a Slurm job step. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "src/cli.h"
#include "src/cli_parser.h"
#include "src/common/log.h"
#include "src/common/parse.h"
#include "src/slurm.h"

#define SCONTROL_TIMEOUT_MS 30000

/*
 * A Slurm step is a static rendezvous whose every value Slurm already knows: node rank
 * SLURM_NODEID, node count SLURM_STEP_NUM_NODES, the master (and crun's store) on node 0 of
 * SLURM_STEP_NODELIST at the address of its node record, run id JOB.STEP. They are handed to
 * the usual checks as if given in the environment, named by the variable they came from, so
 * every later message says where a value came from; what the user typed wins, except a
 * node rank or node count that contradicts Slurm's.
 *
 * The values must outlive cli_parse_diag(): one parse at a time, as for getenv().
 */
static struct {
	char nnodes[16], node_rank[16], run_id[80], port[16], nproc[16];
	char master[SLURM_NAME_MAX], local[SLURM_NAME_MAX];
	char master_origin[64], local_origin[64];
} vals;

static void put(struct cli_parser *p, enum cli_opt_id id, const char *origin, const char *val)
{
	struct opt_val *v = &p->v[id];

	snprintf(v->origin, sizeof(v->origin), "%s", origin);
	v->val = val;
	v->set = true;
}

static bool typed(const struct cli_parser *p, enum cli_opt_id id)
{
	return p->v[id].set && strncmp(p->v[id].origin, "PET_", 4) != 0;
}

/* Whether the command line says how to rendezvous: then a Slurm step is not looked for. */
static bool rdzv_given(const struct cli_parser *p)
{
	static const enum cli_opt_id ids[] = {O_RDZV_BACKEND, O_RDZV_ENDPOINT, O_RDZV_ID,
					      O_MASTER_ADDR,  O_MASTER_PORT,   O_NODE_RANK,
					      O_STANDALONE};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(ids); i++) {
		if (p->v[ids[i]].set) {
			return true;
		}
	}
	return false;
}

int cli_slurm_setup(struct cli_parser *p)
{
	struct slurm_step st;
	struct crun_diag sd = {0};
	const char *why;
	bool asked;
	int n;

	asked = p->v[O_RDZV_BACKEND].set && strcmp(p->v[O_RDZV_BACKEND].val, "slurm") == 0;
	if (!asked && (rdzv_given(p) || !slurm_in_step())) {
		return 0;
	}
	/* Short: cli_fail() keeps 199 bytes, and Slurm's part of the message comes after. */
	why = asked ? "--rdzv-backend slurm" : "in a Slurm step (SLURM_STEP_ID is set)";
	if (slurm_step_read(&st, &sd) < 0) {
		return cli_fail(p, O_COUNT, "%s: %s", why, sd.msg);
	}
	if (st.local_id > 0 || st.ntasks > st.nnodes) {
		return cli_fail(p, O_COUNT,
				"%s: %d tasks on %d node%s, but crun is one agent per node that "
				"starts the workers itself: srun --ntasks-per-node=1 crun ...",
				why, st.ntasks, st.nnodes, st.nnodes == 1 ? "" : "s");
	}
	if (asked && p->v[O_STANDALONE].set) {
		return cli_fail(p, O_STANDALONE, "cannot be combined with --rdzv-backend slurm");
	}
	if (typed(p, O_NODE_RANK)) {
		return cli_fail(p, O_NODE_RANK, "Slurm sets the node rank (SLURM_NODEID=%d)",
				st.node_id);
	}
	if (typed(p, O_NNODES) &&
	    (parse_int(p->v[O_NNODES].val, 1, SLURM_HOSTLIST_MAX, &n) < 0 || n != st.nnodes)) {
		return cli_fail(p, O_NNODES, "the Slurm step has %d nodes (%s); leave it out",
				st.nnodes, st.nnodes_var);
	}

	if (!asked) {
		put(p, O_RDZV_BACKEND, "SLURM_STEP_ID", "slurm");
	}
	snprintf(vals.nnodes, sizeof(vals.nnodes), "%d", st.nnodes);
	put(p, O_NNODES, st.nnodes_var, vals.nnodes);
	snprintf(vals.node_rank, sizeof(vals.node_rank), "%d", st.node_id);
	put(p, O_NODE_RANK, "SLURM_NODEID", vals.node_rank);
	if (!p->v[O_RDZV_ID].set) {
		snprintf(vals.run_id, sizeof(vals.run_id), "%s.%s", st.job_id, st.step_id);
		put(p, O_RDZV_ID, "SLURM_JOB_ID.SLURM_STEP_ID", vals.run_id);
	}
	if (!p->v[O_MASTER_PORT].set) {
		snprintf(vals.port, sizeof(vals.port), "%d",
			 slurm_default_port(st.job_id, st.step_id));
		put(p, O_MASTER_PORT, "SLURM_JOB_ID", vals.port);
	}
	if (!p->v[O_NPROC].set && (st.gpus_on_node > 0 || st.cpus_on_node > 0)) {
		snprintf(vals.nproc, sizeof(vals.nproc), "%d",
			 st.gpus_on_node > 0 ? st.gpus_on_node : st.cpus_on_node);
		put(p, O_NPROC, st.gpus_on_node > 0 ? "SLURM_GPUS_ON_NODE" : "SLURM_CPUS_ON_NODE",
		    vals.nproc);
	}
	/* Addresses from Slurm's node records (NodeAddr=), not from resolving node names. */
	if (st.nnodes > 1) {
		bool master = !p->v[O_MASTER_ADDR].set && !p->v[O_RDZV_ENDPOINT].set;
		bool local = !p->v[O_LOCAL_ADDR].set;

		if ((master || local) &&
		    slurm_node_addrs(master ? st.first_node : NULL, local ? st.this_node : NULL,
				     vals.master, vals.local, SCONTROL_TIMEOUT_MS, &sd) < 0) {
			return cli_fail(p, O_COUNT, "%s: %s", why, sd.msg);
		}
		if (master) {
			snprintf(vals.master_origin, sizeof(vals.master_origin),
				 "NodeAddr of %.50s", st.first_node);
			put(p, O_MASTER_ADDR, vals.master_origin, vals.master);
		}
		if (local) {
			snprintf(vals.local_origin, sizeof(vals.local_origin), "NodeAddr of %.50s",
				 st.this_node);
			put(p, O_LOCAL_ADDR, vals.local_origin, vals.local);
		}
	}
	log_info("rendezvous from Slurm (%s): job %s step %s, node rank %d of %d on %s%s%s%s, "
		 "node 0 %s%s%s%s, run id %s",
		 asked ? "--rdzv-backend slurm"
		       : "detected: SLURM_JOB_ID and SLURM_STEP_ID are set",
		 st.job_id, st.step_id, st.node_id, st.nnodes, st.this_node,
		 p->v[O_LOCAL_ADDR].set ? " (" : "",
		 p->v[O_LOCAL_ADDR].set ? p->v[O_LOCAL_ADDR].val : "",
		 p->v[O_LOCAL_ADDR].set ? ")" : "", st.first_node,
		 p->v[O_MASTER_ADDR].set ? " (" : "",
		 p->v[O_MASTER_ADDR].set ? p->v[O_MASTER_ADDR].val : "",
		 p->v[O_MASTER_ADDR].set ? ")" : "", p->v[O_RDZV_ID].val);
	return 0;
}
