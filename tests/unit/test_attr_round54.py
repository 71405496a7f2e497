"""Rules from rounds 54 and 55 of blind cases: srun unable to launch the step on one node is the scheduler's and names
that node; /dev/shm full in every pod names no pod; the rank the kernel's OOM killer silenced is the one the others
wait on; one error raised alike on every node a host prefix names names no node; Ray's coloured `Local node IP`
still pairs an address with its host; a peer dialling Docker's bridge address is the set-up's; a rank killed before
its peers' network errors is what they report."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_step_srun_could_not_launch_on_one_node_names_that_node(tmp_path):
    lines = [
        "Here is the list of hosts: cn117 cn124",
        "srun: error: Task launch for 5512.1 failed on node cn124: Job credential expired",
        "srun: error: Application launch failed: Job credential expired",
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 2, for key: "
        "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
        "srun: error: cn117: task 0: Exited with exit code 1",
    ]
    v = _verdict(tmp_path, {"slurm-5512.out": lines})
    assert v.category is Category.SCHEDULER and v.restartable
    assert v.culprit.nodes == ("cn124",)


def test_dev_shm_full_in_every_pod_names_no_pod(tmp_path):
    def pod(name: str) -> list[str]:
        return [f"[rank0]:[2026-01-13 09:20:58] {name}:935:985 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to "
                "extend /dev/shm/nccl-mL7jru to 9637892 bytes, error: No space left on device (28)"]  # fmt: skip

    files = {"slice-job-0-0.log": pod("ttn-slice-job-0-0"), "slice-job-0-1.log": pod("ttn-slice-job-0-1")}
    v = _verdict(tmp_path, files)
    assert v.category is Category.HOST and v.restartable is False and v.culprit.nodes == ()


def test_the_rank_an_oom_kill_silenced_is_named(tmp_path):
    kern = ["[Wed Mar 23 23:53:30 2022] Out of memory: Killed process 28114 (python) total-vm:336579108kB, "
            "anon-rss:256747405kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:512000kB oom_score_adj:0"]
    log = [f"[E ProcessGroupNCCL.cpp:587] [Rank {r}] Watchdog caught collective operation timeout: "
           "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800487 milliseconds before timing out."
           for r in range(1, 8)]  # fmt: skip
    files = {"asr-gpu07.dmesg-T.txt": kern, "train.asr-gpu07.log": ["rank 0 world 8 host asr-gpu07", *log]}
    v = _verdict(tmp_path, files)
    assert v.category is Category.HOST and v.culprit.nodes == ("asr-gpu07",) and v.culprit.ranks == (0,)


def test_one_error_raised_on_every_node_by_host_prefix_names_no_node(tmp_path):
    err = ("FileNotFoundError: [Errno 2] No such file or directory: '/shared/out/cpt/tmp-checkpoint-500' -> "
           "'/shared/out/cpt/checkpoint-500'")  # fmt: skip
    lines = [f"gpu-n3{n}: {err}" for n in (1, 2, 3)]
    v = _verdict(tmp_path, {"train_cpt_3node.log": lines})
    assert v.category is Category.APPLICATION and v.culprit.nodes == () and v.culprit.ranks == ()


def test_rays_coloured_local_node_ip_still_pairs_the_address_with_its_host(tmp_path):
    lines = [
        "Starting HEAD at gpu-c05",
        "2025-11-03 21:14:07,221\tINFO scripts.py:971 -- \x1b[37mLocal node IP\x1b[39m: \x1b[1m10.31.0.5\x1b[22m",
        "Starting WORKER 1 at gpu-c06",
        "2025-11-03 21:14:18,903\tINFO scripts.py:1155 -- \x1b[37mLocal node IP\x1b[39m: \x1b[1m10.31.0.6\x1b[22m",
        "(raylet, ip=10.31.0.6) [2025-11-03 21:38:52,617 E 217950 217950] (raylet) node_manager.cc:3187: 1 Workers "
        "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons.",
    ]
    v = _verdict(tmp_path, {"slurm-5580912.out": lines})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-c06",)


def test_peers_dialling_dockers_bridge_address_are_the_set_ups_not_a_hang(tmp_path):
    lines = [
        "(RayWorkerVllm pid=207931, ip=10.0.1.75) [E socket.cpp:957] [c10d] The client socket has timed out after "
        "1800s while trying to connect to (172.17.0.2, 44737).",
        *(f"(ActorModelRayActor pid=48887{r}) [E ProcessGroupNCCL.cpp:523] [Rank {r}] Watchdog caught collective "
          "operation timeout: WorkNCCL(SeqNum=3856, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800106 "
          "milliseconds before timing out." for r in (1, 2, 3)),  # fmt: skip
    ]
    v = _verdict(tmp_path, {"ppo_ray_job.log": lines})
    assert v.category is Category.NETWORK and v.restartable is False


def test_a_site_network_in_172_17_beyond_the_bridge_is_not_taken_for_it(tmp_path):
    lines = ["[E socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to connect to "
             "(172.17.4.21, 29500)."]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.signature != "bridge_address_unreachable"


def _killed(local: int) -> str:
    return (f"a100-n04: [2023-05-30 15:05:57,546] [ERROR] [launch.py:321:sigkill_handler] ['/opt/conda/bin/python', "
            f"'-u', 'finetune.py', '--local_rank={local}'] exits with return code = -7")  # fmt: skip


_MAPPING = ("a100-n03: [2023-05-30 14:06:05,114] [INFO] [launch.py:161:main] global_rank_mapping=defaultdict(<class "
            "'list'>, {'a100-n03': [0, 1, 2, 3, 4, 5, 6, 7], 'a100-n04': [8, 9, 10, 11, 12, 13, 14, 15]})")
_IB_ERRORS = [f"a100-n03: NET/IB : Got completion from peer 10.8.1.4<50871> with error 12, opcode 0, len 0, vendor "
              f"err 129 (Recv) [rank {r}]" for r in range(3)]  # fmt: skip


def test_a_rank_killed_before_its_peers_network_errors_is_what_they_report(tmp_path):
    lines = [_MAPPING, _killed(5), *_IB_ERRORS]
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.UNKNOWN and v.culprit.ranks == (13,) and v.culprit.nodes == ("a100-n04",)
    assert v.confidence <= 0.3


def test_network_errors_before_a_kill_stay_the_networks(tmp_path):
    lines = [_MAPPING, *_IB_ERRORS, _killed(5)]
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.NETWORK


def test_an_exception_reporting_a_segfaulted_worker_is_a_crash(tmp_path):
    lines = ["37: RuntimeError: Worker failure: Local process 1 (pid 92077) exited with exit code -11",
             "srun: error: gpu-r07-15: task 37: Exited with exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-418733.out": lines})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (37,)


def _timeout(rank: int) -> str:
    return (f"[default{rank % 4}]:[E ProcessGroupNCCL.cpp:737] [Rank {rank}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=2310417, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800632 milliseconds "
            "before timing out.")  # fmt: skip


_SIGKILLED = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 5 (pid: 2207118) "
              "of binary: /usr/bin/python")


def test_collective_timeouts_after_a_rank_was_killed_wait_on_that_rank(tmp_path):
    lines = ["+ torchrun --nnodes=1 --nproc_per_node=8 pretrain.py", _SIGKILLED,
             *(_timeout(r) for r in (0, 1, 2, 3, 4, 6, 7))]  # fmt: skip
    v = _verdict(tmp_path, {"tr9-22B-1554478.out": lines})
    assert v.category is Category.UNKNOWN and v.culprit.ranks == (5,)


def test_a_kill_reported_after_the_timeouts_orders_nothing(tmp_path):
    lines = ["+ torchrun --nnodes=1 --nproc_per_node=8 pretrain.py", *(_timeout(r) for r in (0, 1, 2, 3, 4, 6, 7)),
             _SIGKILLED]  # fmt: skip
    v = _verdict(tmp_path, {"tr9-22B-1554479.out": lines})
    assert v.category is Category.DISTRIBUTED_HANG
