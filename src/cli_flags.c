/* SPDX-License-Identifier: MIT */
/* src/cli_flags.c: the value of each crun option, checked and stored in the job spec. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/cli.h"
#include "src/cli_parser.h"
#include "src/common/net.h"
#include "src/common/parse.h"
#include "src/common/signames.h"
#include "src/common/util.h"
#include "src/gpu_count.h"
#include "src/opt_store.h"
#include "src/program.h"

#define NPROC_MAX 4096          /* a sanity bound: more local workers is surely a typo */
#define NNODES_MAX 1000000
#define SECONDS_MAX CLI_SECONDS_MAX
#define RANK_MAP_MAX 1024       /* local ranks addressable by --redirects/--tee maps */
#define RUN_ID_MAX 128
#define DEFAULT_C10D_PORT 29400

/* ---- values: a number, seconds, a boolean, a string ---- */

int cli_int_value(struct cli_parser *p, enum cli_opt_id id, long min, long max, int *out)
{
	char b[64];
	long v;
	int rc;

	rc = parse_long(p->v[id].val, min, max, &v);
	if (rc == -EINVAL) {
		return cli_fail(p, id, "expected an integer, got \"%s\"",
				opt_show(b, sizeof(b), p->v[id].val));
	}
	if (rc < 0) {
		return cli_fail(p, id, "%s is out of range %ld..%ld",
				opt_show(b, sizeof(b), p->v[id].val), min, max);
	}
	*out = (int)v;
	return 0;
}

/* Seconds as a decimal ("30", "0.5") into milliseconds. */
int cli_seconds_value(struct cli_parser *p, enum cli_opt_id id, int64_t *ms)
{
	char b[64];
	int rc;

	rc = parse_seconds_ms(p->v[id].val, SECONDS_MAX, ms);
	if (rc == -EINVAL) {
		return cli_fail(p, id, "expected seconds, got \"%s\"",
				opt_show(b, sizeof(b), p->v[id].val));
	}
	if (rc < 0) {
		return cli_fail(p, id, "%s seconds is out of range 0..%.0f",
				opt_show(b, sizeof(b), p->v[id].val), SECONDS_MAX);
	}
	return 0;
}

int cli_flag_value(struct cli_parser *p, enum cli_opt_id id, bool *out)
{
	char b[64];

	*out = false;
	if (!p->v[id].set) {
		return 0;
	}
	if (opt_parse_bool(p->v[id].val, out) < 0) {
		return cli_fail(p, id, "expected 0 or 1, got \"%s\"",
				opt_show(b, sizeof(b), p->v[id].val));
	}
	return 0;
}

/* A string flag: non-empty, no control characters (it ends up in env and log lines). */
int cli_text_value(struct cli_parser *p, enum cli_opt_id id, size_t maxlen, char **out)
{
	const char *s = p->v[id].val;
	char *copy;
	size_t i;

	if (*s == '\0') {
		return cli_fail(p, id, "empty value");
	}
	for (i = 0; s[i] != '\0'; i++) {
		if (iscntrl((unsigned char)s[i])) {
			return cli_fail(p, id, "control character in value");
		}
	}
	if (i > maxlen) {
		return cli_fail(p, id, "longer than %zu bytes", maxlen);
	}
	copy = strdup(s);
	if (copy == NULL) {
		return cli_oom(p);
	}
	free(*out);
	*out = copy;
	return 0;
}

/* ---- the flags, one by one ---- */

