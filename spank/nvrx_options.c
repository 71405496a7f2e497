/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_options.c: option table and callbacks for --nvrx and --nvrx-health. */
#define _GNU_SOURCE

#include <stddef.h>
#include <string.h>

#include "nvrx_options.h"

enum option_val {
	OPT_NVRX = 1,
	OPT_NVRX_HEALTH = 2,
};

static struct nvrx_options options = { false, NULL, false };

static const char *const health_values[] = { "off", "quick", "full" };

const char *nvrx_health_parse(const char *value)
{
	size_t i = 0;

	if (value == NULL)
		return (NULL);
	for (i = 0; i < sizeof(health_values) / sizeof(health_values[0]); i++) {
		if (strcmp(value, health_values[i]) == 0)
			return (health_values[i]);
	}
	return (NULL);
}

/*
 * Called on the submit side with remote=0 (srun, sbatch, salloc: a non-zero return rejects the
 * command line), and again in slurmstepd with remote=1 for the values forwarded to the step.
 */
static int option_cb(int val, const char *optarg, int remote)
{
	const char *health = NULL;

	switch (val) {
	case OPT_NVRX:
		options.enabled = true;
		return (0);
	case OPT_NVRX_HEALTH:
		health = nvrx_health_parse(optarg);
		if (health == NULL) {
			if (remote) {
				/* Never fail a running step over an option: note it and carry on. */
				slurm_info("nvrx: ignoring invalid --nvrx-health value '%s'", optarg ? optarg : "");
				options.health_bad = true;
				return (0);
			}
			slurm_error("nvrx: invalid --nvrx-health value '%s': expected off, quick or full",
				    optarg ? optarg : "");
			return (-1);
		}
		options.health = health;
		return (0);
	}
	slurm_error("nvrx: unknown option value %d", val);
	return (-1);
}

static struct spank_option option_table[] = {
	{ "nvrx", NULL, "[nvrx] Enable nvrx-hpc for this job or step: task registration and exit reports to the node agent.",
	  0, OPT_NVRX, option_cb },
	{ "nvrx-health", "off|quick|full", "[nvrx] GPU/host health check level for the Prolog and Epilog of this job.",
	  1, OPT_NVRX_HEALTH, option_cb },
};

int nvrx_options_register(spank_t sp)
{
	spank_err_t rc = ESPANK_SUCCESS;
	size_t i = 0;

	for (i = 0; i < sizeof(option_table) / sizeof(option_table[0]); i++) {
		rc = spank_option_register(sp, &option_table[i]);
		if (rc != ESPANK_SUCCESS) {
			slurm_error("nvrx: cannot register option --%s: %s", option_table[i].name, spank_strerror(rc));
			return (-1);
		}
	}
	return (0);
}

const struct nvrx_options *nvrx_options_get(void)
{
	return (&options);
}
