/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_dispatch.c: the exported SPANK callbacks; each forwards to the file of its context. */
#include <slurm/spank.h>

#include "nvrx_config.h"
#include "nvrx_local.h"
#include "nvrx_remote.h"

#ifndef NVRX_VERSION
#define NVRX_VERSION "0.0.0-unknown"
#endif

SPANK_PLUGIN(nvrx, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	slurm_debug("nvrx: nvrx_spank %s, context %d", NVRX_VERSION, (int)spank_context());
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return (nvrx_local_init(sp, ac, av));
	case S_CTX_REMOTE:
		return (nvrx_remote_init(sp, ac, av));
	case S_CTX_SLURMD:
		/* Nothing to do in slurmd but refuse a broken plugstack line early. */
		return (nvrx_config_check(ac, av));
	default:
		return (0);
	}
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return (nvrx_local_init_post_opt(sp, ac, av));
	case S_CTX_REMOTE:
		return (nvrx_remote_init_post_opt(sp, ac, av));
	default:
		return (0);
	}
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	if (spank_context() != S_CTX_REMOTE)
		return (0);
	return (nvrx_remote_user_init(sp, ac, av));
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	if (spank_context() != S_CTX_REMOTE)
		return (0);
	return (nvrx_remote_task_post_fork(sp, ac, av));
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	if (spank_context() != S_CTX_REMOTE)
		return (0);
	return (nvrx_remote_task_exit(sp, ac, av));
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	if (spank_context() != S_CTX_REMOTE)
		return (0);
	return (nvrx_remote_exit(sp, ac, av));
}