int cli_do_nnodes(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	const char *v = p->v[O_NNODES].val;
	const char *colon;
	char b[64], minb[32];
	long lo, hi;

	if (!p->v[O_NNODES].set) {
		return 0;
	}
	colon = strchr(v, ':');
	if (colon == NULL) {
		if (parse_long(v, 1, NNODES_MAX, &lo) < 0) {
			return cli_fail(p, O_NNODES,
					"expected N or MIN:MAX with 1 <= N <= %d, got \"%s\"",
					NNODES_MAX, opt_show(b, sizeof(b), v));
		}
		hi = lo;
	} else {
		if ((size_t)(colon - v) >= sizeof(minb)) {
			return cli_fail(p, O_NNODES, "expected N or MIN:MAX, got \"%s\"",
					opt_show(b, sizeof(b), v));
		}
		memcpy(minb, v, (size_t)(colon - v));
		minb[colon - v] = '\0';
		if (parse_long(minb, 1, NNODES_MAX, &lo) < 0 ||
		    parse_long(colon + 1, 1, NNODES_MAX, &hi) < 0) {
			return cli_fail(
				p, O_NNODES,
				"expected N or MIN:MAX with 1 <= MIN <= MAX <= %d, got \"%s\"",
				NNODES_MAX, opt_show(b, sizeof(b), v));
		}
		if (lo > hi) {
			return cli_fail(p, O_NNODES, "MIN %ld is above MAX %ld", lo, hi);
		}
	}
	s->min_nodes = (int)lo;
	s->max_nodes = (int)hi;
	return 0;
}

/* 0 when given, 1 when "gpu"/"cpu"/"auto" must still be counted (after the cheap checks). */
int cli_do_nproc(struct cli_parser *p, bool *count_later)
{
	char b[64];
	long n;
	int rc;

	*count_later = false;
	if (!p->v[O_NPROC].set) {
		return 0;
	}
	if (strcmp(p->v[O_NPROC].val, "gpu") == 0 || strcmp(p->v[O_NPROC].val, "cpu") == 0 ||
	    strcmp(p->v[O_NPROC].val, "auto") == 0) {
		*count_later = true;
		return 0;
	}
	rc = parse_long(p->v[O_NPROC].val, 1, NPROC_MAX, &n);
	if (rc == -EINVAL) {
		return cli_fail(p, O_NPROC, "expected a count, gpu, cpu or auto, got \"%s\"",
				opt_show(b, sizeof(b), p->v[O_NPROC].val));
	}
	if (rc < 0) {
		return cli_fail(p, O_NPROC, "%s is out of range 1..%d",
				opt_show(b, sizeof(b), p->v[O_NPROC].val), NPROC_MAX);
	}
	p->spec->nproc_per_node = (int)n;
	return 0;
}

int cli_count_nproc(struct cli_parser *p)
{
	const char *v = p->v[O_NPROC].val;
	struct crun_diag gd = {0};
	long cpus;
	int gpus = 0;

	if (strcmp(v, "gpu") == 0 || strcmp(v, "auto") == 0) {
		gpus = gpu_count(&gd);
		if (gpus > 0) {
			p->spec->nproc_per_node = gpus > NPROC_MAX ? NPROC_MAX : gpus;
			p->spec->nproc_is_gpu = true;
			return 0;
		}
		if (strcmp(v, "gpu") == 0) {
			return cli_fail(p, O_NPROC, "gpu: %s", gd.msg);
		}
	}
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus < 1) {
		cpus = 1;
	}
	p->spec->nproc_per_node = cpus > NPROC_MAX ? NPROC_MAX : (int)cpus;
	return 0;
}

int cli_do_backend(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	const char *v = p->v[O_RDZV_BACKEND].val;
	char b[64];

	if (!p->v[O_RDZV_BACKEND].set) {
		return 0;
	}
	if (strcmp(v, "c10d") == 0 || strcmp(v, "tcp") == 0) {
		s->rdzv_kind = RDZV_KIND_C10D;
	} else if (strcmp(v, "static") == 0) {
		s->rdzv_kind = RDZV_KIND_STATIC;
	} else if (strcmp(v, "file") == 0) {
		s->rdzv_kind = RDZV_KIND_FILE;
	} else if (strcmp(v, "etcd") == 0) {
		s->rdzv_kind = RDZV_KIND_ETCD;
	} else if (strcmp(v, "slurm") == 0) {
		/* A static rendezvous filled in from the Slurm step (cli_slurm.c). */
		s->rdzv_kind = RDZV_KIND_STATIC;
	} else if (strcmp(v, "etcd-v2") == 0) {
		/* torchrun's name for its v2-API backend; etcd 3.4+ serves v3, and 3.6 only v3. */
		s->rdzv_kind = RDZV_KIND_ETCD;
		s->etcd_v2_name = true;
	} else {
		return cli_fail(p, O_RDZV_BACKEND,
				"unknown backend \"%s\" (use c10d, tcp, static, file, etcd or "
				"slurm)",
				opt_show(b, sizeof(b), v));
	}
	return 0;
}

