/* SPDX-License-Identifier: MIT */
/* src/slurm.c: a Slurm job step as crun sees it: SLURM_* variables, hostlists, node addresses. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/parse.h"
#include "src/common/run.h"
#include "src/slurm.h"

#define SCONTROL_OUTPUT_MAX (256 * 1024) /* `scontrol -o show node` is ~700 bytes a node */

/* ---- hostlists ---- */

struct walk {
	size_t want; /* the index asked for; SIZE_MAX: count them all */
	size_t seen;
	char *out;
	size_t len;
};

/* One name is complete in @buf (@pos bytes): 1 when it is the one wanted, else 0. */
static int emit(struct walk *w, const char *buf, size_t pos)
{
	if (pos == 0) {
		return -EINVAL;
	}
	if (w->seen >= SLURM_HOSTLIST_MAX) {
		return -E2BIG;
	}
	if (w->seen++ != w->want) {
		return 0;
	}
	if (pos >= w->len) {
		return -ENAMETOOLONG;
	}
	memcpy(w->out, buf, pos);
	w->out[pos] = '\0';
	return 1;
}

static bool all_digits(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return n > 0 && n <= 18;
}

/*
 * Expand the name @s (@n bytes, no top-level comma) after the @pos bytes already in @buf:
 * the text up to the first bracket group, then each number of the group followed by the
 * expansion of the rest. Returns 1 (found, stop), 0 (go on) or a negative code.
 */
static int expand(const char *s, size_t n, char *buf, size_t pos, size_t cap, struct walk *w)
{
	const char *open = memchr(s, '[', n), *close, *item, *end, *dash;
	unsigned long long lo, hi, v;
	size_t pre = open != NULL ? (size_t)(open - s) : n, ilen;
	int width, rc;

	if (memchr(s, ']', pre) != NULL) {
		return -EINVAL;
	}
	if (pos + pre >= cap) {
		return -ENAMETOOLONG;
	}
	memcpy(buf + pos, s, pre);
	pos += pre;
	if (open == NULL) {
		return emit(w, buf, pos);
	}
	close = memchr(open, ']', n - pre);
	if (close == NULL || close == open + 1 ||
	    memchr(open + 1, '[', (size_t)(close - open - 1))) {
		return -EINVAL;
	}
	for (item = open + 1; item < close; item = end + 1) {
		end = memchr(item, ',', (size_t)(close - item));
		if (end == NULL) {
			end = close;
		}
		ilen = (size_t)(end - item);
		dash = memchr(item, '-', ilen);
		if (dash == NULL) {
			dash = end;
		}
		if (!all_digits(item, (size_t)(dash - item)) ||
		    (dash != end && !all_digits(dash + 1, (size_t)(end - dash - 1)))) {
			return -EINVAL;
		}
		lo = strtoull(item, NULL, 10);
		hi = dash != end ? strtoull(dash + 1, NULL, 10) : lo;
		if (hi < lo) {
			return -EINVAL;
		}
		width = (int)(dash - item);
		for (v = lo; v <= hi; v++) {
			int k = snprintf(buf + pos, cap - pos, "%0*llu", width, v);

			if (k < 0 || (size_t)k >= cap - pos) {
				return -ENAMETOOLONG;
			}
			rc = expand(close + 1, n - (size_t)(close + 1 - s), buf, pos + (size_t)k,
				    cap, w);
			if (rc != 0) {
				return rc;
			}
		}
	}
	return 0;
}

/* Every comma-separated name of @list in order. 1 (found), 0 (all seen) or a negative code. */
static int walk_list(const char *list, struct walk *w)
{
	char buf[SLURM_NAME_MAX];
	const char *s = list, *q;
	int depth, rc;

	for (;;) {
		depth = 0;
		for (q = s; *q != '\0' && (*q != ',' || depth > 0); q++) {
			depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
			if (depth < 0 || depth > 1) {
				return -EINVAL;
			}
		}
		if (depth != 0 || q == s) {
			return -EINVAL;
		}
		rc = expand(s, (size_t)(q - s), buf, 0, sizeof(buf), w);
		if (rc != 0) {
			return rc;
		}
		if (*q == '\0') {
			return 0;
		}
		s = q + 1;
	}
}

int slurm_hostlist_nth(const char *list, size_t idx, char *out, size_t len)
{
	struct walk w = {.want = idx, .out = out, .len = len};
	int rc;

	if (idx == SIZE_MAX) {
		return -ENOENT;
	}
	rc = walk_list(list, &w);
	return rc == 1 ? 0 : rc == 0 ? -ENOENT : rc;
}

long slurm_hostlist_count(const char *list)
{
	struct walk w = {.want = SIZE_MAX};
	int rc;

	rc = walk_list(list, &w);
	return rc < 0 ? rc : (long)w.seen;
}

/* ---- the step ---- */

