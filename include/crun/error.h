/* SPDX-License-Identifier: MIT */
/* include/crun/error.h: return codes shared by every crun API. */
#ifndef CRUN_ERROR_H
#define CRUN_ERROR_H

#include <crun/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every function returns 0 (or a non-negative count) on success, -errno for OS-level failures
 * (-ETIMEDOUT, -ECONNREFUSED, -ENOENT for a missing key, -EMSGSIZE for a limit, -EPROTO for a
 * peer that broke the protocol), or one of the CRUN_E* codes below for crun's own conditions.
 * Append new codes at the end only: the numbers are part of the ABI.
 */
#define CRUN_ERROR_MAP(X)                                                              \
	X(CONFIG, "invalid configuration")                                             \
	X(VERSION, "peer speaks an unsupported protocol version")                      \
	X(MAGIC, "peer is not a crun store (bad magic)")                               \
	X(AUTH, "authentication failed")                                               \
	X(SERVER, "store server reported an error")                                    \
	X(ROUND, "rendezvous round closed before this node joined")                    \
	X(CLOSED, "job is closed to new nodes")                                        \
	X(RESTARTS, "restart budget exhausted")                                        \
	X(PEERFAIL, "a peer failed")                                                   \
	X(NOTCRUN, "not started by crun (no CRUN_*/RANK environment)")                 \
	X(BACKEND, "collective backend unavailable")                                   \
	X(NCCL, "NCCL call failed")                                                    \
	X(CUDA, "CUDA call failed")                                                    \
	X(NODEV, "no GPU device available")

enum crun_error {
	CRUN_ERROR_BASE = -10000, /* below every -errno value */
/* A private name, not X: a program's own X macro survives this header. */
#define CRUN_ERROR_ENUM_(name, msg) CRUN_E##name,
	CRUN_ERROR_MAP(CRUN_ERROR_ENUM_)
#undef CRUN_ERROR_ENUM_
	CRUN_ERROR_END
};

/** Describe any return code: 0, -errno, or CRUN_E*. Never NULL; the string is static. */
CRUN_EXPORT const char *crun_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
