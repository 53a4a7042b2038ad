/* SPDX-License-Identifier: MIT */
/* src/common/token.h: the store's shared secret: token files, keys, proofs, fingerprints. */
#ifndef CRUN_SRC_COMMON_TOKEN_H
#define CRUN_SRC_COMMON_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/common/diag.h"

/*
 * The one module that touches the token (docs/security.md). The token itself never leaves
 * the process: the handshake proves knowledge of a key derived from it (HMAC-SHA256), and
 * messages name a token by its fingerprint (the first 8 bytes of SHA-256(token), in hex).
 * A credential may be confined to one run ("scoped"): its key is HMAC(token, "job:" run_id),
 * and a client holding only that key can neither act outside the run nor recover the token.
 */
#define TOKEN_MAX_LEN 4096       /* bytes of a token */
#define TOKEN_KEY_LEN 32         /* an HMAC-SHA256 key, and a proof */
#define TOKEN_NONCE_LEN 32       /* each side's handshake nonce */
#define TOKEN_FPR_HEX 16         /* hex digits of a fingerprint */
#define TOKEN_GEN_HEX 64         /* a generated token: 32 random bytes in hex */
#define TOKEN_MIN_LEN 16         /* bytes of a token given by a file, flag or environment */
#define TOKEN_MIN_DISTINCT 8     /* ... and distinct byte values in it */
#define TOKEN_SCOPE_MAX 128      /* a scope is a run id (RUN_ID_MAX) */
#define TOKEN_JOB_MAGIC "crun-job-key-v1" /* first word of a scoped credential file */

enum token_role { TOKEN_ROLE_CLIENT = 0, TOKEN_ROLE_SERVER = 1 };

/* What a client presents: a key (derived from a token, maybe scoped) and names for messages. */
struct token_cred {
	bool set;                        /* false: no credential (an --insecure client) */
	uint8_t key[TOKEN_KEY_LEN];      /* the handshake key */
	char fpr[TOKEN_FPR_HEX + 1];     /* the token's fingerprint */
	char scope[TOKEN_SCOPE_MAX + 1]; /* the run the key is confined to; "" for none */
	char source[320];                /* "token file PATH", "$CRUN_STORE_TOKEN", ... */
};

/**
 * Refuse a token too weak to stand guessing: shorter than TOKEN_MIN_LEN bytes, or with fewer
 * than TOKEN_MIN_DISTINCT distinct bytes ("aaaa...", "abab..."). @source names where it came
 * from in the message. 0, or CRUN_ECONFIG with @d filled.
 */
int token_check_strength(const char *tok, const char *source, struct crun_diag *d);

/** The fingerprint of the @len bytes at @tok (borrowed) into @out. */
void token_fingerprint(const void *tok, size_t len, char out[TOKEN_FPR_HEX + 1]);
/**
 * The handshake key of token @tok (@len bytes): HMAC-SHA256(token, "store:") unscoped,
 * HMAC-SHA256(token, "job:" @scope) for a non-empty @scope. Returns 0, or -EINVAL for a
 * scope longer than TOKEN_SCOPE_MAX.
 */
int token_derive_key(const void *tok, size_t len, const char *scope, uint8_t key[TOKEN_KEY_LEN]);
/**
 * HMAC-SHA256(@key, @a || @b) into @out (@b may be NULL with @blen 0): the one HMAC every
 * key and proof goes through (nettle's). Returns 0.
 */
int token_hmac(const void *key, size_t klen, const void *a, size_t alen, const void *b,
	       size_t blen, uint8_t out[TOKEN_KEY_LEN]);
/** A scope may be a run id that cannot reach another run's keys: 1..128 printable bytes,
 *  no '/', no space, and not "rdzv". */
bool token_scope_valid(const char *scope);
/**
 * Fill @c from token @tok (borrowed, NUL-terminated, not empty) for @scope (NULL or "":
 * unscoped); @source names where it came from, for messages. Returns 0 or a negative code.
 */
int token_cred_from_token(struct token_cred *c, const char *tok, const char *scope,
			  const char *source, struct crun_diag *d);
/**
 * Read the token in @path: its first line, without the newline. Refused (-EACCES, message
 * naming the file, its mode and owner) unless it is a regular file owned by this user and
 * neither readable nor writable by group or others. On success *@tok is malloc'd and owned by
 * the caller (free after token_wipe()). Returns 0 or a negative code with @d filled.
 */
int token_file_read(const char *path, char **tok, struct crun_diag *d);
/**
 * Load a credential from @path: either a token file (then derived for @scope, NULL for none)
 * or a scoped credential written by token_cred_write() (then @scope must be NULL or match).
 */
int token_cred_load(struct token_cred *c, const char *path, const char *scope,
		    struct crun_diag *d);
/** Write scoped credential @c to a new file @path, mode 0600 (O_EXCL: never overwrites). */
int token_cred_write(const char *path, const struct token_cred *c, struct crun_diag *d);
/** A fresh random token (TOKEN_GEN_HEX hex digits) into @out. Returns 0 or -EIO. */
int token_generate(char out[TOKEN_GEN_HEX + 1]);
/**
 * The per-user default token file: $CRUN_TOKEN_FILE, else $XDG_CONFIG_HOME/crun/token, else
 * $HOME/.config/crun/token. Returns 0, or CRUN_ECONFIG when none can be named.
 */
int token_default_path(char *buf, size_t len, struct crun_diag *d);
/**
 * Read the token in @path, creating it first (mode 0600, its directory 0700) with a random
 * token when it does not exist. Creation is atomic (a private file linked into place), so
 * agents starting at once on a shared home all end with the token that won. *@created says
 * whether this call made it. *@tok as for token_file_read().
 */
int token_file_ensure(const char *path, char **tok, bool *created, struct crun_diag *d);
/** Overwrite and free a token (NULL is a no-op). */
void token_wipe(char *tok);
/**
 * The handshake proof of @role: HMAC-SHA256(@key, server_nonce || client_nonce || context),
 * the context naming the protocol and the role, so a proof cannot be replayed as the other.
 * Returns 0 (a negative code would mean no proof: treat it as a failed handshake).
 */
int token_proof(const uint8_t key[TOKEN_KEY_LEN], const uint8_t sn[TOKEN_NONCE_LEN],
		const uint8_t cn[TOKEN_NONCE_LEN], enum token_role role,
		uint8_t out[TOKEN_KEY_LEN]);
/** Constant-time comparison of @n bytes (nettle's memeql_sec). */
bool token_equal(const void *a, const void *b, size_t n);

#endif
