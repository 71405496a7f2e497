"""The one adapter to Slurm: CLI backend, optional pyslurm backend, hostlists, job context, dev cluster."""
