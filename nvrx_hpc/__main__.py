"""`python -m nvrx_hpc` is the `nvrx-hpc` command (Prolog/Epilog use this form with an absolute interpreter)."""

from nvrx_hpc.cli.main import run

run()