int cli_random_run_id(char **out)
{
	unsigned char r[16];
	char buf[40];

	if (util_random(r, sizeof(r)) < 0) {
		return -EIO;
	}
	r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* a version 4 UUID, as torchrun makes */
	r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
	snprintf(buf, sizeof(buf),
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0], r[1],
		 r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14],
		 r[15]);
	*out = strdup(buf);
	return *out == NULL ? -ENOMEM : 0;
}

/* "HOST:PORT" with brackets around an IPv6 host, for spec->rdzv_endpoint. */
static int set_hostport(char **dst, const char *host, int port)
{
	char buf[300];

	net_join_hostport(buf, sizeof(buf), host, port);
	return cli_set_str(dst, buf);
}

int cli_do_rdzv_id(struct cli_parser *p)
{
	const char *v = p->v[O_RDZV_ID].val;
	size_t i;
	int rc;

	if (!p->v[O_RDZV_ID].set) {
		return 0;
	}
	rc = cli_text_value(p, O_RDZV_ID, RUN_ID_MAX, &p->spec->rdzv_id);
	if (rc != 0) {
		return rc;
	}
	/* The run id names store keys "rdzv/<id>/..." and log folders: keep it one path part. */
	for (i = 0; v[i] != '\0'; i++) {
		if (v[i] == '/' || isspace((unsigned char)v[i])) {
			return cli_fail(p, O_RDZV_ID,
					"\"/\" and spaces are not allowed in a run id");
		}
	}
	if (strcmp(v, ".") == 0 || strcmp(v, "..") == 0) {
		return cli_fail(p, O_RDZV_ID, "\"%s\" is not a usable run id", v);
	}
	return 0;
}

static int dir_of_exists(struct cli_parser *p, enum cli_opt_id id, const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	size_t n;

	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof(dir)) {
		return cli_fail(p, id, "path too long");
	}
	memcpy(dir, path, n);
	dir[n] = '\0';
	if (stat(dir, &st) != 0) {
		return cli_fail(p, id, "directory %s: %s", dir, strerror(errno));
	}
	if (!S_ISDIR(st.st_mode)) {
		return cli_fail(p, id, "%s is not a directory", dir);
	}
	return 0;
}

