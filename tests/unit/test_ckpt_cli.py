"""`nvrx-hpc ckpt ls|verify|inspect|scavenge` on versions written by two thread-ranks (partner scheme)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from ckpt_threads import ThreadWorld
from typer.testing import CliRunner

from nvrx_hpc.ckpt import AsyncCheckpointer
from nvrx_hpc.cli.ckpt import app


@pytest.fixture
def tree(tmp_path):
    """Steps 1 and 2 of two ranks on nodes n1, n2 (each holds the other's replica); n1's disk then lost."""
    def save(t):
        with AsyncCheckpointer(str(tmp_path / "bb" / "{domain}"), scheme="partner", comm=t,
                               failure_domain=f"n{t.rank + 1}") as ck:
            for step in (1, 2):
                ck.save({"w": torch.full((100,), float(step + t.rank)), "b": torch.ones(3).bfloat16()}, step).wait()

    ThreadWorld(2).run(save)
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_ls_json_lists_versions_newest_first(tree):
    result = invoke("ls", "--bb-dir", str(tree / "bb" / "*"), "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["step"] for r in rows] == [2, 1]
    assert rows[0] | {"created": None} == {"step": 2, "status": "committed", "scheme": "partner", "ranks": 2,
                                          "size_mib": rows[0]["size_mib"], "shards": 2, "replicas": 2,
                                          "parities": 0, "in_shared": False, "created": None}
    table = invoke("ls", "--bb-dir", str(tree / "bb" / "n1"), "--bb-dir", str(tree / "bb" / "n2"))
    assert "committed" in table.stdout and "partner" in table.stdout


def test_verify_finds_a_bad_copy_but_the_version_stays_restorable(tree):
    shard = tree / "bb" / "n2" / "v000000000002" / "shard-r00001.h5"
    data = bytearray(shard.read_bytes())
    data[-200] ^= 0xFF  # somewhere in the last tensor's bytes or the meta blob
    shard.write_bytes(bytes(data))
    result = invoke("verify", "--bb-dir", str(tree / "bb" / "*"), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    bad = [c for c in report["checks"] if not c["ok"]]
    assert [(c["rank"], c["kind"]) for c in bad] == [(1, "shard")] and report["restorable"]
    shutil.rmtree(tree / "bb" / "n1")  # now rank 1's only good copy (its replica on n1) is gone
    result = invoke("verify", "--bb-dir", str(tree / "bb" / "*"))
    assert result.exit_code == 69
    assert "NOT restorable: no good copy of ranks [1]" in result.stdout


def test_inspect_shows_manifest_and_tensors(tree):
    result = invoke("inspect", "--bb-dir", str(tree / "bb" / "*"), "--rank", "1", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["step"] == 2 and info["world_size"] == 2 and info["scheme"] == "partner"
    assert [t["path"] for t in info["tensors"]] == ["w", "b"]
    assert info["tensors"][1]["dtype"] == "bfloat16" and info["replicas"][1]["holder"] == 0
    missing = invoke("inspect", "--bb-dir", str(tree / "bb" / "*"), "--rank", "5")
    assert missing.exit_code != 0 and "rank 5 is not in step 2" in str(missing.exception)


def test_scavenge_copies_the_newest_version_from_replicas_after_a_node_loss(tree):
    shutil.rmtree(tree / "bb" / "n1")
    shared = tree / "shared"
    result = invoke("scavenge", "--bb-dir", str(tree / "bb" / "*"), "--shared-dir", str(shared), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["step"] == 2 and report["complete"] and sorted(report["copied"]) == [0, 1]
    assert sorted(p.name for p in (shared / "v000000000002").iterdir()) == [
        "MANIFEST.json", "shard-r00000.h5", "shard-r00001.h5"]
    again = invoke("scavenge", "--bb-dir", str(tree / "bb" / "*"), "--shared-dir", str(shared))
    assert again.exit_code == 0 and "nothing to scavenge: the newest version (step 2) is already there" in again.stdout
    ok = invoke("verify", "--shared-dir", str(shared))
    assert ok.exit_code == 0 and "restorable" in ok.stdout


def test_a_missing_required_package_is_named_not_an_internal_error(tmp_path):
    # torch stands in for any requirement an install lacks (a site that pip-installed with --no-deps)
    code = ("import sys; sys.modules['torch'] = None; from nvrx_hpc.cli.main import run; "
            f"sys.argv = ['nvrx-hpc', 'ckpt', 'ls', '--bb-dir', {str(tmp_path)!r}]; run()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 69 and "needs the Python package 'torch'" in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
