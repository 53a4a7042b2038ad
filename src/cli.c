/* SPDX-License-Identifier: MIT */
/* src/cli.c: the crun command line: torchrun's flags, PET_* environment, validation. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "config.h"
#include "src/cli.h"
#include "src/common/clock.h"
#include "src/common/net.h"

#define NPROC_MAX 4096          /* a sanity bound: more local workers is surely a typo */
#define NNODES_MAX 1000000
#define RESTARTS_MAX 1000000
#define SECONDS_MAX (365.0 * 24 * 3600) /* a year: any longer is a typo */
#define RANK_MAP_MAX 1024       /* local ranks addressable by --redirects/--tee maps */
#define RUN_ID_MAX 128
#define DEFAULT_C10D_PORT 29400
#define GPU_PROBE_TIMEOUT_MS 60000

enum opt_id {
	O_NNODES,
	O_NPROC,
	O_NODE_RANK,
	O_MASTER_ADDR,
	O_MASTER_PORT,
	O_RDZV_BACKEND,
	O_RDZV_ENDPOINT,
	O_RDZV_ID,
	O_RDZV_CONF,
	O_STANDALONE,
	O_MAX_RESTARTS,
	O_MONITOR_INTERVAL,
	O_START_METHOD,
	O_SHUTDOWN_TIMEOUT,
	O_SIGNALS,
	O_LOCAL_ADDR,
	O_ROLE,
	O_MODULE,
	O_NO_PYTHON,
	O_RUN_PATH,
	O_VIRTUAL_LOCAL_RANK,
	O_LOCAL_RANK_ARG,
	O_LOG_DIR,
	O_REDIRECTS,
	O_TEE,
	O_LOCAL_RANKS_FILTER,
	O_LOG_PREFIX,
	O_LOGS_SPECS,
	O_HELP,
	O_VERSION,
	O_COUNT
};

struct opt {
	const char *name;    /* long name with dashes; dashes and underscores in it match alike */
	char shrt;           /* short letter or 0 */
	bool arg;            /* takes a value */
	bool env;            /* also read from PET_<NAME> */
	const char *metavar; /* for --help */
	const char *help;    /* one line for --help; "\n" starts a section heading before it */
	const char *section; /* heading printed before this option, or NULL */
};

static const struct opt opts[O_COUNT] = {
	[O_NNODES] = {"nnodes", 0, true, true, "N|MIN:MAX",
		      "number of nodes, or the elastic range (default 1)", "Job shape"},
	[O_NPROC] = {"nproc-per-node", 0, true, true, "N|gpu|cpu|auto",
		     "workers on this node: a count, the visible GPUs, the online CPUs, or GPUs if "
		     "any else CPUs (default 1)", NULL},
	[O_NODE_RANK] = {"node-rank", 0, true, true, "N",
			 "this node's rank for --rdzv-backend static (default 0)",
			 "Static rendezvous (torchrun's default)"},
	[O_MASTER_ADDR] = {"master-addr", 0, true, true, "ADDR",
			   "address of node 0 for static mode (default 127.0.0.1)", NULL},
	[O_MASTER_PORT] = {"master-port", 0, true, true, "PORT",
			   "port of node 0 for static mode (default 29500)", NULL},
	[O_RDZV_BACKEND] = {"rdzv-backend", 0, true, true, "NAME",
			    "c10d (alias tcp), static or file (default static)",
			    "Dynamic rendezvous"},
	[O_RDZV_ENDPOINT] = {"rdzv-endpoint", 0, true, true, "HOST[:PORT]|file:///PATH",
			     "the store: c10d address (default port 29400) or shared file", NULL},
	[O_RDZV_ID] = {"rdzv-id", 0, true, true, "ID", "the job's run id (default none)", NULL},
	[O_RDZV_CONF] = {"rdzv-conf", 0, true, true, "KEY=VALUE,...",
			 "join_timeout, last_call_timeout, close_timeout, heartbeat_timeout, "
			 "keep_alive_interval, read_timeout (seconds), keep_alive_max_attempt, "
			 "is_host (0|1)", NULL},
	[O_STANDALONE] = {"standalone", 0, false, true, NULL,
			  "single node: c10d store on 127.0.0.1, a free port, a fresh run id",
			  NULL},
	[O_MAX_RESTARTS] = {"max-restarts", 0, true, true, "N",
			    "job-wide restarts after worker failures (default 0)",
			    "Restarts and shutdown"},
	[O_MONITOR_INTERVAL] = {"monitor-interval", 0, true, true, "SECONDS",
				"accepted for torchrun compatibility; crun is event-driven", NULL},
	[O_START_METHOD] = {"start-method", 0, true, true, "spawn|fork|forkserver",
			    "accepted for torchrun compatibility; workers are always exec'd",
			    NULL},
	[O_SHUTDOWN_TIMEOUT] = {"shutdown-timeout", 0, true, true, "SECONDS",
				"grace between SIGTERM and SIGKILL when stopping workers "
				"(default 30)", NULL},
	[O_SIGNALS] = {"signals-to-handle", 0, true, true, "SIG,...",
		       "signals forwarded to workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)",
		       NULL},
	[O_LOCAL_ADDR] = {"local-addr", 0, true, true, "ADDR|HOST|IFACE",
			  "address this node advertises; an interface name (eth0) also sets "
			  "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME", "Workers"},
	[O_ROLE] = {"role", 0, true, true, "NAME", "worker role, ROLE_NAME (default default)",
		    NULL},
	[O_MODULE] = {"module", 'm', false, true, NULL,
		      "PROGRAM is a Python module: python3 -u -m PROGRAM", NULL},
	[O_NO_PYTHON] = {"no-python", 0, false, true, NULL,
			 "run PROGRAM directly even if it ends in .py", NULL},
	[O_RUN_PATH] = {"run-path", 0, false, true, NULL,
			"run PROGRAM under python3 -u whatever its name", NULL},
	[O_VIRTUAL_LOCAL_RANK] = {"virtual-local-rank", 0, false, true, NULL,
				  "LOCAL_RANK=0 in every worker, CUDA_VISIBLE_DEVICES narrowed to "
				  "its GPU", NULL},
	[O_LOCAL_RANK_ARG] = {"local-rank-arg", 0, false, true, NULL,
			      "append --local_rank=N to each worker's arguments (legacy "
			      "torch.distributed.launch scripts)", NULL},
	[O_LOG_DIR] = {"log-dir", 0, true, true, "DIR",
		       "keep DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log", "Output"},
	[O_REDIRECTS] = {"redirects", 'r', true, true, "STD|RANK:STD,...",
			 "send streams to the log files only: 0 none, 1 out, 2 err, 3 both",
			 NULL},
	[O_TEE] = {"tee", 't', true, true, "STD|RANK:STD,...",
		   "send streams to the log files and the console (as --redirects)", NULL},
	[O_LOCAL_RANKS_FILTER] = {"local-ranks-filter", 0, true, true, "RANK,...",
				  "show only these local ranks on the console", NULL},
	[O_LOG_PREFIX] = {"log-prefix", 0, true, true, "TEMPLATE",
			  "console line prefix with {rank} {local_rank} {role} {host} "
			  "(default \"[rank{rank}]:\")", NULL},
	[O_LOGS_SPECS] = {"logs-specs", 0, true, true, "NAME",
			  "accepted for torchrun compatibility; only \"default\"", NULL},
	[O_HELP] = {"help", 'h', false, false, NULL, "print this help and exit", "Other"},
	[O_VERSION] = {"version", 0, false, false, NULL, "print the version and exit", NULL},
};

/* Where a value came from: the spelling the user typed, for error lines. */
struct optval {
	const char *val; /* borrowed from argv or the environment */
	char origin[64]; /* "--nproc_per_node", "-r", "PET_NNODES" */
	bool set;
};

