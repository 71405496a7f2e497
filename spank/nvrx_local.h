/* Copyright (c) 2025, nvrx-hpc authors. SPDX-License-Identifier: Apache-2.0 */
/* nvrx_local.h: the submit side, srun (local context) and sbatch/salloc (allocator context). */
#ifndef NVRX_LOCAL_H
#define NVRX_LOCAL_H

#include <slurm/spank.h>

int nvrx_local_init(spank_t sp, int ac, char **av);
int nvrx_local_init_post_opt(spank_t sp, int ac, char **av);

#endif /* NVRX_LOCAL_H */
