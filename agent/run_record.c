/* SPDX-License-Identifier: MIT */
/* agent/run_record.c: the run record an agent leaves (JSON, json-c), and reading it back. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "agent/run_record.h"
#include "src/common/fs.h"
#include "src/common/log.h"

/* A record is a few KiB per hundred events; anything much larger is not one. */
#define RECORD_MAX_BYTES (4u << 20)

static const char *const end_names[RUN_END_COUNT] = {"finished", "failed", "cancelled"};

const char *run_end_name(enum run_end e)
{
	return (int)e >= 0 && e < RUN_END_COUNT ? end_names[e] : "unknown";
}

/* ---- where ---- */

/* The state dir's rule (run_record.h), into @out. */
static int state_dir(char *out, size_t cap)
{
	const char *v;
	int n;

	if ((v = getenv("CRUN_STATE_DIR")) != NULL && v[0] == '/') {
		n = snprintf(out, cap, "%s", v);
	} else if ((v = getenv("STATE_DIRECTORY")) != NULL && v[0] == '/') {
		n = snprintf(out, cap, "%.*s", (int)strcspn(v, ":"), v); /* systemd: the first */
	} else if (geteuid() == 0) {
		n = snprintf(out, cap, "/var/lib/crun");
	} else if ((v = getenv("XDG_STATE_HOME")) != NULL && v[0] == '/') {
		n = snprintf(out, cap, "%s/crun", v);
	} else if ((v = getenv("HOME")) != NULL && v[0] == '/') {
		n = snprintf(out, cap, "%s/.local/state/crun", v);
	} else {
		return -ENOENT;
	}
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int run_record_dir(char *out, size_t cap, bool create, struct crun_diag *d)
{
	char base[PATH_MAX];
	int rc;

	rc = state_dir(base, sizeof(base));
	if (rc == -ENOENT) {
		return diag_set(d, rc, "run records: no state directory (set CRUN_STATE_DIR or HOME)");
	}
	if (rc < 0 || (size_t)snprintf(out, cap, "%s/runs", base) >= cap) {
		return diag_set(d, -ENAMETOOLONG, "run records: the state directory's name is too long");
	}
	if (!create) {
		return 0;
	}
	rc = fs_mkdir_p(out, 0700);
	if (rc < 0) {
		return diag_set(d, rc, "run records: creating %s: %s", out, strerror(-rc));
	}
	rc = fs_check_dir_safe(base, "the state directory", d);
	if (rc == 0) {
		rc = fs_check_dir_safe(out, "the run-record directory", d);
	}
	return rc > 0 ? 0 : rc; /* a group-writable one is a warning the caller may log */
}

/* A run id as a file name: as it is, unless it could be read as "." or "..". */
static void run_dirname(const char *run_id, char *out, size_t cap)
{
	snprintf(out, cap, "%s%s", run_id[0] == '.' ? "_" : "", run_id);
}

/* ---- writing ---- */

static void put_int(json_object *o, const char *k, int64_t v)
{
	json_object_object_add(o, k, json_object_new_int64(v));
}

static void put_str(json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static void put_time(json_object *o, const char *k, int64_t ms)
{
	char buf[64], key[64];
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	snprintf(key, sizeof(key), "%s_ms", k);
	put_int(o, key, ms);
	if (ms > 0 && gmtime_r(&t, &tm) != NULL &&
	    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) > 0) {
		put_str(o, k, buf);
	}
}

static json_object *event_json(const struct node_event *e)
{
	json_object *o = json_object_new_object();

	put_time(o, "time", e->wall_ms);
	put_str(o, "state", node_state_name(e->state));
	put_int(o, "round", e->round);
	put_int(o, "restarts", e->restarts);
	if (e->state == NODE_STOPPING) {
		/* Its operator stopped it: the node left the job (no failure). */
		json_object_object_add(o, "left", json_object_new_boolean(1));
	}
	if (e->fail_exit >= 0) {
		json_object *f = json_object_new_object();

		put_int(f, "rank", e->fail_rank);
		put_int(f, "exit_code", e->fail_exit);
		put_str(f, "message", e->msg);
		json_object_object_add(o, "failure", f);
	}
	return o;
}

static json_object *record_json(const struct run_record *r)
{
	const struct node_record *l = &r->last;
	json_object *o = json_object_new_object(), *a;
	int i;

	put_int(o, "version", 1);
	put_str(o, "run_id", r->run_id);
	put_str(o, "host", l->host);
	put_int(o, "pid", l->pid);
	put_str(o, "state", run_end_name(r->end));
	/* A cancelled node left the job (its operator stopped it); `crun status` shows "left". */
	json_object_object_add(o, "left", json_object_new_boolean(r->end == RUN_END_CANCELLED));
	put_int(o, "exit_code", r->exit_code);
	put_int(o, "node_rank", l->node_rank);
	put_int(o, "nodes", l->nodes);
	put_int(o, "world_size", l->world_size);
	put_int(o, "nproc_per_node", r->nproc);
	put_int(o, "first_rank", r->rank_offset);
	put_int(o, "round", l->round);
	put_int(o, "restarts", l->restarts);
	put_int(o, "max_restarts", l->max_restarts);
	put_time(o, "start", r->start_ms);
	put_time(o, "end", r->end_ms);
	if (l->fail_exit >= 0) {
		json_object *f = json_object_new_object();

		put_int(f, "rank", l->fail_rank);
		put_int(f, "exit_code", l->fail_exit);
		put_time(f, "time", l->fail_wall_ms);
		put_str(f, "message", l->fail_msg);
		json_object_object_add(o, "last_failure", f);
	} else {
		json_object_object_add(o, "last_failure", NULL);
	}
	a = json_object_new_array();
	for (i = 0; i < r->n; i++) {
		json_object_array_add(a, event_json(&r->ev[i]));
	}
	json_object_object_add(o, "history", a);
	put_int(o, "history_dropped", r->dropped);
	return o;
}

int run_record_write(const struct run_record *r, const char *dir, bool flat, struct crun_diag *d)
{
	char path[PATH_MAX], sub[300];
	json_object *o = record_json(r);
	struct fs_chunk c[2];
	const char *text;
	int rc;

	run_dirname(r->run_id, sub, sizeof(sub));
	if (flat) {
		rc = snprintf(path, sizeof(path), "%s/run-%s:%ld.json", dir, r->last.host,
			      r->last.pid);
	} else {
		rc = snprintf(path, sizeof(path), "%s/%s", dir, sub);
		if (rc > 0 && (size_t)rc < sizeof(path)) {
			rc = mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -errno;
			if (rc < 0) {
				json_object_put(o);
				return diag_set(d, rc, "run record: creating %s: %s", path,
						strerror(-rc));
			}
			rc = snprintf(path, sizeof(path), "%s/%s/%s:%ld.json", dir, sub,
				      r->last.host, r->last.pid);
		}
	}
	if (rc < 0 || (size_t)rc >= sizeof(path)) {
		json_object_put(o);
		return diag_set(d, -ENAMETOOLONG, "run record: the file name under %s is too long",
				dir);
	}
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
						      JSON_C_TO_STRING_NOSLASHESCAPE);
	c[0] = (struct fs_chunk){text, strlen(text)};
	c[1] = (struct fs_chunk){"\n", 1};
	/* Not durable: a record lost to a power cut is named and skipped by its reader (below). */
	rc = fs_write_replace(path, c, 2, 0600, NULL, false);
	json_object_put(o);
	if (rc < 0) {
		return diag_set(d, rc, "run record: writing %s: %s", path, strerror(-rc));
	}
	log_debug("run record: %s", path);
	return 0;
}

