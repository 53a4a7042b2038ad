/* SPDX-License-Identifier: MIT */
/* agent/jobspec.c: defaults and release of struct job_spec. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "agent/jobspec.h"

int jobspec_defaults(struct job_spec *spec)
{
	size_t i;

	memset(spec, 0, sizeof(*spec));
	spec->min_nodes = 1;
	spec->max_nodes = 1;
	spec->nproc_per_node = 1;
	spec->rdzv_kind = RDZV_KIND_STATIC;
	spec->rdzv_port = 29400;
	spec->is_host = -1;
	spec->node_rank = -1;
	spec->master_port = 29500;
	spec->max_restarts = 0;
	spec->shutdown_timeout_ms = 30 * 1000;
	spec->monitor_interval_s = 5.0;
	spec->failure_window_ms = JOBSPEC_FAILURE_WINDOW_MS;
	spec->restart_backoff_ms = 1000;
	spec->restart_backoff_max_ms = 30 * 1000;
	spec->worker_timeout_ms = 0;
	spec->signals[0] = SIGTERM;
	spec->signals[1] = SIGINT;
	spec->signals[2] = SIGHUP;
	spec->signals[3] = SIGQUIT;
	spec->nsignals = 4;
	spec->program_kind = PROGRAM_EXEC;
	for (i = 0; i < sizeof(spec->redirects) / sizeof(spec->redirects[0]); i++) {
		spec->redirects[i] = STD_NONE;
		spec->tee[i] = STD_NONE;
	}
	rdzv_conf_defaults(&spec->rdzv); /* torchrun's rendezvous timeouts */

	spec->rdzv_id = strdup("none");
	spec->master_addr = strdup("127.0.0.1");
	spec->role = strdup("default");
	spec->log_prefix = strdup("[rank{rank}]:");
	spec->python_exec = strdup("python3");
	if (spec->rdzv_id == NULL || spec->master_addr == NULL || spec->role == NULL ||
	    spec->log_prefix == NULL || spec->python_exec == NULL) {
		return -ENOMEM;
	}
	spec->rdzv.run_id = spec->rdzv_id;
	return 0;
}

void jobspec_finish(struct job_spec *spec)
{
	int i;

	if (spec == NULL) {
		return;
	}
	free(spec->rdzv_endpoint);
	free(spec->rdzv_host);
	free(spec->rdzv_path);
	free(spec->rdzv_id);
	free(spec->etcd_cacert);
	free(spec->etcd_cert);
	free(spec->etcd_key);
	free(spec->etcd_user);
	free(spec->etcd_password_file);
	free(spec->master_addr);
	free(spec->local_addr);
	free(spec->advertise_addr);
	free(spec->socket_ifname);
	free(spec->role);
	free(spec->program);
	if (spec->args != NULL) {
		for (i = 0; i < spec->nargs; i++) {
			free(spec->args[i]);
		}
		free(spec->args);
	}
	free(spec->python_exec);
	free(spec->python_path);
	free(spec->log_dir);
	free(spec->token_file);
	free(spec->tls_ca);
	free(spec->tls_cert);
	free(spec->tls_key);
	free(spec->tls_server_name);
	free(spec->ranks_filter);
	free(spec->log_prefix);
	for (i = 0; i < 2; i++) {
		if (spec->dup_filters[i] != NULL) {
			for (char **f = spec->dup_filters[i]; *f != NULL; f++) {
				free(*f);
			}
			free(spec->dup_filters[i]);
		}
	}
	free(spec->numa_binding);
	free(spec->event_log_handler);
	free(spec->metrics_listen);
	memset(spec, 0, sizeof(*spec));
}
