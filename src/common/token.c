/* SPDX-License-Identifier: MIT */
/* src/common/token.c: token files, handshake keys and proofs, fingerprints (nettle). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>

#include <crun/error.h>

#include "src/common/fs.h"
#include "src/common/io.h"
#include "src/common/log.h"
#include "src/common/token.h"
#include "src/common/util.h"

#define PROOF_CONTEXT_CLIENT "crun-store-v2 client proof"
#define PROOF_CONTEXT_SERVER "crun-store-v2 server proof"

static void hex(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

static int unhex(const char *s, size_t n, uint8_t *out)
{
	size_t i;
	int hi, lo;

	for (i = 0; i < n; i++) {
		hi = s[2 * i];
		lo = s[2 * i + 1];
		hi = hi >= '0' && hi <= '9' ? hi - '0' : hi >= 'a' && hi <= 'f' ? hi - 'a' + 10 : -1;
		lo = lo >= '0' && lo <= '9' ? lo - '0' : lo >= 'a' && lo <= 'f' ? lo - 'a' + 10 : -1;
		if (hi < 0 || lo < 0) {
			return -EINVAL;
		}
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void token_fingerprint(const void *tok, size_t len, char out[TOKEN_FPR_HEX + 1])
{
	uint8_t md[SHA256_DIGEST_SIZE];
	struct sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, len, tok);
	sha256_digest(&c, sizeof(md), md);
	hex(md, TOKEN_FPR_HEX / 2, out);
	explicit_bzero(md, sizeof(md));
	explicit_bzero(&c, sizeof(c));
}

/* nettle: no library state to set up, so the first call costs what the hash does. The
 * context, which holds the key's pads, is wiped. */
int token_hmac(const void *key, size_t klen, const void *a, size_t alen, const void *b,
	       size_t blen, uint8_t out[TOKEN_KEY_LEN])
{
	struct hmac_sha256_ctx c;

	hmac_sha256_set_key(&c, klen, key);
	hmac_sha256_update(&c, alen, a);
	if (blen > 0) {
		hmac_sha256_update(&c, blen, b);
	}
	hmac_sha256_digest(&c, TOKEN_KEY_LEN, out);
	explicit_bzero(&c, sizeof(c));
	return 0;
}

int token_derive_key(const void *tok, size_t len, const char *scope, uint8_t key[TOKEN_KEY_LEN])
{
	if (scope == NULL || scope[0] == '\0') {
		return token_hmac(tok, len, "store:", 6, NULL, 0, key);
	}
	if (strlen(scope) > TOKEN_SCOPE_MAX) {
		return -EINVAL;
	}
	return token_hmac(tok, len, "job:", 4, scope, strlen(scope), key);
}

bool token_scope_valid(const char *scope)
{
	size_t i, n = scope != NULL ? strlen(scope) : 0;

	if (n == 0 || n > TOKEN_SCOPE_MAX || strcmp(scope, "rdzv") == 0) {
		return false;
	}
	for (i = 0; i < n; i++) {
		if ((unsigned char)scope[i] <= ' ' || (unsigned char)scope[i] >= 0x7f ||
		    scope[i] == '/') {
			return false;
		}
	}
	return true;
}

int token_check_strength(const char *tok, const char *source, struct crun_diag *d)
{
	bool seen[256] = {false};
	size_t i, n = strlen(tok);
	int distinct = 0;

	if (n < TOKEN_MIN_LEN) {
		return diag_set(d, CRUN_ECONFIG,
				"%s: the token is %zu bytes; at least %d are needed to stand "
				"guessing (generate one: head -c 32 /dev/urandom | od -An -tx1 | "
				"tr -d ' \\n')",
				source, n, TOKEN_MIN_LEN);
	}
	for (i = 0; i < n; i++) {
		distinct += !seen[(unsigned char)tok[i]];
		seen[(unsigned char)tok[i]] = true;
	}
	if (distinct < TOKEN_MIN_DISTINCT) {
		return diag_set(d, CRUN_ECONFIG,
				"%s: the token has too little entropy (%d distinct characters; at "
				"least %d): use a generated one (head -c 32 /dev/urandom | od -An "
				"-tx1 | tr -d ' \\n')",
				source, distinct, TOKEN_MIN_DISTINCT);
	}
	return 0;
}