struct parser {
	struct optval v[O_COUNT];
	struct job_spec *spec;
	struct crun_diag *d;
	const char *program;
	char **args;
	int nargs;
};

/* Copy at most 48 bytes of @s into @buf for an error line, non-printables as '?'. */
static const char *show(char *buf, size_t len, const char *s)
{
	size_t i, n = 0;

	for (i = 0; s[i] != '\0' && n + 4 < len && i < 48; i++) {
		buf[n++] = isprint((unsigned char)s[i]) ? s[i] : '?';
	}
	if (s[i] != '\0' && n + 4 < len) {
		buf[n++] = '.';
		buf[n++] = '.';
		buf[n++] = '.';
	}
	buf[n] = '\0';
	return buf;
}

__attribute__((format(printf, 3, 4))) static int fail(struct parser *p, enum opt_id id,
						     const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (id == O_COUNT) {
		diag_set(p->d, CRUN_ECONFIG, "%s", what);
	} else {
		diag_set(p->d, CRUN_ECONFIG, "%s: %s", p->v[id].origin, what);
	}
	return CLI_USAGE;
}

static int oom(struct parser *p)
{
	diag_set(p->d, -ENOMEM, "out of memory");
	return CLI_USAGE;
}

/* ---- value parsers: 0 or -EINVAL/-ERANGE, nothing printed ---- */

static int parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	if (*s == '\0' || isspace((unsigned char)*s)) {
		return -EINVAL;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end != '\0') {
		return -EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		return -ERANGE;
	}
	*out = v;
	return 0;
}

static int int_value(struct parser *p, enum opt_id id, long min, long max, int *out)
{
	char b[64];
	long v;
	int rc;

	rc = parse_long(p->v[id].val, min, max, &v);
	if (rc == -EINVAL) {
		return fail(p, id, "expected an integer, got \"%s\"", show(b, sizeof(b), p->v[id].val));
	}
	if (rc < 0) {
		return fail(p, id, "%s is out of range %ld..%ld", show(b, sizeof(b), p->v[id].val),
			    min, max);
	}
	*out = (int)v;
	return 0;
}

/* Seconds as a decimal ("30", "0.5") into milliseconds. */
static int parse_seconds(const char *s, int64_t *ms)
{
	char *end;
	double v;

	if (*s == '\0' || isspace((unsigned char)*s)) {
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || !isfinite(v)) {
		return -EINVAL;
	}
	if (errno == ERANGE || v < 0 || v > SECONDS_MAX) {
		return -ERANGE;
	}
	*ms = (int64_t)(v * 1000.0 + 0.5);
	return 0;
}

static int seconds_value(struct parser *p, enum opt_id id, int64_t *ms)
{
	char b[64];
	int rc;

	rc = parse_seconds(p->v[id].val, ms);
	if (rc == -EINVAL) {
		return fail(p, id, "expected seconds, got \"%s\"", show(b, sizeof(b), p->v[id].val));
	}
	if (rc < 0) {
		return fail(p, id, "%s seconds is out of range 0..%.0f",
			    show(b, sizeof(b), p->v[id].val), SECONDS_MAX);
	}
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off", ""};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
	}
	for (i = 0; i < ARRAY_SIZE(no); i++) {
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int flag_value(struct parser *p, enum opt_id id, bool *out)
{
	char b[64];

	*out = false;
	if (!p->v[id].set) {
		return 0;
	}
	if (parse_bool(p->v[id].val, out) < 0) {
		return fail(p, id, "expected 0 or 1, got \"%s\"", show(b, sizeof(b), p->v[id].val));
	}
	return 0;
}

/* A string flag: non-empty, no control characters (it ends up in env and log lines). */
static int text_value(struct parser *p, enum opt_id id, size_t maxlen, char **out)
{
	const char *s = p->v[id].val;
	char *copy;
	size_t i;

	if (*s == '\0') {
		return fail(p, id, "empty value");
	}
	for (i = 0; s[i] != '\0'; i++) {
		if (iscntrl((unsigned char)s[i])) {
			return fail(p, id, "control character in value");
		}
	}
	if (i > maxlen) {
		return fail(p, id, "longer than %zu bytes", maxlen);
	}
	copy = strdup(s);
	if (copy == NULL) {
		return oom(p);
	}
	free(*out);
	*out = copy;
	return 0;
}

/* ---- command line and environment ---- */

static const struct opt *find_long(const char *name, size_t len, enum opt_id *id)
{
	char norm[64];
	size_t i;
	int k;

	if (len == 0 || len >= sizeof(norm)) {
		return NULL;
	}
	for (i = 0; i < len; i++) {
		norm[i] = name[i] == '_' ? '-' : name[i];
	}
	norm[len] = '\0';
	for (k = 0; k < O_COUNT; k++) {
		if (strcmp(opts[k].name, norm) == 0) {
			*id = (enum opt_id)k;
			return &opts[k];
		}
	}
	return NULL;
}

static const struct opt *find_short(char c, enum opt_id *id)
{
	int k;

	for (k = 0; k < O_COUNT; k++) {
		if (opts[k].shrt != 0 && opts[k].shrt == c) {
			*id = (enum opt_id)k;
			return &opts[k];
		}
	}
	return NULL;
}

static void set_val(struct parser *p, enum opt_id id, const char *origin, size_t olen,
		    const char *val)
{
	struct optval *v = &p->v[id];

	if (olen >= sizeof(v->origin)) {
		olen = sizeof(v->origin) - 1;
	}
	memcpy(v->origin, origin, olen);
	v->origin[olen] = '\0';
	v->val = val;
	v->set = true;
}

/* torchrun reads every flag from PET_<NAME> too (PET_NPROC_PER_NODE); the command line wins. */
static void read_env(struct parser *p)
{
	char name[80];
	const char *val;
	size_t i, n;
	int k;

	for (k = 0; k < O_COUNT; k++) {
		if (!opts[k].env) {
			continue;
		}
		n = (size_t)snprintf(name, sizeof(name), "PET_");
		for (i = 0; opts[k].name[i] != '\0' && n + 1 < sizeof(name); i++) {
			name[n++] = opts[k].name[i] == '-' ? '_' : (char)toupper(opts[k].name[i]);
		}
		name[n] = '\0';
		val = getenv(name);
		if (val != NULL) {
			set_val(p, (enum opt_id)k, name, n, val);
		}
	}
}

static int print_version(void)
{
	printf("crun %s\n", CRUN_VERSION);
	fflush(stdout);
	return CLI_EXIT;
}

static int print_help(void)
{
	cli_usage(stdout);
	fflush(stdout);
	return CLI_EXIT;
}

/* A value that is missing: the end of argv, or what is clearly the next long option. */
static bool missing(const char *next)
{
	return next == NULL || (next[0] == '-' && next[1] == '-' && next[2] != '\0');
}

static int read_argv(struct parser *p, int argc, char **argv)
{
	const struct opt *o;
	enum opt_id id = O_COUNT;
	const char *a, *eq, *val;
	char b[64];
	size_t nlen;
	int i;

	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0') {
			break; /* the program: everything from here on is its own */
		}
		if (a[1] == '-') {
			eq = strchr(a + 2, '=');
			nlen = eq ? (size_t)(eq - a) : strlen(a);
			o = find_long(a + 2, nlen - 2, &id);
			if (o == NULL) {
				char shown[72];

				snprintf(shown, sizeof(shown), "%.*s", (int)(nlen > 60 ? 60 : nlen), a);
				return fail(p, O_COUNT, "%s: unknown option (see crun --help)",
					    show(b, sizeof(b), shown));
			}
			if (id == O_HELP) {
				return print_help();
			}
			if (id == O_VERSION) {
				return print_version();
			}
			if (!o->arg) {
				if (eq != NULL) {
					set_val(p, id, a, nlen, "1");
					return fail(p, id, "takes no value");
				}
				set_val(p, id, a, nlen, "1");
				continue;
			}
			if (eq != NULL) {
				val = eq + 1;
			} else {
				val = i + 1 < argc ? argv[i + 1] : NULL;
				if (missing(val)) {
					set_val(p, id, a, nlen, "");
					return fail(p, id, "missing value (%s)", o->metavar);
				}
				i++;
			}
			set_val(p, id, a, nlen, val);
			continue;
		}
		/* -h, -m, -r VALUE, -rVALUE, -t VALUE, -tVALUE */
		o = find_short(a[1], &id);
		if (o == NULL) {
			return fail(p, O_COUNT, "%s: unknown option (see crun --help)",
				    show(b, sizeof(b), a));
		}
		if (id == O_HELP && a[2] == '\0') {
			return print_help();
		}
		if (!o->arg) {
			set_val(p, id, a, 2, "1");
			if (a[2] != '\0') {
				return fail(p, id, "takes no value (got \"%s\")", show(b, sizeof(b), a));
			}
			continue;
		}
		if (a[2] != '\0') {
			val = a[2] == '=' ? a + 3 : a + 2;
		} else {
			val = i + 1 < argc ? argv[i + 1] : NULL;
			if (missing(val)) {
				set_val(p, id, a, 2, "");
				return fail(p, id, "missing value (%s)", o->metavar);
			}
			i++;
		}
		set_val(p, id, a, 2, val);
	}
	if (i >= argc) {
		return fail(p, O_COUNT, "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM "
					"[ARGS...]; see crun --help)");
	}
	p->program = argv[i];
	p->args = argv + i + 1;
	p->nargs = argc - i - 1;
	return CLI_OK;
}

