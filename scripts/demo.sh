#!/usr/bin/env bash
# `make demo`: the local cluster, our SPANK plugin and Prolog/Epilog at work on a real sbatch job.
# Leaves the cluster up for inspection; `nvrx-hpc cluster down` stops it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
nvrx() { "$PYTHON" -m nvrx_hpc "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "1. bring up the local Slurm cluster (munge, slurmctld, slurmd n1..n4) with the SPANK plugin"
nvrx cluster up
eval "$(nvrx cluster env)"
state=$NVRX_CLUSTER__STATE_DIR
demo=$state/demo
rm -rf "$demo"; mkdir -p "$demo/sock"

say "2. listen on the agent socket of n1 and n2, as a node agent would"
nvrx spank listen --socket "$demo/sock/%n.sock" --nodes n1,n2 --timeout 120 --steps 1 > "$demo/agent-messages.jsonl" &
listener=$!
for _ in $(seq 50); do [ -S "$demo/sock/n1.sock" ] && [ -S "$demo/sock/n2.sock" ] && break; sleep 0.1; done

say "3. sbatch --wait sbatch_templates/spank-demo.sbatch (2 nodes, --nvrx)"
job=$(NVRX_AGENT_SOCKET="$demo/sock/%n.sock" timeout 180 sbatch --parsable --wait \
  --output="$demo/job-%j.out" "$repo/sbatch_templates/spank-demo.sbatch" | cut -d';' -f1) || true
wait "$listener" || true
echo "job ${job:-?} finished:"
cat "$demo"/job-*.out

say "4. what the plugin sent to the agent sockets (registrations, exit statuses, step ends)"
cat "$demo/agent-messages.jsonl"

say "5. what the Prolog and Epilog (nvrx-hpc prolog|epilog) recorded for this job"
grep "\"job\": \"${job:-none}\"" "$state/log/hooks.jsonl" || echo "(no hook records found)"

say "the cluster is still up"
nvrx cluster status
echo "inspect:  eval \"\$(nvrx-hpc cluster env)\"; sinfo; squeue"
echo "stop:     nvrx-hpc cluster down"
