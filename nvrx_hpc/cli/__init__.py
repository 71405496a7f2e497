"""The Typer app `nvrx-hpc`: thin commands that parse, call the packages, and print."""
