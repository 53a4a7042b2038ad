/* SPDX-License-Identifier: MIT */
/* src/crun-store.c: a command line over the store client, for operators and scripts. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>

#include "config.h"
#include "src/common/parse.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/token.h"
#include "src/opt.h"
#include "src/opt_store.h"

/* Exit status, as grep: found / not found / trouble. */
enum { EXIT_FOUND = 0, EXIT_NOTFOUND = 1, EXIT_TROUBLE = 2 };

enum store_cli_opt {
	S_ENDPOINT,
	S_PREFIX,
	S_TIMEOUT,
	S_TOKEN_FILE,
	S_TOKEN,
	S_SCOPE,
	S_INSECURE,
	S_TLS_CA,
	S_TLS_CERT,
	S_TLS_KEY,
	S_TLS_SERVER_NAME,
	S_VERBOSE,
	S_QUIET,
	S_HELP,
	S_VERSION,
	S_COUNT
};

static const struct opt store_opts[S_COUNT] = {
	[S_ENDPOINT] = OPT_STORE_ENDPOINT("Options", false, "CRUN_STORE_ENDPOINT", "E",
					  "HOST:PORT, [V6]:PORT, tcp://HOST:PORT, file:///PATH or "
					  "etcd://HOST:PORT[,HOST:PORT...] (default: "
					  "$CRUN_STORE_ENDPOINT)"),
	[S_PREFIX] = {"prefix", 'p', true, true, "P",
		      "prepended to every key (default: $CRUN_STORE_PREFIX, or none)", NULL},
	[S_TIMEOUT] = {"timeout", 't', true, false, "SEC",
		       "connect and operation deadline in seconds, fractions allowed (default: "
		       "30 to connect, 300 per operation)", NULL},
	[S_TOKEN_FILE] = OPT_STORE_TOKEN_FILE(
		NULL, "the store's token, a file only you can read (default: "
		      "$CRUN_STORE_TOKEN_FILE, $CRUN_STORE_TOKEN, else the per-user file "
		      "$CRUN_TOKEN_FILE, $XDG_CONFIG_HOME/crun/token or ~/.config/crun/token, "
		      "created 0600 on first use)"),
	[S_TOKEN] = {"token", 'T', true, false, "T",
		     "the token itself (less safe: argv is visible to others)", NULL},
	[S_SCOPE] = {"scope", 0, true, false, "RUN", "confine the connection to run RUN's keys",
		     NULL},
	[S_INSECURE] = OPT_STORE_INSECURE(NULL, "send no credential (for a store started with "
						"--insecure)"),
	[S_TLS_CA] = OPT_STORE_TLS_CA(NULL, "CRUN_STORE_TLS_CA",
				      "TLS: verify the store's certificate against the CA in FILE "
				      "(default: $CRUN_STORE_TLS_CA; any TLS option turns TLS on)"),
	[S_TLS_CERT] = OPT_STORE_TLS_CERT(NULL, "CRUN_STORE_TLS_CERT",
					  "mutual TLS: our PEM certificate ($CRUN_STORE_TLS_CERT) ..."),
	[S_TLS_KEY] = OPT_STORE_TLS_KEY(NULL, "CRUN_STORE_TLS_KEY",
					"... and key, mode 0600 ($CRUN_STORE_TLS_KEY)"),
	[S_TLS_SERVER_NAME] = OPT_STORE_TLS_SERVER_NAME(
		NULL, "CRUN_STORE_TLS_SERVER_NAME",
		"the name the store's certificate carries (default: the endpoint's host; "
		"$CRUN_STORE_TLS_SERVER_NAME)"),
	[S_VERBOSE] = OPT_VERBOSE_ENTRY(NULL, "log the client's reconnects and retries at debug "
					      "level"),
	[S_QUIET] = OPT_QUIET_ENTRY,
	[S_HELP] = OPT_HELP_ENTRY(NULL),
	[S_VERSION] = OPT_VERSION_ENTRY,
};

static void print_usage(FILE *out);

static const struct opt_table store_table = {
	.prog = "crun-store",
	.opts = store_opts,
	.n = S_COUNT,
	.env_prefix = "CRUN_STORE_",
	.operands = true,
	.usage = print_usage,
	.version = "crun-store " CRUN_VERSION,
};