static const char *env2(const char *a, const char *b, const char **which)
{
	const char *v = getenv(a);

	*which = a;
	if (v == NULL && b != NULL) {
		v = getenv(b);
		*which = b;
	}
	return v;
}

bool slurm_in_step(void)
{
	const char *which;

	return env2("SLURM_JOB_ID", "SLURM_JOBID", &which) != NULL &&
	       env2("SLURM_STEP_ID", "SLURM_STEPID", &which) != NULL;
}

/* An optional count: 0 when unset. */
static int env_count(const char *name, int max, int *out, struct crun_diag *d)
{
	const char *v = getenv(name);

	*out = 0;
	if (v == NULL || *v == '\0') {
		return 0;
	}
	if (parse_int(v, 0, max, out) < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: expected a count 0..%d, got \"%.40s\"", name,
				max, v);
	}
	return 0;
}

static int copy_id(char *dst, size_t len, const char *name, const char *v, struct crun_diag *d)
{
	size_t i, n = strlen(v);

	if (n == 0 || n >= len) {
		return diag_set(d, CRUN_ECONFIG, "%s: expected a job or step id, got \"%.40s\"",
				name, v);
	}
	for (i = 0; i < n; i++) {
		if (!isalnum((unsigned char)v[i]) && v[i] != '_' && v[i] != '+') {
			return diag_set(d, CRUN_ECONFIG,
					"%s: expected a job or step id, got \"%.40s\"", name, v);
		}
	}
	memcpy(dst, v, n + 1);
	return 0;
}

int slurm_step_read(struct slurm_step *s, struct crun_diag *d)
{
	const char *v, *which, *list;
	long count;
	int rc;

	memset(s, 0, sizeof(*s));
	v = env2("SLURM_JOB_ID", "SLURM_JOBID", &which);
	if (v == NULL) {
		return diag_set(d, CRUN_ECONFIG,
				"not inside a Slurm job (SLURM_JOB_ID is not set): run crun "
				"with srun inside an allocation");
	}
	if ((rc = copy_id(s->job_id, sizeof(s->job_id), which, v, d)) < 0) {
		return rc;
	}
	v = env2("SLURM_STEP_ID", "SLURM_STEPID", &which);
	if (v == NULL) {
		return diag_set(d, CRUN_ECONFIG,
				"job %s: not inside a job step (SLURM_STEP_ID is not set; a batch "
				"script is not one): start crun with srun --ntasks-per-node=1",
				s->job_id);
	}
	if ((rc = copy_id(s->step_id, sizeof(s->step_id), which, v, d)) < 0) {
		return rc;
	}
	v = env2("SLURM_STEP_NUM_NODES", "SLURM_NNODES", &s->nnodes_var);
	if (v == NULL || parse_int(v, 1, SLURM_HOSTLIST_MAX, &s->nnodes) < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: expected a node count, got %s%.40s%s",
				s->nnodes_var, v ? "\"" : "", v ? v : "nothing", v ? "\"" : "");
	}
	v = getenv("SLURM_NODEID");
	if (v == NULL || parse_int(v, 0, s->nnodes - 1, &s->node_id) < 0) {
		return diag_set(d, CRUN_ECONFIG,
				"SLURM_NODEID: expected a node index 0..%d, got %s%.40s%s",
				s->nnodes - 1, v ? "\"" : "", v ? v : "nothing", v ? "\"" : "");
	}
	if ((rc = env_count(getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
							   : "SLURM_NTASKS",
			    SLURM_HOSTLIST_MAX * 64, &s->ntasks, d)) < 0 ||
	    (rc = env_count("SLURM_LOCALID", 1 << 20, &s->local_id, d)) < 0 ||
	    (rc = env_count("SLURM_GPUS_ON_NODE", 4096, &s->gpus_on_node, d)) < 0 ||
	    (rc = env_count("SLURM_CPUS_ON_NODE", 1 << 20, &s->cpus_on_node, d)) < 0) {
		return rc;
	}
	list = env2("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", &which);
	if (list == NULL) {
		list = env2("SLURM_NODELIST", NULL, &which);
	}
	if (list == NULL) {
		return diag_set(d, CRUN_ECONFIG,
				"SLURM_STEP_NODELIST: not set (nor SLURM_JOB_NODELIST)");
	}
	count = slurm_hostlist_count(list);
	if (count < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: not a hostlist: \"%.60s\": %s", which, list,
				crun_strerror((int)count));
	}
	if (strcmp(which, "SLURM_STEP_NODELIST") == 0 && count != s->nnodes) {
		return diag_set(d, CRUN_ECONFIG, "%s names %ld nodes, but %s is %d", which, count,
				s->nnodes_var, s->nnodes);
	}
	rc = slurm_hostlist_nth(list, 0, s->first_node, sizeof(s->first_node));
	if (rc == 0) {
		v = getenv("SLURMD_NODENAME");
		if (v != NULL && *v != '\0' && strlen(v) < sizeof(s->this_node)) {
			memcpy(s->this_node, v, strlen(v) + 1);
		} else {
			rc = slurm_hostlist_nth(list, (size_t)s->node_id, s->this_node,
						sizeof(s->this_node));
		}
	}
	if (rc < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: \"%.60s\": %s", which, list,
				crun_strerror(rc));
	}
	return 0;
}

