"""Rules drawn from round 106 after its first contact was scored: torchrun's rendezvous results printed under srun's
labels make the labels the nodes' launchers, and each label's list maps its own node's local ranks."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def _result(label: int) -> list[str]:
    first = 8 * label
    ranks = ", ".join(str(r) for r in range(first, first + 8))
    return [f"{label}: INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. "
            "Result:", f"{label}:   restart_count=0", f"{label}:   group_rank={label}",
            f"{label}:   group_world_size=2",
            f"{label}:   local_ranks=[0, 1, 2, 3, 4, 5, 6, 7]", f"{label}:   role_ranks=[{ranks}]",
            f"{label}:   global_ranks=[{ranks}]"]


def _log() -> list[str]:
    return [*_result(0), *_result(1),
            "1: Traceback (most recent call last):",
            '1:   File "train.py", line 196, in main',
            "1:     shard_paths = shard_file_list(args.data_dir, rank=rank, world_size=world_size)",
            "1: IndexError: list index out of range",
            "0: INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group for "
            "rank: 2, key: store_based_barrier_key:1 (world_size=16, worker_count=15, timeout=0:30:00)",
            "1: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 7 (pid: 91402) of "
            "binary: /home/mk/.conda/envs/pt19/bin/python",
            "srun: error: gpu-b14: task 1: Exited with exit code 1"]


def test_torchrun_s_rendezvous_results_under_srun_labels_make_them_launchers(tmp_path):
    """Two nodes' torchrun print their worker groups under srun's labels 0 and 1; the failed worker is local rank 7
    of the second node: global rank 15, not srun's label 1 (round 106a)."""
    v = _verdict(tmp_path, {"slurm-2077431.out": _log()})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [15]
    assert list(v.culprit.nodes) == ["gpu-b14"]
