/* SPDX-License-Identifier: MIT */
/* src/crun-store.c: a command line over the store client, for operators and scripts. */
#include <errno.h>
#include <getopt.h>
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

/* Exit status, as grep: found / not found / trouble. */
enum { EXIT_FOUND = 0, EXIT_NOTFOUND = 1, EXIT_TROUBLE = 2 };

static const char usage_text[] =
	"usage: crun-store [OPTION]... COMMAND [ARG]...\n"
	"\n"
	"Talk to a crun store (crun-rdzvd, an agent's embedded store, or a shared file).\n"
	"\n"
	"Options:\n"
	"  -e, --endpoint E   HOST:PORT, [V6]:PORT, tcp://HOST:PORT, file:///PATH or\n"
	"                     etcd://HOST:PORT[,HOST:PORT...]\n"
	"                     (default: $CRUN_STORE_ENDPOINT)\n"
	"  -p, --prefix P     prepended to every key (default: $CRUN_STORE_PREFIX, or none)\n"
	"  -t, --timeout SEC  connect and operation deadline in seconds, fractions allowed\n"
	"                     (default: 30 to connect, 300 per operation)\n"
	"      --token-file F the store's token, a file only you can read (default:\n"
	"                     $CRUN_STORE_TOKEN_FILE, $CRUN_STORE_TOKEN, else the per-user\n"
	"                     file $CRUN_TOKEN_FILE, $XDG_CONFIG_HOME/crun/token or\n"
	"                     ~/.config/crun/token, created 0600 on first use)\n"
	"  -T, --token T      the token itself (less safe: argv is visible to others)\n"
	"      --scope RUN    confine the connection to run RUN's keys\n"
	"      --insecure     send no credential (for a store started with --insecure)\n"
	"      --tls-ca F     TLS: verify the store's certificate against the CA in F\n"
	"                     (default: $CRUN_STORE_TLS_CA; any TLS option turns TLS on)\n"
	"      --tls-cert F   mutual TLS: our PEM certificate ($CRUN_STORE_TLS_CERT) ...\n"
	"      --tls-key F    ... and key, mode 0600 ($CRUN_STORE_TLS_KEY)\n"
	"      --tls-server-name NAME\n"
	"                     the name the store's certificate carries (default: the\n"
	"                     endpoint's host; $CRUN_STORE_TLS_SERVER_NAME)\n"
	"  -h, --help         show this help and exit\n"
	"  -V, --version      show the version and exit\n"
	"\n"
	"Commands:\n"
	"  set KEY VALUE              store VALUE at KEY\n"
	"  get KEY                    print the value of KEY (exit 1 if absent)\n"
	"  add KEY N                  add integer N to the counter at KEY, print the result\n"
	"  wait KEY... [--timeout SEC] wait until every KEY exists (exit 1 on timeout)\n"
	"  cas KEY EXPECTED DESIRED   set DESIRED if the value is EXPECTED (\"\" = absent);\n"
	"                             print the value now stored (exit 1 unless DESIRED)\n"
	"  del KEY                    delete KEY (exit 1 if it did not exist)\n"
	"  check KEY...               exit 0 if every KEY exists now, 1 if not\n"
	"  keys                       print the number of keys in the whole store\n"
	"  append KEY VALUE           append VALUE to KEY (created when absent)\n"
	"  ping                       check that the store answers\n"
	"\n"
	"Exit status: 0 success or found; 1 not found, wait timed out, cas value not DESIRED or\n"
	"check false; 2 bad usage or a store error (the message on stderr says which).\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("crun-store: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'crun-store --help' for more information.\n", stderr);
	return EXIT_TROUBLE;
}

static int store_error(const char *what, const char *key, int rc)
{
	const char *why;

	switch (rc) {
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

static int cmd_wait(struct crun_store *st, int argc, char **argv, int timeout_ms)
{
	const char **keys;
	int n = 0, i, rc;

	keys = calloc((size_t)argc + 1, sizeof(*keys));
	if (keys == NULL) {
		return store_error("wait", NULL, -ENOMEM);
	}
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--timeout") == 0 || strcmp(a, "-t") == 0) {
			if (i + 1 >= argc || parse_seconds(argv[i + 1], &timeout_ms) < 0) {
				free(keys);
				return usage_error("wait: --timeout: expected seconds >= 0, got "
						   "\"%s\"",
						   i + 1 < argc ? argv[i + 1] : "");
			}
			i++;
		} else if (strncmp(a, "--timeout=", 10) == 0) {
			if (parse_seconds(a + 10, &timeout_ms) < 0) {
				free(keys);
				return usage_error("wait: --timeout: expected seconds >= 0, got "
						   "\"%s\"",
						   a + 10);
			}
		} else {
			keys[n++] = a;
		}
	}
	if (n == 0) {
		free(keys);
		return usage_error("wait: expected at least one KEY");
	}
	rc = crun_store_wait(st, keys, (size_t)n, timeout_ms);
	free(keys);
	if (rc == -ETIMEDOUT) {
		fprintf(stderr, "crun-store: wait: timed out\n");
		return EXIT_NOTFOUND;
	}
	return rc < 0 ? store_error("wait", NULL, rc) : EXIT_FOUND;
}