/* ---- reading ---- */

static int64_t get_int(json_object *o, const char *k, int64_t dflt)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_int)
		       ? json_object_get_int64(v)
		       : dflt;
}

static void get_str(json_object *o, const char *k, char *out, size_t cap)
{
	json_object *v;

	snprintf(out, cap, "%s",
		 json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string)
			 ? json_object_get_string(v)
			 : "");
}

static enum node_state state_named(const char *s)
{
	int i;

	for (i = 0; i < NODE_STATE_COUNT; i++) {
		if (strcmp(s, node_state_name((enum node_state)i)) == 0) {
			return (enum node_state)i;
		}
	}
	return NODE_STATE_COUNT;
}

static void failure_from(json_object *f, int *rank, int *exit_code, char *msg, size_t cap)
{
	*rank = (int)get_int(f, "rank", -1);
	*exit_code = (int)get_int(f, "exit_code", -1);
	get_str(f, "message", msg, cap);
}

static int events_from(json_object *o, struct run_record *r)
{
	json_object *a, *e, *f;
	size_t i, n;

	if (!json_object_object_get_ex(o, "history", &a) || !json_object_is_type(a, json_type_array)) {
		return 0;
	}
	n = json_object_array_length(a);
	r->ev = calloc(n + 1, sizeof(*r->ev));
	if (r->ev == NULL) {
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		struct node_event *ev = &r->ev[r->n];
		char st[32];

		e = json_object_array_get_idx(a, i);
		if (!json_object_is_type(e, json_type_object)) {
			continue;
		}
		ev->wall_ms = get_int(e, "time_ms", 0);
		get_str(e, "state", st, sizeof(st));
		ev->state = state_named(st);
		ev->round = (int)get_int(e, "round", -1);
		ev->restarts = (int)get_int(e, "restarts", 0);
		ev->fail_rank = ev->fail_exit = -1;
		if (json_object_object_get_ex(e, "failure", &f) && f != NULL) {
			failure_from(f, &ev->fail_rank, &ev->fail_exit, ev->msg, sizeof(ev->msg));
		}
		r->n++;
	}
	r->dropped = (int)get_int(o, "history_dropped", 0);
	return 0;
}

