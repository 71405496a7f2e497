"""nvrx-hpc: keeps large PyTorch training jobs alive on Slurm clusters."""

__version__ = "0.1.0"
__all__ = ["__version__"]
