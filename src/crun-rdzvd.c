/* SPDX-License-Identifier: MIT */
/* src/crun-rdzvd.c: the store as a standalone daemon (man crun-rdzvd(8)). */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include <crun/error.h>
#include <crun/store.h>

#include "config.h"
#include "src/common/notify.h"
#include "rendezvous/rdzv_keys.h"
#include "src/common/log.h"
#include "rendezvous/store/server.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/parse.h"
#include "rendezvous/store/store_conf.h"
#include "rendezvous/store/unix_path.h"
#include "src/common/token.h"
#include "src/opt.h"
#include "src/opt_store.h"

#define EXIT_USAGE OPT_USAGE

/* The help below states the server's defaults: keep it in step with server.h. */
_Static_assert(STORE_DEFAULT_MAX_CONNECTIONS == 65536 && STORE_NOFILE_PERCENT == 90 &&
		       STORE_NOFILE_RESERVE == 64 && STORE_DEFAULT_MAX_CONNS_PER_ADDR == 4096 &&
		       STORE_DEFAULT_MAX_PENDING == 1024 && STORE_DEFAULT_MAX_MEMORY == 256u << 20 &&
		       STORE_DEFAULT_FRAME_TIMEOUT_MS == 30000 &&
		       STORE_DEFAULT_UNTIMED_WAITS_PER_CONN == 256 &&
		       STORE_DEFAULT_UNTIMED_WAITS == 65536 && CRUN_STORE_MAX_VALUE_LEN == 16777216 &&
		       STORE_DATA_KEY_BYTES == 256 && STORE_SCOPE_SHARE == 4 &&
		       STORE_DEFAULT_TS_MAX_DATA == 160u << 20 && STORE_DEFAULT_TS_MAX_KEYS == 65536 &&
		       STORE_DEFAULT_BUSY_POLL_US == 0,
	       "crun-rdzvd --help states other defaults");

enum rdzvd_opt {
	R_LISTEN,
	R_MAX_CONNS,
	R_PER_ADDR,
	R_TOKEN_FILE,
	R_TOKEN,
	R_INSECURE,
	R_TLS_CERT,
	R_TLS_KEY,
	R_TLS_CA,
	R_IDLE,
	R_MAX_PENDING,
	R_MAX_VALUE,
	R_MAX_MEMORY,
	R_FRAME_TIMEOUT,
	R_BUSY_POLL,
	R_UNTIMED,
	R_UNTIMED_TOTAL,
	R_MAX_WAIT,
	R_MAX_DATA,
	R_MAX_KEYS,
	R_SCOPE_DATA,
	R_SCOPE_KEYS,
	R_TCPSTORE_RUN,
	R_TS_DATA,
	R_TS_KEYS,
	R_UNIX_SOCKET,
	R_NO_UNIX_SOCKET,
	R_METRICS,
	R_VERBOSE,
	R_QUIET,
	R_HELP,
	R_VERSION,
	R_COUNT
};