static void print_usage(FILE *out)
{
	fputs("Usage: crun-store [OPTION]... COMMAND [ARG]...\n"
	      "\n"
	      "Talk to a crun store (crun-rdzvd, an agent's embedded store, or a shared file).\n",
	      out);
	opt_print_options(out, &store_table);
	fputs("\n"
	      "Commands:\n"
	      "  set KEY VALUE              store VALUE at KEY\n"
	      "  get KEY                    print the value of KEY (exit 1 if absent)\n"
	      "  add KEY N                  add integer N to the counter at KEY, print the result\n"
	      "  wait KEY... [--timeout SEC] wait until every KEY exists (exit 1 on timeout)\n"
	      "  wait-get KEY [--timeout SEC] wait until KEY exists, print its value (exit 1 on\n"
	      "                             timeout)\n"
	      "  cas KEY EXPECTED DESIRED   set DESIRED if the value is EXPECTED (\"\" = absent);\n"
	      "                             print the value now stored (exit 1 unless DESIRED)\n"
	      "  del KEY                    delete KEY (exit 1 if it did not exist)\n"
	      "  check KEY...               exit 0 if every KEY exists now, 1 if not\n"
	      "  keys                       print the number of keys in the whole store\n"
	      "  append KEY VALUE           append VALUE to KEY (created when absent)\n"
	      "  ping                       check that the store answers\n"
	      "\n"
	      "Exit status: 0 success or found; 1 not found, wait timed out, cas value not DESIRED or\n"
	      "check false; 2 bad usage (a credential file others can read included) or a store\n"
	      "error (the message on stderr says which).\n",
	      out);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("crun-store: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see crun-store --help)\n", stderr);
	return EXIT_TROUBLE;
}

/* @rc of @what on @key (NULL: none) in words; @st (NULL: none) has the store's own message. */
static int store_error(struct crun_store *st, const char *what, const char *key, int rc)
{
	const char *why;

	switch (rc) {
	case -ENOMEM:
		/* The server's reply names what ran out: a quota (its limit, its run) or memory. */
		why = st != NULL && store_last_error(st)[0] != '\0' ? store_last_error(st)
								      : crun_strerror(rc);
		break;
	case -EMSGSIZE:
		why = "over the store's limits (a key with its prefix is at most 4096 bytes, a "
		      "value 16 MiB, a request 4096 keys)";
		break;
	case -ETIMEDOUT:
		why = "no answer before the deadline (see --timeout)";
		break;
	case -EACCES:
		why = "not in this connection's scope (a run-confined credential, or --scope)";
		break;
	case -ECONNRESET:
	case -EPIPE:
		why = "the store closed the connection";
		break;
	default:
		why = crun_strerror(rc);
		break;
	}
	if (key != NULL) {
		/* Keep the line readable when the key itself is the problem. */
		fprintf(stderr, "crun-store: %s %.200s%s: %s\n", what, key,
			strlen(key) > 200 ? "..." : "", why);
	} else {
		fprintf(stderr, "crun-store: %s: %s\n", what, why);
	}
	return EXIT_TROUBLE;
}

/* Seconds (fractions allowed) to milliseconds; -EINVAL unless 0 <= SEC <= 2,000,000. */
static int parse_seconds(const char *s, int *ms)
{
	int64_t v;

	if (parse_seconds_ms(s, 2000000.0, &v) != 0) {
		return -EINVAL;
	}
	*ms = (int)v;
	return 0;
}

static void print_value(const void *v, size_t len)
{
	fwrite(v, 1, len, stdout);
	fputc('\n', stdout);
}

static int want_args(const char *cmd, int have, int min, int max, const char *shape)
{
	if (have < min || (max >= 0 && have > max)) {
		return usage_error("%s: expected %s, got %d argument%s", cmd, shape, have,
				   have == 1 ? "" : "s");
	}
	return 0;
}

/*
 * The arguments of "wait" and "wait-get" (@cmd): keys into @keys (argc + 1 entries), their
 * count into *@n, and --timeout SEC into *@timeout_ms. 0, or the usage error's exit code.
 */
