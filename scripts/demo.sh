#!/usr/bin/env bash
# `make demo`: a real local Slurm cluster, a PyTorch training kept alive through an injected fault,
# the recovery, the final model hash against a fault-free run, a node failing its health check, and
# the attribution report of a failed job. Leaves the cluster up; `nvrx-hpc cluster down` stops it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
nvrx() { "$PYTHON" -m nvrx_hpc "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
wait_job() {  # wait_job JOB SECONDS
  local deadline=$((SECONDS + $2))
  while squeue -h -j "$1" 2>/dev/null | grep -q .; do
    [ $SECONDS -lt $deadline ] || { echo "job $1 still running after $2 s; cancelling"; scancel "$1"; return 1; }
    sleep 1
  done
}
iteration_of() {  # the highest iteration any rank reported in RUN_DIR's status.json
  "$PYTHON" -c 'import json,sys
try: r=json.load(open(sys.argv[1]+"/status.json")).get("ranks",{})
except Exception: r={}
print(max([v.get("iteration") or 0 for v in r.values()] or [0]))' "$1"
}
train=("$PYTHON" "$repo/examples/train.py" --steps 60 --ckpt-every 5 --step-time 0.2)
# The same kind of training, checkpointing through nvrx_hpc.ckpt into each node's burst buffer
# (partner copies on the next node), so it survives losing a node's disk.
train_ckpt() { echo "$PYTHON" "$repo/examples/train_ckpt.py" --steps 60 --ckpt-every 5 --step-time 0.2 \
  --bb-dir "$state/bb/{domain}/$1"; }

say "1. the local Slurm cluster: munge, slurmctld, slurmd n1..n4, our SPANK plugin, Prolog/Epilog"
nvrx cluster up
eval "$(nvrx cluster env)"
state=$NVRX_CLUSTER__STATE_DIR
demo=$state/demo
rm -rf "$demo"; mkdir -p "$demo"
# Burst buffers of an earlier demo would hand this one their checkpoints: start from nothing.
rm -rf "$state"/bb/*/reference "$state"/bb/*/faulty
nvrx cluster clear-gpu-faults >/dev/null

say "2. a fault-free reference run: 2 nodes x 2 ranks + 1 spare, under nvrx-hpc run, async checkpoints"
# shellcheck disable=SC2046
ref=$(nvrx submit --nodes 2 --spares 1 --tasks-per-node 2 --time 10 --run-dir "$demo/reference" -- $(train_ckpt reference))
echo "job $ref"; wait_job "$ref" 240
echo "final hash: $(cat "$demo/reference/final_hash.txt")"

say "3. the same training; rank 3 is SIGKILLed mid-run and its node's burst buffer is wiped"
# shellcheck disable=SC2046
job=$(nvrx submit --nodes 2 --spares 1 --tasks-per-node 2 --time 10 --run-dir "$demo/faulty" -- $(train_ckpt faulty))
echo "job $job"
deadline=$((SECONDS + 180))
until [ "$(iteration_of "$demo/faulty")" -ge 10 ]; do
  [ $SECONDS -lt $deadline ] || { echo "the training never reached step 10"; scancel "$job"; exit 1; }
  squeue -h -j "$job" 2>/dev/null | grep -q . || { echo "job $job ended before step 10"; exit 1; }
  sleep 0.2
done
nvrx status "$job" --run-dir "$demo/faulty"
victim=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]+"/status.json"))["ranks"]["3"]["pid"])' "$demo/faulty")
node=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]+"/status.json"))["ranks"]["3"]["node"])' "$demo/faulty")
echo "kill -9 $victim  (rank 3 on $node); rm -rf $state/bb/$node/faulty  (its burst buffer)"
kill -9 "$victim"; rm -rf "${state:?}/bb/$node/faulty"
wait_job "$job" 240
echo "what the launcher decided (events.jsonl):"
"$PYTHON" - "$demo/faulty/events.jsonl" <<'PY'
import json, sys
t0 = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    t0 = t0 or e["time"]
    if e["kind"] in ("launcher.rank.exited", "launcher.culprit", "launcher.node.excluded", "launcher.restart",
                     "launcher.step.started", "launcher.step.first_iteration", "launcher.decision.done",
                     "ckpt.restored"):
        what = e.get("reason") or ""
        if e["kind"] == "ckpt.restored":
            what = f"rank {e.get('rank')}: step {e['detail'].get('step')} from {e['detail'].get('sources')}"
        print(f"  +{e['time'] - t0:6.2f}s {e['kind']:32} {e.get('node') or ''} {what}")
PY
a=$(cat "$demo/reference/final_hash.txt"); b=$(cat "$demo/faulty/final_hash.txt")
echo "reference hash: $a"; echo "recovered hash: $b"
[ "$a" = "$b" ] && echo "MATCH: the recovered model equals the fault-free one" || { echo "MISMATCH"; exit 1; }

say "4. a simulated fatal GPU Xid on n2 (sim backend): the Prolog drains n2, the job runs elsewhere"
nvrx cluster inject-gpu-fault n2 xid=79
filler=$(sbatch --parsable -w n1 -n2 -o /dev/null --wrap 'sleep 300')   # n1 busy, so the scheduler tries n2
gate=$(sbatch --parsable -N1 -n2 -o "$demo/gate-%j.out" --wrap 'echo "ran on $SLURMD_NODENAME"')
wait_job "$gate" 120 || true
cat "$demo/gate-$gate.out"
sinfo -N -o '%N %T %E' | grep -E '^n2 '
scancel "$filler"; nvrx cluster clear-gpu-faults >/dev/null
nvrx node undrain n2 --yes

say "5. a job that fails for good: the Epilog triggers attribution, the report lands in its run dir"
fail_dir=$demo/failing
fail=$(NVRX_TEST_FAULT="exit:rank=2:step=3:code=1" nvrx submit --nodes 2 --spares 0 \
  --tasks-per-node 2 --time 5 --max-restarts 0 --run-dir "$fail_dir" -- "${train[@]}")
echo "job $fail"; wait_job "$fail" 240 || true
for _ in $(seq 60); do [ -s "$fail_dir/report.json" ] && break; sleep 1; done
nvrx attribute "$fail_dir" || true
ls "$fail_dir"/report.* 2>/dev/null || echo "(no report yet)"

say "the cluster is still up"
nvrx cluster status
echo "inspect:  eval \"\$(nvrx-hpc cluster env)\"; sinfo; squeue; ls $demo"
echo "stop:     nvrx-hpc cluster down"