static const struct opt rdzvd_opts[R_COUNT] = {
	[R_LISTEN] = {"listen", 'l', true, false, "ADDR:PORT",
		      "bind exactly this address (port 0 picks one); required. The bound "
		      "ADDR:PORT is printed as the first line of stdout", "Options"},
	[R_MAX_CONNS] = {"max-connections", 'c', true, false, "N",
			 "refuse connections beyond N (default 65536, or 90% of the open file "
			 "limit less 64 when that is lower; the soft limit is raised to the hard "
			 "one at start); connections not yet authenticated have a quarter of it, "
			 "256 per source, and are shed first", NULL},
	[R_PER_ADDR] = {"max-conns-per-addr", 0, true, false, "N",
			"refuse connections beyond N from one address (default 4096)", NULL},
	[R_TOKEN_FILE] = OPT_STORE_TOKEN_FILE(
		"Authentication and TLS",
		"require the token in the first line of FILE (mode 0600, ours); default: "
		"$CRUN_TOKEN_FILE, else $XDG_CONFIG_HOME/crun/token or ~/.config/crun/token, "
		"created with a random token on first use"),
	[R_TOKEN] = {"token", 't', true, false, "TOKEN",
		     "require this token (less safe: argv and the environment "
		     "($CRUN_STORE_TOKEN) are visible to others)", NULL},
	[R_INSECURE] = OPT_STORE_INSECURE(NULL, "no authentication: anyone who reaches the "
						"address may read and write every key (a warning "
						"is logged)"),
	[R_TLS_CERT] = OPT_STORE_TLS_CERT(NULL, NULL,
					  "serve TLS 1.2+ with this PEM certificate (chain) ..."),
	[R_TLS_KEY] = OPT_STORE_TLS_KEY(NULL, NULL,
					"... and this PEM key (mode 0600, ours; else refused)"),
	[R_TLS_CA] = OPT_STORE_TLS_CA(NULL, NULL,
				      "mutual TLS: every client must present a certificate signed "
				      "by a CA in FILE (docs/security.md, \"TLS\")"),
	[R_IDLE] = {"idle-timeout", 'i', true, false, "SEC",
		    "close connections idle SEC seconds with no wait pending (default 0: never)",
		    "Limits"},
	[R_MAX_PENDING] = {"max-pending", 0, true, false, "N",
			   "pending waits per connection (default 1024)", NULL},
	[R_MAX_VALUE] = {"max-value-len", 0, true, false, "BYTES",
			 "largest value accepted (default and maximum 16777216)", NULL},
	[R_MAX_MEMORY] = {"max-memory", 0, true, false, "MIB",
			  "memory for partial frames and held waits, all connections together; "
			  "the biggest holder is dropped beyond it (default 256)", NULL},
	[R_FRAME_TIMEOUT] = {"frame-timeout", 0, true, false, "SEC",
			     "drop a peer whose frame is not complete SEC seconds after its first "
			     "byte (default 30)", NULL},
	[R_BUSY_POLL] = {"busy-poll", 0, true, false, "USEC",
			 "after a read, poll USEC microseconds more before sleeping (default 0: "
			 "never)", NULL},
	[R_UNTIMED] = {"max-untimed-waits", 0, true, false, "N",
		       "waits without a deadline per connection (default 256)", NULL},
	[R_UNTIMED_TOTAL] = {"max-untimed-waits-total", 0, true, false, "N",
			     "waits without a deadline, whole server (default 65536)", NULL},
	[R_MAX_WAIT] = {"max-wait", 0, true, false, "SEC",
			"hold no wait longer than SEC seconds: the deadline of waits that give "
			"none (default 0: no maximum)", NULL},
	[R_MAX_DATA] = {"max-data", 0, true, false, "MIB",
			"stored keys and values, all runs together; a write beyond it is refused "
			"(default: --max-memory's value)", NULL},
	[R_MAX_KEYS] = {"max-keys", 0, true, false, "N",
			"stored keys, all runs together (default: one per 256 bytes of --max-data)",
			NULL},
	[R_SCOPE_DATA] = {"scope-max-data", 0, true, false, "MIB",
			  "stored keys and values of one run (rdzv/RUN/ and RUN/; default: a "
			  "quarter of --max-data)", NULL},
	[R_SCOPE_KEYS] = {"scope-max-keys", 0, true, false, "N",
			  "stored keys of one run (default: a quarter of --max-keys)", NULL},
	[R_TCPSTORE_RUN] = {"tcpstore-run", 0, true, false, "RUN",
			    "serve PyTorch TCPStore clients (torch.distributed.TCPStore, 1.x and "
			    "2.x) on the same port, confined to the keys under RUN/tcpstore/GEN/, "
			    "GEN the round the agents last spawned (they cannot authenticate); "
			    "default: refused", "PyTorch"},
	[R_TS_DATA] = {"tcpstore-max-data", 0, true, false, "MIB",
		       "stored keys and values under RUN/tcpstore/ (default 160; a 1,000-rank "
		       "gloo bootstrap stores 130)", NULL},
	[R_TS_KEYS] = {"tcpstore-max-keys", 0, true, false, "N",
		       "stored keys under RUN/tcpstore/ (default 65536)", NULL},
	[R_UNIX_SOCKET] = {"unix-socket", 0, true, false, "PATH",
			   "also serve same-host clients on this AF_UNIX socket, in a directory "
			   "only this user can write (default: /run/crun/store-NETNS-ADDR-PORT.sock "
			   "as root, else under $XDG_RUNTIME_DIR/crun or /tmp/crun-UID; clients find "
			   "a default one themselves, this one with $CRUN_STORE_UNIX_SOCKET)",
			   "Same-host clients"},
	[R_NO_UNIX_SOCKET] = {"no-unix-socket", 0, false, false, NULL,
			      "serve TCP only (also: CRUN_STORE_UNIX_SOCKET=off)", NULL},
	[R_METRICS] = {"metrics", 0, true, false, "ADDR:PORT",
		       "serve Prometheus metrics at http://ADDR:PORT/metrics (a scrape sends "
		       "the store's token as Authorization: Bearer); default: none", "Monitoring"},
	[R_VERBOSE] = OPT_VERBOSE_ENTRY("Other", "log at debug level (dropped authenticated "
						 "connections are logged at info level either "
						 "way; unauthenticated ones in one line per 5 s)"),
	[R_QUIET] = OPT_QUIET_ENTRY,
	[R_HELP] = OPT_HELP_ENTRY(NULL),
	[R_VERSION] = OPT_VERSION_ENTRY,
};

