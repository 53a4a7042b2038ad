/* SPDX-License-Identifier: MIT */
/*
 * agent/spawn_proc.c: one worker process started, and reaped (spawn_process(), spawn_reap()).
 *
 * The child shares the agent's memory until it execs (clone() with CLONE_VM), so starting it
 * copies nothing. A copy-on-write child cost the agent a copy of its page tables, every page
 * write-protected and a TLB shoot-down on each core its threads had run on: 0.1-0.4 ms a worker
 * on a 2-core guest, a third of an 8-worker launch (bench/notes/launch.md). CLONE_VFORK is not
 * used: it would stop the agent until each child has exec'd, one after another, which a loaded
 * machine turns into a scheduling delay a worker.
 *
 * Sharing has two rules, and this file is where they are kept:
 * - What the child reads lives in a block of its own (its stack, argv, envp, the agent's PATH),
 *   unmapped only once the kernel has said the child is done with it: CLONE_CHILD_CLEARTID has
 *   the kernel zero a word of the block when the child execs or exits.
 * - The child writes nothing of the agent's. It runs on the forking thread's TLS, where libc's
 *   wrappers would store errno on a failure (under the feet of that thread, between one of its
 *   system calls and its look at errno), so it makes its system calls directly and calls no
 *   libc function but strerrordesc_np(), a table lookup, through a pointer the agent took (a
 *   call through the PLT would have the dynamic linker bind it lazily, on that thread's data,
 *   the first time). The compiler's sanitizers are off in its code, whose checks keep their
 *   state in that TLS too.
 * On a machine without a direct system call here, the child is a copy-on-write clone and the
 * same code goes through syscall().
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/spawn.h"
#include "src/common/fs.h"

#ifndef P_PIDFD
#define P_PIDFD 3 /* <linux/wait.h>; glibc 2.36 does not export it */
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000 /* <linux/sched.h> */
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2) /* <linux/close_range.h> */
#endif

/* Code that runs in the child: no sanitizer instrumentation, which would touch the agent's TLS. */
#define CHILD_CODE __attribute__((no_sanitize("address", "undefined")))

/* ---- system calls without errno: the result, or -errno ---- */

#if defined(__x86_64__) && !defined(__ILP32__)
#define SPAWN_SHARES_MEMORY 1
CHILD_CODE static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#elif defined(__aarch64__)
#define SPAWN_SHARES_MEMORY 1
CHILD_CODE static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;

	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}
#else
#define SPAWN_SHARES_MEMORY 0
/* A copy-on-write child: errno is its own, so libc's wrapper will do. */
static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r = syscall(n, a, b, c, d, e, f);

	return r < 0 ? -errno : r;
}
#endif

#define sys1(n, a) sys6((n), (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* ---- the child's block ---- */

#define CHILD_STACK (64u * 1024u)

/* The kernel's struct sigaction (handler, flags, restorer, mask), all zero: SIG_DFL. */
static const unsigned long sig_default[6];
/* The kernel's signal set: 64 signals (128 on some machines), none of them. */
#define KERNEL_SIGSET_SIZE ((NSIG - 1) / 8)
static const uint64_t no_signals[2];

/* The open-file limit workers get (spawn_keep_nofile()), as prlimit64 takes it. */
static struct {
	uint64_t cur, max;
} worker_nofile;
static bool worker_nofile_kept;

/*
 * One child's block: a guard page, its stack, then this header and what it points at. Only the
 * agent's main thread spawns, so the list of blocks not yet released needs no lock.
 */
struct child_block {
	pid_t in_use;	/* 1 until the kernel zeroes it: the child exec'd or exited */
	size_t map_len; /* of the whole mapping: a guard page, the stack, then this block */
	struct child_block *next;
	pid_t agent;
	int fd[3];	     /* the worker's 0, 1, 2 */
	char **argv, **envp; /* copies, in this block */
	char **sh_argv;	     /* room for "/bin/sh PATH ARGS..." (a script without #!) */
	const char *path;    /* the agent's PATH, copied, or FS_DEFAULT_PATH */
	char *buf;	     /* room for one PATH directory plus the program name */
	size_t buf_len;
	bool set_nofile;
	uint64_t nofile[2];
	/* strerrordesc_np(), its address taken here: the child calls no PLT entry, whose first
	 * call would run the dynamic linker's lazy binding on the agent's thread data. */
	const char *(*errdesc)(int);
};

