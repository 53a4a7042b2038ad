/* SPDX-License-Identifier: MIT */
/* src/crun-rdzvd.c: the store as a standalone daemon (man crun-rdzvd(8)). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include <crun/error.h>
#include <crun/store.h>

#include "config.h"
#include "agent/notify.h"
#include "rendezvous/rdzv_keys.h"
#include "src/common/log.h"
#include "rendezvous/store/server.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/parse.h"
#include "src/common/token.h"

#define EXIT_USAGE 2

/* The limit defaults come from server.h: --help prints what the server uses. */
static void print_usage(void)
{
	printf("Usage: crun-rdzvd --listen ADDR:PORT [OPTIONS]\n"
	"\n"
	"The crun rendezvous store as a daemon (see crun-rdzvd(8), docs/protocol.md).\n"
	"\n"
	"  -l, --listen ADDR:PORT     bind exactly this address (port 0 picks one); required.\n"
	"                             The bound ADDR:PORT is printed as the first line of stdout.\n"
	"  -c, --max-connections N    refuse connections beyond N (default %d, or %d%% of the\n"
	"                             open file limit less %d when that is lower; the soft\n"
	"                             limit is raised to the hard one at start)\n"
	"      --max-conns-per-addr N refuse connections beyond N from one address (default %d)\n"
	"      --token-file FILE      require the token in the first line of FILE (mode 0600,\n"
	"                             ours); default: $CRUN_TOKEN_FILE, else\n"
	"                             $XDG_CONFIG_HOME/crun/token or ~/.config/crun/token,\n"
	"                             created with a random token on first use\n"
	"  -t, --token TOKEN          require this token (less safe: argv and the environment\n"
	"                             ($CRUN_STORE_TOKEN) are visible to others)\n"
	"      --insecure             no authentication: anyone who reaches the address may\n"
	"                             read and write every key (a warning is logged)\n"
	"      --tls-cert FILE        serve TLS 1.2+ with this PEM certificate (chain) ...\n"
	"      --tls-key FILE         ... and this PEM key (mode 0600, ours; else refused)\n"
	"      --tls-ca FILE          mutual TLS: every client must present a certificate\n"
	"                             signed by a CA in FILE (docs/security.md, \"TLS\")\n"
	"  -i, --idle-timeout SEC     close connections idle SEC seconds with no wait pending\n"
	"                             (default 0: never)\n"
	"      --max-pending N        pending waits per connection (default %d)\n"
	"      --max-value-len BYTES  largest value accepted (default and maximum 16777216)\n"
	"      --max-memory MIB       memory for partial frames and held waits, all connections\n"
	"                             together; the biggest holder is dropped beyond it\n"
	"                             (default %u)\n"
	"      --frame-timeout SEC    drop a peer whose frame is not complete SEC seconds after\n"
	"                             its first byte (default %d)\n"
	"      --max-untimed-waits N  waits without a deadline per connection (default %d)\n"
	"      --max-untimed-waits-total N\n"
	"                             waits without a deadline, whole server (default %d)\n"
	"      --max-wait SEC         hold no wait longer than SEC seconds: the deadline of waits\n"
	"                             that give none (default 0: no maximum)\n"
	"      --tcpstore-run RUN     serve PyTorch TCPStore clients (torch.distributed.TCPStore,\n"
	"                             1.x and 2.x) on the same port, confined to the keys under\n"
	"                             RUN/tcpstore/ (they cannot authenticate); default: refused\n"
	"  -v, --verbose              log at debug level (dropped connections are logged\n"
	"                             at info level either way)\n"
	"  -q, --quiet                log only warnings and errors\n"
	"  -h, --help                 show this help and exit\n"
	"  -V, --version              show the version and exit\n"
	"\n"
	"Exit status: 0 after SIGTERM or SIGINT, 1 on a runtime failure (address in use, ...),\n"
	"2 on bad usage.\n",
	STORE_DEFAULT_MAX_CONNECTIONS, STORE_NOFILE_PERCENT, STORE_NOFILE_RESERVE,
	STORE_DEFAULT_MAX_CONNS_PER_ADDR, STORE_DEFAULT_MAX_PENDING,
	STORE_DEFAULT_MAX_MEMORY >> 20, STORE_DEFAULT_FRAME_TIMEOUT_MS / 1000,
	STORE_DEFAULT_UNTIMED_WAITS_PER_CONN, STORE_DEFAULT_UNTIMED_WAITS);
}