int cli_do_endpoint(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	struct opt_val *ov = &p->v[O_RDZV_ENDPOINT];
	const char *v = ov->set ? ov->val : "";
	char host[256], b[64];
	int port;

	if (s->rdzv_kind == RDZV_KIND_FILE) {
		if (!ov->set || *v == '\0') {
			if (!ov->set) {
				snprintf(ov->origin, sizeof(ov->origin), "--rdzv-endpoint");
			}
			return cli_fail(p, O_RDZV_ENDPOINT,
					"required with --rdzv-backend file (file:///shared/path)");
		}
		if (strncmp(v, "file://", 7) != 0 || v[7] != '/' || v[8] == '\0') {
			return cli_fail(p, O_RDZV_ENDPOINT,
					"expected file:///ABSOLUTE/PATH, got \"%s\"",
					opt_show(b, sizeof(b), v));
		}
		if (v[strlen(v) - 1] == '/') {
			return cli_fail(p, O_RDZV_ENDPOINT, "%s names a directory, not a file",
					opt_show(b, sizeof(b), v));
		}
		if (dir_of_exists(p, O_RDZV_ENDPOINT, v + 7) != 0) {
			return CLI_USAGE;
		}
		if (cli_set_str(&s->rdzv_endpoint, v) < 0 ||
		    cli_set_str(&s->rdzv_path, v + 7) < 0) {
			return cli_oom(p);
		}
		return 0;
	}
	if (strncmp(v, "file://", 7) == 0) {
		return cli_fail(p, O_RDZV_ENDPOINT, "a file:// endpoint needs --rdzv-backend file");
	}
	if (s->rdzv_kind == RDZV_KIND_ETCD) {
		return cli_etcd_endpoint(p, v);
	}
	if (s->rdzv_kind == RDZV_KIND_STATIC) {
		/* torchrun: the endpoint, when given, names the master instead of the flags. */
		if (*v == '\0') {
			if (set_hostport(&s->rdzv_endpoint, s->master_addr, s->master_port) < 0 ||
			    cli_set_str(&s->rdzv_host, s->master_addr) < 0) {
				return cli_oom(p);
			}
			s->rdzv_port = s->master_port;
			return 0;
		}
		if (strncmp(v, "tcp://", 6) == 0) {
			v += 6;
		}
		if (net_parse_hostport(v, s->master_port, host, sizeof(host), &port) < 0 ||
		    !net_valid_host(host) || (*v == '[' && strchr(host, ':') == NULL)) {
			return cli_fail(p, O_RDZV_ENDPOINT, "expected HOST[:PORT], got \"%s\"",
					opt_show(b, sizeof(b), ov->val));
		}
		if (cli_set_str(&s->master_addr, host) < 0) {
			return cli_oom(p);
		}
		s->master_port = port;
		if (set_hostport(&s->rdzv_endpoint, host, port) < 0 ||
		    cli_set_str(&s->rdzv_host, host) < 0) {
			return cli_oom(p);
		}
		s->rdzv_port = port;
		return 0;
	}
	/* c10d: torchrun's empty endpoint means the local host, port 29400. */
	if (*v == '\0') {
		v = "127.0.0.1";
	}
	if (strncmp(v, "tcp://", 6) == 0) {
		v += 6;
	}
	if (net_parse_hostport(v, DEFAULT_C10D_PORT, host, sizeof(host), &port) < 0 ||
	    !net_valid_host(host) || (*v == '[' && strchr(host, ':') == NULL)) {
		return cli_fail(p, O_RDZV_ENDPOINT, "expected HOST[:PORT], got \"%s\"",
				opt_show(b, sizeof(b), ov->val));
	}
	if (port == 0 && s->max_nodes > 1 && !s->standalone) {
		return cli_fail(p, O_RDZV_ENDPOINT,
				"port 0 cannot be found by other nodes (--nnodes %d:%d)",
				s->min_nodes, s->max_nodes);
	}
	if (set_hostport(&s->rdzv_endpoint, host, port) < 0 ||
	    cli_set_str(&s->rdzv_host, host) < 0) {
		return cli_oom(p);
	}
	s->rdzv_port = port;
	return 0;
}

/* "3" (every local rank) or "0:1,1:2" (per local rank, others none) into @masks. */
int cli_do_std_map(struct cli_parser *p, enum cli_opt_id id, enum std_mask *masks)
{
	const char *v = p->v[id].val;
	char *copy, *item, *save = NULL, *colon;
	char b[64];
	long r, m;
	size_t i;
	int rc = 0;

	if (!p->v[id].set || *v == '\0') {
		return 0; /* torchrun's default "": no stream anywhere but the console */
	}
	if (strchr(v, ':') == NULL) {
		if (parse_long(v, 0, 3, &m) < 0) {
			return cli_fail(p, id, "expected 0..3 or LOCAL_RANK:0..3,..., got \"%s\"",
					opt_show(b, sizeof(b), v));
		}
		for (i = 0; i <= RANK_MAP_MAX; i++) {
			masks[i] = (enum std_mask)m;
		}
		return 0;
	}
	for (i = 0; i <= RANK_MAP_MAX; i++) {
		masks[i] = STD_NONE;
	}
	copy = strdup(v);
	if (copy == NULL) {
		return cli_oom(p);
	}
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		colon = strchr(item, ':');
		if (colon == NULL) {
			rc = cli_fail(p, id, "expected LOCAL_RANK:0..3, got \"%s\"",
				      opt_show(b, sizeof(b), item));
			break;
		}
		*colon = '\0';
		if (parse_long(item, 0, RANK_MAP_MAX - 1, &r) < 0 ||
		    parse_long(colon + 1, 0, 3, &m) < 0) {
			*colon = ':';
			rc = cli_fail(p, id,
				      "expected LOCAL_RANK:0..3 with LOCAL_RANK < %d, got \"%s\"",
				      RANK_MAP_MAX, opt_show(b, sizeof(b), item));
			break;
		}
		masks[r] = (enum std_mask)m;
	}
	free(copy);
	return rc;
}