int token_cred_from_token(struct token_cred *c, const char *tok, const char *scope,
			  const char *source, struct crun_diag *d)
{
	size_t n = tok != NULL ? strlen(tok) : 0;
	int rc;

	memset(c, 0, sizeof(*c));
	if (n == 0 || n > TOKEN_MAX_LEN) {
		return diag_set(d, -EINVAL, "%s: the token must be %d to %d bytes", source,
				TOKEN_MIN_LEN, TOKEN_MAX_LEN);
	}
	rc = token_check_strength(tok, source, d);
	if (rc < 0) {
		return rc;
	}
	if (scope != NULL && scope[0] != '\0' && !token_scope_valid(scope)) {
		return diag_set(d, -EINVAL, "%s: \"%s\" cannot be a token scope", source, scope);
	}
	if (token_derive_key(tok, n, scope, c->key) < 0) {
		return diag_set(d, -EIO, "%s: HMAC failed", source);
	}
	token_fingerprint(tok, n, c->fpr);
	snprintf(c->scope, sizeof(c->scope), "%s", scope != NULL ? scope : "");
	snprintf(c->source, sizeof(c->source), "%s", source);
	c->set = true;
	return 0;
}

/* The directory holding @file: others must not be able to replace what is in it. */
static int check_dir_of(const char *file, const char *path, struct crun_diag *d)
{
	char dir[PATH_MAX];
	char *slash;
	int rc;

	if (snprintf(dir, sizeof(dir), "%s", file) >= (int)sizeof(dir)) {
		return diag_set(d, -ENAMETOOLONG, "token file %s: path too long", path);
	}
	slash = strrchr(dir, '/');
	if (slash == NULL) {
		snprintf(dir, sizeof(dir), ".");
	} else {
		slash[slash == dir ? 1 : 0] = '\0';
	}
	rc = fs_check_dir_safe(dir, "token file directory", d);
	if (rc > 0) {
		log_warn("token file %s: %s", path, d->msg);
		diag_clear(d);
		return 0;
	}
	return rc < 0 ? diag_prefix(d, "token file %s", path) : 0;
}

/*
 * A token file may be a symbolic link (to a secrets mount, say): it is followed, and what is
 * checked is the file it leads to (fs_check_private() on the open file), the directory of
 * the name given and, for a link, the directory of its target (fs_check_dir_safe()).
 */
static int check_token_dirs(const char *path, struct crun_diag *d)
{
	char real[PATH_MAX];
	struct stat sb;
	int rc;

	rc = check_dir_of(path, path, d);
	if (rc < 0 || lstat(path, &sb) < 0 || !S_ISLNK(sb.st_mode)) {
		return rc;
	}
	if (realpath(path, real) == NULL) {
		rc = -errno;
		return diag_set(d, rc, "token file %s: %s", path, strerror(-rc));
	}
	return check_dir_of(real, path, d);
}

