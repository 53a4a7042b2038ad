/* SPDX-License-Identifier: MIT */
/* agent/spawn.c: worker environment and argv, and the process-group guard. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/spawn.h"
#include "src/common/fs.h"
#include "src/common/log.h"
#include "src/common/signames.h"

/* ---- environment ---- */

int spawn_env_init(struct spawn_env *e, char *const *envp)
{
	int i;

	memset(e, 0, sizeof(*e));
	for (i = 0; envp != NULL && envp[i] != NULL; i++) {
		if (strchr(envp[i], '=') == NULL) {
			continue;
		}
		if (e->n + 2 > e->cap) {
			int ncap = e->cap == 0 ? 64 : e->cap * 2;
			char **nv = realloc(e->v, (size_t)ncap * sizeof(*nv));

			if (nv == NULL) {
				spawn_env_finish(e);
				return -ENOMEM;
			}
			e->v = nv;
			e->cap = ncap;
		}
		e->v[e->n] = strdup(envp[i]);
		if (e->v[e->n] == NULL) {
			spawn_env_finish(e);
			return -ENOMEM;
		}
		e->n++;
		e->v[e->n] = NULL;
	}
	if (e->v == NULL) {
		e->v = calloc(1, sizeof(*e->v));
		if (e->v == NULL) {
			return -ENOMEM;
		}
		e->cap = 1;
	}
	return 0;
}

static int find(const struct spawn_env *e, const char *key)
{
	size_t kl = strlen(key);
	int i;

	for (i = 0; i < e->n; i++) {
		if (strncmp(e->v[i], key, kl) == 0 && e->v[i][kl] == '=') {
			return i;
		}
	}
	return -1;
}

const char *spawn_env_get(const struct spawn_env *e, const char *key)
{
	int i = find(e, key);

	return i < 0 ? NULL : e->v[i] + strlen(key) + 1;
}

int spawn_env_set(struct spawn_env *e, const char *key, const char *val)
{
	size_t kl = strlen(key), vl = strlen(val);
	char *kv = malloc(kl + vl + 2);
	int i;

	if (kv == NULL) {
		return -ENOMEM;
	}
	memcpy(kv, key, kl);
	kv[kl] = '=';
	memcpy(kv + kl + 1, val, vl + 1);
	i = find(e, key);
	if (i >= 0) {
		free(e->v[i]);
		e->v[i] = kv;
		return 0;
	}
	if (e->n + 2 > e->cap) {
		int ncap = e->cap < 8 ? 16 : e->cap * 2;
		char **nv = realloc(e->v, (size_t)ncap * sizeof(*nv));

		if (nv == NULL) {
			free(kv);
			return -ENOMEM;
		}
		e->v = nv;
		e->cap = ncap;
	}
	e->v[e->n++] = kv;
	e->v[e->n] = NULL;
	return 0;
}

int spawn_env_setf(struct spawn_env *e, const char *key, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return spawn_env_set(e, key, buf);
}

void spawn_env_unset(struct spawn_env *e, const char *key)
{
	int i = find(e, key);

	if (i < 0) {
		return;
	}
	free(e->v[i]);
	memmove(&e->v[i], &e->v[i + 1], (size_t)(e->n - i) * sizeof(*e->v)); /* with the NULL */
	e->n--;
}

/* What workers inherit of the store, as its configuration says (store_conf_worker_env()). */
static int store_env(struct spawn_env *e, const struct spawn_worker_info *wi)
{
	struct store_env_var v[STORE_CONF_ENV_MAX];
	size_t n, i;
	int rc = 0;

	if (wi->store == NULL) {
		return wi->store_token_file != NULL
			       ? spawn_env_set(e, "CRUN_STORE_TOKEN_FILE", wi->store_token_file)
			       : 0;
	}
	n = store_conf_worker_env(wi->store, wi->store_token_file, v);
	for (i = 0; i < n; i++) {
		if (v[i].val != NULL) {
			rc |= spawn_env_set(e, v[i].name, v[i].val);
		} else if (!v[i].keep) {
			spawn_env_unset(e, v[i].name);
		}
	}
	return rc;
}

void spawn_env_finish(struct spawn_env *e)
{
	int i;

	for (i = 0; i < e->n; i++) {
		free(e->v[i]);
	}
	free(e->v);
	memset(e, 0, sizeof(*e));
}