int cli_do_ranks_filter(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	const char *v = p->v[O_LOCAL_RANKS_FILTER].val;
	char *copy, *item, *save = NULL;
	char b[64];
	long r;
	int rc = 0;

	if (!p->v[O_LOCAL_RANKS_FILTER].set || *v == '\0') {
		return 0;
	}
	s->ranks_filter = calloc((size_t)s->nproc_per_node, sizeof(bool));
	copy = strdup(v);
	if (s->ranks_filter == NULL || copy == NULL) {
		free(copy);
		return cli_oom(p);
	}
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		if (parse_long(item, 0, LONG_MAX, &r) < 0) {
			rc = cli_fail(p, O_LOCAL_RANKS_FILTER,
				      "expected local ranks like 0,2, got \"%s\"",
				      opt_show(b, sizeof(b), item));
			break;
		}
		if (r >= s->nproc_per_node) {
			rc = cli_fail(p, O_LOCAL_RANKS_FILTER,
				      "local rank %ld is out of range 0..%d (--nproc-per-node %d)",
				      r, s->nproc_per_node - 1, s->nproc_per_node);
			break;
		}
		s->ranks_filter[r] = true;
	}
	free(copy);
	return rc;
}

int cli_do_signals(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	const char *v = p->v[O_SIGNALS].val;
	char *copy, *item, *save = NULL;
	char b[64];
	int sig, rc = 0, i;

	if (!p->v[O_SIGNALS].set) {
		return 0;
	}
	copy = strdup(v);
	if (copy == NULL) {
		return cli_oom(p);
	}
	s->nsignals = 0;
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*item)) {
			item++;
		}
		sig = signal_parse(item);
		if (sig < 0) {
			rc = cli_fail(p, O_SIGNALS, "unknown signal \"%s\"",
				      opt_show(b, sizeof(b), item));
			break;
		}
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
			rc = cli_fail(p, O_SIGNALS, "%s cannot be handled", signal_abbrev(sig));
			break;
		}
		for (i = 0; i < s->nsignals && s->signals[i] != sig; i++) {
		}
		if (i < s->nsignals) {
			continue;
		}
		if (s->nsignals == JOBSPEC_MAX_SIGNALS) {
			rc = cli_fail(p, O_SIGNALS, "more than %d signals", JOBSPEC_MAX_SIGNALS);
			break;
		}
		s->signals[s->nsignals++] = sig;
	}
	free(copy);
	if (rc == 0 && s->nsignals == 0) {
		rc = cli_fail(p, O_SIGNALS, "no signal given");
	}
	return rc;
}

int cli_do_log_prefix(struct cli_parser *p)
{
	static const char *const fields[] = {"rank", "local_rank", "role", "host"};
	const char *v = p->v[O_LOG_PREFIX].val;
	const char *q, *end;
	char b[64];
	size_t i;

	if (!p->v[O_LOG_PREFIX].set) {
		return 0;
	}
	for (q = v; *q != '\0'; q++) {
		if (iscntrl((unsigned char)*q)) {
			return cli_fail(p, O_LOG_PREFIX, "control character in template");
		}
	}
	for (q = strchr(v, '{'); q != NULL; q = strchr(end, '{')) {
		end = strchr(q, '}');
		if (end == NULL) {
			return cli_fail(p, O_LOG_PREFIX, "unclosed \"{\" in \"%s\"",
					opt_show(b, sizeof(b), v));
		}
		for (i = 0; i < ARRAY_SIZE(fields); i++) {
			if (strlen(fields[i]) == (size_t)(end - q - 1) &&
			    strncmp(fields[i], q + 1, (size_t)(end - q - 1)) == 0) {
				break;
			}
		}
		if (i == ARRAY_SIZE(fields)) {
			return cli_fail(
				p, O_LOG_PREFIX,
				"unknown field \"%.*s\" (use {rank} {local_rank} {role} {host})",
				(int)(end - q + 1 > 40 ? 40 : end - q + 1), q);
		}
	}
	if (strlen(v) > 256) {
		return cli_fail(p, O_LOG_PREFIX, "longer than 256 bytes");
	}
	return cli_set_str(&p->spec->log_prefix, v) < 0 ? cli_oom(p) : 0;
}

