"""Round 10's rules: torchrun's local rank prefixes made global per file (its `--role rank` command line or
a doubled `[rank2]:[rank6]:` prefix says `[rankN]:` is local; its rendezvous result `global_ranks=[...]`,
its `--node-rank`/`--nproc-per-node` or its failure box give the global rank)."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def _traceback(prefix: str) -> list[str]:
    return [f"{prefix}Traceback (most recent call last):", f'{prefix}  File "/w/train.py", line 9, in <module>',
            f"{prefix}    batch = next(it)", f"{prefix}ValueError: shard schema has no field 'tokens'"]


_AGENT = "I0301 10:00:01.000000 4411 torch/distributed/elastic/agent/server/api.py:525]   "


def test_torchrun_role_rank_makes_the_rank_prefix_local_and_its_node_rank_makes_it_global(tmp_path):
    cmd = "+ torchrun --nnodes 3 --node_rank 2 --nproc_per_node 4 --role rank --tee 3 train.py"
    files = {"node2.log": [cmd, "[rank0]:step 10 loss 3.2", *_traceback("[rank3]:")]}
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.category is Category.APPLICATION and v.culprit.ranks == (11,)


def test_without_role_rank_a_single_rank_prefix_stays_global(tmp_path):
    cmd = "+ torchrun --nnodes 3 --node_rank 2 --nproc_per_node 4 --tee 3 train.py"
    files = {"node2.log": [cmd, _AGENT + "global_ranks=[8, 9, 10, 11]", *_traceback("[rank9]:")]}
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.culprit.ranks == (9,)


def test_a_doubled_prefix_marks_the_files_rank_prefix_local_and_the_rendezvous_maps_it(tmp_path):
    watchdog = ("[rank0]:[rank4]:[E301 10:05:00.1 ProcessGroupNCCL.cpp:1595] [PG ID 0 Rank 4] Process group "
                "watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
                "network error, NCCL version 2.21.5")
    lines = [_AGENT + "local_ranks=[0, 1, 2, 3]", _AGENT + "global_ranks=[4, 5, 6, 7]", *_traceback("[rank1]:"),
             watchdog]
    v = analyze_run(write_run(tmp_path, {"b.log": lines})).verdict
    assert v.culprit.ranks == (5,)


def test_the_rendezvous_result_makes_a_default_prefix_global(tmp_path):
    node_b = [_AGENT + "group_rank=1", _AGENT + "local_ranks=[0, 1, 2, 3, 4, 5, 6, 7]",
              _AGENT + "global_ranks=[8, 9, 10, 11, 12, 13, 14, 15]",
              "[default2]:Fatal Python error: Segmentation fault", "[default2]:",
              '[default2]:  File "/w/train.py", line 401 in main',
              "E1016 22:24:33.763311 77186 torch/distributed/elastic/multiprocessing/api.py:869] failed "
              "(exitcode: -11) local_rank: 2 (pid: 77231) of binary: /usr/bin/python3"]
    v = analyze_run(write_run(tmp_path, {"node-b.log": node_b})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (10,)


def test_a_one_line_rendezvous_result_with_a_range(tmp_path):
    line = ("[default] Rendezvous complete for workers. Result: restart_count=0 group_rank=2 local_ranks=[0, 1] "
            "role_ranks=[4, 5] global_ranks=[4..5] role_world_sizes=[6, 6]")
    run = write_run(tmp_path, {"n3.log": [line, "[default1]:Fatal Python error: Segmentation fault"]})
    v = analyze_run(run).verdict
    assert v.culprit.ranks == (5,)


def test_rank_prefixes_are_read_outside_in():
    from nvrx_hpc.attribution.lines import torch_rank_prefixes  # round 10's helper

    assert torch_rank_prefixes("3: [default1]:[rank1]:[rank9]:[W] x") == (1, 9)
    assert torch_rank_prefixes("[rank2]:KeyError: 'a'") == (2, None)
    assert torch_rank_prefixes("KeyError: 'a'") == (None, None)


def _shm(rank: int) -> str:
    return (f"[1,{rank}]<stderr>:RuntimeError: DataLoader worker (pid 3{rank}) is killed by signal: Bus error. "
            "It is possible that dataloader's workers are out of shared memory. Please try to raise your shared "
            "memory limit.")


def test_mpiruns_display_map_places_the_ranks_of_a_full_dev_shm_on_their_node(tmp_path):
    table = [" ========================   JOB MAP   ========================"]
    for i, host in enumerate(("cz-07", "cz-08", "cz-09")):
        table += [f" Data for node: {host}\tNum slots: 2\tMax slots: 0\tNum procs: 2"]
        table += [f" \tProcess OMPI jobid: [7,1] App: 0 Process rank: {r} Bound: N/A" for r in (i, i + 3)]
    table += [" ============================================================="]
    v = analyze_run(write_run(tmp_path, {"mpirun.log": [*table, _shm(1), _shm(4)]})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("cz-08",)  # found by its ranks' places
    assert v.culprit.ranks == ()  # the node alone: its /dev/shm, not a rank of it (round 95)
    assert v.restartable


def test_mpiruns_report_bindings_place_ranks_too(tmp_path):
    binds = [f"[cz-0{7 + r % 3}:411{r}] MCW rank {r} bound to socket 0[core {r}[hwt 0]]: [B/./.]" for r in range(6)]
    v = analyze_run(write_run(tmp_path, {"mpirun.log": [*binds, _shm(2), _shm(5)]})).verdict
    assert v.culprit.nodes == ("cz-09",) and v.restartable