/* ---- the flags, one by one ---- */

static int do_nnodes(struct parser *p)
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
			return fail(p, O_NNODES, "expected N or MIN:MAX with 1 <= N <= %d, got \"%s\"",
				    NNODES_MAX, show(b, sizeof(b), v));
		}
		hi = lo;
	} else {
		if ((size_t)(colon - v) >= sizeof(minb)) {
			return fail(p, O_NNODES, "expected N or MIN:MAX, got \"%s\"",
				    show(b, sizeof(b), v));
		}
		memcpy(minb, v, (size_t)(colon - v));
		minb[colon - v] = '\0';
		if (parse_long(minb, 1, NNODES_MAX, &lo) < 0 ||
		    parse_long(colon + 1, 1, NNODES_MAX, &hi) < 0) {
			return fail(p, O_NNODES,
				    "expected N or MIN:MAX with 1 <= MIN <= MAX <= %d, got \"%s\"",
				    NNODES_MAX, show(b, sizeof(b), v));
		}
		if (lo > hi) {
			return fail(p, O_NNODES, "MIN %ld is above MAX %ld", lo, hi);
		}
	}
	s->min_nodes = (int)lo;
	s->max_nodes = (int)hi;
	return 0;
}

/* 0 when given, 1 when "gpu"/"cpu"/"auto" must still be counted (after the cheap checks). */
static int do_nproc(struct parser *p, bool *count_later)
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
		return fail(p, O_NPROC, "expected a count, gpu, cpu or auto, got \"%s\"",
			    show(b, sizeof(b), p->v[O_NPROC].val));
	}
	if (rc < 0) {
		return fail(p, O_NPROC, "%s is out of range 1..%d", show(b, sizeof(b), p->v[O_NPROC].val),
			    NPROC_MAX);
	}
	p->spec->nproc_per_node = (int)n;
	return 0;
}

static int count_nproc(struct parser *p)
{
	const char *v = p->v[O_NPROC].val;
	struct crun_diag gd = {0};
	long cpus;
	int gpus = 0;

	if (strcmp(v, "gpu") == 0 || strcmp(v, "auto") == 0) {
		gpus = cli_count_gpus(&gd);
		if (gpus > 0) {
			p->spec->nproc_per_node = gpus > NPROC_MAX ? NPROC_MAX : gpus;
			p->spec->nproc_is_gpu = true;
			return 0;
		}
		if (strcmp(v, "gpu") == 0) {
			return fail(p, O_NPROC, "gpu: %s", gd.msg);
		}
	}
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus < 1) {
		cpus = 1;
	}
	p->spec->nproc_per_node = cpus > NPROC_MAX ? NPROC_MAX : (int)cpus;
	return 0;
}

static int do_backend(struct parser *p)
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
	} else if (strcmp(v, "etcd") == 0 || strcmp(v, "etcd-v2") == 0) {
		return fail(p, O_RDZV_BACKEND, "%s is not supported yet (use c10d, static or file)", v);
	} else {
		return fail(p, O_RDZV_BACKEND, "unknown backend \"%s\" (use c10d, tcp, static or file)",
			    show(b, sizeof(b), v));
	}
	return 0;
}

static int random_run_id(char **out)
{
	unsigned char r[16];
	char buf[40];
	ssize_t n;
	int fd;

	n = getrandom(r, sizeof(r), 0);
	if (n != (ssize_t)sizeof(r)) {
		fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || read(fd, r, sizeof(r)) != (ssize_t)sizeof(r)) {
			if (fd >= 0) {
				close(fd);
			}
			return -EIO;
		}
		close(fd);
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

static int set_str(char **dst, const char *src)
{
	char *c = strdup(src);

	if (c == NULL) {
		return -ENOMEM;
	}
	free(*dst);
	*dst = c;
	return 0;
}

/* A host name (letters, digits, '.', '-', '_'), an IPv4 literal, or an IPv6 literal. */
static bool valid_host(const char *h)
{
	struct in6_addr a6;
	size_t i;

	if (strchr(h, ':') != NULL) {
		return inet_pton(AF_INET6, h, &a6) == 1;
	}
	for (i = 0; h[i] != '\0'; i++) {
		if (!isalnum((unsigned char)h[i]) && h[i] != '.' && h[i] != '-' && h[i] != '_') {
			return false;
		}
	}
	return i > 0 && i <= 253 && h[0] != '-' && h[0] != '.';
}

/* "HOST:PORT" with brackets around an IPv6 host, for spec->rdzv_endpoint. */
static int join_hostport(char **dst, const char *host, int port)
{
	char buf[300];

	if (strchr(host, ':') != NULL) {
		snprintf(buf, sizeof(buf), "[%s]:%d", host, port);
	} else {
		snprintf(buf, sizeof(buf), "%s:%d", host, port);
	}
	return set_str(dst, buf);
}

static int do_rdzv_id(struct parser *p)
{
	const char *v = p->v[O_RDZV_ID].val;
	size_t i;
	int rc;

	if (!p->v[O_RDZV_ID].set) {
		return 0;
	}
	rc = text_value(p, O_RDZV_ID, RUN_ID_MAX, &p->spec->rdzv_id);
	if (rc != 0) {
		return rc;
	}
	/* The run id names store keys "rdzv/<id>/..." and log folders: keep it one path part. */
	for (i = 0; v[i] != '\0'; i++) {
		if (v[i] == '/' || isspace((unsigned char)v[i])) {
			return fail(p, O_RDZV_ID, "\"/\" and spaces are not allowed in a run id");
		}
	}
	if (strcmp(v, ".") == 0 || strcmp(v, "..") == 0) {
		return fail(p, O_RDZV_ID, "\"%s\" is not a usable run id", v);
	}
	return 0;
}

static int dir_of_exists(struct parser *p, enum opt_id id, const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	size_t n;

	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof(dir)) {
		return fail(p, id, "path too long");
	}
	memcpy(dir, path, n);
	dir[n] = '\0';
	if (stat(dir, &st) != 0) {
		return fail(p, id, "directory %s: %s", dir, strerror(errno));
	}
	if (!S_ISDIR(st.st_mode)) {
		return fail(p, id, "%s is not a directory", dir);
	}
	return 0;
}