/* Parse one record's text. Returns 0, -EBADMSG (not a record) or -ENOMEM. */
static int record_from(const char *text, struct run_record *r)
{
	json_object *o = json_tokener_parse(text), *f;
	struct node_record *l = &r->last;
	char st[32];
	int i, rc;

	memset(r, 0, sizeof(*r));
	if (o == NULL || !json_object_is_type(o, json_type_object) || get_int(o, "version", 0) != 1) {
		json_object_put(o);
		return -EBADMSG;
	}
	get_str(o, "run_id", r->run_id, sizeof(r->run_id));
	get_str(o, "host", l->host, sizeof(l->host));
	l->pid = (long)get_int(o, "pid", 0);
	get_str(o, "state", st, sizeof(st));
	r->end = RUN_END_COUNT;
	for (i = 0; i < RUN_END_COUNT; i++) {
		if (strcmp(st, end_names[i]) == 0) {
			r->end = (enum run_end)i;
		}
	}
	r->exit_code = (int)get_int(o, "exit_code", -1);
	l->node_rank = (int)get_int(o, "node_rank", -1);
	l->nodes = (int)get_int(o, "nodes", -1);
	l->world_size = (int)get_int(o, "world_size", -1);
	r->nproc = (int)get_int(o, "nproc_per_node", 0);
	r->rank_offset = (int)get_int(o, "first_rank", -1);
	l->round = (int)get_int(o, "round", -1);
	l->restarts = (int)get_int(o, "restarts", 0);
	l->max_restarts = (int)get_int(o, "max_restarts", 0);
	r->start_ms = get_int(o, "start_ms", 0);
	r->end_ms = get_int(o, "end_ms", 0);
	l->hb_wall_ms = r->end_ms;
	l->state = r->end == RUN_END_FINISHED ? NODE_FINISHED
		   : r->end == RUN_END_CANCELLED ? NODE_STOPPING
						 : NODE_FAILED;
	l->fail_rank = l->fail_exit = -1;
	if (json_object_object_get_ex(o, "last_failure", &f) && f != NULL &&
	    json_object_is_type(f, json_type_object)) {
		failure_from(f, &l->fail_rank, &l->fail_exit, l->fail_msg, sizeof(l->fail_msg));
		l->fail_wall_ms = get_int(f, "time_ms", 0);
	}
	rc = r->run_id[0] != '\0' && r->end != RUN_END_COUNT ? events_from(o, r) : -EBADMSG;
	json_object_put(o);
	return rc;
}

