/* SPDX-License-Identifier: MIT */
/* agent/notify_status.c: this node's state, to systemd (STATUS=) and to the store (crun status). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/notify.h"
#include "agent/notify_status.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/clock.h"
#include "src/common/log.h"

/* One store operation of the publisher; the last record waits at most about twice this. */
#define PUBLISH_TIMEOUT_MS 3000

static const char *const state_names[NODE_STATE_COUNT] = {
	"joining", "running", "restarting", "waiting", "stopping", "finished", "failed",
};

const char *node_state_name(enum node_state s)
{
	return (int)s >= 0 && s < NODE_STATE_COUNT ? state_names[s] : "unknown";
}

int notify_status_format(const struct node_record *r, char *buf, size_t cap)
{
	char msg[sizeof(r->fail_msg)];
	size_t i;
	int n;

	/* The message ends the line: keep it one line. */
	for (i = 0; r->fail_msg[i] != '\0' && i + 1 < sizeof(msg); i++) {
		msg[i] = r->fail_msg[i] == '\n' || r->fail_msg[i] == '\r' ? ' ' : r->fail_msg[i];
	}
	msg[i] = '\0';
	n = snprintf(buf, cap,
		     "v1 state=%s host=%s pid=%ld rank=%d nodes=%d world=%d round=%d restarts=%d "
		     "max=%d hb=%" PRId64 " since=%" PRId64 " frank=%d fexit=%d ftime=%" PRId64 " msg=%s",
		     node_state_name(r->state), r->host[0] != '\0' ? r->host : "-", r->pid,
		     r->node_rank, r->nodes, r->world_size, r->round, r->restarts, r->max_restarts,
		     r->hb_wall_ms, r->since_wall_ms, r->fail_rank, r->fail_exit, r->fail_wall_ms, msg);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int notify_status_parse(const char *line, struct node_record *r)
{
	char state[32], host[256];
	const char *m;
	int i, n = 0;

	memset(r, 0, sizeof(*r));
	if (sscanf(line,
		   "v1 state=%31s host=%255s pid=%ld rank=%d nodes=%d world=%d round=%d "
		   "restarts=%d max=%d hb=%" SCNd64 " since=%" SCNd64 " frank=%d fexit=%d ftime=%" SCNd64 " msg=%n",
		   state, host, &r->pid, &r->node_rank, &r->nodes, &r->world_size, &r->round,
		   &r->restarts, &r->max_restarts, &r->hb_wall_ms, &r->since_wall_ms, &r->fail_rank,
		   &r->fail_exit, &r->fail_wall_ms, &n) != 14 ||
	    n == 0) {
		return -EBADMSG;
	}
	r->state = NODE_STATE_COUNT;
	for (i = 0; i < NODE_STATE_COUNT; i++) {
		if (strcmp(state, state_names[i]) == 0) {
			r->state = (enum node_state)i;
		}
	}
	snprintf(r->host, sizeof(r->host), "%s", host);
	m = line + n;
	snprintf(r->fail_msg, sizeof(r->fail_msg), "%.*s", (int)strcspn(m, "\n"), m);
	return 0;
}

struct notify_status {
	struct store_conf sc; /* the agent's store configuration, borrowed with short timeouts */
	char base[300];       /* "rdzv/<run>/" */
	char id[300];         /* "<host>:<pid>" */

	pthread_mutex_t lock;
	pthread_cond_t cond;  /* on CLOCK_MONOTONIC */
	struct node_record rec;
	uint64_t version, published;
	bool stop, ready_sent, stopping_sent;
	char last_status[700]; /* the last STATUS= sent: an unchanged one is not sent again */
	pthread_t thr;
	bool thr_ok;

	/* The publisher's own (its thread only). */
	struct crun_store *st;
	bool indexed;
};

static void publish(struct notify_status *s, struct node_record *r)
{
	char key[sizeof(s->base) + sizeof(s->id) + 32], line[1024];
	struct crun_diag d = {0};
	int rc, n;

	if (s->st == NULL) {
		rc = store_open_conf(&s->sc, &s->st, &d);
		if (rc < 0) {
			log_debug("status: %s", d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
			s->st = NULL;
			return;
		}
	}
	r->hb_wall_ms = crun_wall_ms();
	n = notify_status_format(r, line, sizeof(line));
	if (n < 0) {
		return;
	}
	snprintf(key, sizeof(key), "%s%s%s", s->base, NOTIFY_STATUS_KEY_NODE, s->id);
	rc = crun_store_set(s->st, key, line, (size_t)n);
	if (rc == 0 && !s->indexed) {
		/* After the record, so a reader that finds the name also finds the record. */
		snprintf(key, sizeof(key), "%s%s", s->base, NOTIFY_STATUS_KEY_NODES);
		snprintf(line, sizeof(line), "%s\n", s->id);
		rc = crun_store_append(s->st, key, line, strlen(line));
		s->indexed = rc == 0;
	}
	if (rc < 0) {
		log_debug("status: publishing: %s", crun_strerror(rc));
		crun_store_close(s->st);
		s->st = NULL;
	}
}

static void deadline_in(struct timespec *at, int64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, at);
	at->tv_sec += (time_t)(ms / 1000);
	at->tv_nsec += (long)(ms % 1000) * 1000000;
	if (at->tv_nsec >= 1000000000) {
		at->tv_sec++;
		at->tv_nsec -= 1000000000;
	}
}

static void *publisher_main(void *arg)
{
	struct notify_status *s = arg;
	struct node_record r;
	struct timespec next;
	uint64_t v;
	bool due = true;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		if (s->stop && s->st == NULL && s->published != 0) {
			/*
			 * The store was not reachable at the last try: an agent that is leaving
			 * does not wait a connect timeout more for it.
			 */
			break;
		}
		if (due || s->version != s->published) {
			r = s->rec;
			v = s->version;
			pthread_mutex_unlock(&s->lock);
			publish(s, &r);
			pthread_mutex_lock(&s->lock);
			s->published = v;
			deadline_in(&next, NOTIFY_STATUS_HB_MS);
			due = false;
		}
		if (s->stop && s->published == s->version) {
			break;
		}
		if (s->version == s->published &&
		    pthread_cond_timedwait(&s->cond, &s->lock, &next) == ETIMEDOUT) {
			due = true;
		}
	}
	pthread_mutex_unlock(&s->lock);
	crun_store_close(s->st);
	s->st = NULL;
	return NULL;
}