static int do_endpoint(struct parser *p)
{
	struct job_spec *s = p->spec;
	struct optval *ov = &p->v[O_RDZV_ENDPOINT];
	const char *v = ov->set ? ov->val : "";
	char host[256], b[64];
	int port;

	if (s->rdzv_kind == RDZV_KIND_FILE) {
		if (!ov->set || *v == '\0') {
			if (!ov->set) {
				snprintf(ov->origin, sizeof(ov->origin), "--rdzv-endpoint");
			}
			return fail(p, O_RDZV_ENDPOINT,
				    "required with --rdzv-backend file (file:///shared/path)");
		}
		if (strncmp(v, "file://", 7) != 0 || v[7] != '/' || v[8] == '\0') {
			return fail(p, O_RDZV_ENDPOINT, "expected file:///ABSOLUTE/PATH, got \"%s\"",
				    show(b, sizeof(b), v));
		}
		if (v[strlen(v) - 1] == '/') {
			return fail(p, O_RDZV_ENDPOINT, "%s names a directory, not a file",
				    show(b, sizeof(b), v));
		}
		if (dir_of_exists(p, O_RDZV_ENDPOINT, v + 7) != 0) {
			return CLI_USAGE;
		}
		if (set_str(&s->rdzv_endpoint, v) < 0 || set_str(&s->rdzv_path, v + 7) < 0) {
			return oom(p);
		}
		return 0;
	}
	if (strncmp(v, "file://", 7) == 0) {
		return fail(p, O_RDZV_ENDPOINT, "a file:// endpoint needs --rdzv-backend file");
	}
	if (s->rdzv_kind == RDZV_KIND_STATIC) {
		/* torchrun: the endpoint, when given, names the master instead of the flags. */
		if (*v == '\0') {
			if (join_hostport(&s->rdzv_endpoint, s->master_addr, s->master_port) < 0 ||
			    set_str(&s->rdzv_host, s->master_addr) < 0) {
				return oom(p);
			}
			s->rdzv_port = s->master_port;
			return 0;
		}
		if (strncmp(v, "tcp://", 6) == 0) {
			v += 6;
		}
		if (net_parse_hostport(v, s->master_port, host, sizeof(host), &port) < 0 ||
		    !valid_host(host) || (*v == '[' && strchr(host, ':') == NULL)) {
			return fail(p, O_RDZV_ENDPOINT, "expected HOST[:PORT], got \"%s\"",
				    show(b, sizeof(b), ov->val));
		}
		if (set_str(&s->master_addr, host) < 0) {
			return oom(p);
		}
		s->master_port = port;
		if (join_hostport(&s->rdzv_endpoint, host, port) < 0 ||
		    set_str(&s->rdzv_host, host) < 0) {
			return oom(p);
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
	    !valid_host(host) || (*v == '[' && strchr(host, ':') == NULL)) {
		return fail(p, O_RDZV_ENDPOINT, "expected HOST[:PORT], got \"%s\"",
			    show(b, sizeof(b), ov->val));
	}
	if (port == 0 && s->max_nodes > 1 && !s->standalone) {
		return fail(p, O_RDZV_ENDPOINT, "port 0 cannot be found by other nodes (--nnodes %d:%d)",
			    s->min_nodes, s->max_nodes);
	}
	if (join_hostport(&s->rdzv_endpoint, host, port) < 0 || set_str(&s->rdzv_host, host) < 0) {
		return oom(p);
	}
	s->rdzv_port = port;
	return 0;
}

static const char *const conf_keys = "join_timeout, last_call_timeout, close_timeout, "
				     "heartbeat_timeout, keep_alive_interval, "
				     "keep_alive_max_attempt, read_timeout, is_host";

static int conf_item(struct parser *p, const char *key, const char *val)
{
	static const struct {
		const char *key;
		size_t off;
		bool positive;
	} secs[] = {
		{"join_timeout", offsetof(struct rdzv_conf, join_timeout_ms), true},
		{"last_call_timeout", offsetof(struct rdzv_conf, last_call_timeout_ms), false},
		{"close_timeout", offsetof(struct rdzv_conf, close_timeout_ms), false},
		{"heartbeat_timeout", offsetof(struct rdzv_conf, heartbeat_timeout_ms), true},
		{"keep_alive_interval", offsetof(struct rdzv_conf, keep_alive_interval_ms), true},
		{"read_timeout", offsetof(struct rdzv_conf, read_timeout_ms), true},
	};
	struct job_spec *s = p->spec;
	char b[64];
	int64_t ms;
	size_t i;
	long n;
	bool yes;

	for (i = 0; i < ARRAY_SIZE(secs); i++) {
		if (strcmp(key, secs[i].key) != 0) {
			continue;
		}
		if (parse_seconds(val, &ms) < 0) {
			return fail(p, O_RDZV_CONF, "%s: expected seconds, got \"%s\"", key,
				    show(b, sizeof(b), val));
		}
		if (secs[i].positive && ms <= 0) {
			return fail(p, O_RDZV_CONF, "%s: must be above 0 seconds", key);
		}
		memcpy((char *)&s->rdzv + secs[i].off, &ms, sizeof(ms));
		return 0;
	}
	if (strcmp(key, "keep_alive_max_attempt") == 0) {
		if (parse_long(val, 1, 1000000, &n) < 0) {
			return fail(p, O_RDZV_CONF, "%s: expected an integer >= 1, got \"%s\"", key,
				    show(b, sizeof(b), val));
		}
		s->rdzv.keep_alive_max_attempt = (int)n;
		return 0;
	}
	if (strcmp(key, "is_host") == 0) {
		if (parse_bool(val, &yes) < 0 || *val == '\0') {
			return fail(p, O_RDZV_CONF, "%s: expected 0 or 1, got \"%s\"", key,
				    show(b, sizeof(b), val));
		}
		s->is_host = yes ? 1 : 0;
		return 0;
	}
	return fail(p, O_RDZV_CONF, "unknown key \"%s\" (known: %s)", show(b, sizeof(b), key),
		    conf_keys);
}

static int do_rdzv_conf(struct parser *p)
{
	const char *v = p->v[O_RDZV_CONF].val;
	char *copy, *item, *save = NULL, *eq;
	char b[64];
	int rc = 0;

	if (!p->v[O_RDZV_CONF].set || *v == '\0') {
		return 0;
	}
	copy = strdup(v);
	if (copy == NULL) {
		return oom(p);
	}
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		eq = strchr(item, '=');
		if (eq == NULL || eq == item) {
			rc = fail(p, O_RDZV_CONF, "expected KEY=VALUE, got \"%s\"",
				  show(b, sizeof(b), item));
			break;
		}
		*eq = '\0';
		rc = conf_item(p, item, eq + 1);
		if (rc != 0) {
			break;
		}
	}
	free(copy);
	return rc;
}

/* "3" (every local rank) or "0:1,1:2" (per local rank, others none) into @masks. */
static int do_std_map(struct parser *p, enum opt_id id, enum std_mask *masks)
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
			return fail(p, id, "expected 0..3 or LOCAL_RANK:0..3,..., got \"%s\"",
				    show(b, sizeof(b), v));
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
		return oom(p);
	}
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		colon = strchr(item, ':');
		if (colon == NULL) {
			rc = fail(p, id, "expected LOCAL_RANK:0..3, got \"%s\"", show(b, sizeof(b), item));
			break;
		}
		*colon = '\0';
		if (parse_long(item, 0, RANK_MAP_MAX - 1, &r) < 0 ||
		    parse_long(colon + 1, 0, 3, &m) < 0) {
			*colon = ':';
			rc = fail(p, id, "expected LOCAL_RANK:0..3 with LOCAL_RANK < %d, got \"%s\"",
				  RANK_MAP_MAX, show(b, sizeof(b), item));
			break;
		}
		masks[r] = (enum std_mask)m;
	}
	free(copy);
	return rc;
}

