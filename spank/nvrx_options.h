/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_options.h: the user options --nvrx and --nvrx-health, registered in every context. */
#ifndef NVRX_OPTIONS_H
#define NVRX_OPTIONS_H

#include <stdbool.h>

#include <slurm/spank.h>

struct nvrx_options {
	bool enabled;       /* --nvrx was given */
	const char *health; /* --nvrx-health value ("off", "quick", "full"), NULL when not given */
	bool health_bad;    /* a value that failed validation reached us (remote side only) */
};

int nvrx_options_register(spank_t sp);
const struct nvrx_options *nvrx_options_get(void);
/* The canonical spelling of a --nvrx-health value, or NULL when it is not one. */
const char *nvrx_health_parse(const char *value);

#endif /* NVRX_OPTIONS_H */
