/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_local.c: srun (local) and sbatch/salloc (allocator): validate options, tell the Prolog. */
#define _GNU_SOURCE

#include <stdbool.h>
#include <stdlib.h>

#include <slurm/spank.h>

#include "nvrx_common.h"
#include "nvrx_config.h"
#include "nvrx_local.h"
#include "nvrx_options.h"

static struct {
	struct nvrx_config config;
	bool loaded; /* init parsed the plugstack line (an `optional` plugin may run on without) */
} context;

int nvrx_local_init(spank_t sp, int ac, char **av)
{
	if (nvrx_config_load(&context.config, ac, av) < 0)
		return (-1);
	context.loaded = true;
	return (nvrx_options_register(sp));
}

/* The user path fails loud: a malformed user-mode socket template stops the command here. */
static int check_env_template(const char *name)
{
	const char *value = getenv(name);
	char err[NVRX_PATH_MAX + 128] = "";

	if (value == NULL || nvrx_template_check(value, err, sizeof(err)) == 0)
		return (0);
	slurm_error("nvrx: environment variable %s: %s", name, err);
	return (-1);
}

/*
 * Hand the choices to the Prolog/Epilog: the job control environment reaches them with a
 * SPANK_ prefix (SPANK_NVRX_ENABLED, SPANK_NVRX_HEALTH). Only a command that creates the
 * allocation (sbatch, salloc, or an srun outside one) feeds them.
 */
static void job_control_export(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_job_control_setenv(sp, name, value, 1);

	if (rc != ESPANK_SUCCESS)
		slurm_info("nvrx: cannot pass %s=%s to the Prolog: %s", name, value, spank_strerror(rc));
}

int nvrx_local_init_post_opt(spank_t sp, int ac, char **av)
{
	const struct nvrx_options *options = nvrx_options_get();
	bool enabled = options->enabled || context.config.default_on;
	int rv = -1;

	(void)ac;
	(void)av;
	if (!context.loaded)
		return (0);
	if (enabled) {
		if (check_env_template(NVRX_ENV_AGENT_SOCKET) < 0 ||
		    check_env_template(NVRX_ENV_AGENT_SOCKET_TEMPLATE) < 0)
			goto fail;
		job_control_export(sp, "NVRX_ENABLED", "1");
	}
	if (options->health != NULL)
		job_control_export(sp, "NVRX_HEALTH", options->health);
	slurm_verbose("nvrx: %s for this job (default=%s, --nvrx %s, health %s)", enabled ? "enabled" : "disabled",
		      context.config.default_on ? "on" : "off", options->enabled ? "given" : "not given",
		      options->health ? options->health : "not given");
	rv = 0;
fail:
	return (rv);
}
