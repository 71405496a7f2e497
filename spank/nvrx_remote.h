/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_remote.h: slurmstepd (remote context): task environment and messages to the node agent. */
#ifndef NVRX_REMOTE_H
#define NVRX_REMOTE_H

#include <slurm/spank.h>

int nvrx_remote_init(spank_t sp, int ac, char **av);
int nvrx_remote_init_post_opt(spank_t sp, int ac, char **av);
int nvrx_remote_user_init(spank_t sp, int ac, char **av);
int nvrx_remote_task_post_fork(spank_t sp, int ac, char **av);
int nvrx_remote_task_exit(spank_t sp, int ac, char **av);
int nvrx_remote_exit(spank_t sp, int ac, char **av);

#endif /* NVRX_REMOTE_H */
