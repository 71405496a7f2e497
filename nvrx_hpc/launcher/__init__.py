"""The in-allocation restart coordinator: `nvrx-hpc run`."""