static struct child_block *blocks;

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : 4096;
}

/* Unmap every block whose child has exec'd or exited. */
static void release_blocks(void)
{
	struct child_block **pp = &blocks;

	while (*pp != NULL) {
		struct child_block *b = *pp;

		if (__atomic_load_n(&b->in_use, __ATOMIC_ACQUIRE) == 0) {
			*pp = b->next;
			munmap((char *)b - CHILD_STACK - page_size(), b->map_len);
		} else {
			pp = &b->next;
		}
	}
}

static size_t vec_size(char *const *v, size_t *count)
{
	size_t n = 0, bytes = 0;

	for (; v[n] != NULL; n++) {
		bytes += strlen(v[n]) + 1;
	}
	*count = n;
	return bytes;
}

/* Copy the NULL-terminated @v into @ptrs (n + 1 slots) and the strings at *@strs. */
static char **vec_copy(char *const *v, size_t n, char **ptrs, char **strs)
{
	size_t i;

	for (i = 0; i < n; i++) {
		size_t len = strlen(v[i]) + 1;

		memcpy(*strs, v[i], len);
		ptrs[i] = *strs;
		*strs += len;
	}
	ptrs[n] = NULL;
	return ptrs;
}

/* A block for @p: its stack, its own copy of everything the child reads. NULL: ENOMEM. */
static struct child_block *block_new(const struct spawn_proc *p)
{
	const char *path = getenv("PATH");
	size_t pg = page_size(), nargv, nenv, sargv, senv, spath, prog, data, len;
	struct child_block *b;
	char **ptrs, *strs, *map;

	if (path == NULL) {
		path = FS_DEFAULT_PATH;
	}
	sargv = vec_size(p->argv, &nargv);
	senv = vec_size(p->envp, &nenv);
	spath = strlen(path) + 1;
	prog = strlen(p->argv[0]);
	data = sizeof(*b) + sizeof(char *) * (nargv + 1 + nenv + 1 + nargv + 2) + sargv + senv +
	       spath + spath + prog + 2;
	len = pg + CHILD_STACK + (data + pg - 1) / pg * pg;
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1,
		   0);
	if (map == MAP_FAILED) {
		return NULL;
	}
	/* A stack that overflows faults instead of writing into another block. */
	(void)mprotect(map, pg, PROT_NONE);
	b = (struct child_block *)(map + pg + CHILD_STACK);
	b->map_len = len;
	ptrs = (char **)(b + 1);
	strs = (char *)(ptrs + nargv + 1 + nenv + 1 + nargv + 2);
	b->argv = vec_copy(p->argv, nargv, ptrs, &strs);
	b->envp = vec_copy(p->envp, nenv, ptrs + nargv + 1, &strs);
	b->sh_argv = ptrs + nargv + 1 + nenv + 1;
	memcpy(strs, path, spath);
	b->path = strs;
	b->buf = strs + spath;
	b->buf_len = spath + prog + 2;
	b->agent = getpid();
	b->fd[0] = p->stdin_fd;
	b->fd[1] = p->stdout_fd;
	b->fd[2] = p->stderr_fd;
	b->set_nofile = worker_nofile_kept;
	b->nofile[0] = worker_nofile.cur;
	b->nofile[1] = worker_nofile.max;
	b->errdesc = strerrordesc_np;
	return b;
}

/* ---- the child, between clone and exec ---- */

CHILD_CODE static size_t child_strlen(const char *s)
{
	const volatile char *v = s; /* volatile: not turned into a call to strlen() */
	size_t n = 0;

	while (v[n] != '\0') {
		n++;
	}
	return n;
}

