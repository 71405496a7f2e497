"""Rules from rounds 74 and 75 of blind cases: the scheduler's own host tables, one-machine sessions, a few more
signatures (the kubelet's eviction, EFA missing, a verbs call refused, StopIteration, mp.spawn's bare exit), a rank
whose watchdog fell a few calls behind, torchrun's filtered output, and pids that two hosts share."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict
from nvrx_hpc.attribution.job_hosts import scheduler_hosts


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


_SACCT = [
    "$ sacct -u dxd01 --format=JobID,JobName,Partition,State,ExitCode,Elapsed,MaxRSS,NodeList",
    "       JobID    JobName  Partition      State ExitCode    Elapsed     MaxRSS        NodeList ",
    "------------ ---------- ---------- ---------- -------- ---------- ---------- --------------- ",
    "118329         tsn_rgb1        big  COMPLETED      0:0   11:42:17                     dgj305 ",
    "118344         tsn_rgb3        big     FAILED      1:0   00:01:29                     dgj213 ",
    "118344.batch      batch                FAILED      1:0   00:01:29   3891240K          dgj213 ",
    "118352         tsn_rgb3        big    RUNNING      0:0   02:16:40                     dgj402 ",
]


def test_sacct_names_the_hosts_of_the_rows_that_ended_badly_by_column_span():
    # the job's own row has an empty MaxRSS: split on blanks it would shift NodeList; the dashes place it
    assert scheduler_hosts("\n".join(_SACCT).encode()) == {"dgj213"}


def test_a_one_host_nodelist_and_pbs_exec_host_are_the_jobs_hosts():
    assert scheduler_hosts(b"   NodeList=c014\n   BatchHost=c014\n") == {"c014"}
    assert scheduler_hosts(b"Exec host:  gpu-2-4/0+gpu-2-4/1+gpu-2-4/2\n") == {"gpu-2-4"}
    assert scheduler_hosts(b"   NodeList=(null)\n") == set()


def test_a_host_fault_with_no_place_of_its_own_is_the_failed_jobs_one_host(tmp_path):
    out = ["Running job", "THCudaCheck FAIL file=THCGeneral.cpp line=50 error=46 : all CUDA-capable devices are busy "
           "or unavailable"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-118344.out": out, "sacct.txt": _SACCT})
    assert v.category is Category.HOST and v.culprit.nodes == ("dgj213",)


def test_a_one_machine_session_places_a_host_fault_at_its_prompt(tmp_path):
    session = ["root@7c1e40b9d2af:/workspace# deepspeed train.py --zero_stage 2",
               "[2023-05-02 11:02:13,114] [INFO] [launch.py:229:main] dist_world_size=4",
               "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
               "memory (shm)."]  # fmt: skip
    v = _verdict(tmp_path, {"training.log": session})
    assert v.category is Category.HOST and v.culprit.nodes == ("7c1e40b9d2af",)


def test_the_kubelets_eviction_for_memory_is_the_host_and_the_jobs_own_demand(tmp_path):
    events = [
        "LAST SEEN   TYPE      REASON              OBJECT                 MESSAGE",
        "2m   Warning   EvictionThresholdMet   node/gke-gpu-pool-3b7e-k4vd   Attempting to reclaim memory",
        "2m   Warning   Evicted   pod/train-0   The node was low on resource: memory. Container main was using "
        "49837196Ki, which exceeds its request of 1Gi.",
    ]
    v = _verdict(tmp_path, {"train.log": ["step 400 loss 1.2", "Killed"], "kubectl_get_events.txt": events})
    assert v.category is Category.HOST and v.culprit.nodes == ("gke-gpu-pool-3b7e-k4vd",)
    assert v.restartable is False


def test_efa_missing_in_every_pod_is_the_set_up_and_names_no_ray_node(tmp_path):
    pods = ((903, "10.67.131.77", "ft-worker-p5-7xk2q", "0-7"), (1017, "10.67.133.9", "ft-worker-p5-m4t8d", "8-15"))
    lines = ["(TorchTrainer pid=612) Started distributed worker processes: "]
    lines += [f"(TorchTrainer pid=612) - (node_id=128b2f330c5c, ip={ip}, pid={pid}) world_rank={ranks}"
              for pid, ip, _pod, ranks in pods]
    lines += [f"(RayTrainWorker pid={pid}, ip={ip}) {pod}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>"
              for pid, ip, pod, _ranks in pods]
    lines += [f"(RayTrainWorker pid={pid}, ip={ip}) {pod}:{pid}:2313 [0] nccl_net_ofi_create_plugin:1067 NCCL WARN "
              "NET/OFI aws-ofi-nccl initialization failed" for pid, ip, pod, _ranks in pods]
    v = _verdict(tmp_path, {"ray_job_driver.log": lines})
    assert v.category is Category.NETWORK and v.restartable is False
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_a_verbs_call_refused_as_invalid_on_every_host_is_the_rdma_set_up(tmp_path):
    lines = [f"{host}:{pid}:{pid + 400} [0] misc/ibvwrap.cc:199 NCCL WARN Call to ibv_modify_qp failed with error "
             "Invalid argument errno 22" for host, pid in (("gpu-n01", 35595), ("gpu-n02", 24294))]
    lines.append("[rank0]: RuntimeError: NCCL Error 2: unhandled system error (run with NCCL_DEBUG=INFO for details)")
    v = _verdict(tmp_path, {"run.log": lines})
    assert v.category is Category.NETWORK and v.restartable is False and v.culprit.nodes == ()


def test_stop_iteration_is_an_exception_of_the_program(tmp_path):
    log = ["Traceback (most recent call last):", '  File "lm_train.py", line 289, in <module>',
           "StopIteration: Caught StopIteration in replica 0 on device 0."]
    v = _verdict(tmp_path, {"train.log": log})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_worker_fallen_a_few_calls_behind_is_the_one_the_others_wait_for(tmp_path):
    log = [f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: "
           f"WorkNCCL(SeqNum={seq}, OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1806233 milliseconds "
           "before timing out." for r, seq in ((1, 5186), (0, 5184), (2, 5186), (3, 5186))]
    v = _verdict(tmp_path, {"train_dist.log": log})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_thousands_of_calls_apart_are_two_groups_not_a_rank_behind(tmp_path):
    log = [f"[rank{r}]:[E1121 07:18:55.33 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
           f"timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
           "600071 milliseconds before timing out." for r, seq in ((0, 5093), (1, 14143), (2, 14143), (3, 14143))]
    v = _verdict(tmp_path, {"run.log": log})
    assert 0 not in v.culprit.ranks


def test_a_crash_on_the_only_rank_torchrun_lets_print_names_no_rank(tmp_path):
    log = ["+ torchrun --nproc_per_node=2 --local-ranks-filter 0 --role rank --tee 3 train.py",
           "[rank0]:[E128 13:22:49.703318846 ProcessGroupNCCL.cpp:1897] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
           "Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
           "encountered"]  # fmt: skip
    v = _verdict(tmp_path, {"run_2gpu.log": log})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == ()


def test_mp_spawns_bare_sigkill_names_the_process_and_its_espnet_host(tmp_path):
    log = ["[gv041:0/4] 2020-09-05 20:04:10,351 (abs_task:1106) INFO: Saving the configuration",
           "[gv041:1/4] 2020-09-05 20:04:10,352 (abs_task:1106) INFO: Saving the configuration",
           "Traceback (most recent call last):",
           '  File "torch/multiprocessing/spawn.py", line 108, in join',
           "Exception: process 0 terminated with signal SIGKILL"]
    v = _verdict(tmp_path, {"exp/lm_train/train.log": log})
    assert v.category is Category.UNKNOWN
    assert v.culprit.ranks == (0,) and v.culprit.nodes == ("gv041",)


def test_a_pid_that_two_hosts_share_is_the_rank_of_the_host_that_names_it(tmp_path):
    log = [f"{host}: {host}:52135:52435 [5] NCCL INFO comm 0x55{rank}8c82 rank {rank} nranks 16 cudaDev 5 nvmlDev 5 "
           "busId 90000 commId 0x3f9ac1d27e5b0466 - Init COMPLETE" for host, rank in (("dgx-a06", 5), ("dgx-a07", 13))]
    kernel = ["Mar 22 06:46:49 dgx-a07 kernel: NVRM: Xid (PCI:0000:bd:00): 79, pid=52135, name=python, GPU has fallen "
              "off the bus."]  # fmt: skip
    v = _verdict(tmp_path, {"train_2node.log": log, "dgx-a07_journalctl_k.txt": kernel})
    assert v.category is Category.GPU_HARDWARE
    assert v.culprit.ranks == (13,) and v.culprit.nodes == ("dgx-a07",)