static int wait_args(const char *cmd, int argc, char **argv, const char **keys, int *n,
		     int *timeout_ms)
{
	const char *sec;
	int i;

	for (i = 0, *n = 0; i < argc; i++) {
		const char *a = argv[i];

		sec = NULL;
		if (strcmp(a, "--timeout") == 0 || strcmp(a, "-t") == 0) {
			sec = ++i < argc ? argv[i] : "";
		} else if (strncmp(a, "--timeout=", 10) == 0) {
			sec = a + 10;
		} else {
			keys[(*n)++] = a;
		}
		if (sec != NULL && parse_seconds(sec, timeout_ms) < 0) {
			return usage_error("%s: --timeout: expected seconds >= 0, got \"%s\"", cmd,
					   sec);
		}
	}
	return *n == 0 ? usage_error("%s: expected at least one KEY", cmd) : 0;
}

static int cmd_wait(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	const char **keys;
	int n = 0, rc;

	keys = calloc((size_t)argc + 1, sizeof(*keys));
	if (keys == NULL) {
		return store_error(NULL, "wait", NULL, -ENOMEM);
	}
	rc = wait_args("wait", argc, argv, keys, &n, &timeout_ms);
	if (rc != 0) {
		free(keys);
		return rc;
	}
	rc = crun_store_wait(st, keys, (size_t)n, timeout_ms);
	free(keys);
	if (rc == -ETIMEDOUT) {
		fprintf(stderr, "crun-store: wait: timed out\n");
		return EXIT_NOTFOUND;
	}
	return rc < 0 ? store_error(st, "wait", NULL, rc) : EXIT_FOUND;
}

/* The end of get and wait-get: the store's error (@rc < 0), else the value @v printed. */
static int print_got(struct crun_store *st, const char *cmd, const char *key, int rc, void *v,
		     size_t len)
{
	if (rc < 0) {
		return store_error(st, cmd, key, rc);
	}
	print_value(v, len);
	free(v);
	return EXIT_FOUND;
}

/* wait-get KEY [--timeout SEC]: TCPStore's blocking get (crun_store_wait_get()). */
static int cmd_wait_get(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	const char *keys[4];
	void *v = NULL;
	size_t len = 0;
	int n = 0, rc;

	if (argc > 3) {
		return usage_error("wait-get: expected KEY [--timeout SEC], got %d arguments", argc);
	}
	rc = wait_args("wait-get", argc, argv, keys, &n, &timeout_ms);
	if (rc != 0) {
		return rc;
	}
	if (n != 1) {
		return usage_error("wait-get: expected one KEY, got %d", n);
	}
	rc = crun_store_wait_get(st, keys[0], &v, &len, timeout_ms);
	if (rc == -ETIMEDOUT) {
		fprintf(stderr, "crun-store: wait-get: timed out\n");
		return EXIT_NOTFOUND;
	}
	return print_got(st, "wait-get", keys[0], rc, v, len);
}

static int cmd_set(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	int rc = crun_store_set(st, argv[0], argv[1], strlen(argv[1]));

	return rc < 0 ? store_error(st, "set", argv[0], rc) : EXIT_FOUND;
}

static int cmd_get(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	void *v = NULL;
	size_t len = 0;
	int rc;

	rc = crun_store_get(st, argv[0], &v, &len);
	if (rc == -ENOENT) {
		return EXIT_NOTFOUND;
	}
	return print_got(st, "get", argv[0], rc, v, len);
}

static int cmd_add(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	int64_t n;
	int rc;

	if (parse_i64(argv[1], &n) < 0) {
		return usage_error("add: N: expected a 64-bit integer, got \"%s\"", argv[1]);
	}
	rc = crun_store_add(st, argv[0], n, &n);
	if (rc == -EINVAL || rc == -ERANGE) {
		fprintf(stderr, "crun-store: add %s: %s\n", argv[0],
			rc == -EINVAL ? "the value stored is not a decimal integer"
				      : "the sum overflows a 64-bit integer");
		return EXIT_TROUBLE;
	}
	if (rc < 0) {
		return store_error(st, "add", argv[0], rc);
	}
	printf("%" PRId64 "\n", n);
	return EXIT_FOUND;
}

static int cmd_cas(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	void *v = NULL;
	size_t len = 0;
	int rc;

	rc = crun_store_compare_set(st, argv[0], argv[1], strlen(argv[1]), argv[2],
				    strlen(argv[2]), &v, &len);
	if (rc < 0) {
		return store_error(st, "cas", argv[0], rc);
	}
	print_value(v, len);
	rc = len == strlen(argv[2]) && memcmp(v, argv[2], len) == 0 ? EXIT_FOUND : EXIT_NOTFOUND;
	free(v);
	return rc;
}