CHILD_CODE static void child_copy(char *to, const char *from, size_t n)
{
	volatile char *v = to; /* volatile: not turned into a call to memcpy() */
	size_t i;

	for (i = 0; i < n; i++) {
		v[i] = from[i];
	}
}

CHILD_CODE __attribute__((noreturn)) static void child_exit(int code)
{
	for (;;) {
		sys1(SYS_exit_group, code);
	}
}

/* "crun: worker: cannot run PROG: WHY\n" on the worker's stderr in one write; then exit. */
CHILD_CODE __attribute__((noreturn)) static void child_fail(const struct child_block *b, int err)
{
	const char *prog = b->argv[0], *why = b->errdesc(err);
	struct iovec iov[5] = {
		{(void *)"crun: worker: cannot run ", 25},
		{(void *)prog, child_strlen(prog)},
		{(void *)": ", 2},
		{(void *)(why != NULL ? why : "unknown error"), 0},
		{(void *)"\n", 1},
	};

	iov[3].iov_len = child_strlen(iov[3].iov_base);
	(void)sys3(SYS_writev, STDERR_FILENO, iov, 5);
	child_exit(err == ENOENT ? 127 : 126);
}

/* Make @from the worker's descriptor @to, inherited across exec. */
CHILD_CODE static long child_fd(int from, int to)
{
	if (from == to) {
		return sys3(SYS_fcntl, to, F_SETFD, 0);
	}
	return sys3(SYS_dup3, from, to, 0);
}

/* execve() of @file, and of /bin/sh @file when the kernel does not know its format. */
CHILD_CODE static long child_exec(struct child_block *b, const char *file)
{
	long rc = sys3(SYS_execve, file, b->argv, b->envp);
	size_t i;

	if (rc != -ENOEXEC) {
		return rc;
	}
	/* A script without "#!": run by the shell, as execvp() does. */
	b->sh_argv[0] = (char *)"/bin/sh";
	b->sh_argv[1] = (char *)file;
	for (i = 1; b->argv[i - 1] != NULL && b->argv[i] != NULL; i++) {
		b->sh_argv[i + 1] = b->argv[i];
	}
	b->sh_argv[i + 1] = NULL;
	(void)sys3(SYS_execve, "/bin/sh", b->sh_argv, b->envp);
	return -ENOEXEC;
}

/*
 * execvp()'s search: a name with a '/' as it is, else each directory of the agent's PATH in
 * turn (an empty one is the current directory); EACCES is remembered and the search goes on,
 * as it does past a missing file; another error ends it. Returns -errno: nothing ran.
 */
CHILD_CODE static long child_exec_path(struct child_block *b)
{
	const char *file = b->argv[0], *dir = b->path, *end;
	size_t flen = child_strlen(file), dlen;
	bool eacces = false;
	long rc = -ENOENT;

	if (flen == 0) {
		return -ENOENT;
	}
	for (end = file; *end != '\0' && *end != '/'; end++) {
	}
	if (*end == '/') {
		return child_exec(b, file);
	}
	for (;; dir = end + 1) {
		for (end = dir; *end != '\0' && *end != ':'; end++) {
		}
		dlen = (size_t)(end - dir);
		if (dlen + 1 + flen + 1 <= b->buf_len) {
			child_copy(b->buf, dir, dlen);
			if (dlen > 0) {
				b->buf[dlen++] = '/';
			}
			child_copy(b->buf + dlen, file, flen + 1);
			rc = child_exec(b, b->buf);
			if (rc == -EACCES) {
				eacces = true;
			} else if (rc != -ENOENT && rc != -ESTALE && rc != -ENOTDIR &&
				   rc != -ENODEV && rc != -ETIMEDOUT) {
				return rc;
			}
		}
		if (*end == '\0') {
			break;
		}
	}
	return eacces ? -EACCES : rc;
}