static int do_ranks_filter(struct parser *p)
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
		return oom(p);
	}
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		if (parse_long(item, 0, LONG_MAX, &r) < 0) {
			rc = fail(p, O_LOCAL_RANKS_FILTER, "expected local ranks like 0,2, got \"%s\"",
				  show(b, sizeof(b), item));
			break;
		}
		if (r >= s->nproc_per_node) {
			rc = fail(p, O_LOCAL_RANKS_FILTER,
				  "local rank %ld is out of range 0..%d (--nproc-per-node %d)", r,
				  s->nproc_per_node - 1, s->nproc_per_node);
			break;
		}
		s->ranks_filter[r] = true;
	}
	free(copy);
	return rc;
}

static int parse_signal(const char *name)
{
	static const struct {
		const char *name;
		int sig;
	} sigs[] = {
		{"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT},   {"ILL", SIGILL},
		{"TRAP", SIGTRAP}, {"ABRT", SIGABRT},   {"BUS", SIGBUS},     {"FPE", SIGFPE},
		{"USR1", SIGUSR1}, {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},
		{"ALRM", SIGALRM}, {"TERM", SIGTERM},   {"CHLD", SIGCHLD},   {"CONT", SIGCONT},
		{"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},   {"URG", SIGURG},
		{"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},   {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
		{"WINCH", SIGWINCH}, {"IO", SIGIO},     {"PWR", SIGPWR},     {"SYS", SIGSYS},
		{"KILL", SIGKILL}, {"STOP", SIGSTOP},
	};
	long n;
	size_t i;

	if (parse_long(name, 1, SIGRTMAX, &n) == 0) {
		return (int)n;
	}
	if (strncasecmp(name, "SIG", 3) == 0) {
		name += 3;
	}
	for (i = 0; i < ARRAY_SIZE(sigs); i++) {
		if (strcasecmp(name, sigs[i].name) == 0) {
			return sigs[i].sig;
		}
	}
	return -EINVAL;
}

static int do_signals(struct parser *p)
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
		return oom(p);
	}
	s->nsignals = 0;
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*item)) {
			item++;
		}
		sig = parse_signal(item);
		if (sig < 0) {
			rc = fail(p, O_SIGNALS, "unknown signal \"%s\"", show(b, sizeof(b), item));
			break;
		}
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
			rc = fail(p, O_SIGNALS, "SIG%s cannot be handled", sigabbrev_np(sig));
			break;
		}
		for (i = 0; i < s->nsignals && s->signals[i] != sig; i++) {
		}
		if (i < s->nsignals) {
			continue;
		}
		if (s->nsignals == JOBSPEC_MAX_SIGNALS) {
			rc = fail(p, O_SIGNALS, "more than %d signals", JOBSPEC_MAX_SIGNALS);
			break;
		}
		s->signals[s->nsignals++] = sig;
	}
	free(copy);
	if (rc == 0 && s->nsignals == 0) {
		rc = fail(p, O_SIGNALS, "no signal given");
	}
	return rc;
}

static int do_log_prefix(struct parser *p)
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
			return fail(p, O_LOG_PREFIX, "control character in template");
		}
	}
	for (q = strchr(v, '{'); q != NULL; q = strchr(end, '{')) {
		end = strchr(q, '}');
		if (end == NULL) {
			return fail(p, O_LOG_PREFIX, "unclosed \"{\" in \"%s\"", show(b, sizeof(b), v));
		}
		for (i = 0; i < ARRAY_SIZE(fields); i++) {
			if (strlen(fields[i]) == (size_t)(end - q - 1) &&
			    strncmp(fields[i], q + 1, (size_t)(end - q - 1)) == 0) {
				break;
			}
		}
		if (i == ARRAY_SIZE(fields)) {
			return fail(p, O_LOG_PREFIX,
				    "unknown field \"%.*s\" (use {rank} {local_rank} {role} {host})",
				    (int)(end - q + 1 > 40 ? 40 : end - q + 1), q);
		}
	}
	if (strlen(v) > 256) {
		return fail(p, O_LOG_PREFIX, "longer than 256 bytes");
	}
	return set_str(&p->spec->log_prefix, v) < 0 ? oom(p) : 0;
}