/* The first line of @path (at most TOKEN_MAX_LEN + 1 bytes read) after the permission check. */
static int read_private(const char *path, char *buf, size_t cap, struct crun_diag *d)
{
	ssize_t n;
	int fd, rc;
	char *nl;

	/* O_NONBLOCK: a FIFO planted at the name is refused below rather than waited on. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		return diag_set(d, rc, "token file %s: %s", path, strerror(-rc));
	}
	rc = fs_check_private(fd, "token file", path, d);
	if (rc == 0) {
		rc = check_token_dirs(path, d);
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	n = io_read_full(fd, buf, cap - 1);
	rc = n < 0 ? (int)n : 0;
	close(fd);
	if (rc < 0) {
		return diag_set(d, rc, "token file %s: %s", path, crun_strerror(rc));
	}
	buf[n] = '\0';
	nl = strpbrk(buf, "\r\n");
	if (nl != NULL) {
		*nl = '\0';
	} else if ((size_t)n == cap - 1) {
		return diag_set(d, -EINVAL, "token file %s: the token is longer than %d bytes",
				path, TOKEN_MAX_LEN);
	}
	if (buf[0] == '\0') {
		return diag_set(d, -EINVAL, "token file %s: empty token", path);
	}
	return 0;
}

int token_file_read(const char *path, char **tok, struct crun_diag *d)
{
	char *buf = malloc(TOKEN_MAX_LEN + 2);
	int rc;

	*tok = NULL;
	if (buf == NULL) {
		return diag_set(d, -ENOMEM, "token file %s: out of memory", path);
	}
	rc = read_private(path, buf, TOKEN_MAX_LEN + 2, d);
	if (rc < 0) {
		explicit_bzero(buf, TOKEN_MAX_LEN + 2);
		free(buf);
		return rc;
	}
	*tok = buf;
	return 0;
}

void token_wipe(char *tok)
{
	if (tok != NULL) {
		explicit_bzero(tok, strlen(tok));
		free(tok);
	}
}

/* "crun-job-key-v1 SCOPE KEYHEX FPR" */
static int parse_job(struct token_cred *c, const char *path, char *line, struct crun_diag *d)
{
	char *save = NULL, *magic, *scope, *key, *fpr;

	magic = strtok_r(line, " ", &save);
	scope = strtok_r(NULL, " ", &save);
	key = strtok_r(NULL, " ", &save);
	fpr = strtok_r(NULL, " ", &save);
	if (magic == NULL || scope == NULL || key == NULL || fpr == NULL ||
	    strtok_r(NULL, " ", &save) != NULL || !token_scope_valid(scope) ||
	    strlen(key) != 2 * TOKEN_KEY_LEN || strlen(fpr) != TOKEN_FPR_HEX ||
	    unhex(key, TOKEN_KEY_LEN, c->key) < 0) {
		memset(c, 0, sizeof(*c));
		return diag_set(d, -EINVAL, "token file %s: malformed %s line", path,
				TOKEN_JOB_MAGIC);
	}
	snprintf(c->scope, sizeof(c->scope), "%s", scope);
	snprintf(c->fpr, sizeof(c->fpr), "%s", fpr);
	c->set = true;
	return 0;
}

int token_cred_load(struct token_cred *c, const char *path, const char *scope,
		    struct crun_diag *d)
{
	char source[sizeof(c->source)];
	char *tok;
	int rc;

	memset(c, 0, sizeof(*c));
	snprintf(source, sizeof(source), "token file %s", path);
	rc = token_file_read(path, &tok, d);
	if (rc < 0) {
		return rc;
	}
	if (strncmp(tok, TOKEN_JOB_MAGIC " ", strlen(TOKEN_JOB_MAGIC) + 1) == 0) {
		rc = parse_job(c, path, tok, d);
		if (rc == 0 && scope != NULL && scope[0] != '\0' && strcmp(scope, c->scope) != 0) {
			rc = diag_set(d, -EINVAL, "token file %s: confined to run %s, not %s",
				      path, c->scope, scope);
			memset(c, 0, sizeof(*c));
		}
		snprintf(c->source, sizeof(c->source), "%s", source);
	} else {
		rc = token_cred_from_token(c, tok, scope, source, d);
	}
	token_wipe(tok);
	return rc;
}

int token_cred_write(const char *path, const struct token_cred *c, struct crun_diag *d)
{
	char line[sizeof(TOKEN_JOB_MAGIC) + TOKEN_SCOPE_MAX + 2 * TOKEN_KEY_LEN + TOKEN_FPR_HEX + 8];
	char keyhex[2 * TOKEN_KEY_LEN + 1];
	int fd, rc, n;

	if (!c->set || c->scope[0] == '\0') {
		return diag_set(d, -EINVAL, "token file %s: only a scoped credential is written",
				path);
	}
	hex(c->key, TOKEN_KEY_LEN, keyhex);
	n = snprintf(line, sizeof(line), "%s %s %s %s\n", TOKEN_JOB_MAGIC, c->scope, keyhex,
		     c->fpr);
	explicit_bzero(keyhex, sizeof(keyhex));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		explicit_bzero(line, sizeof(line));
		return diag_set(d, rc, "token file %s: %s", path, strerror(-rc));
	}
	rc = io_write_full(fd, line, (size_t)n);
	explicit_bzero(line, sizeof(line));
	if (close(fd) < 0 && rc == 0) {
		rc = -errno;
	}
	if (rc < 0) {
		unlink(path);
		return diag_set(d, rc, "token file %s: %s", path, crun_strerror(rc));
	}
	return 0;
}

int token_generate(char out[TOKEN_GEN_HEX + 1])
{
	uint8_t r[TOKEN_GEN_HEX / 2];

	if (util_random(r, sizeof(r)) < 0) {
		return -EIO;
	}
	hex(r, sizeof(r), out);
	explicit_bzero(r, sizeof(r));
	return 0;
}

