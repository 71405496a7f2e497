"""Flight recorder against the real thing: dumps written by real torch gloo ranks with ranks stuck before
a collective, and agreement with PyTorch's own analyzer (torch.distributed.flight_recorder) on missing
ranks, on every dump set it can read."""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nvrx_hpc.attribution.fr_analysis import analyze_files
from nvrx_hpc.attribution.fr_load import restricted_loads

FR = Path(__file__).resolve().parents[1] / "fixtures" / "fr"

RANK_SCRIPT = textwrap.dedent(
    """
    import datetime, os, sys, time
    import torch, torch.distributed as dist
    rank, world, port, out, stuck = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=180))
    t = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(t)
    if str(rank) in stuck.split(","):
        time.sleep(4)  # stuck before its fourth all_reduce
    else:
        work = dist.all_reduce(t, async_op=True)
        try:
            work.wait(timeout=datetime.timedelta(seconds=2))
        except Exception:
            pass
    with open(f"{out}/rank-{rank}", "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    os._exit(0)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_gloo_ranks_two_stuck_are_both_named(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = tmp_path / "fr"
    out.mkdir()
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1"}
    port = str(_free_port())
    procs = [
        subprocess.Popen([sys.executable, str(script), str(r), "4", port, str(out), "1,3"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        for r in range(4)
    ]
    for p in procs:
        output = p.communicate(timeout=300)[0]
        assert p.returncode == 0, output.decode(errors="replace")[-2000:]
    dump = restricted_loads((out / "rank-0").read_bytes())
    assert dump["version"].startswith("2.") and dump["entries"]
    report = analyze_files(sorted(out.iterdir()))
    assert report.culprits == (1, 3)
    assert not report.problems


def _torch_missing(directory: Path) -> set[int]:
    builder = pytest.importorskip("torch.distributed.flight_recorder.components.builder")
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir

    args = JobConfig().parse_args([str(directory), "-p", "rank-", "--allow-incomplete-ranks"])
    details, version = read_dir(args)
    db = builder.build_db(details, args, version)
    return {r for c in db.collectives for r in (c.missing_ranks or ())}


def _normalised_gloo(src: Path, dst: Path) -> Path:
    """torch's gloo dumps key pg_config by '' while entries name the group '0' (its analyzer then fails
    with a KeyError); the same data with the key PyTorch expects."""
    dst.mkdir()
    for f in src.iterdir():
        d = restricted_loads(f.read_bytes())
        (_, cfg), = d["pg_config"].items()
        d["pg_config"] = {"0": {**cfg, "name": "0", "desc": "default_pg"}}
        (dst / f.name).write_bytes(pickle.dumps(d))
    return dst


@pytest.mark.parametrize("name", ["one_faulty", "two_faulty", "v2.4", "v2.7", "v2.9", "real_gloo"])
def test_missing_ranks_agree_with_pytorchs_analyzer(name, tmp_path, capsys):
    pytest.importorskip("torch.distributed.flight_recorder")
    directory = FR / name
    if name == "real_gloo":
        directory = _normalised_gloo(directory, tmp_path / "gloo")
    else:
        directory = Path(shutil.copytree(directory, tmp_path / name))
    theirs = _torch_missing(directory)
    ours = analyze_files(sorted(directory.iterdir()))
    assert theirs, "PyTorch's analyzer found no missing rank"
    assert {r for f in ours.findings for r in f.never_joined} == theirs
    assert set(ours.culprits) <= theirs


TP_DP_SCRIPT = textwrap.dedent(
    """
    import datetime, os, sys, time
    import torch, torch.distributed as dist
    rank, port, out, stuck = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4,
                            timeout=datetime.timedelta(seconds=180))
    short = datetime.timedelta(seconds=3)
    tp = [dist.new_group([0, 1], timeout=short), dist.new_group([2, 3], timeout=short)][rank // 2]
    dp = [dist.new_group([0, 2], timeout=short), dist.new_group([1, 3], timeout=short)][rank % 2]
    t = torch.ones(8)
    for step in range(3):
        dist.all_reduce(t, group=tp)                   # tensor parallel
        if step == 2 and rank == stuck:
            time.sleep(8)                              # never joins its data-parallel all-reduce
            break
        try:
            dist.all_reduce(t, group=dp)               # data parallel: its peer times out here
            dist.all_reduce(t, async_op=True).wait(timeout=short)   # default group: the others wait here
        except Exception:
            break
    with open(f"{out}/rank-{rank}", "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    os._exit(0)
    """
)


def test_real_gloo_tp_dp_hang_names_the_rank_that_never_joined_not_its_victims(tmp_path):
    """TP groups {0,1},{2,3}, DP groups {0,2},{1,3}. Rank 3 never joins its DP all-reduce: rank 1 waits for
    it there (gloo then counts that collective as completed, with an error), ranks 0 and 2 wait for 1 and 3
    in the default group. Only rank 3 waits on nobody; with the srun task list its node is named too."""
    pytest.importorskip("torch")
    from nvrx_hpc.attribution.analyze import analyze_run

    script = tmp_path / "rank.py"
    script.write_text(TP_DP_SCRIPT)
    run = tmp_path / "77"
    (run / "fr").mkdir(parents=True)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1"}
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(script), str(r), port, str(run / "fr"), "3"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(4)]  # fmt: skip
    for p in procs:
        output = p.communicate(timeout=300)[0]
        assert p.returncode == 0, output.decode(errors="replace")[-2000:]
    fr = analyze_files(sorted((run / "fr").iterdir()))
    by_desc = {f.desc: f for f in fr.findings}
    assert by_desc["default_pg"].never_joined == (1, 3)  # the victim 1 is missing there too
    assert fr.culprits == (3,)
    (run / "logs").mkdir()
    (run / "logs" / "step-0.log").write_text(
        "srun: error: n1: tasks 0-1: Exited with exit code 1\nsrun: error: n2: tasks 2-3: Exited with exit code 1\n"
    )
    v = analyze_run(run).verdict
    assert v.category.value == "distributed_hang"
    assert v.culprit.ranks == (3,) and v.culprit.nodes == ("n2",)