static int do_log_dir(struct parser *p)
{
	struct stat st;
	int rc;

	if (!p->v[O_LOG_DIR].set) {
		return 0;
	}
	rc = text_value(p, O_LOG_DIR, PATH_MAX - 64, &p->spec->log_dir);
	if (rc != 0) {
		return rc;
	}
	if (stat(p->spec->log_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
		return fail(p, O_LOG_DIR, "%s exists and is not a directory", p->spec->log_dir);
	}
	return 0;
}

int cli_resolve_local_addr(const char *s, char **addr, char **ifname, struct crun_diag *d)
{
	char buf[INET6_ADDRSTRLEN];
	struct in6_addr a6;
	struct in_addr a4;
	struct ifaddrs *ifs = NULL, *it;
	struct addrinfo hints, *res = NULL, *ai;
	const void *src = NULL;
	bool named = false;
	int family = 0, rc, pass;

	*addr = NULL;
	*ifname = NULL;
	if (inet_pton(AF_INET, s, &a4) == 1) {
		inet_ntop(AF_INET, &a4, buf, sizeof(buf));
		goto found;
	}
	if (inet_pton(AF_INET6, s, &a6) == 1) {
		inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
		goto found;
	}
	if (strlen(s) < IFNAMSIZ && getifaddrs(&ifs) == 0) {
		/* IPv4 first (NCCL and gloo prefer it), then a global IPv6 address. */
		for (pass = 0; pass < 2 && src == NULL; pass++) {
			for (it = ifs; it != NULL; it = it->ifa_next) {
				if (strcmp(it->ifa_name, s) != 0) {
					continue;
				}
				named = true;
				if (it->ifa_addr == NULL) {
					continue;
				}
				family = it->ifa_addr->sa_family;
				if (pass == 0 && family == AF_INET) {
					src = &((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr;
					break;
				}
				if (pass == 1 && family == AF_INET6 &&
				    !IN6_IS_ADDR_LINKLOCAL(
					    &((struct sockaddr_in6 *)(void *)it->ifa_addr)->sin6_addr)) {
					src = &((struct sockaddr_in6 *)(void *)it->ifa_addr)->sin6_addr;
					break;
				}
			}
		}
		if (src != NULL) {
			inet_ntop(family, src, buf, sizeof(buf));
			freeifaddrs(ifs);
			*ifname = strdup(s);
			if (*ifname == NULL) {
				return diag_set(d, -ENOMEM, "out of memory");
			}
			goto found;
		}
		freeifaddrs(ifs);
		if (named) {
			return diag_set(d, -ENOENT, "interface %s has no usable address", s);
		}
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(s, NULL, &hints, &res);
	if (rc != 0) {
		return diag_set(d, -ENOENT, "\"%s\" is not an address, an interface or a known host (%s)",
				s, gai_strerror(rc));
	}
	for (pass = 0; pass < 2 && src == NULL; pass++) {
		for (ai = res; ai != NULL; ai = ai->ai_next) {
			if (pass == 0 && ai->ai_family == AF_INET) {
				src = &((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr;
			} else if (pass == 1 && ai->ai_family == AF_INET6) {
				src = &((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr;
			}
			if (src != NULL) {
				family = ai->ai_family;
				break;
			}
		}
	}
	if (src == NULL) {
		freeaddrinfo(res);
		return diag_set(d, -ENOENT, "%s has no IPv4 or IPv6 address", s);
	}
	inet_ntop(family, src, buf, sizeof(buf));
	freeaddrinfo(res);
found:
	*addr = strdup(buf);
	if (*addr == NULL) {
		free(*ifname);
		*ifname = NULL;
		return diag_set(d, -ENOMEM, "out of memory");
	}
	return 0;
}

static int do_local_addr(struct parser *p)
{
	struct job_spec *s = p->spec;
	struct crun_diag ld = {0};
	int rc;

	if (!p->v[O_LOCAL_ADDR].set) {
		return 0;
	}
	rc = text_value(p, O_LOCAL_ADDR, 255, &s->local_addr);
	if (rc != 0) {
		return rc;
	}
	rc = cli_resolve_local_addr(s->local_addr, &s->advertise_addr, &s->socket_ifname, &ld);
	if (rc == -ENOMEM) {
		return oom(p);
	}
	if (rc < 0) {
		return fail(p, O_LOCAL_ADDR, "%s", ld.msg);
	}
	return 0;
}

/* ---- the program ---- */

/* 0 if @path is an executable regular file, else -ENOENT, -EISDIR or -EACCES. */
static int check_exec(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0) {
		return -errno;
	}
	if (S_ISDIR(st.st_mode)) {
		return -EISDIR;
	}
	if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0) {
		return -EACCES;
	}
	return 0;
}

/* execvp's search: a name with a '/' is used as is; otherwise each PATH entry is tried. */
static int find_exec(const char *name, char **out)
{
	const char *path = getenv("PATH");
	const char *dir, *colon;
	char cand[PATH_MAX];
	size_t dl;
	int rc, best = -ENOENT;

	if (strchr(name, '/') != NULL) {
		rc = check_exec(name);
		if (rc == 0) {
			*out = strdup(name);
			return *out == NULL ? -ENOMEM : 0;
		}
		return rc;
	}
	if (path == NULL) {
		path = "/usr/local/bin:/bin:/usr/bin"; /* glibc's execvp default */
	}
	for (dir = path;; dir = colon + 1) {
		colon = strchr(dir, ':');
		dl = colon ? (size_t)(colon - dir) : strlen(dir);
		if (dl == 0) {
			rc = snprintf(cand, sizeof(cand), "%s", name);
		} else {
			rc = snprintf(cand, sizeof(cand), "%.*s/%s", (int)dl, dir, name);
		}
		if (rc > 0 && (size_t)rc < sizeof(cand)) {
			rc = check_exec(cand);
			if (rc == 0) {
				*out = strdup(cand);
				return *out == NULL ? -ENOMEM : 0;
			}
			if (rc == -EACCES) {
				best = -EACCES;
			}
		}
		if (colon == NULL) {
			break;
		}
	}
	return best == -EACCES ? -EACCES : -ENOEXEC; /* -ENOEXEC here: not found in PATH */
}

static int exec_error(struct parser *p, const char *what, const char *name, int rc, bool hint)
{
	char b[64];

	show(b, sizeof(b), name);
	switch (rc) {
	case -ENOENT:
		return fail(p, O_COUNT, "%s %s: no such file", what, b);
	case -ENOEXEC:
		if (hint && access(name, F_OK) == 0) {
			return fail(p, O_COUNT, "%s %s: not found in PATH (use ./%s)", what, b, b);
		}
		return fail(p, O_COUNT, "%s %s: not found in PATH", what, b);
	case -EISDIR:
		return fail(p, O_COUNT, "%s %s: is a directory", what, b);
	case -EACCES:
		if (hint) {
			return fail(p, O_COUNT,
				    "%s %s: not executable (chmod +x it, or use --run-path to run "
				    "it under python)", what, b);
		}
		return fail(p, O_COUNT, "%s %s: not executable", what, b);
	case -ENOMEM:
		return oom(p);
	default:
		return fail(p, O_COUNT, "%s %s: %s", what, b, strerror(-rc));
	}
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int do_program(struct parser *p)
{
	struct job_spec *s = p->spec;
	const char *pyenv = getenv("PYTHON_EXEC");
	bool module, no_python, run_path;
	struct stat st;
	char *found = NULL;
	char b[64];
	int rc, i;

	if (flag_value(p, O_MODULE, &module) != 0 || flag_value(p, O_NO_PYTHON, &no_python) != 0 ||
	    flag_value(p, O_RUN_PATH, &run_path) != 0) {
		return CLI_USAGE;
	}
	if (module && no_python) {
		return fail(p, O_MODULE, "cannot be combined with --no-python");
	}
	if (module && run_path) {
		return fail(p, O_MODULE, "cannot be combined with --run-path");
	}
	if (run_path && no_python) {
		return fail(p, O_RUN_PATH, "cannot be combined with --no-python");
	}
	if (*p->program == '\0') {
		return fail(p, O_COUNT, "program: empty name");
	}
	if (module) {
		s->program_kind = PROGRAM_MODULE;
	} else if (no_python) {
		s->program_kind = PROGRAM_EXEC;
	} else if (run_path || ends_with(p->program, ".py")) {
		s->program_kind = PROGRAM_PYTHON;
	} else {
		s->program_kind = PROGRAM_EXEC;
	}

	if (s->program_kind == PROGRAM_EXEC) {
		rc = find_exec(p->program, &found);
		if (rc < 0) {
			return exec_error(p, "program", p->program, rc, !no_python);
		}
		free(s->program);
		s->program = found;
	} else {
		if (pyenv != NULL && *pyenv != '\0' && set_str(&s->python_exec, pyenv) < 0) {
			return oom(p);
		}
		rc = find_exec(s->python_exec, &found);
		if (rc < 0) {
			return exec_error(p, "python interpreter", s->python_exec, rc, false);
		}
		free(found);
		if (s->program_kind == PROGRAM_PYTHON) {
			if (stat(p->program, &st) != 0) {
				return exec_error(p, "program", p->program, -errno, false);
			}
			if (S_ISDIR(st.st_mode)) {
				return fail(p, O_COUNT, "program %s: is a directory",
					    show(b, sizeof(b), p->program));
			}
			if (access(p->program, R_OK) != 0) {
				return fail(p, O_COUNT, "program %s: not readable",
					    show(b, sizeof(b), p->program));
			}
		}
		if (set_str(&s->program, p->program) < 0) {
			return oom(p);
		}
	}

	s->args = calloc((size_t)p->nargs + 1, sizeof(char *));
	if (s->args == NULL) {
		return oom(p);
	}
	for (i = 0; i < p->nargs; i++) {
		s->args[i] = strdup(p->args[i]);
		if (s->args[i] == NULL) {
			return oom(p);
		}
		s->nargs = i + 1;
	}
	return 0;
}

/* ---- GPU counting ---- */

struct gpu_probe {
	int count; /* >= 0 */
	char msg[200];
};

/* The CUDA driver API, loaded at run time: no build dependency on CUDA. */
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_errstr_fn)(int, const char **);

static void gpu_probe_child(struct gpu_probe *r)
{
	cu_init_fn cu_init;
	cu_count_fn cu_count;
	cu_errstr_fn cu_errstr;
	const char *es = NULL, *cvd;
	void *h;
	int rc, n = 0;

	r->count = 0;
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(r->msg, sizeof(r->msg), "no NVIDIA driver (%s)", dlerror());
		return;
	}
	cu_init = (cu_init_fn)dlsym(h, "cuInit");
	cu_count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
	cu_errstr = (cu_errstr_fn)dlsym(h, "cuGetErrorString");
	if (cu_init == NULL || cu_count == NULL) {
		snprintf(r->msg, sizeof(r->msg), "libcuda.so.1 lacks cuInit/cuDeviceGetCount");
		return;
	}
	cvd = getenv("CUDA_VISIBLE_DEVICES");
	rc = cu_init(0);
	if (rc == 0) {
		rc = cu_count(&n);
	}
	if (rc == 100 || (rc == 0 && n == 0)) { /* CUDA_ERROR_NO_DEVICE */
		snprintf(r->msg, sizeof(r->msg), "no CUDA device visible%s%s%s",
			 cvd ? " (CUDA_VISIBLE_DEVICES=\"" : "", cvd ? cvd : "", cvd ? "\")" : "");
		return;
	}
	if (rc != 0) {
		if (cu_errstr != NULL) {
			cu_errstr(rc, &es);
		}
		snprintf(r->msg, sizeof(r->msg), "CUDA driver error %d (%s)", rc,
			 es ? es : "unknown");
		return;
	}
	r->count = n;
}

int cli_count_gpus(struct crun_diag *d)
{
	struct gpu_probe r;
	struct pollfd pfd;
	size_t got = 0;
	ssize_t n;
	pid_t pid;
	int fds[2], rc, status;
	int64_t deadline, left;

	memset(&r, 0, sizeof(r));
	if (pipe2(fds, O_CLOEXEC) != 0) {
		return diag_set(d, -errno, "pipe: %s", strerror(errno));
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(fds[0]);
		close(fds[1]);
		return diag_set(d, rc, "fork: %s", strerror(-rc));
	}
	if (pid == 0) {
		close(fds[0]);
		gpu_probe_child(&r);
		if (write(fds[1], &r, sizeof(r)) != (ssize_t)sizeof(r)) {
			_exit(1);
		}
		_exit(0);
	}
	close(fds[1]);
	deadline = crun_now_ms() + GPU_PROBE_TIMEOUT_MS;
	rc = 0;
	while (got < sizeof(r)) {
		left = deadline - crun_now_ms();
		if (left <= 0) {
			rc = diag_set(d, -ETIMEDOUT, "CUDA driver did not answer in %d s",
				      GPU_PROBE_TIMEOUT_MS / 1000);
			break;
		}
		pfd.fd = fds[0];
		pfd.events = POLLIN;
		n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			continue;
		}
		n = read(fds[0], (char *)&r + got, sizeof(r) - got);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			rc = diag_set(d, -EPIPE, "GPU probe process died");
			break;
		}
		got += (size_t)n;
	}
	close(fds[0]);
	if (rc < 0) {
		kill(pid, SIGKILL);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	if (rc < 0) {
		return rc;
	}
	r.msg[sizeof(r.msg) - 1] = '\0';
	if (r.count <= 0) {
		diag_set(d, CRUN_ENODEV, "%s", r.msg);
		return 0;
	}
	return r.count;
}

/* ---- putting it together ---- */

static int check_static_and_standalone(struct parser *p, bool standalone)
{
	struct job_spec *s = p->spec;
	bool dynamic;

	if (standalone) {
		if (s->max_nodes != 1) {
			return fail(p, O_STANDALONE, "runs one node, but --nnodes is %d:%d",
				    s->min_nodes, s->max_nodes);
		}
		if (p->v[O_NODE_RANK].set && strncmp(p->v[O_NODE_RANK].origin, "PET_", 4) != 0) {
			return fail(p, O_NODE_RANK, "cannot be combined with --standalone");
		}
		p->v[O_NODE_RANK].set = false;
		return 0;
	}
	dynamic = s->rdzv_kind != RDZV_KIND_STATIC;
	/*
	 * Schedulers export PET_NODE_RANK for every job; like torchrun, a dynamic backend ignores
	 * it. Only a --node-rank typed on this command line is a contradiction.
	 */
	if (p->v[O_NODE_RANK].set && dynamic && strncmp(p->v[O_NODE_RANK].origin, "PET_", 4) == 0) {
		p->v[O_NODE_RANK].set = false;
	}
	if (p->v[O_NODE_RANK].set && dynamic) {
		return fail(p, O_NODE_RANK,
			    "only for --rdzv-backend static (%s assigns node ranks itself)",
			    s->rdzv_kind == RDZV_KIND_FILE ? "file" : "c10d");
	}
	if (!dynamic && s->min_nodes != s->max_nodes) {
		return fail(p, O_NNODES, "static rendezvous needs a fixed node count, got %d:%d "
					 "(use --rdzv-backend c10d for elastic jobs)",
			    s->min_nodes, s->max_nodes);
	}
	return 0;
}

/*
 * --virtual-local-rank gives worker i the i-th entry of CUDA_VISIBLE_DEVICES as its only device.
 * With fewer entries than workers some worker would get a device the user hid (or none): refuse
 * before anything starts rather than pick one.
 */
static int check_virtual_devices(struct parser *p)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	const char *q;
	int n = 0;

	if (!p->spec->virtual_local_rank || cvd == NULL) {
		return 0;
	}
	for (q = cvd; *q != '\0';) {
		size_t len = strcspn(q, ",");

		if (len == 0) {
			break; /* CUDA stops at the first empty entry too */
		}
		n++;
		q += len;
		if (*q == ',') {
			q++;
		}
	}
	if (n < p->spec->nproc_per_node) {
		return fail(p, O_VIRTUAL_LOCAL_RANK,
			    "%d workers per node, but CUDA_VISIBLE_DEVICES=\"%.64s\" lists %d device%s",
			    p->spec->nproc_per_node, cvd, n, n == 1 ? "" : "s");
	}
	return 0;
}

int cli_parse_diag(int argc, char **argv, struct job_spec *spec, struct crun_diag *d)
{
	struct crun_diag local = {0};
	struct parser p;
	bool standalone, count_later, yes;
	char b[64];
	int rc;

	if (d == NULL) {
		d = &local;
	}
	memset(&p, 0, sizeof(p));
	p.spec = spec;
	p.d = d;
	if (jobspec_defaults(spec) < 0) {
		return oom(&p);
	}
	read_env(&p);
	rc = read_argv(&p, argc, argv);
	if (rc != CLI_OK) {
		return rc;
	}

	/* Cheap checks first, in a fixed order; counting GPUs and resolving names come last. */
	if ((rc = do_nnodes(&p)) != 0 || (rc = do_nproc(&p, &count_later)) != 0 ||
	    (rc = do_backend(&p)) != 0 || (rc = flag_value(&p, O_STANDALONE, &standalone)) != 0) {
		return rc;
	}
	spec->standalone = standalone;
	if (standalone) {
		/* torchrun: --standalone picks the rendezvous itself and ignores the user's. */
		if (p.v[O_RDZV_BACKEND].set || p.v[O_RDZV_ENDPOINT].set || p.v[O_RDZV_ID].set) {
			fprintf(stderr, "crun: warning: --standalone ignores --rdzv-backend, "
					"--rdzv-endpoint and --rdzv-id\n");
		}
		p.v[O_RDZV_ENDPOINT].set = false;
		p.v[O_RDZV_ID].set = false;
		spec->rdzv_kind = RDZV_KIND_C10D;
		free(spec->rdzv_id);
		spec->rdzv_id = NULL;
		if (random_run_id(&spec->rdzv_id) < 0 ||
		    set_str(&spec->rdzv_endpoint, "127.0.0.1:0") < 0 ||
		    set_str(&spec->rdzv_host, "127.0.0.1") < 0) {
			return oom(&p);
		}
		spec->rdzv_port = 0;
	}
	if ((rc = check_static_and_standalone(&p, standalone)) != 0) {
		return rc;
	}
	if (p.v[O_MASTER_ADDR].set) {
		if ((rc = text_value(&p, O_MASTER_ADDR, 255, &spec->master_addr)) != 0) {
			return rc;
		}
		if (!valid_host(spec->master_addr)) {
			return fail(&p, O_MASTER_ADDR, "expected a host name or IP address, got \"%s\"",
				    show(b, sizeof(b), spec->master_addr));
		}
	}
	if (p.v[O_MASTER_PORT].set) {
		if ((rc = int_value(&p, O_MASTER_PORT, 0, 65535, &spec->master_port)) != 0) {
			return rc;
		}
		if (spec->master_port == 0 && spec->max_nodes > 1) {
			return fail(&p, O_MASTER_PORT, "port 0 cannot be found by other nodes");
		}

	}
	if (spec->rdzv_kind == RDZV_KIND_STATIC) {
		spec->node_rank = 0;
		if (p.v[O_NODE_RANK].set &&
		    (rc = int_value(&p, O_NODE_RANK, 0, spec->max_nodes - 1, &spec->node_rank)) != 0) {
			return rc;
		}
	}
	if (!standalone && ((rc = do_endpoint(&p)) != 0 || (rc = do_rdzv_id(&p)) != 0)) {
		return rc;
	}
	/* Static multi-node jobs keep crun's store one port above the master's (agent/agent.c). */
	if (spec->rdzv_kind == RDZV_KIND_STATIC && spec->max_nodes > 1 &&
	    spec->master_port == 65535) {
		return fail(&p, p.v[O_RDZV_ENDPOINT].set ? O_RDZV_ENDPOINT : O_MASTER_PORT,
			    "port 65535 leaves no port for the store (it uses the master port + 1)");
	}
	if ((rc = do_rdzv_conf(&p)) != 0) {
		return rc;
	}
	if (p.v[O_MAX_RESTARTS].set &&
	    (rc = int_value(&p, O_MAX_RESTARTS, 0, RESTARTS_MAX, &spec->max_restarts)) != 0) {
		return rc;
	}
	if (p.v[O_MONITOR_INTERVAL].set) {
		int64_t ms;

		if ((rc = seconds_value(&p, O_MONITOR_INTERVAL, &ms)) != 0) {
			return rc;
		}
		spec->monitor_interval_s = (double)ms / 1000.0;
	}
	if (p.v[O_START_METHOD].set && strcmp(p.v[O_START_METHOD].val, "spawn") != 0 &&
	    strcmp(p.v[O_START_METHOD].val, "fork") != 0 &&
	    strcmp(p.v[O_START_METHOD].val, "forkserver") != 0) {
		return fail(&p, O_START_METHOD, "expected spawn, fork or forkserver, got \"%s\"",
			    show(b, sizeof(b), p.v[O_START_METHOD].val));
	}
	if (p.v[O_LOGS_SPECS].set && strcmp(p.v[O_LOGS_SPECS].val, "default") != 0) {
		return fail(&p, O_LOGS_SPECS, "Python LogsSpecs plugins are not supported (only "
					      "\"default\"; use --log-dir and --log-prefix)");
	}
	if (p.v[O_SHUTDOWN_TIMEOUT].set &&
	    (rc = seconds_value(&p, O_SHUTDOWN_TIMEOUT, &spec->shutdown_timeout_ms)) != 0) {
		return rc;
	}
	if ((rc = do_signals(&p)) != 0) {
		return rc;
	}
	if (p.v[O_ROLE].set && (rc = text_value(&p, O_ROLE, 128, &spec->role)) != 0) {
		return rc;
	}
	if ((rc = flag_value(&p, O_VIRTUAL_LOCAL_RANK, &yes)) != 0) {
		return rc;
	}
	spec->virtual_local_rank = yes;
	if ((rc = flag_value(&p, O_LOCAL_RANK_ARG, &yes)) != 0) {
		return rc;
	}
	spec->local_rank_arg = yes;
	if ((rc = do_log_dir(&p)) != 0 || (rc = do_std_map(&p, O_REDIRECTS, spec->redirects)) != 0 ||
	    (rc = do_std_map(&p, O_TEE, spec->tee)) != 0 || (rc = do_log_prefix(&p)) != 0) {
		return rc;
	}
	if ((rc = do_program(&p)) != 0) {
		return rc;
	}
	if ((rc = do_local_addr(&p)) != 0) {
		return rc;
	}
	if (count_later && (rc = count_nproc(&p)) != 0) {
		return rc;
	}
	if ((rc = do_ranks_filter(&p)) != 0) {
		return rc;
	}
	if ((rc = check_virtual_devices(&p)) != 0) {
		return rc;
	}

	/* What the rendezvous needs, pointing into the spec (valid until jobspec_finish()). */
	spec->rdzv.run_id = spec->rdzv_id;
	spec->rdzv.min_nodes = spec->min_nodes;
	spec->rdzv.max_nodes = spec->max_nodes;
	spec->rdzv.node_rank = spec->rdzv_kind == RDZV_KIND_STATIC ? spec->node_rank : -1;
	spec->rdzv.local_world_size = spec->nproc_per_node;
	spec->rdzv.advertise_addr = spec->advertise_addr;
	spec->rdzv.max_restarts = spec->max_restarts;
	return CLI_OK;
}

int cli_parse(int argc, char **argv, struct job_spec *spec)
{
	struct crun_diag d = {0};
	int rc;

	rc = cli_parse_diag(argc, argv, spec, &d);
	if (rc == CLI_USAGE) {
		fprintf(stderr, "crun: %s\n", d.msg);
	}
	return rc;
}

/* "  LEFT  help..." with the help text wrapped at 80 columns under column 32. */
static void print_wrapped(FILE *out, const char *left, const char *help)
{
	const char *q = help;
	size_t n, brk;

	while (*q != '\0') {
		n = strlen(q);
		brk = n;
		if (n > 48) {
			for (brk = 48; brk > 0 && q[brk] != ' '; brk--) {
			}
			if (brk == 0) {
				brk = n;
			}
		}
		fprintf(out, "  %-28s  %.*s\n", left, (int)brk, q);
		left = "";
		q += brk;
		while (*q == ' ') {
			q++;
		}
	}
}

void cli_usage(FILE *out)
{
	char left[64];
	int k;

	fprintf(out, "Usage: crun [OPTIONS] PROGRAM [ARGS...]\n"
		     "Launch PROGRAM as --nproc-per-node workers on this node, as one job with the\n"
		     "same command on every other node (a torchrun equivalent). A .py PROGRAM runs\n"
		     "under python3 -u ($PYTHON_EXEC); ARGS pass through unchanged except\n"
		     "${local_rank}. Every option also reads PET_<OPTION> (PET_NPROC_PER_NODE=4);\n"
		     "the command line wins. Dashes and underscores are alike (--nproc_per_node).\n");
	for (k = 0; k < O_COUNT; k++) {
		if (opts[k].section != NULL) {
			fprintf(out, "\n%s:\n", opts[k].section);
		}
		if (opts[k].shrt != 0) {
			snprintf(left, sizeof(left), "-%c, --%s%s%s", opts[k].shrt, opts[k].name,
				 opts[k].arg ? " " : "", opts[k].arg ? opts[k].metavar : "");
		} else {
			snprintf(left, sizeof(left), "    --%s%s%s", opts[k].name,
				 opts[k].arg ? " " : "", opts[k].arg ? opts[k].metavar : "");
		}
		if (strlen(left) > 28) {
			fprintf(out, "  %s\n", left);
			left[0] = '\0';
		}
		print_wrapped(out, left, opts[k].help);
	}
	fprintf(out, "\nExit status: 0 on success; the first failed worker's exit code (128+N for\n"
		     "signal N); 1 when rendezvous or the agent itself failed; 2 for a bad command\n"
		     "line; 128+N when crun was stopped by signal N. See crun(1).\n");
}
