"""The checkpoint layer on the real local Slurm cluster: MPI ranks started by `srun --mpi=pmix` on virtual nodes.

Failure domains are the nodes themselves (SLURMD_NODENAME) and each node's burst buffer is
`<state_dir>/bb/<node>/<tag>`: wiping it is losing that node's disk. Saved on n1,n2 (two ranks each), the
job is restored on n2,n3 after n1's burst buffer is gone, under PARTNER and XOR.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JOB = HERE / "ckpt_job.py"
REPO = HERE.parent.parent
TIMEOUT = 150
# Open MPI's TCP wire-up between virtual nodes of one host fails now and then under load (docs/cluster.md);
# these are the words it fails with. Only such a launch failure is retried, once.
WIREUP_FLAKE = ("Open MPI failed to TCP connect", "connect() to 127.0.0.1", "ORTE_ERROR_LOG")


def srun(cluster, nodes: str, spec: dict, where: Path, name: str) -> dict[str, list[dict]]:
    path = where / f"{name}.json"
    path.write_text(json.dumps({**spec, "out": str(where / f"{name}-{{rank}}.json")}))
    argv = ["srun", "--mpi=pmix", "-N2", "-n4", "-w", nodes, "-t", "2", "--quiet", "--kill-on-bad-exit=1",
            sys.executable, str(JOB), str(path)]
    for attempt in (1, 2):
        done = cluster.run(argv, timeout=TIMEOUT, env={"PYTHONPATH": str(REPO)})  # this checkout's nvrx_hpc
        output = done.stdout + done.stderr
        if done.returncode == 0 or attempt == 2 or not any(flake in output for flake in WIREUP_FLAKE):
            break
    assert done.returncode == 0, output[-4000:]
    out: dict[str, list[dict]] = {}
    for rank in range(4):
        for rec in json.loads((where / f"{name}-{rank}.json").read_text()):
            assert "crash" not in rec, rec["crash"]
            out.setdefault(rec["scenario"], []).append(rec)
    return out


@pytest.fixture
def tag(cluster):
    name = f"ckpt-test-{uuid.uuid4().hex[:8]}"
    yield name
    for node in cluster.nodes:
        shutil.rmtree(cluster.state_dir / "bb" / node / name, ignore_errors=True)


def test_srun_pmix_restore_after_losing_a_node(cluster, tag, tmp_path):
    bb = str(cluster.state_dir / "bb" / "{domain}" / tag)
    schemes = [{"name": "partner", "scheme": "partner"}, {"name": "xor", "scheme": "xor", "set_size": 2}]
    saved = srun(cluster, "n1,n2", {"scenarios": [
        {**s, "bb": f"{bb}/{s['name']}", "ops": [{"op": "save", "steps": [1, 2]}]} for s in schemes]}, tmp_path, "save")
    for recs in saved.values():
        assert sorted(r["domain"] for r in recs) == ["n1", "n1", "n2", "n2"]
    shutil.rmtree(cluster.state_dir / "bb" / "n1" / tag)  # n1's disk is gone
    restored = srun(cluster, "n2,n3", {"scenarios": [
        {**s, "bb": f"{bb}/{s['name']}", "ops": [{"op": "load"}]} for s in schemes]}, tmp_path, "restore")
    for s in schemes:
        want = {r["rank"]: r["saved"]["2"] for r in saved[s["name"]]}
        for rec in restored[s["name"]]:
            assert rec.get("error") is None, rec["error"]
            assert rec["step"] == 2 and rec["hash"] == want[rec["rank"]], rec
            assert rec["domain"] == ["n2", "n3"][rec["rank"] // 2]
    assert restored["partner"][0]["restore"]["sources"] == {"local": 2, "peer": 2}
    assert restored["xor"][0]["restore"]["sources"] == {"peer": 2, "xor": 2}