int cli_do_stdio(struct cli_parser *p)
{
	static const char *const ttys[] = {"auto", "always", "never"};
	const char *v;
	char b[64];
	size_t i;
	int rc;

	if (p->v[O_STDIN].set) {
		v = p->v[O_STDIN].val;
		if (strcmp(v, "none") == 0) {
			p->spec->stdin_rank = JOBSPEC_STDIN_NONE;
		} else if (strcmp(v, "all") == 0) {
			p->spec->stdin_rank = JOBSPEC_STDIN_ALL;
		} else if (strcmp(v, "rank0") == 0) {
			p->spec->stdin_rank = 0;
		} else if (isdigit((unsigned char)v[0])) {
			rc = cli_int_value(p, O_STDIN, 0, INT_MAX, &p->spec->stdin_rank);
			if (rc != 0) {
				return rc;
			}
		} else {
			return cli_fail(p, O_STDIN,
					"expected a global rank, all or none, got \"%s\"",
					opt_show(b, sizeof(b), v));
		}
	}
	if (p->v[O_TTY].set) {
		v = p->v[O_TTY].val;
		for (i = 0; i < ARRAY_SIZE(ttys) && strcmp(v, ttys[i]) != 0; i++) {
		}
		if (i == ARRAY_SIZE(ttys)) {
			return cli_fail(p, O_TTY, "expected auto, always or never, got \"%s\"",
					opt_show(b, sizeof(b), v));
		}
		/* The table is in enum tty_mode's order. */
		p->spec->tty = (enum tty_mode)i;
	}
	return 0;
}

/* --metrics ADDR:PORT: where the hosted store serves its metrics (checked as a listen
 * address here; bound when the store starts). */
int cli_do_metrics(struct cli_parser *p)
{
	char host[256], b[64];
	int port, rc;

	if (!p->v[O_METRICS].set) {
		return 0;
	}
	if (net_parse_hostport(p->v[O_METRICS].val, -1, host, sizeof(host), &port) < 0 ||
	    port < 0 || port > 65535) {
		return cli_fail(p, O_METRICS, "expected ADDR:PORT, got \"%s\"",
				opt_show(b, sizeof(b), p->v[O_METRICS].val));
	}
	rc = cli_text_value(p, O_METRICS, 300, &p->spec->metrics_listen);
	return rc;
}

