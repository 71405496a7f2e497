"""Rules drawn from round 106 after its first contact was scored: torchrun's rendezvous results printed under srun's
labels make the labels the nodes' launchers, and each label's list maps its own node's local ranks; the rank whose loss
went nan a step before every other rank's is where the NaN began; UCX failing to register GPU memory is the node
adapter's; a network NCCL cannot find is the network set-up's."""

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


def _bars(node_first: dict[int, int]) -> dict[str, list[str]]:
    """Two nodes' torchrun logs (four local ranks each); each rank's loss is nan from the step `node_first` gives
    (global rank -> first bad step of ten) through the next epoch."""
    files: dict[str, list[str]] = {}
    for node in (0, 1):
        host = f"ws-3090-{'ab'[node]}"
        lines = [f"(diffad) lab@{host}:~/DiffusionAD$ torchrun --nnodes 2 --nproc_per_node 4 --node_rank {node} "
                 "--master_addr 192.168.10.21 --master_port 29511 --tee 3 train_ddp.py"]
        for epoch in (0, 1):
            for step in range(1, 11):
                for local in range(4):
                    bad = epoch > 0 or step >= node_first[4 * node + local]
                    loss = "nan" if bad else f"{2.0 + step / 10:.3f}"
                    lines.append(f"[default{local}]:Epoch:{epoch}, Train loss: {loss}: {step * 10:3d}%|█   | "
                                 f"{step}/10 [00:{step:02d}<00:10,  1.9s/it]")
        files[f"{host}_screw.log"] = lines
    return files


def test_the_rank_whose_loss_went_nan_a_step_before_the_others_is_where_it_began(tmp_path):
    """One rank's batch of abnormal samples makes its loss nan at step 3; the all-reduce spreads it to every other
    rank at step 4 (round 106c): rank 5."""
    first = {r: 4 for r in range(8)}
    v = _verdict(tmp_path, _bars({**first, 5: 3}))
    assert v.category is Category.NUMERICAL and list(v.culprit.ranks) == [5]
    together = _verdict(tmp_path / "together", _bars(first))
    assert list(together.culprit.ranks) == []


def test_ucx_failing_to_register_gpu_memory_on_one_node_is_that_node_s_adapter(tmp_path):
    """Under mpirun, UCX on one node cannot register the GPU's memory with the adapter (`ibv_reg_mr(...) failed: Bad
    address`: no GPUDirect RDMA there), and MPI_Bcast fails on that node's ranks (round 106e)."""
    log = []
    for rank in (9, 8, 10):
        pid = 50403 + rank
        log += [f"[1,{rank}]<stdout>:[1716275655.208113] [gpu-rtx3090-01:{pid}:0]           ib_md.c:349  UCX  ERROR "
                f"ibv_reg_mr(address=0x7f1c4ba00000, length=2097152, access=0xf) failed: Bad address",
                f"[1,{rank}]<stderr>:[gpu-rtx3090-01:{pid}] *** An error occurred in MPI_Bcast",
                f"[1,{rank}]<stderr>:[gpu-rtx3090-01:{pid}] *** MPI_ERR_OTHER: known error not in list"]
    v = _verdict(tmp_path, {"slurm-2291847.out": log})
    assert v.category is Category.NETWORK and list(v.culprit.nodes) == ["gpu-rtx3090-01"] and v.restartable


def test_a_network_nccl_cannot_find_is_the_network_set_up_not_a_framework_crash(tmp_path):
    """`NCCL_NET=gIB` where the plugin cannot load: every rank's NCCL says the network was not found, and the
    communicator's init fails with an internal error (round 106g)."""
    log = []
    for rank in range(4):
        log += [f"{rank // 2}: trainer-{rank // 2}:{1400 + rank}:{1400 + rank} [{rank % 2}] net.cc:579 NCCL WARN "
                "Error: network gIB not found.",
                f"{rank // 2}: [rank{rank}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:"
                "1970, internal error - please report this issue to the NCCL developers"]
    v = _verdict(tmp_path, {"train.log": log})
    assert v.category is Category.NETWORK and v.restartable is False