/* The @idx-th comma-separated entry of @list into @out; false when there is none. */
static int nth_entry(const char *list, int idx, char *out, size_t len)
{
	const char *p = list;
	int i;

	for (i = 0; i < idx; i++) {
		p = strchr(p, ',');
		if (p == NULL) {
			return -ENOENT;
		}
		p++;
	}
	snprintf(out, len, "%.*s", (int)strcspn(p, ","), p);
	return out[0] == '\0' ? -ENOENT : 0;
}

int spawn_worker_env(const struct spawn_worker_info *wi, char *const *base, struct spawn_env *out)
{
	const struct job_spec *spec = wi->spec;
	struct spawn_env *e = out;
	int rc, lr = spec->virtual_local_rank ? 0 : wi->local_rank;

	rc = spawn_env_init(e, base);
	if (rc < 0) {
		return rc;
	}
	rc = 0;
	rc |= spawn_env_setf(e, "RANK", "%d", wi->rank);
	rc |= spawn_env_setf(e, "LOCAL_RANK", "%d", lr);
	rc |= spawn_env_setf(e, "WORLD_SIZE", "%d", wi->world_size);
	rc |= spawn_env_setf(e, "LOCAL_WORLD_SIZE", "%d", spec->nproc_per_node);
	rc |= spawn_env_setf(e, "GROUP_RANK", "%d", wi->group_rank);
	rc |= spawn_env_setf(e, "GROUP_WORLD_SIZE", "%d", wi->group_world_size);
	/* One role per job: role ranks are the global ranks. */
	rc |= spawn_env_setf(e, "ROLE_RANK", "%d", wi->rank);
	rc |= spawn_env_setf(e, "ROLE_WORLD_SIZE", "%d", wi->world_size);
	rc |= spawn_env_set(e, "ROLE_NAME", spec->role != NULL ? spec->role : "default");
	rc |= spawn_env_set(e, "MASTER_ADDR", wi->master_addr);
	rc |= spawn_env_setf(e, "MASTER_PORT", "%d", wi->master_port);
	rc |= spawn_env_setf(e, "TORCHELASTIC_RESTART_COUNT", "%d", wi->restart_count);
	rc |= spawn_env_setf(e, "TORCHELASTIC_MAX_RESTARTS", "%d", spec->max_restarts);
	rc |= spawn_env_set(e, "TORCHELASTIC_RUN_ID", wi->run_id);
	/* True: PyTorch's env:// bootstrap connects to MASTER_ADDR:MASTER_PORT, crun's store,
	 * as a client on every rank, instead of rank 0 opening a TCPStore there. */
	rc |= spawn_env_set(e, "TORCHELASTIC_USE_AGENT_STORE", wi->agent_store ? "True" : "False");
	if (wi->error_file != NULL) {
		rc |= spawn_env_set(e, "TORCHELASTIC_ERROR_FILE", wi->error_file);
	}
	if (wi->heartbeat_file != NULL) {
		rc |= spawn_env_set(e, "CRUN_HEARTBEAT_FILE", wi->heartbeat_file);
	}
	if (spawn_env_get(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL) {
		rc |= spawn_env_set(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
	}
	/* PyTorch before 2.2 reads only the old name; each name keeps a value the user set. */
	if (spawn_env_get(e, "NCCL_ASYNC_ERROR_HANDLING") == NULL) {
		rc |= spawn_env_set(e, "NCCL_ASYNC_ERROR_HANDLING", "1");
	}
	if (spawn_env_get(e, "OMP_NUM_THREADS") == NULL && spec->nproc_per_node > 1) {
		rc |= spawn_env_set(e, "OMP_NUM_THREADS", "1");
	}
	rc |= store_env(e, wi);
	if (wi->store_prefix != NULL) {
		rc |= spawn_env_set(e, "CRUN_STORE_PREFIX", wi->store_prefix);
	}
	if (spec->socket_ifname != NULL) {
		if (spawn_env_get(e, "NCCL_SOCKET_IFNAME") == NULL) {
			rc |= spawn_env_set(e, "NCCL_SOCKET_IFNAME", spec->socket_ifname);
		}
		if (spawn_env_get(e, "GLOO_SOCKET_IFNAME") == NULL) {
			rc |= spawn_env_set(e, "GLOO_SOCKET_IFNAME", spec->socket_ifname);
		}
	}
	if (spec->virtual_local_rank) {
		/* The worker sees only its own GPU, as device 0. */
		const char *vis = spawn_env_get(e, "CUDA_VISIBLE_DEVICES");
		char dev[64];

		if (vis == NULL) {
			snprintf(dev, sizeof(dev), "%d", wi->local_rank);
		} else if (nth_entry(vis, wi->local_rank, dev, sizeof(dev)) < 0) {
			/* Never a device the user hid: the command line refuses this case. */
			spawn_env_finish(e);
			return -ENODEV;
		}
		rc |= spawn_env_set(e, "CUDA_VISIBLE_DEVICES", dev);
		/* torchrun keeps LOCAL_WORLD_SIZE = nproc here too; libcrun-worker reads this to
		 * know that its one visible GPU serves LOCAL_RANK 0 of that many (gpu_device.h). */
		rc |= spawn_env_set(e, "CRUN_VIRTUAL_LOCAL_RANK", "1");
	}
	if (rc != 0) {
		spawn_env_finish(e);
		return -ENOMEM;
	}
	return 0;
}

/* ---- argv ---- */

/* @arg with every "${local_rank}" replaced by @lr; malloc'd. */
static char *expand_macro(const char *arg, int lr)
{
	static const char macro[] = "${local_rank}";
	const size_t ml = sizeof(macro) - 1;
	char num[16], *out, *o;
	const char *p;
	size_t count = 0, nl;

	snprintf(num, sizeof(num), "%d", lr);
	nl = strlen(num);
	for (p = strstr(arg, macro); p != NULL; p = strstr(p + ml, macro)) {
		count++;
	}
	out = malloc(strlen(arg) + count * nl + 1);
	if (out == NULL) {
		return NULL;
	}
	o = out;
	for (p = arg; *p != '\0';) {
		if (strncmp(p, macro, ml) == 0) {
			memcpy(o, num, nl);
			o += nl;
			p += ml;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	return out;
}

void spawn_argv_free(char **argv)
{
	int i;

	if (argv == NULL) {
		return;
	}
	for (i = 0; argv[i] != NULL; i++) {
		free(argv[i]);
	}
	free(argv);
}

int spawn_worker_argv(const struct job_spec *spec, int local_rank, char ***argv)
{
	const char *py = spec->python_path != NULL   ? spec->python_path
			 : spec->python_exec != NULL ? spec->python_exec
						     : "python3";
	int nargs = spec->nargs, n = 0, i, max = nargs + 8;
	char **v = calloc((size_t)max, sizeof(*v));

	if (v == NULL) {
		return -ENOMEM;
	}
	switch (spec->program_kind) {
	case PROGRAM_PYTHON:
		v[n++] = strdup(py);
		v[n++] = strdup("-u");
		break;
	case PROGRAM_MODULE:
		v[n++] = strdup(py);
		v[n++] = strdup("-u");
		v[n++] = strdup("-m");
		break;
	case PROGRAM_EXEC:
	default:
		break;
	}
	v[n++] = strdup(spec->program);
	if (spec->local_rank_arg != LOCAL_RANK_ARG_NONE) {
		/* Where torch.distributed.launch puts it: after the program, before its args. */
		char lra[40];

		snprintf(lra, sizeof(lra), "--local%srank=%d",
			 spec->local_rank_arg == LOCAL_RANK_ARG_DASH ? "-" : "_",
			 spec->virtual_local_rank ? 0 : local_rank);
		v[n++] = strdup(lra);
	}
	for (i = 0; i < nargs && spec->args != NULL && spec->args[i] != NULL; i++) {
		v[n++] = expand_macro(spec->args[i], local_rank);
	}
	v[n] = NULL;
	for (i = 0; i < n; i++) {
		if (v[i] == NULL) {
			/* Free what was made; the holes stop spawn_argv_free early, so walk all. */
			int j;

			for (j = 0; j < n; j++) {
				free(v[j]);
			}
			free(v);
			return -ENOMEM;
		}
	}
	*argv = v;
	return 0;
}

/* ---- guard ---- */

static int guard_fd = -1;
static pid_t guard_pid = -1;
static int guard_pidfd = -1; /* readable once the guard has exited */

#define GUARD_MAX 65536

static char guard_tmpdir[PATH_MAX];

/* Protocol on the pipe: int32 > 0 adds a process group, < 0 removes one, 0 says "clean end". */
static void guard_loop(int fd)
{
	static pid_t pg[GUARD_MAX];
	int n = 0;
	bool clean = false;

	for (;;) {
		int32_t v;
		ssize_t r = read(fd, &v, sizeof(v));
		int i;

		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r != (ssize_t)sizeof(v)) {
			break; /* EOF: the agent is gone */
		}
		if (v == 0) {
			clean = true;
			continue;
		}
		if (v > 0) {
			if (n < GUARD_MAX) {
				pg[n++] = (pid_t)v;
			}
			continue;
		}
		for (i = 0; i < n; i++) {
			if (pg[i] == (pid_t)-v) {
				pg[i] = pg[--n];
				break;
			}
		}
	}
	for (int i = 0; i < n; i++) {
		kill(-pg[i], SIGKILL);
	}
	/* An agent killed outright cannot clean up: do it for it (error files, temp logs). */
	if (!clean && guard_tmpdir[0] != '\0') {
		fs_rm_rf(guard_tmpdir);
	}
}

int spawn_guard_start(const char *tmpdir)
{
	static const int ignore[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
				     SIGTSTP, SIGTTIN, SIGTTOU};
	int p[2];
	pid_t pid;

	if (guard_fd >= 0) {
		return 0;
	}
	snprintf(guard_tmpdir, sizeof(guard_tmpdir), "%s", tmpdir != NULL ? tmpdir : "");
	if (pipe2(p, O_CLOEXEC) != 0) {
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		int fd;
		size_t i;

		/* The guard must outlive the agent: no terminal signal, no death signal. */
		for (i = 0; i < sizeof(ignore) / sizeof(ignore[0]); i++) {
			signal(ignore[i], SIG_IGN);
		}
		setpgid(0, 0);
		prctl(PR_SET_NAME, "crun-guard");
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			if (fd > 2) {
				close(fd);
			}
		}
		if (p[0] > 3) {
			close_range(3, (unsigned)p[0] - 1, 0);
		}
		close_range((unsigned)p[0] + 1, ~0u, 0);
		guard_loop(p[0]);
		_exit(0);
	}
	close(p[0]);
	guard_fd = p[1];
	guard_pid = pid;
	guard_pidfd = pidfd_open(pid, 0); /* -1 (old kernel): noticed at the attempt's end only */
	return 0;
}

int spawn_guard_pidfd(void)
{
	return guard_pidfd;
}

/* The guard is gone while the agent runs (killed by someone): say what that means. */
static void guard_died(int status)
{
	char b[32];

	if (WIFSIGNALED(status)) {
		snprintf(b, sizeof(b), "was killed by %s", signal_abbrev(WTERMSIG(status)) != NULL
								  ? signal_abbrev(WTERMSIG(status))
								  : "a signal");
	} else {
		snprintf(b, sizeof(b), "exited %d", WEXITSTATUS(status));
	}
	log_error("crun-guard (pid %d) %s: should this agent now die outright (SIGKILL, the OOM "
		  "killer), its workers' children and temporary files are left behind; the job "
		  "goes on", (int)guard_pid, b);
	guard_pid = -1;
	if (guard_fd >= 0) {
		close(guard_fd);
		guard_fd = -1;
	}
	if (guard_pidfd >= 0) {
		close(guard_pidfd);
		guard_pidfd = -1;
	}
}

bool spawn_guard_check(void)
{
	int status;

	if (guard_pid <= 0 || waitpid(guard_pid, &status, WNOHANG) != guard_pid) {
		return guard_pid > 0;
	}
	guard_died(status);
	return false;
}

static void guard_send(int32_t v)
{
	if (guard_fd < 0) {
		return;
	}
	while (write(guard_fd, &v, sizeof(v)) < 0 && errno == EINTR) {
	}
}

void spawn_guard_add(pid_t pgid)
{
	guard_send((int32_t)pgid);
}

void spawn_guard_remove(pid_t pgid)
{
	guard_send(-(int32_t)pgid);
}

void spawn_guard_stop(void)
{
	guard_send(0);
	if (guard_fd >= 0) {
		close(guard_fd);
		guard_fd = -1;
	}
	if (guard_pid > 0) {
		while (waitpid(guard_pid, NULL, 0) < 0 && errno == EINTR) {
		}
		guard_pid = -1;
	}
	if (guard_pidfd >= 0) {
		close(guard_pidfd);
		guard_pidfd = -1;
	}
}

void spawn_reap_orphans(void)
{
	for (;;) {
		int status;
		pid_t p = waitpid(-1, &status, WNOHANG);

		if (p <= 0) {
			return;
		}
		if (p == guard_pid) {
			guard_died(status);
		}
	}
}
