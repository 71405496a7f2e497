#!/usr/bin/env bash
# Installs what nvrx-hpc's tests and demo need on a fresh Debian 12 machine (idempotent, fast when done).
#   apt: Slurm 22.05 (slurmctld, slurmd, client, libslurm-dev for spank.h), munge, Open MPI + PMIx
#   pip: the CPU build of torch (pinned here, $NVRX_TORCH, default torch==2.13.0: the wheel on disk; an unpinned
#        torch would pull a multi-GB CUDA build), then this project in editable mode with its dev, mpi, torch,
#        service, fast (hyperscan) and lightning extras (the package itself only asks for torch>=2.4, so a site keeps
#        its own build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
TORCH=${NVRX_TORCH:-torch==2.13.0}
EXTRAS=dev,mpi,torch,service,fast,lightning
log() { echo "[setup] $*"; }

pkgs=(slurmctld slurmd slurm-client munge libslurm-dev openmpi-bin libpmix-dev make gcc)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "[setup] missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    exit 69
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  }
fi

# Editable install of this very tree, with every extra the tests use. The check runs from / so that a
# checkout in the current directory does not pass for an installed package, and reads pyproject.toml so
# that a dependency added there is installed even when an older editable install is present.
if ! (cd / && "$PYTHON" - "$repo" "$EXTRAS" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, pathlib, re, sys, tomllib
import nvrx_hpc
repo = pathlib.Path(sys.argv[1]).resolve()
assert pathlib.Path(nvrx_hpc.__file__).resolve().parent.parent == repo
project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
wanted = list(project["dependencies"])
for extra in sys.argv[2].split(","):
    wanted += project["optional-dependencies"].get(extra, [])
for requirement in wanted:
    if ";" in requirement and "python_version < '3.11'" in requirement:
        continue
    md.version(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])  # raises when not installed
PY
); then
  # One resolve: the explicit torch pin and the package's torch>=2.4 agree on the CPU wheel.
  log "pip install $TORCH -e .[$EXTRAS]"
  "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$TORCH" -e "$repo[$EXTRAS]"
fi
log "ok"