int cli_do_log_dir(struct cli_parser *p)
{
	struct stat st;
	int rc;

	if (!p->v[O_LOG_DIR].set) {
		return 0;
	}
	rc = cli_text_value(p, O_LOG_DIR, PATH_MAX - 64, &p->spec->log_dir);
	if (rc != 0) {
		return rc;
	}
	if (stat(p->spec->log_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
		return cli_fail(p, O_LOG_DIR, "%s exists and is not a directory", p->spec->log_dir);
	}
	return 0;
}

/* One --tls-* file: made absolute (workers get it by path), and it must exist. */
static int tls_path(struct cli_parser *p, enum cli_opt_id id, const char *given, char **out)
{
	char *abs;

	if (given == NULL) {
		return 0;
	}
	if (strlen(given) > PATH_MAX - 1) {
		return cli_fail(p, id, "longer than %d bytes", PATH_MAX - 1);
	}
	abs = realpath(given, NULL);
	if (abs == NULL) {
		return cli_fail(p, id, "%s: %s", given, strerror(errno));
	}
	free(*out);
	*out = abs;
	return 0;
}

int cli_do_store(struct cli_parser *p)
{
	static const int ids[OS_COUNT] = {
		[OS_ENDPOINT] = O_RDZV_ENDPOINT, [OS_TOKEN_FILE] = O_TOKEN_FILE,
		[OS_INSECURE] = O_INSECURE,      [OS_TLS_CA] = O_TLS_CA,
		[OS_TLS_CERT] = O_TLS_CERT,      [OS_TLS_KEY] = O_TLS_KEY,
		[OS_TLS_SERVER_NAME] = O_TLS_SERVER_NAME, [OS_CONFIG] = O_CONFIG,
	};
	struct job_spec *s = p->spec;
	struct opt_store_flags f;
	int rc;

	if ((rc = opt_store_take(p->v, ids, &f, p->d)) != 0) {
		return rc;
	}
	s->insecure = f.insecure;
	if (f.token_file != NULL) {
		if (strlen(f.token_file) > PATH_MAX - 1) {
			return cli_fail(p, O_TOKEN_FILE, "longer than %d bytes", PATH_MAX - 1);
		}
		if (cli_set_str(&s->token_file, f.token_file) < 0) {
			return cli_oom(p);
		}
	}
	if ((rc = tls_path(p, O_TLS_CA, f.tls_ca, &s->tls_ca)) != 0 ||
	    (rc = tls_path(p, O_TLS_CERT, f.tls_cert, &s->tls_cert)) != 0 ||
	    (rc = tls_path(p, O_TLS_KEY, f.tls_key, &s->tls_key)) != 0) {
		return rc;
	}
	if (f.tls_server_name != NULL) {
		if (strlen(f.tls_server_name) > 255) {
			return cli_fail(p, O_TLS_SERVER_NAME, "longer than 255 bytes");
		}
		if (cli_set_str(&s->tls_server_name, f.tls_server_name) < 0) {
			return cli_oom(p);
		}
	}
	if ((s->tls_cert != NULL || s->tls_server_name != NULL) && s->tls_ca == NULL) {
		return cli_fail(p, O_COUNT,
				"--tls-ca is required with --tls-cert or --tls-server-name (it "
				"verifies the store's certificate)");
	}
	return 0;
}

int cli_do_local_addr(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	struct crun_diag ld = {0};
	int rc;

	if (!p->v[O_LOCAL_ADDR].set) {
		return 0;
	}
	rc = cli_text_value(p, O_LOCAL_ADDR, 255, &s->local_addr);
	if (rc != 0) {
		return rc;
	}
	rc = net_resolve_local_addr(s->local_addr, &s->advertise_addr, &s->socket_ifname, &ld);
	if (rc == -ENOMEM) {
		return cli_oom(p);
	}
	if (rc < 0) {
		return cli_fail(p, O_LOCAL_ADDR, "%s", ld.msg);
	}
	return 0;
}

int cli_do_program(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	bool module, no_python, run_path;
	int i;

	if (cli_flag_value(p, O_MODULE, &module) != 0 ||
	    cli_flag_value(p, O_NO_PYTHON, &no_python) != 0 ||
	    cli_flag_value(p, O_RUN_PATH, &run_path) != 0) {
		return CLI_USAGE;
	}
	if (module && no_python) {
		return cli_fail(p, O_MODULE, "cannot be combined with --no-python");
	}
	if (module && run_path) {
		return cli_fail(p, O_MODULE, "cannot be combined with --run-path");
	}
	if (run_path && no_python) {
		return cli_fail(p, O_RUN_PATH, "cannot be combined with --no-python");
	}
	if (*p->program == '\0') {
		return cli_fail(p, O_COUNT, "program: empty name");
	}
	s->program_kind = program_kind_of(p->program, module, no_python, run_path);
	if (p->v[O_PYTHON].set) {
		const char *env = getenv("PYTHON_EXEC");

		if (cli_text_value(p, O_PYTHON, PATH_MAX - 1, &s->python_exec) != 0) {
			return CLI_USAGE;
		}
		if (env != NULL && *env != '\0' && strcmp(env, s->python_exec) != 0 &&
		    s->program_kind != PROGRAM_EXEC) {
			/* torchrun's order: PYTHON_EXEC first. Say so, not to surprise anyone. */
			fprintf(stderr, "crun: warning: $PYTHON_EXEC (%.200s) overrides %s\n", env,
				p->v[O_PYTHON].origin);
		}
	}
	if (program_resolve(s, p->program, !no_python,
			    p->v[O_PYTHON].set || cli_python_exec_set(), p->d) < 0) {
		return CLI_USAGE; /* @d says why */
	}

	s->args = calloc((size_t)p->nargs + 1, sizeof(char *));
	if (s->args == NULL) {
		return cli_oom(p);
	}
	for (i = 0; i < p->nargs; i++) {
		s->args[i] = strdup(p->args[i]);
		if (s->args[i] == NULL) {
			return cli_oom(p);
		}
		s->nargs = i + 1;
	}
	return 0;
}

bool cli_python_exec_set(void)
{
	const char *env = getenv("PYTHON_EXEC");

	return env != NULL && *env != '\0';
}

int cli_do_local_rank_arg(struct cli_parser *p)
{
	static const struct {
		const char *name;
		enum local_rank_arg style;
	} styles[] = {
		{"none", LOCAL_RANK_ARG_NONE},         {"underscore", LOCAL_RANK_ARG_UNDERSCORE},
		{"dash", LOCAL_RANK_ARG_DASH},         {"--local_rank", LOCAL_RANK_ARG_UNDERSCORE},
		{"--local-rank", LOCAL_RANK_ARG_DASH},
	};
	struct opt_val *ov = &p->v[O_LOCAL_RANK_ARG];
	bool use_env, yes;
	char b[64];
	size_t i;
	int rc;

	if ((rc = cli_flag_value(p, O_USE_ENV, &use_env)) != 0) {
		return rc;
	}
	p->spec->local_rank_arg = LOCAL_RANK_ARG_NONE;
	if (!ov->set) {
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(styles); i++) {
		if (strcmp(ov->val, styles[i].name) == 0) {
			break;
		}
	}
	if (i < ARRAY_SIZE(styles)) {
		p->spec->local_rank_arg = styles[i].style;
	} else if (opt_parse_bool(ov->val, &yes) == 0) {
		/* Alone, or 1 in PET_LOCAL_RANK_ARG: torch 1.x's spelling, as before. */
		p->spec->local_rank_arg = yes ? LOCAL_RANK_ARG_UNDERSCORE : LOCAL_RANK_ARG_NONE;
	} else {
		return cli_fail(p, O_LOCAL_RANK_ARG,
				"expected none, underscore (--local_rank=N) or dash "
				"(--local-rank=N), got \"%s\"",
				opt_show(b, sizeof(b), ov->val));
	}
	if (use_env && p->spec->local_rank_arg != LOCAL_RANK_ARG_NONE) {
		return cli_fail(p, O_LOCAL_RANK_ARG,
				"cannot be combined with %s (which means: no --local-rank "
				"argument, LOCAL_RANK only)",
				p->v[O_USE_ENV].origin);
	}
	return 0;
}

int cli_do_exit_code(struct cli_parser *p)
{
	const char *v = p->v[O_EXIT_CODE].val;
	char b[64];

	p->spec->exit_code_torchrun = false;
	if (!p->v[O_EXIT_CODE].set || strcmp(v, "crun") == 0) {
		return 0;
	}
	if (strcmp(v, "torchrun") == 0) {
		p->spec->exit_code_torchrun = true;
		return 0;
	}
	return cli_fail(p, O_EXIT_CODE, "expected crun or torchrun, got \"%s\"",
			opt_show(b, sizeof(b), v));
}

int cli_do_restart_waits(struct cli_parser *p)
{
	struct job_spec *spec = p->spec;
	int rc;

	if (p->v[O_RESTART_BACKOFF].set &&
	    (rc = cli_seconds_value(p, O_RESTART_BACKOFF, &spec->restart_backoff_ms)) != 0) {
		return rc;
	}
	if (p->v[O_RESTART_BACKOFF_MAX].set) {
		rc = cli_seconds_value(p, O_RESTART_BACKOFF_MAX, &spec->restart_backoff_max_ms);
		if (rc != 0) {
			return rc;
		}
		if (spec->restart_backoff_max_ms < spec->restart_backoff_ms) {
			return cli_fail(p, O_RESTART_BACKOFF_MAX,
					"%.3g s is below --restart-backoff (%.3g s)",
					(double)spec->restart_backoff_max_ms / 1000.0,
					(double)spec->restart_backoff_ms / 1000.0);
		}
	} else if (spec->restart_backoff_max_ms < spec->restart_backoff_ms) {
		spec->restart_backoff_max_ms = spec->restart_backoff_ms;
	}
	if (p->v[O_WORKER_TIMEOUT].set &&
	    (rc = cli_seconds_value(p, O_WORKER_TIMEOUT, &spec->worker_timeout_ms)) != 0) {
		return rc;
	}
	return 0;
}