CHILD_CODE static int child_main(void *arg)
{
	struct child_block *b = arg;
	int sig, i;
	long rc;

	/* Handlers belong to the agent: every signal back to its default, then unblock. */
	for (sig = 1; sig < NSIG; sig++) {
		if (sig != SIGKILL && sig != SIGSTOP) {
			(void)sys4(SYS_rt_sigaction, sig, sig_default, NULL, KERNEL_SIGSET_SIZE);
		}
	}
	(void)sys4(SYS_rt_sigprocmask, SIG_SETMASK, no_signals, NULL, KERNEL_SIGSET_SIZE);
	/* Its own session and process group: the agent signals -pid to reach its children too. */
	if (sys1(SYS_setsid, 0) < 0) {
		child_exit(127);
	}
	/* Die with the agent (however it dies); the guard takes care of this process's children. */
	if (sys2(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL) < 0 || sys1(SYS_getppid, 0) != b->agent) {
		child_exit(127);
	}
	for (i = 0; i < 3; i++) {
		if (child_fd(b->fd[i], i) < 0) {
			child_exit(127);
		}
	}
	/*
	 * Whatever the agent inherited without O_CLOEXEC (its parent's descriptors) stays out of
	 * the worker: it gets stdin, stdout and stderr only, as torchrun's workers do.
	 */
	(void)sys3(SYS_close_range, 3, ~0u, CLOSE_RANGE_CLOEXEC);
	/* The limit the agent was given, not the one it raised for its store. */
	if (b->set_nofile && sys4(SYS_prlimit64, 0, RLIMIT_NOFILE, b->nofile, NULL) < 0) {
		child_exit(127);
	}
	rc = child_exec_path(b);
	child_fail(b, (int)-rc);
}

/* ---- the agent's side ---- */

int spawn_keep_nofile(void)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r) < 0) {
		return -errno;
	}
	worker_nofile.cur = r.rlim_cur;
	worker_nofile.max = r.rlim_max;
	worker_nofile_kept = true;
	return 0;
}

int spawn_process(const struct spawn_proc *p, pid_t *pid, int *pidfd)
{
	int flags = CLONE_PIDFD | SIGCHLD, fd = -1, e;
	struct child_block *b;
	sigset_t all, old;
	pid_t child;

	if (p->argv[0] == NULL) {
		return -EINVAL;
	}
	release_blocks();
	b = block_new(p);
	if (b == NULL) {
		return -ENOMEM;
	}
	if (SPAWN_SHARES_MEMORY) {
		flags |= CLONE_VM | CLONE_CHILD_CLEARTID;
	}
	__atomic_store_n(&b->in_use, 1, __ATOMIC_RELEASE);
	/* No handler of the agent may run in the child while it shares the agent's memory. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	child = clone(child_main, b, flags, b, &fd, NULL, &b->in_use);
	e = errno;
	if (child < 0 && e == EINVAL && (flags & CLONE_VM) != 0) {
		/* Refused (valgrind runs no such clone): a copy-on-write child, as on other
		 * machines. */
		flags &= ~(CLONE_VM | CLONE_CHILD_CLEARTID);
		child = clone(child_main, b, flags, b, &fd, NULL, NULL);
		e = errno;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (child < 0 || (flags & CLONE_VM) == 0) {
		/* Nothing shares the block: a copy-on-write child has its own. */
		munmap((char *)b - CHILD_STACK - page_size(), b->map_len);
		if (child < 0) {
			return -e;
		}
	} else {
		b->next = blocks;
		blocks = b;
	}
	*pid = child;
	*pidfd = fd;
	return 0;
}

int spawn_reap(int pidfd, bool *exited, int *exit_status, int *term_signal)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	*exited = false;
	while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG) != 0) {
		if (errno == EAGAIN) {
			return 0; /* a non-blocking pidfd (libuv's poll sets O_NONBLOCK): not yet */
		}
		if (errno != EINTR) {
			return -errno;
		}
	}
	if (si.si_pid == 0) {
		return 0; /* not yet */
	}
	*exited = true;
	*exit_status = 0;
	*term_signal = 0;
	if (si.si_code == CLD_EXITED) {
		*exit_status = si.si_status;
	} else {
		*term_signal = si.si_status;
	}
	release_blocks(); /* this worker's, at least */
	return 0;
}
