/* SPDX-License-Identifier: MIT */
/* agent/torch_probe.h: which PyTorch the workers' python would import, asked without importing
 * it; whether that torch's own torchrun shares its c10d store with its workers (docs/agent.md,
 * "The agent store"). */
#ifndef CRUN_AGENT_TORCH_PROBE_H
#define CRUN_AGENT_TORCH_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/jobspec.h"

/* The probe asks a python that must not import torch (seconds, and maybe CUDA): this bounds it. */
#define TORCH_PROBE_TIMEOUT_MS 5000

/* The first torch whose torchrun gives c10d workers its own store (pytorch#128096). */
#define TORCH_SHARES_MAJOR 2
#define TORCH_SHARES_MINOR 4

/**
 * Ask @python which torch it would import: importlib.util.find_spec("torch") and that
 * package's version.py, read as text (else importlib.metadata), within @timeout_ms. Returns 1
 * with the version in @ver ("1.13.0a0", "2.5.1+cu121"), 0 when it finds no torch, or < 0:
 * -ETIMEDOUT, -errno (it did not start) or CRUN_EPROTO (an answer not understood, @why says
 * what came back). @ver and @why (each @cap bytes) are always NUL-terminated.
 */
int torch_probe_version(const char *python, int timeout_ms, char *ver, char *why, size_t cap);

/** Whether the version @ver is @major.@minor or later; false for one that does not parse. */
bool torch_version_at_least(const char *ver, int major, int minor);

/**
 * The plan's input for c10d by the rule: is the job's program Python whose interpreter's
 * torch is 2.4 or later (and TORCH_DISABLE_SHARE_RDZV_TCP_STORE is not 1, as that torchrun
 * reads it)? Asks once (the caller keeps the answer) and logs, at info level, the version seen
 * and what follows; false for other programs, no torch, or no answer in time.
 */
bool torch_probe_shares_store(const struct job_spec *spec);

#endif
