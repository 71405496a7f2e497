"""Test-data generators shared by benchmarks/ and tests/: synthetic training logs and flight-recorder dumps.

They stay out of the nvrx_hpc package: nothing a site installs makes up data."""