/* ---- node records ---- */

int slurm_parse_node_addr(const char *text, const char *name, char *out, size_t len)
{
	const char *line, *eol, *q, *tok;
	size_t nlen = strlen(name), tlen;

	for (line = text; *line != '\0'; line = *eol != '\0' ? eol + 1 : eol) {
		eol = strchr(line, '\n');
		if (eol == NULL) {
			eol = line + strlen(line);
		}
		while (line < eol && isspace((unsigned char)*line)) {
			line++;
		}
		if ((size_t)(eol - line) < 9 + nlen || strncmp(line, "NodeName=", 9) != 0 ||
		    strncmp(line + 9, name, nlen) != 0 ||
		    (line + 9 + nlen < eol && !isspace((unsigned char)line[9 + nlen]))) {
			continue;
		}
		for (q = line; q < eol;) {
			while (q < eol && isspace((unsigned char)*q)) {
				q++;
			}
			tok = q;
			while (q < eol && !isspace((unsigned char)*q)) {
				q++;
			}
			tlen = (size_t)(q - tok);
			if (tlen > 9 && strncmp(tok, "NodeAddr=", 9) == 0) {
				if (tlen - 9 >= len) {
					return -ENAMETOOLONG;
				}
				memcpy(out, tok + 9, tlen - 9);
				out[tlen - 9] = '\0';
				return 0;
			}
		}
		return -ENOENT;
	}
	return -ENOENT;
}

/* The first line of @s, for a message. */
static int first_line_len(const char *s)
{
	size_t n = strcspn(s, "\n");

	return (int)(n > 160 ? 160 : n);
}

int slurm_node_addrs(const char *a, const char *b, char *addr_a, char *addr_b, int timeout_ms,
		     struct crun_diag *d)
{
	char names[2 * SLURM_NAME_MAX + 2];
	char a0[] = "scontrol", a1[] = "-o", a2[] = "show", a3[] = "node";
	char *argv[] = {a0, a1, a2, a3, names, NULL};
	const char *want[2] = {a, b};
	char *addr[2] = {addr_a, addr_b};
	char *out;
	int rc, status = 0, i;

	snprintf(names, sizeof(names), "%s%s%s", a ? a : "", a && b && strcmp(a, b) ? "," : "",
		 b && (!a || strcmp(a, b)) ? b : "");
	if (names[0] == '\0') {
		return 0;
	}
	out = malloc(SCONTROL_OUTPUT_MAX);
	if (out == NULL) {
		return diag_set(d, -ENOMEM, "scontrol: out of memory");
	}
	rc = crun_run_capture(argv, out, SCONTROL_OUTPUT_MAX, timeout_ms, &status);
	if (rc == -ENOENT) {
		diag_set(d, rc,
			 "scontrol: not found on PATH (the Slurm backend reads node "
			 "addresses with Slurm's scontrol)");
		goto out;
	}
	if (rc == -ETIMEDOUT) {
		diag_set(d, rc, "scontrol -o show node %s: no answer within %d s", names,
			 timeout_ms / 1000);
		goto out;
	}
	if (rc < 0) {
		diag_set(d, rc, "scontrol -o show node %s: %s", names, crun_strerror(rc));
		goto out;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		rc = diag_set(d, CRUN_ECONFIG, "scontrol -o show node %s: exit %d: %.*s", names,
			      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
			      first_line_len(out), out);
		goto out;
	}
	for (i = 0; i < 2; i++) {
		if (want[i] == NULL) {
			continue;
		}
		rc = slurm_parse_node_addr(out, want[i], addr[i], SLURM_NAME_MAX);
		if (rc < 0) {
			diag_set(d, CRUN_ECONFIG,
				 "scontrol -o show node %s: no NodeAddr= for node %s in \"%.*s\"",
				 names, want[i], first_line_len(out), out);
			rc = CRUN_ECONFIG;
			goto out;
		}
	}
	rc = 0;
out:
	free(out);
	return rc;
}

int slurm_default_port(const char *job_id, const char *step_id)
{
	unsigned long long job = 0, step = 0;
	const char *q;

	/* Decimal ids as Slurm gives them; anything else (a test's, a future format) hashed. */
	for (q = job_id; *q != '\0'; q++) {
		job = isdigit((unsigned char)*q) ? job * 10 + (unsigned)(*q - '0')
						 : job * 31 + (unsigned char)*q;
	}
	for (q = step_id; *q != '\0'; q++) {
		step = isdigit((unsigned char)*q) ? step * 10 + (unsigned)(*q - '0')
						  : step * 31 + (unsigned char)*q;
	}
	return 29500 + (int)(2 * ((8 * job + step) % 1000));
}
