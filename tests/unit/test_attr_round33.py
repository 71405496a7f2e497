"""Rules from round 33 of blind cases: a watchdog line's own `[Rank N]` under an srun label that is a launcher's;
pdsh's exit code 127 on a host whose launch command is missing; `ray list nodes` pairs an address with its host;
the kubelet's node shutdown; a framework's assertion over the user's numbers; a full /dev/shm is node-local."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

SRUN_TORCHRUN = "+ srun -l torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=q11:29400 t.py"


def _old_watchdog(rank: int, numel: int) -> str:
    return (f"{rank // 4}: [E ProcessGroupNCCL.cpp:828] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum=4417, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran "
            "for 600075 milliseconds before timing out.")


def test_a_watchdog_lines_own_rank_counts_where_srun_labels_launchers(tmp_path):
    out = [SRUN_TORCHRUN] + [_old_watchdog(r, 2048 if r == 6 else 1024) for r in range(8)]
    v = analyze_run(write_run(tmp_path, {"slurm-51.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (6,)


def test_pdsh_not_finding_the_command_on_a_host_names_that_hosts_ranks(tmp_path):
    log = ["[INFO] [runner.py:548:main] cmd = pdsh -S -f 1024 -w n11,n12 cd /data/run; /venv/bin/python -u t.py",
           "n12: bash: /venv/bin/python: No such file or directory",
           "pdsh@n11: n12: ssh exited with exit code 127",
           "n11: [INFO] [launch.py:161:main] global_rank_mapping=defaultdict(<class 'list'>, {'n11': [0, 1], "
           "'n12': [2, 3]})",
           "n11: RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for key: "
           "store_based_barrier_key:1 (world_size=4, worker_count=2, timeout=0:30:00)"]
    v = analyze_run(write_run(tmp_path, {"run.log": log})).verdict
    assert v.category is Category.APPLICATION and v.culprit.nodes == ("n12",) and v.culprit.ranks == (2, 3)
    assert v.restartable is False


def test_ray_list_nodes_gives_the_host_of_a_memory_kill(tmp_path):
    driver = ["(raylet, ip=10.1.6.24) [2025-04-02 10:08:44,017 E 58211 58211] (raylet) node_manager.cc:3069: 1 "
              "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons "
              "at node (ID: 5de0b7a4c93f, IP: 10.1.6.24) over the last time period."]
    nodes = ["$ ray list nodes --detail", "- node_id: 3b0e5c81", "  node_ip: 10.1.6.21", "  is_head_node: true",
             "  labels:", "    hostname: gpu-021", "- node_id: 5de0b7a4c93f", "  node_ip: 10.1.6.24",
             "  is_head_node: false", "  labels:", "    ray.io/node_id: 5de0b7a4c93f", "    hostname: gpu-024"]
    v = analyze_run(write_run(tmp_path, {"driver.log": driver, "ray_list_nodes.txt": nodes})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-024",)


def test_a_kubelets_node_shutdown_is_the_hosts(tmp_path):
    events = ["LAST SEEN   TYPE      REASON          OBJECT               MESSAGE",
              "97m   Warning   NodeShutdown   pod/job-worker-1   Pod was terminated in response to imminent node "
              "shutdown."]
    v = analyze_run(write_run(tmp_path, {"kubectl_get_events.txt": events})).verdict
    assert v.category is Category.HOST and v.restartable


def _assert_in_framework(msg: str) -> list[str]:
    return ["Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.10/site-packages/megatron/core/utils.py", line 51, in ensure_divisibility',
            f"    assert numerator % denominator == 0, {msg!r}",
            f"AssertionError: {msg}"]


def test_a_frameworks_assertion_over_the_users_numbers_is_the_applications(tmp_path):
    v = analyze_run(write_run(tmp_path, {"train.log": _assert_in_framework("15 is not divisible by 2")})).verdict
    assert v.category is Category.APPLICATION


def test_a_frameworks_assertion_on_its_own_state_stays_a_framework_crash(tmp_path):
    v = analyze_run(write_run(tmp_path, {"train.log": _assert_in_framework("flat param not sharded")})).verdict
    assert v.category is Category.FRAMEWORK_CRASH


def test_a_full_dev_shm_that_several_ranks_hit_is_not_a_shared_file_system(tmp_path):
    out = ["$ NCCL_DEBUG=WARN torchrun --standalone --nproc_per_node 8 train.py"]
    out += [f"[rank{r}]: Error while creating shared memory segment /dev/shm/nccl-Ab{r} (size 7340032), error: No "
            "space left on device (28)" for r in (0, 3, 6)]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"terminal.log": out})).verdict
    assert v.category is Category.HOST and v.restartable is False