static int cmd_del(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	int rc = crun_store_delete(st, argv[0]);

	if (rc == -ENOENT) {
		return EXIT_NOTFOUND;
	}
	return rc < 0 ? store_error(st, "del", argv[0], rc) : EXIT_FOUND;
}

static int cmd_check(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	bool all;
	int rc;

	rc = crun_store_check(st, (const char *const *)argv, (size_t)argc, &all);
	if (rc < 0) {
		return store_error(st, "check", NULL, rc);
	}
	return all ? EXIT_FOUND : EXIT_NOTFOUND;
}

static int cmd_keys(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	int64_t n;
	int rc;

	rc = crun_store_num_keys(st, &n);
	if (rc < 0) {
		return store_error(st, "keys", NULL, rc);
	}
	printf("%" PRId64 "\n", n);
	return EXIT_FOUND;
}

static int cmd_append(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	int rc = crun_store_append(st, argv[0], argv[1], strlen(argv[1]));

	return rc < 0 ? store_error(st, "append", argv[0], rc) : EXIT_FOUND;
}

static int cmd_ping(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	int rc = crun_store_ping(st);

	return rc < 0 ? store_error(st, "ping", NULL, rc) : EXIT_FOUND;
}

/* The commands: name, how many arguments (max -1: any), their shape for errors, the code. */
static const struct command {
	const char *name;
	int min, max;
	const char *shape;
	int (*run)(struct crun_store *st, int argc, char **argv, int timeout_ms);
} commands[] = {
	{"set", 2, 2, "KEY VALUE", cmd_set},
	{"get", 1, 1, "KEY", cmd_get},
	{"add", 2, 2, "KEY N", cmd_add},
	{"wait", 0, -1, "KEY... [--timeout SEC]", cmd_wait}, /* counts its own arguments */
	{"wait-get", 0, -1, "KEY [--timeout SEC]", cmd_wait_get}, /* counts its own arguments */
	{"cas", 3, 3, "KEY EXPECTED DESIRED", cmd_cas},
	{"del", 1, 1, "KEY", cmd_del},
	{"check", 1, -1, "KEY...", cmd_check},
	{"keys", 0, 0, "no arguments", cmd_keys},
	{"append", 2, 2, "KEY VALUE", cmd_append},
	{"ping", 0, 0, "no arguments", cmd_ping},
};

static const struct command *find_command(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(name, commands[i].name) == 0) {
			return &commands[i];
		}
	}
	return NULL;
}

/* A TCP store: the only kind the token is for (file and etcd stores have their own). */
static bool tcp_endpoint(const char *ep)
{
	return strstr(ep, "://") == NULL || strncmp(ep, "tcp://", 6) == 0;
}

/*
 * The store @o's flags and environment name, opened through the one configuration value:
 * the token by the one policy (--token-file, --token, then what crun gives its workers,
 * $CRUN_STORE_TOKEN_FILE or $CRUN_STORE_TOKEN, then for a TCP store the per-user default file,
 * created on first use as crun and crun-rdzvd do).
 */
