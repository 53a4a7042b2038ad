/* SPDX-License-Identifier: MIT */
/* agent/torch_probe.c: the workers' torch, asked of their python without importing it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <crun/error.h>

#include "agent/torch_probe.h"
#include "src/common/log.h"
#include "src/common/run.h"

#define ANSWER "crun-torch-probe: "

/*
 * Run as `python -c`: find the torch that `import torch` would load (PYTHONPATH, site-packages,
 * a venv: the worker's environment is the agent's) and read its version.py as text. Importing
 * torch would take seconds and may touch CUDA; find_spec of a top-level package imports
 * nothing. One line, ANSWER then "version V", "none" or "unknown".
 */
static const char probe_script[] =
	"import importlib.util, os, re\n"
	"def probe():\n"
	"    spec = importlib.util.find_spec('torch')\n"
	"    if spec is None:\n"
	"        return 'none'\n"
	"    for d in spec.submodule_search_locations or []:\n"
	"        try:\n"
	"            with open(os.path.join(d, 'version.py')) as f:\n"
	"                m = re.search(r'''^__version__\\s*=\\s*['\"]([^'\"]+)['\"]''',\n"
	"                              f.read(), re.M)\n"
	"        except OSError:\n"
	"            continue\n"
	"        if m:\n"
	"            return 'version ' + m.group(1)\n"
	"    try:\n"
	"        from importlib.metadata import version\n"
	"        return 'version ' + version('torch')\n"
	"    except Exception:\n"
	"        return 'unknown'\n"
	"print('" ANSWER "' + probe(), flush=True)\n";

/* @s's first line, at most 120 bytes, for a message. */
static void first_line(char *dst, size_t cap, const char *s)
{
	size_t n = strcspn(s, "\n");

	snprintf(dst, cap, "%.*s", (int)(n > 120 ? 120 : n), s);
}

int torch_probe_version(const char *python, int timeout_ms, char *ver, char *why, size_t cap)
{
	char *argv[] = {(char *)python, (char *)"-c", (char *)probe_script, NULL};
	char out[4096];
	const char *a;
	size_t n;
	int rc, status = 0;

	ver[0] = '\0';
	why[0] = '\0';
	rc = crun_run_capture(argv, out, sizeof(out), timeout_ms, &status);
	if (rc < 0) {
		return rc;
	}
	a = strstr(out, ANSWER);
	if (a == NULL || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		first_line(why, cap, out[0] != '\0' ? out : "no output");
		return -EPROTO;
	}
	a += strlen(ANSWER);
	n = strcspn(a, "\r\n");
	if (n == 4 && strncmp(a, "none", 4) == 0) {
		return 0;
	}
	if (n > 8 && strncmp(a, "version ", 8) == 0 && n - 8 < cap) {
		snprintf(ver, cap, "%.*s", (int)(n - 8), a + 8);
		return 1;
	}
	first_line(why, cap, a);
	return -EPROTO;
}

bool torch_version_at_least(const char *ver, int major, int minor)
{
	char *end;
	long ma, mi;

	ma = strtol(ver, &end, 10);
	if (end == ver || *end != '.') {
		return false;
	}
	ver = end + 1;
	mi = strtol(ver, &end, 10);
	if (end == ver || ma < 0 || mi < 0) {
		return false;
	}
	return ma > major || (ma == major && mi >= minor);
}

bool torch_probe_shares_store(const struct job_spec *spec)
{
	const char *py = spec->python_path;
	const char *disabled = getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE"); /* torch 2.4+'s */
	char ver[128], why[128];
	int rc;

	if (spec->program_kind == PROGRAM_EXEC || py == NULL) {
		log_debug("workers are not Python: rank 0's TCPStore for PyTorch, should they "
			  "use it (--agent-store to use crun's store)");
		return false;
	}
	rc = torch_probe_version(py, TORCH_PROBE_TIMEOUT_MS, ver, why, sizeof(ver));
	if (rc == 1 && torch_version_at_least(ver, TORCH_SHARES_MAJOR, TORCH_SHARES_MINOR) &&
	    disabled != NULL && strcmp(disabled, "1") == 0) {
		log_info("the workers' python %s has torch %s, and "
			 "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 keeps its torchrun's c10d store "
			 "from its workers: so does crun",
			 py, ver);
		return false;
	}
	if (rc == 1 && torch_version_at_least(ver, TORCH_SHARES_MAJOR, TORCH_SHARES_MINOR)) {
		log_info("the workers' python %s has torch %s, whose torchrun shares its c10d "
			 "store with its workers: so does crun (--no-agent-store to opt out)",
			 py, ver);
		return true;
	}
	if (rc == 1) {
		log_info("the workers' python %s has torch %s, whose torchrun gives c10d workers "
			 "rank 0's own TCPStore: so does crun (--agent-store to opt in)",
			 py, ver);
	} else if (rc == 0) {
		log_info("the workers' python %s has no torch: rank 0's own TCPStore for any "
			 "PyTorch the program brings (--agent-store to use crun's store)",
			 py);
	} else if (rc == -EPROTO) {
		log_warn("could not tell which torch the workers' python %s has (it answered: %s): "
			 "rank 0's own TCPStore, as torchrun before 2.4 (--agent-store to use "
			 "crun's store)",
			 py, why);
	} else {
		char b[64];

		if (rc == -ETIMEDOUT) {
			snprintf(b, sizeof(b), "no answer in %d s", TORCH_PROBE_TIMEOUT_MS / 1000);
		}
		log_warn("could not tell which torch the workers' python %s has (%s): rank 0's own "
			 "TCPStore, as torchrun before 2.4 (--agent-store to use crun's store)",
			 py, rc == -ETIMEDOUT ? b : crun_strerror(rc));
	}
	return false;
}