static void free_status(struct notify_status *s)
{
	store_conf_finish(&s->sc);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

int notify_status_create(const struct store_conf *sc, const char *run_id, const char *host,
			 int max_restarts, struct notify_status **out)
{
	const struct store_conf_variant v = {
		.connect_timeout_ms = PUBLISH_TIMEOUT_MS,
		.timeout_ms = PUBLISH_TIMEOUT_MS,
	};
	struct notify_status *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;
	sigset_t all, old;
	int rc;

	*out = NULL;
	if (s == NULL) {
		return -ENOMEM;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	/* Everything the agent's own connection has (TLS included), with short timeouts. */
	if (store_conf_derive(&s->sc, sc, &v) < 0) {
		free_status(s);
		return -ENOMEM;
	}
	snprintf(s->base, sizeof(s->base), "rdzv/%s/", run_id);
	snprintf(s->id, sizeof(s->id), "%s:%ld", host, (long)getpid());
	snprintf(s->rec.host, sizeof(s->rec.host), "%s", host);
	s->rec.pid = (long)getpid();
	s->rec.state = NODE_JOINING;
	s->rec.node_rank = s->rec.nodes = s->rec.world_size = s->rec.round = -1;
	s->rec.max_restarts = max_restarts;
	s->rec.since_wall_ms = crun_wall_ms();
	s->rec.fail_rank = s->rec.fail_exit = -1;
	s->version = 1;
	/* Signals belong to the agent's loop thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->thr, NULL, publisher_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		free_status(s);
		return -rc;
	}
	s->thr_ok = true;
	*out = s;
	return 0;
}

/* The STATUS= line systemctl status shows; called with the lock held. */
static void tell_systemd(struct notify_status *s)
{
	const struct node_record *r = &s->rec;
	const char *ready = "", *stopping = "";
	char what[700];

	if (!notify_enabled()) {
		return;
	}
	switch (r->state) {
	case NODE_RUNNING:
		snprintf(what, sizeof(what),
			 "running: round %d, node rank %d of %d, world size %d, restarts %d of %d",
			 r->round, r->node_rank, r->nodes, r->world_size, r->restarts,
			 r->max_restarts);
		if (!s->ready_sent) {
			ready = "READY=1\n";
			s->ready_sent = true;
		}
		break;
	case NODE_JOINING:
		snprintf(what, sizeof(what), "joining: waiting for a rendezvous round (restarts %d of %d)",
			 r->restarts, r->max_restarts);
		break;
	case NODE_WAITING:
		snprintf(what, sizeof(what), "waiting: this node's workers finished; waiting for "
					     "the other nodes (round %d)", r->round);
		break;
	case NODE_RESTARTING:
		snprintf(what, sizeof(what), "restarting: restarts %d of %d; last failure: %s",
			 r->restarts, r->max_restarts, r->fail_msg[0] != '\0' ? r->fail_msg : "-");
		break;
	default:
		snprintf(what, sizeof(what), "%s%s%s", node_state_name(r->state),
			 r->state == NODE_FAILED && r->fail_msg[0] != '\0' ? ": " : "",
			 r->state == NODE_FAILED ? r->fail_msg : "");
		if (!s->stopping_sent) {
			stopping = "STOPPING=1\n";
			s->stopping_sent = true;
		}
		break;
	}
	if (ready[0] == '\0' && stopping[0] == '\0' && strcmp(what, s->last_status) == 0) {
		return;
	}
	snprintf(s->last_status, sizeof(s->last_status), "%s", what);
	notify_send("%s%sSTATUS=%s", ready, stopping, what);
}

void notify_status_set(struct notify_status *s, enum node_state st,
		       const struct rdzv_assignment *as)
{
	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->lock);
	if (s->rec.state != st) {
		s->rec.since_wall_ms = crun_wall_ms();
	}
	s->rec.state = st;
	if (as != NULL) {
		s->rec.node_rank = as->group_rank;
		s->rec.nodes = as->group_world_size;
		s->rec.world_size = as->world_size;
		s->rec.round = as->round;
		s->rec.restarts = as->restart_count;
	}
	s->version++;
	tell_systemd(s);
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void notify_status_fail(struct notify_status *s, int rank, int exit_code, const char *msg)
{
	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->lock);
	s->rec.fail_rank = rank;
	s->rec.fail_exit = exit_code;
	s->rec.fail_wall_ms = crun_wall_ms();
	snprintf(s->rec.fail_msg, sizeof(s->rec.fail_msg), "%s", msg != NULL ? msg : "");
	s->version++;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void notify_status_end(struct notify_status *s, int exit_code)
{
	enum node_state st;

	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->lock);
	st = s->rec.state;
	pthread_mutex_unlock(&s->lock);
	if (exit_code == 0) {
		st = NODE_FINISHED;
	} else if (st != NODE_STOPPING) {
		st = NODE_FAILED;
	}
	notify_status_set(s, st, NULL);
}

void notify_status_destroy(struct notify_status *s)
{
	if (s == NULL) {
		return;
	}
	if (s->thr_ok) {
		pthread_mutex_lock(&s->lock);
		s->stop = true;
		pthread_cond_signal(&s->cond);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->thr, NULL);
	}
	free_status(s);
}