static int read_file(const char *path, char **out)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc;
	struct stat sb;
	char *buf;
	size_t got = 0;
	ssize_t k;

	if (fd < 0) {
		return -errno;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > (off_t)RECORD_MAX_BYTES) {
		rc = fstat(fd, &sb) < 0 ? -errno : -EBADMSG;
		close(fd);
		return rc;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (buf == NULL) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)sb.st_size && (k = read(fd, buf + got, (size_t)sb.st_size - got)) > 0) {
		got += (size_t)k;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	return 0;
}

static bool is_record_name(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && n > 5 && strcmp(name + n - 5, ".json") == 0;
}

/* Append the records in @dir (one run's folder) to *@v; with @one, only its newest. */
static int read_run(const char *dir, bool one, struct run_record **v, int *n, int *cap)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX], *text;
	struct run_record r;
	int rc = 0, start = *n;

	if (dp == NULL) {
		return errno == ENOENT ? 0 : -errno;
	}
	while ((de = readdir(dp)) != NULL && rc != -ENOMEM) {
		if (!is_record_name(de->d_name) ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path)) {
			continue;
		}
		text = NULL;
		rc = read_file(path, &text);
		if (rc == 0) {
			rc = record_from(text, &r);
		}
		free(text);
		if (rc == -ENOMEM) {
			break;
		}
		if (rc < 0) {
			log_warn("run records: %s: not a run record (%s); skipped", path,
				 rc == -EBADMSG ? "unreadable JSON or fields" : strerror(-rc));
			rc = 0;
			continue;
		}
		if (one && *n > start) {
			if (r.end_ms <= (*v)[start].end_ms) {
				free(r.ev);
				continue;
			}
			free((*v)[start].ev);
			(*v)[start] = r;
			continue;
		}
		if (*n == *cap) {
			struct run_record *g = realloc(*v, (size_t)(*cap * 2 + 8) * sizeof(**v));

			if (g == NULL) {
				free(r.ev);
				rc = -ENOMEM;
				break;
			}
			*v = g;
			*cap = *cap * 2 + 8;
		}
		(*v)[(*n)++] = r;
	}
	closedir(dp);
	return rc;
}

int run_record_read_all(const char *dir, const char *run_id, struct run_record **out, int *n,
			struct crun_diag *d)
{
	char path[PATH_MAX], sub[300];
	struct run_record *v = NULL;
	struct dirent *de;
	DIR *dp;
	int cap = 0, rc = 0;

	*out = NULL;
	*n = 0;
	if (run_id != NULL) {
		run_dirname(run_id, sub, sizeof(sub));
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, sub) >= sizeof(path)) {
			return diag_set(d, -ENAMETOOLONG, "run records: %s/%s: name too long", dir,
					sub);
		}
		rc = read_run(path, false, &v, n, &cap);
	} else if ((dp = opendir(dir)) == NULL) {
		rc = errno == ENOENT ? 0 : -errno;
	} else {
		while ((de = readdir(dp)) != NULL && rc == 0) {
			if (de->d_name[0] == '.' ||
			    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
				    sizeof(path)) {
				continue;
			}
			rc = read_run(path, true, &v, n, &cap);
			if (rc == -ENOTDIR) {
				rc = 0;
			}
		}
		closedir(dp);
	}
	if (rc < 0) {
		run_record_free_all(v, *n);
		*n = 0;
		return diag_set(d, rc, "run records: reading %s: %s", dir, strerror(-rc));
	}
	*out = v;
	return 0;
}

void run_record_free_all(struct run_record *r, int n)
{
	int i;

	for (i = 0; r != NULL && i < n; i++) {
		free(r[i].ev);
	}
	free(r);
}