static void print_usage(FILE *out);

static const struct opt_table rdzvd_table = {
	.prog = "crun-rdzvd",
	.opts = rdzvd_opts,
	.n = R_COUNT,
	.usage = print_usage,
	.version = "crun-rdzvd " CRUN_VERSION " (store protocol 2)",
};

static void print_usage(FILE *out)
{
	fprintf(out, "Usage: crun-rdzvd --listen ADDR:PORT [OPTIONS]\n"
		     "\n"
		     "The crun rendezvous store as a daemon (see crun-rdzvd(8), docs/protocol.md).\n");
	opt_print_options(out, &rdzvd_table);
	fprintf(out, "\nExit status: 0 after SIGTERM or SIGINT, 1 on a runtime failure (address in\n"
		     "use, ...), 2 on bad usage (a credential file others can read included).\n");
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

/* What the command line asks for, checked. */
struct config {
	struct store_server_opts o;
	struct store_settings ss; /* the store flags, for the one token policy */
	struct store_conf sc;	  /* what they resolve to: the token and TLS files served */
	bool insecure;
	const char *unix_socket; /* --unix-socket */
	bool no_unix_socket;     /* --no-unix-socket */
	char tsprefix[STORE_TCPSTORE_MAX_PREFIX + 1];
};

/* An integer option in @min..@max into *@out, else a usage error saying what it expects. */
static int int_val(const struct opt_val *v, long min, long max, const char *want, long *out,
		   struct crun_diag *d)
{
	char b[64];

	if (!v->set) {
		return 0;
	}
	if (parse_long(v->val, min, max, out) < 0) {
		return opt_fail(v, d, "expected %s, got \"%s\"", want, opt_show(b, sizeof(b), v->val));
	}
	return 0;
}

/* Seconds (fractions allowed) up to @max_s into *@ms; at least @min_ms. */
static int seconds_val(const struct opt_val *v, double max_s, int64_t min_ms, const char *want,
		       int64_t *ms, struct crun_diag *d)
{
	char b[64];

	if (!v->set) {
		return 0;
	}
	if (parse_seconds_ms(v->val, max_s, ms) < 0 || *ms < min_ms) {
		return opt_fail(v, d, "expected %s, got \"%s\"", want, opt_show(b, sizeof(b), v->val));
	}
	return 0;
}

/* The stored data's quotas: MiB and key counts, into c->o (0 where not given: the default). */
static int take_quotas(const struct opt_val *v, struct config *c, struct crun_diag *d)
{
	static const struct {
		int id;
		bool mib;
	} q[] = {{R_MAX_DATA, true},   {R_MAX_KEYS, false}, {R_SCOPE_DATA, true},
		 {R_SCOPE_KEYS, false}, {R_TS_DATA, true},  {R_TS_KEYS, false}};
	uint64_t *out[] = {&c->o.max_data,	 &c->o.max_keys,	  &c->o.scope_max_data,
			   &c->o.scope_max_keys, &c->o.tcpstore_max_data, &c->o.tcpstore_max_keys};
	long n;
	size_t i;
	int rc;

	for (i = 0; i < ARRAY_SIZE(q); i++) {
		n = 0;
		rc = q[i].mib ? int_val(&v[q[i].id], 1, 1L << 20, "MiB (an integer in 1..1048576)",
					&n, d)
			      : int_val(&v[q[i].id], 1, 1L << 40,
					"a key count (an integer in 1..1099511627776)", &n, d);
		if (rc != 0) {
			return rc;
		}
		*out[i] = q[i].mib ? (uint64_t)n << 20 : (uint64_t)n;
	}
	return 0;
}

/* The limits: each an integer or seconds, into c->o (0 where not given: the default). */
static int take_limits(const struct opt_val *v, struct config *c, struct crun_diag *d)
{
	struct store_server_opts *o = &c->o;
	long conns = 0, per = 0, idle = 0, pend = 0, vlen = 0, mem = 0, unt = 0, unt_all = 0;
	long poll = -1;
	int64_t frame = 0, wait = 0;
	int rc;

	if ((rc = int_val(&v[R_MAX_CONNS], 1, INT_MAX, "a positive integer", &conns, d)) != 0 ||
	    (rc = int_val(&v[R_PER_ADDR], 1, INT_MAX, "a positive integer", &per, d)) != 0 ||
	    (rc = int_val(&v[R_IDLE], 0, INT_MAX / 1000,
			  "seconds (a non-negative integer)", &idle, d)) != 0 ||
	    (rc = int_val(&v[R_MAX_PENDING], 1, 1 << 20, "an integer in 1..1048576", &pend,
			  d)) != 0 ||
	    (rc = int_val(&v[R_MAX_VALUE], 1, CRUN_STORE_MAX_VALUE_LEN,
			  "an integer in 1..16777216", &vlen, d)) != 0 ||
	    (rc = int_val(&v[R_MAX_MEMORY], 1, 1L << 20, "MiB (an integer in 1..1048576)", &mem,
			  d)) != 0 ||
	    (rc = int_val(&v[R_UNTIMED], 1, INT_MAX, "a positive integer", &unt, d)) != 0 ||
	    (rc = int_val(&v[R_UNTIMED_TOTAL], 1, INT_MAX, "a positive integer", &unt_all,
			  d)) != 0 ||
	    (rc = seconds_val(&v[R_FRAME_TIMEOUT], INT_MAX / 1000, 1, "seconds (above 0)",
			      &frame, d)) != 0 ||
	    (rc = seconds_val(&v[R_MAX_WAIT], 1e9, 0, "seconds (0: no maximum)", &wait, d)) != 0 ||
	    (rc = int_val(&v[R_BUSY_POLL], 0, 1000000, "microseconds (an integer in 0..1000000)",
			  &poll, d)) != 0) {
		return rc;
	}
	o->max_connections = (int)conns;
	o->max_conns_per_addr = (int)per;
	o->idle_timeout_ms = (int)(idle * 1000);
	o->max_pending_per_conn = (int)pend;
	o->max_value_len = (size_t)vlen;
	o->max_memory = (size_t)mem << 20;
	o->max_untimed_waits_per_conn = (int)unt;
	o->max_untimed_waits = (int)unt_all;
	o->frame_timeout_ms = (int)frame;
	o->max_wait_ms = wait;
	o->busy_poll_us = poll < 0 ? 0 : poll == 0 ? -1 : (int)poll; /* opts: 0 is the default */
	return 0;
}

/* --token, --token-file (the later one wins) and --insecure, for the token policy. */
static int take_token(const struct opt_val *v, const struct opt_store_flags *f, struct config *c,
		      struct crun_diag *d)
{
	const struct opt_val *tok = &v[R_TOKEN], *file = &v[R_TOKEN_FILE];

	c->insecure = c->ss.insecure = f->insecure;
	if (c->insecure && tok->set) {
		return opt_fail(&v[R_INSECURE], d, "cannot be combined with --token or --token-file");
	}
	if (tok->set && (!file->set || tok->at > file->at)) {
		/* An empty token would silently mean "no token" (an unset shell variable in
		 * --token "$TOKEN"): refuse it rather than serve everyone. */
		if (*tok->val == '\0') {
			return opt_fail(tok, d, "the token must not be empty");
		}
		c->ss.token = tok->val;
	} else {
		c->ss.token_file = f->token_file;
	}
	return 0;
}

/* The command line into @c: OPT_OK, or OPT_EXIT / OPT_USAGE after printing help or an error. */
static int parse(int argc, char **argv, struct config *c)
{
	static const int ids[OS_COUNT] = {
		[OS_ENDPOINT] = -1,		[OS_TOKEN_FILE] = R_TOKEN_FILE,
		[OS_INSECURE] = R_INSECURE,	[OS_TLS_CA] = R_TLS_CA,
		[OS_TLS_CERT] = R_TLS_CERT,	[OS_TLS_KEY] = R_TLS_KEY,
		[OS_TLS_SERVER_NAME] = -1,	[OS_CONFIG] = -1,
	};
	struct opt_val v[R_COUNT];
	struct opt_store_flags f;
	struct crun_diag d = {0};
	int first, rc;

	memset(v, 0, sizeof(v));
	rc = opt_read_argv(&rdzvd_table, v, argc, argv, &first, &d);
	if (rc == OPT_OK && (rc = opt_store_take(v, ids, &f, &d)) == OPT_OK &&
	    (rc = take_limits(v, c, &d)) == OPT_OK && (rc = take_quotas(v, c, &d)) == OPT_OK) {
		rc = take_token(v, &f, c, &d);
	}
	if (rc != OPT_OK) {
		opt_exit_status(&rdzvd_table, rc, &d);
		return rc;
	}
	c->o.listen = v[R_LISTEN].set ? v[R_LISTEN].val : NULL;
	c->o.metrics_listen = v[R_METRICS].set ? v[R_METRICS].val : NULL;
	c->unix_socket = v[R_UNIX_SOCKET].set ? v[R_UNIX_SOCKET].val : NULL;
	c->no_unix_socket = v[R_NO_UNIX_SOCKET].set;
	c->ss.tls_cert = f.tls_cert;
	c->ss.tls_key = f.tls_key;
	c->ss.tls_ca = f.tls_ca;
	if (v[R_TCPSTORE_RUN].set) {
		if (!token_scope_valid(v[R_TCPSTORE_RUN].val) ||
		    rdzv_key_tcpstore(c->tsprefix, sizeof(c->tsprefix), v[R_TCPSTORE_RUN].val) < 0) {
			char b[64];

			opt_fail(&v[R_TCPSTORE_RUN], &d, "not a valid run id: \"%s\"",
				 opt_show(b, sizeof(b), v[R_TCPSTORE_RUN].val));
			return opt_exit_status(&rdzvd_table, OPT_USAGE, &d);
		}
		c->o.tcpstore_run = v[R_TCPSTORE_RUN].val;
	}
	if (c->o.listen == NULL || *c->o.listen == '\0') {
		rc = opt_fail(NULL, &d, "--listen ADDR:PORT is required (see crun-rdzvd --help)");
	} else if (c->unix_socket != NULL && c->no_unix_socket) {
		rc = opt_fail(&v[R_UNIX_SOCKET], &d, "contradicts --no-unix-socket");
	} else if (c->unix_socket != NULL &&
		   (c->unix_socket[0] != '/' || strlen(c->unix_socket) >= STORE_UNIX_PATH_MAX)) {
		rc = opt_fail(&v[R_UNIX_SOCKET], &d, "expected an absolute path under %d bytes",
			      STORE_UNIX_PATH_MAX);
	} else if (c->ss.tls_ca != NULL && c->ss.tls_cert == NULL) {
		rc = opt_fail(&v[R_TLS_CA], &d, "needs --tls-cert and --tls-key (mutual TLS is "
						 "served with a certificate)");
	} else if (c->ss.tls_cert != NULL && c->o.tcpstore_run != NULL) {
		rc = opt_fail(&v[R_TCPSTORE_RUN], &d, "PyTorch's TCPStore clients cannot speak TLS, "
						      "and this store is given --tls-cert");
	}
	if (rc != OPT_OK) {
		return opt_exit_status(&rdzvd_table, rc, &d);
	}
	opt_log_level(&v[R_VERBOSE], &v[R_QUIET]);
	return OPT_OK;
}

/*
 * The one token policy, as a store's host: the flags, then $CRUN_STORE_TOKEN, else the per-user
 * token file, made on first use (authentication is on by default); then the token and TLS files
 * served. 0, or EXIT_USAGE after saying why.
 */
static int resolve_store_conf(struct config *c)
{
	struct crun_diag diag = {0};
	int rc;

	rc = store_conf_init(&c->sc, &c->ss,
			     STORE_TOKEN_ENV | STORE_TOKEN_DEFAULT | STORE_TOKEN_CREATE |
				     STORE_TOKEN_READ,
			     &diag);
	if (rc < 0) {
		fprintf(stderr, "crun-rdzvd: %s\n(give --token-file FILE, or --insecure to run "
				"without authentication)\n", diag.msg);
		return EXIT_USAGE;
	}
	if (c->sc.token_created) {
		log_info("token from %s (created now, mode 0600)", c->sc.token_file);
	} else if (c->sc.token != NULL) {
		log_info("token from %s", c->sc.token_src);
	}
	store_conf_server_opts(&c->sc, &c->o);
	if (c->unix_socket != NULL) {
		c->o.unix_socket = c->unix_socket;
	} else if (c->no_unix_socket) {
		c->o.unix_socket = NULL;
	}
	return 0;
}

/* The event loop, the server and its signals; the watchdog when systemd asks for one. */
static int setup(struct daemon *d, struct config *c)
{
	struct crun_diag diag = {0};
	long v;
	int rc;

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
	rc = uv_loop_init(&d->loop);
	if (rc < 0) {
		log_error("event loop: %s", uv_strerror(rc));
		return 1;
	}
	rc = store_server_create(&d->loop, &c->o, &d->srv, &diag);
	if (rc < 0) {
		log_error("%s", diag.msg);
		uv_loop_close(&d->loop);
		return rc == -EINVAL || rc == CRUN_ECONFIG || rc == -EACCES || rc == -ENOENT
			       ? EXIT_USAGE
			       : 1;
	}
	uv_signal_init(&d->loop, &d->sigterm);
	uv_signal_init(&d->loop, &d->sigint);
	d->sigterm.data = d->sigint.data = d;
	uv_signal_start(&d->sigterm, on_signal, SIGTERM);
	uv_signal_start(&d->sigint, on_signal, SIGINT);
	if (notify_watchdog_usec() > 0) {
		uint64_t half_ms = notify_watchdog_usec() / 2000;

		uv_timer_init(&d->loop, &d->watchdog);
		uv_timer_start(&d->watchdog, on_watchdog, 0, half_ms > 0 ? half_ms : 1);
		d->watchdog_on = true;
	}
	return 0;
}

/* Say where we listen (stdout's first line, the log, systemd), then serve until a signal. */
static int run(struct daemon *d, const struct config *c)
{
	const char *auth = c->sc.token != NULL ? " (token required)" : " (no authentication)";
	int rc;

	printf("%s\n", store_server_address(d->srv));
	fflush(stdout);
	log_info("listening on %s%s%s", store_server_address(d->srv), auth,
		 c->o.tls_ca != NULL	 ? " over mutual TLS"
		 : c->o.tls_cert != NULL ? " over TLS"
					 : "");
	notify_send("READY=1\nSTATUS=listening on %s%s", store_server_address(d->srv), auth);
	uv_run(&d->loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&d->loop);
	if (rc != 0) {
		log_error("shutdown: %s", uv_strerror(rc));
		return 1;
	}
	log_info("stopped");
	return 0;
}

int main(int argc, char **argv)
{
	struct config c;
	struct daemon d;
	int rc;

	memset(&c, 0, sizeof(c));
	memset(&d, 0, sizeof(d));
	log_set_ident("crun-rdzvd");
	notify_init(); /* before any thread; keeps $NOTIFY_SOCKET from anything we start */
	rc = parse(argc, argv, &c);
	if (rc == OPT_EXIT) {
		return 0; /* --help, --version */
	}
	if (rc == OPT_OK) {
		rc = resolve_store_conf(&c);
	}
	if (rc == OPT_OK) {
		if (c.insecure) {
			log_warn("--insecure: any client that reaches this address may read and "
				 "write every key (no authentication)");
		}
		if (c.o.tcpstore_run == NULL) {
			c.o.tcpstore_refusal = "crun-rdzvd serves them only with --tcpstore-run RUN";
		}
		rc = setup(&d, &c);
		if (rc == 0) {
			rc = run(&d, &c);
		}
	}
	notify_finish();
	store_conf_finish(&c.sc);
	return rc;
}
