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
#include "rendezvous/rdzv_keys.h"
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

int notify_event_format(const struct node_event *e, char *buf, size_t cap)
{
	char msg[sizeof(e->msg)];
	size_t i;
	int n;

	for (i = 0; e->msg[i] != '\0' && i + 1 < sizeof(msg); i++) {
		msg[i] = e->msg[i] == '\n' || e->msg[i] == '\r' ? ' ' : e->msg[i];
	}
	msg[i] = '\0';
	n = snprintf(buf, cap,
		     "e1 t=%" PRId64 " state=%s round=%d restarts=%d frank=%d fexit=%d msg=%s",
		     e->wall_ms, node_state_name(e->state), e->round, e->restarts, e->fail_rank,
		     e->fail_exit, msg);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int notify_event_parse(const char *line, struct node_event *e)
{
	char state[32];
	int i, n = 0;

	memset(e, 0, sizeof(*e));
	if (sscanf(line, "e1 t=%" SCNd64 " state=%31s round=%d restarts=%d frank=%d fexit=%d msg=%n",
		   &e->wall_ms, state, &e->round, &e->restarts, &e->fail_rank, &e->fail_exit,
		   &n) != 6 ||
	    n == 0) {
		return -EBADMSG;
	}
	e->state = NODE_STATE_COUNT;
	for (i = 0; i < NODE_STATE_COUNT; i++) {
		if (strcmp(state, state_names[i]) == 0) {
			e->state = (enum node_state)i;
		}
	}
	snprintf(e->msg, sizeof(e->msg), "%.*s", (int)strcspn(line + n, "\n"), line + n);
	return 0;
}

struct notify_status {
	struct store_conf sc; /* the agent's store configuration, borrowed with short timeouts */
	char run[256];        /* the run id (rendezvous/rdzv_keys.h names its keys) */
	char id[300];         /* "<host>:<pid>" */

	pthread_mutex_t lock;
	pthread_cond_t cond;  /* on CLOCK_MONOTONIC */
	struct node_record rec;
	uint64_t version, published;
	bool stop, ready_sent, stopping_sent;
	char last_status[700]; /* the last STATUS= sent: an unchanged one is not sent again */
	pthread_t thr;
	bool thr_ok;
	/* The history: a ring of the newest NOTIFY_STATUS_EVENTS; nev counts every event. */
	struct node_event ev[NOTIFY_STATUS_EVENTS];
	uint64_t nev;

	/* The publisher's own (its thread only). */
	struct crun_store *st;
	bool indexed;
	uint64_t ev_published; /* events appended to the store's history so far */
};

/* The events the store has not seen yet, as lines, into @buf; *@upto: the count they reach.
 * Called with the lock held. Returns the length (0: none). */
static size_t pending_events(struct notify_status *s, char *buf, size_t cap, uint64_t *upto)
{
	uint64_t i = s->ev_published;
	size_t len = 0;
	int n;

	if (s->nev - i > NOTIFY_STATUS_EVENTS) {
		i = s->nev - NOTIFY_STATUS_EVENTS; /* older ones left the ring */
	}
	for (; i < s->nev; i++) {
		n = notify_event_format(&s->ev[i % NOTIFY_STATUS_EVENTS], buf + len, cap - len);
		if (n < 0 || len + (size_t)n + 1 >= cap) {
			break; /* the rest at the next publication */
		}
		len += (size_t)n;
		buf[len++] = '\n';
	}
	*upto = i;
	return len;
}

/* Append the events the store has not seen to this node's history key. */
static int publish_events(struct notify_status *s)
{
	char key[sizeof(s->run) + sizeof(s->id) + 32], buf[8192];
	uint64_t upto;
	size_t len;
	int rc;

	pthread_mutex_lock(&s->lock);
	len = pending_events(s, buf, sizeof(buf), &upto);
	pthread_mutex_unlock(&s->lock);
	if (len == 0) {
		return 0;
	}
	rdzv_key_status_hist(key, sizeof(key), s->run, s->id);
	rc = crun_store_append(s->st, key, buf, len);
	if (rc == 0) {
		s->ev_published = upto;
	}
	return rc;
}

static void publish(struct notify_status *s, struct node_record *r)
{
	char key[sizeof(s->run) + sizeof(s->id) + 32], line[1024];
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
	rdzv_key_status_node(key, sizeof(key), s->run, s->id);
	rc = publish_events(s);
	if (rc == 0) {
		rc = crun_store_set(s->st, key, line, (size_t)n);
	}
	if (rc == 0 && !s->indexed) {
		/* After the record, so a reader that finds the name also finds the record. */
		rdzv_key_status_index(key, sizeof(key), s->run);
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
		    crun_cond_wait_mono(&s->cond, &s->lock, &next) == ETIMEDOUT) {
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
	snprintf(s->run, sizeof(s->run), "%s", run_id);
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

/* The history's next event: the record as it is now. Called with the lock held. */
static void add_event(struct notify_status *s, bool failure)
{
	struct node_event *e = &s->ev[s->nev++ % NOTIFY_STATUS_EVENTS];

	memset(e, 0, sizeof(*e));
	e->wall_ms = crun_wall_ms();
	e->state = s->rec.state;
	e->round = s->rec.round;
	e->restarts = s->rec.restarts;
	e->fail_rank = failure ? s->rec.fail_rank : -1;
	e->fail_exit = failure ? s->rec.fail_exit : -1;
	/* The first part of a long summary: the record keeps the whole last one. */
	snprintf(e->msg, sizeof(e->msg), "%.*s", (int)sizeof(e->msg) - 1,
		 failure ? s->rec.fail_msg : "");
}

void notify_status_set(struct notify_status *s, enum node_state st,
		       const struct rdzv_assignment *as)
{
	bool changed;

	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->lock);
	changed = s->rec.state != st || s->nev == 0 || (as != NULL && as->round != s->rec.round);
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
	if (changed) {
		add_event(s, false);
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
	add_event(s, true);
	s->version++;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int notify_status_snapshot(struct notify_status *s, struct node_record *rec,
			   struct node_event **ev, int *n, int *dropped)
{
	uint64_t first, i;

	pthread_mutex_lock(&s->lock);
	first = s->nev > NOTIFY_STATUS_EVENTS ? s->nev - NOTIFY_STATUS_EVENTS : 0;
	*rec = s->rec;
	*n = (int)(s->nev - first);
	*dropped = (int)first;
	*ev = calloc((size_t)*n + 1, sizeof(**ev));
	if (*ev == NULL) {
		pthread_mutex_unlock(&s->lock);
		return -ENOMEM;
	}
	for (i = first; i < s->nev; i++) {
		(*ev)[i - first] = s->ev[i % NOTIFY_STATUS_EVENTS];
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
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