int token_default_path(char *buf, size_t len, struct crun_diag *d)
{
	const char *env = getenv("CRUN_TOKEN_FILE");
	int n;

	if (env != NULL && env[0] != '\0') {
		n = snprintf(buf, len, "%s", env);
	} else if ((env = getenv("XDG_CONFIG_HOME")) != NULL && env[0] == '/') {
		n = snprintf(buf, len, "%s/crun/token", env);
	} else if ((env = getenv("HOME")) != NULL && env[0] == '/') {
		n = snprintf(buf, len, "%s/.config/crun/token", env);
	} else {
		return diag_set(d, CRUN_ECONFIG,
				"no token file: set --token-file, $CRUN_TOKEN_FILE or $HOME");
	}
	if (n < 0 || (size_t)n >= len) {
		return diag_set(d, -ENAMETOOLONG, "token file %s: path too long", env);
	}
	return 0;
}

/* mkdir -p the directory of @path, the last level 0700 when it is made here. */
static int make_parent(const char *path, struct crun_diag *d)
{
	char dir[PATH_MAX];
	char *slash;
	int rc;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir)) {
		return diag_set(d, -ENAMETOOLONG, "token file %s: path too long", path);
	}
	slash = strrchr(dir, '/');
	if (slash == NULL || slash == dir) {
		return 0;
	}
	*slash = '\0';
	rc = fs_mkdir_p(dir, 0700);
	if (rc < 0) {
		return diag_set(d, rc, "token file %s: directory %s: %s", path, dir,
				crun_strerror(rc));
	}
	return 0;
}

int token_file_ensure(const char *path, char **tok, bool *created, struct crun_diag *d)
{
	char tmp[PATH_MAX], gen[TOKEN_GEN_HEX + 2], salt_hex[17];
	uint8_t salt[8];
	int fd, rc;

	*created = false;
	if (access(path, F_OK) == 0 || errno != ENOENT) {
		return token_file_read(path, tok, d);
	}
	rc = make_parent(path, d);
	if (rc < 0) {
		return rc;
	}
	if (token_generate(gen) < 0 || util_random(salt, sizeof(salt)) < 0) {
		return diag_set(d, -EIO, "token file %s: no random bytes", path);
	}
	hex(salt, sizeof(salt), salt_hex);
	/* A random name: hosts sharing the directory over NFS may have equal pids. */
	if (snprintf(tmp, sizeof(tmp), "%s.new.%s", path, salt_hex) >= (int)sizeof(tmp)) {
		explicit_bzero(gen, sizeof(gen));
		return diag_set(d, -ENAMETOOLONG, "token file %s: path too long", path);
	}
	strcat(gen, "\n");
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		explicit_bzero(gen, sizeof(gen));
		return diag_set(d, rc, "token file %s: %s: %s", path, tmp, strerror(-rc));
	}
	rc = io_write_full(fd, gen, strlen(gen));
	explicit_bzero(gen, sizeof(gen));
	if (rc == 0 && fsync(fd) < 0) {
		rc = -errno;
	}
	close(fd);
	/* link() never replaces: when another agent got there first, its token wins and the
	 * same file is read below by everyone. */
	if (rc == 0 && link(tmp, path) < 0) {
		rc = errno == EEXIST ? 0 : -errno;
	} else if (rc == 0) {
		*created = true;
	}
	unlink(tmp);
	if (rc < 0) {
		return diag_set(d, rc, "token file %s: %s", path, crun_strerror(rc));
	}
	return token_file_read(path, tok, d);
}

int token_proof(const uint8_t key[TOKEN_KEY_LEN], const uint8_t sn[TOKEN_NONCE_LEN],
		const uint8_t cn[TOKEN_NONCE_LEN], enum token_role role,
		uint8_t out[TOKEN_KEY_LEN])
{
	uint8_t msg[2 * TOKEN_NONCE_LEN];
	const char *ctx = role == TOKEN_ROLE_SERVER ? PROOF_CONTEXT_SERVER : PROOF_CONTEXT_CLIENT;

	memcpy(msg, sn, TOKEN_NONCE_LEN);
	memcpy(msg + TOKEN_NONCE_LEN, cn, TOKEN_NONCE_LEN);
	return token_hmac(key, TOKEN_KEY_LEN, msg, sizeof(msg), ctx, strlen(ctx), out);
}

bool token_equal(const void *a, const void *b, size_t n)
{
	return memeql_sec(a, b, n) != 0;
}