static int open_store(const struct crun_store_opts *o, const char *token, const char *token_file,
		      bool insecure, int timeout_ms, struct crun_store **st)
{
	struct store_settings s = {
		.endpoint = o->endpoint,
		.prefix = o->prefix,
		.scope = o->scope,
		.insecure = insecure,
		.token_file = token_file,
		.token = token,
		.tls_ca = o->tls_ca,
		.tls_cert = o->tls_cert,
		.tls_key = o->tls_key,
		.tls_server_name = o->tls_server_name,
	};
	unsigned policy = STORE_TOKEN_ENV;
	struct crun_diag d = {0};
	struct store_conf c;
	int rc;

	if (token_file == NULL && token == NULL) {
		s.token_file = getenv("CRUN_STORE_TOKEN_FILE"); /* a worker's credential */
	}
	if (tcp_endpoint(o->endpoint)) {
		policy |= STORE_TOKEN_DEFAULT | STORE_TOKEN_CREATE;
	}
	store_settings_etcd_env(&s);
	if (timeout_ms >= 0) {
		/* One deadline for everything; 0 still allows one attempt. */
		s.connect_timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
		s.timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
	}
	rc = store_conf_init(&c, &s, policy, &d);
	if (rc == 0) {
		rc = store_open_conf(&c, st, &d);
	}
	store_conf_finish(&c);
	if (rc < 0) {
		fprintf(stderr, "crun-store: %s\n", d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
	}
	return rc;
}

/* The command line into @o (its strings borrowed from @argv and the environment), *@timeout_ms
 * (-1: the defaults) and *@cmd_at (argv's index of COMMAND). OPT_OK, OPT_EXIT or OPT_USAGE
 * (printed). The token policy is the caller's: *@token and *@insecure say what was given. */
static int parse(int argc, char **argv, struct crun_store_opts *o, const char **token,
		 bool *insecure, int *timeout_ms, int *cmd_at)
{
	static const int ids[OS_COUNT] = {
		[OS_ENDPOINT] = S_ENDPOINT,	[OS_TOKEN_FILE] = S_TOKEN_FILE,
		[OS_INSECURE] = S_INSECURE,	[OS_TLS_CA] = S_TLS_CA,
		[OS_TLS_CERT] = S_TLS_CERT,	[OS_TLS_KEY] = S_TLS_KEY,
		[OS_TLS_SERVER_NAME] = S_TLS_SERVER_NAME, [OS_CONFIG] = -1,
	};
	struct opt_val v[S_COUNT];
	struct opt_store_flags f;
	struct crun_diag d = {0};
	char b[64];
	int rc;

	memset(v, 0, sizeof(v));
	opt_read_env(&store_table, v);
	rc = opt_read_argv(&store_table, v, argc, argv, cmd_at, &d);
	if (rc == OPT_OK && v[S_TIMEOUT].set && parse_seconds(v[S_TIMEOUT].val, timeout_ms) < 0) {
		rc = opt_fail(&v[S_TIMEOUT], &d, "expected seconds >= 0, got \"%s\"",
			      opt_show(b, sizeof(b), v[S_TIMEOUT].val));
	}
	if (rc == OPT_OK) {
		rc = opt_store_take(v, ids, &f, &d);
	}
	if (rc == OPT_OK && f.insecure && v[S_TOKEN].set) {
		rc = opt_fail(&v[S_INSECURE], &d, "cannot be combined with --token or --token-file");
	}
	if (rc != OPT_OK) {
		opt_exit_status(&store_table, rc, &d);
		return rc;
	}
	opt_log_level(&v[S_VERBOSE], &v[S_QUIET]);
	o->endpoint = f.endpoint;
	o->prefix = v[S_PREFIX].set ? v[S_PREFIX].val : NULL;
	o->scope = v[S_SCOPE].set ? v[S_SCOPE].val : NULL;
	o->token_file = f.token_file;
	o->tls_ca = f.tls_ca;
	o->tls_cert = f.tls_cert;
	o->tls_key = f.tls_key;
	o->tls_server_name = f.tls_server_name;
	*token = v[S_TOKEN].set ? v[S_TOKEN].val : NULL;
	*insecure = f.insecure;
	return OPT_OK;
}

int main(int argc, char **argv)
{
	struct crun_store_opts o = {0};
	struct crun_store *st = NULL;
	int timeout_ms = -1, first, rc;
	const struct command *cmd;
	const char *token = NULL;
	bool insecure = false;

	o.struct_size = sizeof(o);
	rc = parse(argc, argv, &o, &token, &insecure, &timeout_ms, &first);
	if (rc != OPT_OK) {
		return rc == OPT_EXIT ? EXIT_FOUND : EXIT_TROUBLE;
	}
	if (first >= argc) {
		return usage_error("no command given");
	}
	cmd = find_command(argv[first]);
	if (cmd == NULL) {
		return usage_error("unknown command \"%s\"", argv[first]);
	}
	if (want_args(cmd->name, argc - first - 1, cmd->min, cmd->max, cmd->shape) != 0) {
		return EXIT_TROUBLE;
	}
	if (o.endpoint == NULL || *o.endpoint == '\0') {
		return usage_error("no endpoint: pass --endpoint or set CRUN_STORE_ENDPOINT");
	}
	rc = open_store(&o, token, o.token_file, insecure, timeout_ms, &st);
	if (rc < 0) {
		return EXIT_TROUBLE;
	}
	rc = cmd->run(st, argc - first - 1, argv + first + 1, timeout_ms);
	crun_store_close(st);
	if (fflush(stdout) != 0) {
		fprintf(stderr, "crun-store: writing output: %s\n", strerror(errno));
		return EXIT_TROUBLE;
	}
	return rc;
}