static int run(struct crun_store *st, const char *cmd, int argc, char **argv, int timeout_ms)
{
	void *v = NULL;
	size_t len = 0;
	int64_t n;
	bool all;
	int rc;

	if (strcmp(cmd, "set") == 0) {
		if (want_args(cmd, argc, 2, 2, "KEY VALUE")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_set(st, argv[0], argv[1], strlen(argv[1]));
		return rc < 0 ? store_error("set", argv[0], rc) : EXIT_FOUND;
	}
	if (strcmp(cmd, "get") == 0) {
		if (want_args(cmd, argc, 1, 1, "KEY")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_get(st, argv[0], &v, &len);
		if (rc == -ENOENT) {
			return EXIT_NOTFOUND;
		}
		if (rc < 0) {
			return store_error("get", argv[0], rc);
		}
		print_value(v, len);
		free(v);
		return EXIT_FOUND;
	}
	if (strcmp(cmd, "add") == 0) {
		if (want_args(cmd, argc, 2, 2, "KEY N")) {
			return EXIT_TROUBLE;
		}
		if (parse_i64(argv[1], &n) < 0) {
			return usage_error("add: N: expected a 64-bit integer, got \"%s\"",
					   argv[1]);
		}
		rc = crun_store_add(st, argv[0], n, &n);
		if (rc == -EINVAL || rc == -ERANGE) {
			fprintf(stderr, "crun-store: add %s: %s\n", argv[0],
				rc == -EINVAL ? "the value stored is not a decimal integer"
					      : "the sum overflows a 64-bit integer");
			return EXIT_TROUBLE;
		}
		if (rc < 0) {
			return store_error("add", argv[0], rc);
		}
		printf("%" PRId64 "\n", n);
		return EXIT_FOUND;
	}
	if (strcmp(cmd, "wait") == 0) {
		return cmd_wait(st, argc, argv, timeout_ms);
	}
	if (strcmp(cmd, "cas") == 0) {
		if (want_args(cmd, argc, 3, 3, "KEY EXPECTED DESIRED")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_compare_set(st, argv[0], argv[1], strlen(argv[1]), argv[2],
					    strlen(argv[2]), &v, &len);
		if (rc < 0) {
			return store_error("cas", argv[0], rc);
		}
		print_value(v, len);
		rc = len == strlen(argv[2]) && memcmp(v, argv[2], len) == 0 ? EXIT_FOUND
									   : EXIT_NOTFOUND;
		free(v);
		return rc;
	}
	if (strcmp(cmd, "del") == 0) {
		if (want_args(cmd, argc, 1, 1, "KEY")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_delete(st, argv[0]);
		if (rc == -ENOENT) {
			return EXIT_NOTFOUND;
		}
		return rc < 0 ? store_error("del", argv[0], rc) : EXIT_FOUND;
	}
	if (strcmp(cmd, "check") == 0) {
		if (want_args(cmd, argc, 1, -1, "KEY...")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_check(st, (const char *const *)argv, (size_t)argc, &all);
		if (rc < 0) {
			return store_error("check", NULL, rc);
		}
		return all ? EXIT_FOUND : EXIT_NOTFOUND;
	}
	if (strcmp(cmd, "keys") == 0) {
		if (want_args(cmd, argc, 0, 0, "no arguments")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_num_keys(st, &n);
		if (rc < 0) {
			return store_error("keys", NULL, rc);
		}
		printf("%" PRId64 "\n", n);
		return EXIT_FOUND;
	}
	if (strcmp(cmd, "append") == 0) {
		if (want_args(cmd, argc, 2, 2, "KEY VALUE")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_append(st, argv[0], argv[1], strlen(argv[1]));
		return rc < 0 ? store_error("append", argv[0], rc) : EXIT_FOUND;
	}
	if (strcmp(cmd, "ping") == 0) {
		if (want_args(cmd, argc, 0, 0, "no arguments")) {
			return EXIT_TROUBLE;
		}
		rc = crun_store_ping(st);
		return rc < 0 ? store_error("ping", NULL, rc) : EXIT_FOUND;
	}
	return usage_error("unknown command \"%s\"", cmd);
}

static bool known_command(const char *cmd)
{
	static const char *const cmds[] = {"set", "get",   "add",  "wait",   "cas",
					   "del", "check", "keys", "append", "ping"};
	size_t i;

	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(cmd, cmds[i]) == 0) {
			return true;
		}
	}
	return false;
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

int main(int argc, char **argv)
{
	enum {
		OPT_TOKEN_FILE = 256,
		OPT_SCOPE,
		OPT_INSECURE,
		OPT_TLS_CA,
		OPT_TLS_CERT,
		OPT_TLS_KEY,
		OPT_TLS_SERVER_NAME,
	};
	static const struct option longopts[] = {
		{"endpoint", required_argument, NULL, 'e'},
		{"prefix", required_argument, NULL, 'p'},
		{"timeout", required_argument, NULL, 't'},
		{"token", required_argument, NULL, 'T'},
		{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
		{"scope", required_argument, NULL, OPT_SCOPE},
		{"insecure", no_argument, NULL, OPT_INSECURE},
		{"tls-ca", required_argument, NULL, OPT_TLS_CA},
		{"tls-cert", required_argument, NULL, OPT_TLS_CERT},
		{"tls-key", required_argument, NULL, OPT_TLS_KEY},
		{"tls-server-name", required_argument, NULL, OPT_TLS_SERVER_NAME},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	struct crun_store_opts o = {0};
	struct crun_store *st = NULL;
	int timeout_ms = -1, c, rc;
	const char *cmd, *token = NULL, *token_file = NULL;
	bool insecure = false;

	o.struct_size = sizeof(o);
	o.endpoint = getenv("CRUN_STORE_ENDPOINT");
	o.prefix = getenv("CRUN_STORE_PREFIX");
	/* Paths only: what crun gives its workers (docs/security.md, "TLS"). */
	o.tls_ca = getenv("CRUN_STORE_TLS_CA");
	o.tls_cert = getenv("CRUN_STORE_TLS_CERT");
	o.tls_key = getenv("CRUN_STORE_TLS_KEY");
	o.tls_server_name = getenv("CRUN_STORE_TLS_SERVER_NAME");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+e:p:t:T:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'e':
			o.endpoint = optarg;
			break;
		case 'p':
			o.prefix = optarg;
			break;
		case 't':
			if (parse_seconds(optarg, &timeout_ms) < 0) {
				return usage_error("--timeout: expected seconds >= 0, got \"%s\"",
						   optarg);
			}
			break;
		case 'T':
			token = optarg;
			break;
		case OPT_TOKEN_FILE:
			token_file = optarg;
			break;
		case OPT_SCOPE:
			o.scope = optarg;
			break;
		case OPT_INSECURE:
			insecure = true;
			break;
		case OPT_TLS_CA:
			o.tls_ca = optarg;
			break;
		case OPT_TLS_CERT:
			o.tls_cert = optarg;
			break;
		case OPT_TLS_KEY:
			o.tls_key = optarg;
			break;
		case OPT_TLS_SERVER_NAME:
			o.tls_server_name = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return EXIT_FOUND;
		case 'V':
			printf("crun-store %s\n", CRUN_VERSION);
			return EXIT_FOUND;
		case ':':
			return usage_error("option %s needs an argument", argv[optind - 1]);
		default:
			if (optopt != 0) {
				return usage_error("unknown option -%c", optopt);
			}
			return usage_error("unknown option %s", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		return usage_error("no command given");
	}
	cmd = argv[optind];
	if (!known_command(cmd)) {
		return usage_error("unknown command \"%s\"", cmd);
	}
	if (o.endpoint == NULL || *o.endpoint == '\0') {
		return usage_error("no endpoint: pass --endpoint or set CRUN_STORE_ENDPOINT");
	}
	if (insecure && (token != NULL || token_file != NULL)) {
		return usage_error("--insecure cannot be combined with --token or --token-file");
	}
	rc = open_store(&o, token, token_file, insecure, timeout_ms, &st);
	if (rc < 0) {
		return EXIT_TROUBLE;
	}
	rc = run(st, cmd, argc - optind - 1, argv + optind + 1,
		 timeout_ms >= 0 ? timeout_ms : -1);
	crun_store_close(st);
	if (fflush(stdout) != 0) {
		fprintf(stderr, "crun-store: writing output: %s\n", strerror(errno));
		return EXIT_TROUBLE;
	}
	return rc;
}