struct daemon {
	uv_loop_t loop;
	uv_signal_t sigterm;
	uv_signal_t sigint;
	uv_timer_t watchdog; /* WATCHDOG=1 from the loop itself: a stuck loop stops the pings */
	bool watchdog_on;
	struct store_server *srv;
};

static void on_watchdog(uv_timer_t *t)
{
	notify_send("WATCHDOG=1");
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	log_info("%s: shutting down", strsignal(signum));
	notify_send("STOPPING=1\nSTATUS=shutting down (%s)", strsignal(signum));
	if (d->watchdog_on) {
		uv_close((uv_handle_t *)&d->watchdog, NULL);
		d->watchdog_on = false;
	}
	store_server_close(d->srv);
	d->srv = NULL;
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "crun-rdzvd: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'crun-rdzvd --help'.\n");
	return EXIT_USAGE;
}

static char *read_token_file(const char *path)
{
	struct crun_diag d = {0};
	char *tok;

	if (token_file_read(path, &tok, &d) < 0) {
		fprintf(stderr, "crun-rdzvd: --token-file: %s\n", d.msg);
		return NULL;
	}
	return tok;
}

int main(int argc, char **argv)
{
	enum {
		OPT_TOKEN_FILE = 256,
		OPT_MAX_PENDING,
		OPT_MAX_VALUE,
		OPT_INSECURE,
		OPT_PER_ADDR,
		OPT_MAX_MEMORY,
		OPT_FRAME_TIMEOUT,
		OPT_UNTIMED,
		OPT_UNTIMED_TOTAL,
		OPT_MAX_WAIT,
		OPT_TCPSTORE_RUN,
		OPT_TLS_CERT,
		OPT_TLS_KEY,
		OPT_TLS_CA,
	};
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"max-connections", required_argument, NULL, 'c'},
		{"token", required_argument, NULL, 't'},
		{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
		{"insecure", no_argument, NULL, OPT_INSECURE},
		{"idle-timeout", required_argument, NULL, 'i'},
		{"max-pending", required_argument, NULL, OPT_MAX_PENDING},
		{"max-value-len", required_argument, NULL, OPT_MAX_VALUE},
		{"max-conns-per-addr", required_argument, NULL, OPT_PER_ADDR},
		{"max-memory", required_argument, NULL, OPT_MAX_MEMORY},
		{"frame-timeout", required_argument, NULL, OPT_FRAME_TIMEOUT},
		{"max-untimed-waits", required_argument, NULL, OPT_UNTIMED},
		{"max-untimed-waits-total", required_argument, NULL, OPT_UNTIMED_TOTAL},
		{"max-wait", required_argument, NULL, OPT_MAX_WAIT},
		{"tcpstore-run", required_argument, NULL, OPT_TCPSTORE_RUN},
		{"tls-cert", required_argument, NULL, OPT_TLS_CERT},
		{"tls-key", required_argument, NULL, OPT_TLS_KEY},
		{"tls-ca", required_argument, NULL, OPT_TLS_CA},
		{"verbose", no_argument, NULL, 'v'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	struct store_server_opts o = {0};
	struct crun_diag diag = {0};
	struct daemon d = {0};
	char *token = NULL;
	static char tsprefix[STORE_TCPSTORE_MAX_PREFIX + 1];
	bool insecure = false;
	const char *env;
	int64_t ms;
	long v;
	int opt, rc;

	log_set_ident("crun-rdzvd");
	notify_init(); /* before any thread; keeps $NOTIFY_SOCKET from anything we start */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":l:c:t:i:vqhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			o.listen = optarg;
			break;
		case 'c':
			if (parse_long(optarg, 1, INT_MAX, &v) < 0) {
				return bad_usage("--max-connections: expected a positive integer, "
						 "got \"%s\"", optarg);
			}
			o.max_connections = (int)v;
			break;
		case 't':
			/* An empty token would silently mean "no token" (an unset shell variable
			 * in --token "$TOKEN"): refuse it rather than serve everyone. */
			free(token);
			if (*optarg == '\0') {
				return bad_usage("%s", "--token: the token must not be empty");
			}
			token = strdup(optarg);
			if (token == NULL) {
				fprintf(stderr, "crun-rdzvd: out of memory\n");
				return 1;
			}
			break;
		case OPT_TOKEN_FILE:
			free(token);
			token = read_token_file(optarg);
			if (token == NULL) {
				return EXIT_USAGE;
			}
			break;
		case OPT_INSECURE:
			insecure = true;
			break;
		case 'i':
			if (parse_long(optarg, 0, INT_MAX / 1000, &v) < 0) {
				return bad_usage("--idle-timeout: expected seconds (a non-negative "
						 "integer), got \"%s\"", optarg);
			}
			o.idle_timeout_ms = (int)(v * 1000);
			break;
		case OPT_MAX_PENDING:
			if (parse_long(optarg, 1, 1 << 20, &v) < 0) {
				return bad_usage("--max-pending: expected an integer in 1..1048576, "
						 "got \"%s\"", optarg);
			}
			o.max_pending_per_conn = (int)v;
			break;
		case OPT_MAX_VALUE:
			if (parse_long(optarg, 1, CRUN_STORE_MAX_VALUE_LEN, &v) < 0) {
				return bad_usage("--max-value-len: expected an integer in "
						 "1..16777216, got \"%s\"", optarg);
			}
			o.max_value_len = (size_t)v;
			break;
		case OPT_PER_ADDR:
			if (parse_long(optarg, 1, INT_MAX, &v) < 0) {
				return bad_usage("--max-conns-per-addr: expected a positive "
						 "integer, got \"%s\"", optarg);
			}
			o.max_conns_per_addr = (int)v;
			break;
		case OPT_MAX_MEMORY:
			if (parse_long(optarg, 1, 1L << 20, &v) < 0) {
				return bad_usage("--max-memory: expected MiB (an integer in "
						 "1..1048576), got \"%s\"", optarg);
			}
			o.max_memory = (size_t)v << 20;
			break;
		case OPT_FRAME_TIMEOUT:
			if (parse_seconds_ms(optarg, INT_MAX / 1000, &ms) < 0 || ms < 1) {
				return bad_usage("--frame-timeout: expected seconds (above 0), got "
						 "\"%s\"", optarg);
			}
			o.frame_timeout_ms = (int)ms;
			break;
		case OPT_UNTIMED:
		case OPT_UNTIMED_TOTAL:
			if (parse_long(optarg, 1, INT_MAX, &v) < 0) {
				return bad_usage("%s: expected a positive integer, got \"%s\"",
						 argv[optind - 1], optarg);
			}
			if (opt == OPT_UNTIMED) {
				o.max_untimed_waits_per_conn = (int)v;
			} else {
				o.max_untimed_waits = (int)v;
			}
			break;
		case OPT_MAX_WAIT:
			if (parse_seconds_ms(optarg, 1e9, &ms) < 0) {
				return bad_usage("--max-wait: expected seconds (0: no maximum), "
						 "got \"%s\"", optarg);
			}
			o.max_wait_ms = ms;
			break;
		case OPT_TCPSTORE_RUN:
			if (!token_scope_valid(optarg) ||
			    rdzv_key_tcpstore(tsprefix, sizeof(tsprefix), optarg) < 0) {
				free(token);
				return bad_usage("--tcpstore-run: not a valid run id: \"%s\"", optarg);
			}
			o.tcpstore_prefix = tsprefix;
			break;
		case OPT_TLS_CERT:
		case OPT_TLS_KEY:
		case OPT_TLS_CA:
			if (optarg[0] == '\0') {
				free(token);
				return bad_usage("%s: expected a file", argv[optind - 1]);
			}
			*(opt == OPT_TLS_CERT  ? &o.tls_cert
			  : opt == OPT_TLS_KEY ? &o.tls_key
					       : &o.tls_ca) = optarg;
			break;
		case 'v':
			log_set_level(LOG_DEBUG);
			break;
		case 'q':
			log_set_level(LOG_WARN);
			break;
		case 'h':
			print_usage();
			free(token);
			return 0;
		case 'V':
			printf("crun-rdzvd %s (store protocol 2)\n", CRUN_VERSION);
			free(token);
			return 0;
		case ':':
			free(token);
			return bad_usage("%s: missing argument", argv[optind - 1]);
		default:
			free(token);
			return bad_usage("unknown option \"%s\"", argv[optind - 1]);
		}
	}
	if (optind < argc) {
		free(token);
		return bad_usage("unexpected argument \"%s\"", argv[optind]);
	}
	if (o.listen == NULL) {
		free(token);
		return bad_usage("%s", "--listen ADDR:PORT is required");
	}
	if ((o.tls_cert != NULL) != (o.tls_key != NULL) || (o.tls_ca != NULL && o.tls_cert == NULL)) {
		free(token);
		return bad_usage("%s", "--tls-cert and --tls-key go together, and --tls-ca needs "
				       "them");
	}
	if (o.tls_cert != NULL && o.tcpstore_prefix != NULL) {
		free(token);
		return bad_usage("%s", "--tcpstore-run: PyTorch's TCPStore clients cannot speak TLS, "
				       "and this store is given --tls-cert");
	}
	if (insecure && token != NULL) {
		free(token);
		return bad_usage("%s", "--insecure: cannot be combined with --token or --token-file");
	}
	env = getenv("CRUN_STORE_TOKEN");
	if (token == NULL && !insecure && env != NULL && *env != '\0') {
		token = strdup(env);
	}
	if (insecure) {
		log_warn("--insecure: any client that reaches this address may read and write "
			 "every key (no authentication)");
	} else if (token == NULL) {
		/* Authentication is on by default: the per-user token file, made on first use. */
		char path[PATH_MAX];
		bool created = false;

		if (token_default_path(path, sizeof(path), &diag) < 0 ||
		    token_file_ensure(path, &token, &created, &diag) < 0) {
			fprintf(stderr, "crun-rdzvd: %s\n(give --token-file FILE, or --insecure to run "
					"without authentication)\n", diag.msg);
			return EXIT_USAGE;
		}
		log_info("token from %s%s", path, created ? " (created now, mode 0600)" : "");
	}
	o.token = token;
	if (o.tcpstore_prefix == NULL) {
		o.tcpstore_refusal = "crun-rdzvd serves them only with --tcpstore-run RUN";
	}

	signal(SIGPIPE, SIG_IGN);
	/* Frame buffers of 256 KiB and more get pages of their own, given back when freed:
	 * glibc's moving threshold would otherwise put them on the heap after the first big
	 * free, and the memory a hostile burst took would stay with the daemon for good. */
	mallopt(M_MMAP_THRESHOLD, 256 * 1024);
	/* Room for the connection cap (STORE_NOFILE_PERCENT of this limit, by default). */
	v = store_server_raise_nofile();
	if (v < 0) {
		log_warn("open file limit: cannot raise the soft limit: %s", strerror((int)-v));
	}
	rc = uv_loop_init(&d.loop);
	if (rc < 0) {
		log_error("event loop: %s", uv_strerror(rc));
		free(token);
		return 1;
	}
	rc = store_server_create(&d.loop, &o, &d.srv, &diag);
	if (rc < 0) {
		log_error("%s", diag.msg);
		uv_loop_close(&d.loop);
		free(token);
		return rc == -EINVAL || rc == CRUN_ECONFIG || rc == -EACCES || rc == -ENOENT
			       ? EXIT_USAGE
			       : 1;
	}
	uv_signal_init(&d.loop, &d.sigterm);
	uv_signal_init(&d.loop, &d.sigint);
	d.sigterm.data = d.sigint.data = &d;
	uv_signal_start(&d.sigterm, on_signal, SIGTERM);
	uv_signal_start(&d.sigint, on_signal, SIGINT);

	printf("%s\n", store_server_address(d.srv));
	fflush(stdout);
	log_info("listening on %s%s%s", store_server_address(d.srv),
		 token != NULL ? " (token required)" : " (no authentication)",
		 o.tls_ca != NULL ? " over mutual TLS" : o.tls_cert != NULL ? " over TLS" : "");
	notify_send("READY=1\nSTATUS=listening on %s%s", store_server_address(d.srv),
		    token != NULL ? " (token required)" : " (no authentication)");
	if (notify_watchdog_usec() > 0) {
		uint64_t half_ms = notify_watchdog_usec() / 2000;

		uv_timer_init(&d.loop, &d.watchdog);
		uv_timer_start(&d.watchdog, on_watchdog, 0, half_ms > 0 ? half_ms : 1);
		d.watchdog_on = true;
	}

	uv_run(&d.loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&d.loop);
	notify_finish();
	free(token);
	if (rc != 0) {
		log_error("shutdown: %s", uv_strerror(rc));
		return 1;
	}
	log_info("stopped");
	return 0;
}
