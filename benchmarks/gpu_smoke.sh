#!/usr/bin/env bash
# GPU smoke test for a machine with NVIDIA GPUs: the real NVML checks, a real Xid listener for a few
# seconds, and the Prolog gate in dry-run mode (it never drains). Prints what it found at each step.
#
#   bash benchmarks/gpu_smoke.sh                 # LISTEN_S=5 seconds of Xid listening by default
#   LISTEN_S=30 bash benchmarks/gpu_smoke.sh
#   bash benchmarks/gpu_smoke.sh --require-gpu   # exit 69 when no GPU/NVML is found (for a GPU CI lane)
#
# Without a GPU every step still runs and says "no GPU/NVML: ..." (no crash, no silent simulation):
# the script exits 0 unless --require-gpu was given. It exits 1 when a step itself crashed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
LISTEN_S=${LISTEN_S:-5}
require_gpu=0
[ "${1:-}" = "--require-gpu" ] && require_gpu=1
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
export NVRX_GPU_BACKEND=nvml            # explicit: the real backend, never sim
out=$(mktemp -d /tmp/nvrx-gpu-smoke.XXXXXX)
nvrx() { "$PYTHON" -m nvrx_hpc "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
crashed=0

say "0. what this machine has"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || echo "nvidia-smi failed (rc $?)"
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,temperature.gpu,ecc.errors.uncorrected.volatile.total \
    --format=csv 2>/dev/null || true
else
  echo "nvidia-smi: not installed"
fi
gpu_line=$("$PYTHON" - <<'PY'
from nvrx_hpc.health.gpu_nvml import NvmlBackend, pci_gpu_count
from nvrx_hpc.health.api import GpuUnavailable
b = NvmlBackend()
try:
    n = b.device_count()
    names = sorted({b.identity(i).name for i in range(n)})
    print(f"GPU {n} NVML sees {n} GPU(s) ({', '.join(names)}); {pci_gpu_count()} NVIDIA GPU(s) on the PCI bus")
except GpuUnavailable as exc:
    print(f"NOGPU {exc.message}; {pci_gpu_count()} NVIDIA GPU(s) on the PCI bus")
finally:
    b.close()
PY
) || { echo "probing NVML crashed"; crashed=1; gpu_line="NOGPU probe crashed"; }
echo "${gpu_line#* }"
have_gpu=0
[ "${gpu_line%% *}" = "GPU" ] && have_gpu=1

say "1. nvrx-hpc health --level quick (real NVML, host checks)"
nvrx health --level quick
rc=$?; echo "exit status $rc (0: nothing fatal, 69: a fatal finding)"
[ "$rc" -ne 0 ] && [ "$rc" -ne 69 ] && crashed=1

say "2. nvrx-hpc health --level full (NVLink/PCIe counters sampled twice, dcgmi diag when installed)"
nvrx health --level full --json >"$out/full.json"
rc=$?; [ "$rc" -ne 0 ] && [ "$rc" -ne 69 ] && crashed=1
"$PYTHON" - "$out/full.json" <<'PY' || crashed=1
import json, sys
report = json.load(open(sys.argv[1]))
print(f"node {report['node']}: {report['verdict']} in {report['duration_s']:.1f} s")
for r in report["results"]:
    print(f"  {r['verdict']:5}  {r['check']:20} {r['detail']}")
PY

say "3. a real Xid listener for ${LISTEN_S} s (NVML event set + /dev/kmsg)"
"$PYTHON" - "$LISTEN_S" <<'PY' || crashed=1
import sys, time
from nvrx_hpc.health.api import GpuUnavailable
from nvrx_hpc.health.gpu_nvml import NvmlBackend, NvmlXidSource
from nvrx_hpc.health.xid import KMSG_PATH, KernelLogXidSource, read_kernel_xids

listen = float(sys.argv[1])
sources = []
backend = NvmlBackend()
try:
    nvml = NvmlXidSource(backend)
    print(f"NVML event set: Xid events registered on GPU(s) {nvml.registered or 'none'}")
    sources.append(nvml)
except GpuUnavailable as exc:
    print(f"NVML event set: {exc.message}")
try:
    sources.append(KernelLogXidSource(KMSG_PATH))
    print(f"kernel log: following {KMSG_PATH}")
except OSError as exc:
    print(f"kernel log: cannot follow {KMSG_PATH} ({exc.strerror}); run as root for it")
old, note = read_kernel_xids(24 * 3600)
print(f"kernel log, last 24 h: {len(old)} Xid line(s)" + (f" ({note})" if note else ""))
for e in old[-10:]:
    print(f"  Xid {e.xid} on {e.where()}: {e.detail}")
deadline = time.monotonic() + listen
seen = 0
while time.monotonic() < deadline and sources:
    for s in sources:
        for e in s.poll(min(0.5, max(deadline - time.monotonic(), 0))):
            seen += 1
            print(f"  live: Xid {e.xid} on {e.where()} from {e.source}: {e.detail}")
print(f"listened {listen:g} s on {len(sources)} source(s): {seen} new Xid event(s)")
for s in sources:
    s.close()
backend.close()
PY

say "4. nvrx-hpc prolog --dry-run (the gate as slurmd would run it; never drains)"
SLURMD_NODENAME=${SLURMD_NODENAME:-$(hostname -s)} SLURM_JOB_ID=${SLURM_JOB_ID:-0} NVRX_HOOK_LOG="$out/hooks.jsonl" \
  nvrx prolog --dry-run >"$out/prolog.json"
rc=$?; [ "$rc" -ne 0 ] && crashed=1
"$PYTHON" - "$out/prolog.json" <<'PY' || crashed=1
import json, sys
d = json.load(open(sys.argv[1]))
print(f"prolog on {d['node']}: action {d['action']}, verdict {d.get('verdict')}, {d.get('duration_s')} s "
      f"(budget {d['report']['budget_s'] if d.get('report') else '-'} s)")
if d.get("reason"):
    print(f"  would drain with: {d['reason']}")
for f in d.get("findings", []):
    print(f"  {f['verdict']:5}  {f['check']}: {f['detail']}")
PY

say "summary"
echo "outputs in $out"
if [ "$have_gpu" = 1 ]; then
  echo "GPUs found: the checks above read real NVML."
else
  echo "no GPU/NVML on this machine: GPU checks reported skip (\"no GPU/NVML\"); host checks ran for real."
fi
if [ "$crashed" = 1 ]; then echo "a step crashed (see above)"; exit 1; fi
if [ "$have_gpu" = 0 ] && [ "$require_gpu" = 1 ]; then exit 69; fi
exit 0
