/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_config.h: the plugstack.conf arguments (key=value), parsed afresh in every context. */
#ifndef NVRX_CONFIG_H
#define NVRX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "nvrx_common.h"

#define NVRX_DEFAULT_AGENT_SOCKET "/run/nvrx/%j/agent-%n.sock"
#define NVRX_DEFAULT_BB_DIR "/dev/shm/nvrx/%j"
#define NVRX_DEFAULT_TIMEOUT_MS 500
#define NVRX_TIMEOUT_MS_MIN 1
#define NVRX_TIMEOUT_MS_MAX 60000

struct nvrx_config {
	char agent_socket[NVRX_PATH_MAX]; /* template: %j, %n, %% */
	char bb_dir[NVRX_PATH_MAX];       /* template: %j, %n, %% */
	int timeout_ms;                   /* connect + send budget per message */
	bool default_on;                  /* true: every job, false: only jobs given --nvrx */
};

/* Pure: set every default, then apply av[]; on error fill err (naming the key) and return -1. */
int nvrx_config_parse(struct nvrx_config *config, int ac, char **av, char *err, size_t errlen);
/* nvrx_config_parse plus a slurm_error line on failure. */
int nvrx_config_load(struct nvrx_config *config, int ac, char **av);
/* nvrx_config_load into scratch space, for contexts that only validate (slurmd). */
int nvrx_config_check(int ac, char **av);

#endif /* NVRX_CONFIG_H */
