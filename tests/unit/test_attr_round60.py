"""Rules from rounds 60 and 61 of blind cases (and two shapes rounds 58-59 showed): a stack dump named after its
rank and host places that rank on that host."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict
from nvrx_hpc.attribution.file_hosts import rank_file_host


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def _dump(pid: int, frames: list[str]) -> list[str]:
    return [f"Process {pid}: /usr/bin/python3 -u train_cls.py", "Python v3.10.12 (/usr/bin/python3.10)", "",
            f'Thread {pid} (active): "MainThread"', *frames]


def test_a_stack_dump_named_after_its_rank_and_host_places_the_odd_rank(tmp_path):
    reduce = ["    all_reduce (torch/distributed/distributed_c10d.py:2288)", "    evaluate (train_cls.py:311)"]
    gather = ["    all_gather_into_tensor (torch/distributed/distributed_c10d.py:2951)",
              "    evaluate (train_cls.py:318)"]
    timeouts = [f"[rank{r}]:[E302 12:31:15.790940 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                f"operation timeout: WorkNCCL(SeqNum=58231, OpType={'ALLGATHER' if r == 6 else 'ALLREDUCE'}, "
                f"NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600051 milliseconds before timing out."
                for r in range(8)]
    v = _verdict(tmp_path, {"train.log": timeouts, "pyspy/gn12_rank0.txt": _dump(401772, reduce),
                            "pyspy/gn13_rank6.txt": _dump(388190, gather)})
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("gn13",)


def test_names_that_hold_no_host_place_nothing():
    for name in ("rank3.log", "train_rank3.log", "pyspy_rank5_pid9931.txt", "node1_rank6.txt", "rank12_gpu3.txt"):
        assert rank_file_host(name) is None, name
    assert rank_file_host("stack-rank6-gpu-a07.log") == "gpu-a07"


def test_a_dmesg_flag_in_a_word_of_its_own_is_not_the_host(tmp_path):
    dmesg = ["[Sun May 21 03:46:58 2023] NVRM: Xid (PCI:0000:1c:00): 79, pid='<unknown>', name=<unknown>, GPU has "
             "fallen off the bus."]  # fmt: skip
    v = _verdict(tmp_path, {"hoth_dmesg_T.txt": dmesg})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("hoth",)


def test_a_dump_named_after_two_ranks_names_no_host():
    assert rank_file_host("pyspy_rank3_rank0.txt") is None


def _cloudwatch(host: str, lines: list[str]) -> list[str]:
    return [f"|\t2025-05-16T16:39:{50 + i}.017-07:00\t|\t{host}:{79 + i}:176 [{i}] {text}"
            for i, text in enumerate(lines)]


def test_an_efa_endpoint_that_no_host_can_open_is_the_set_up_in_cloudwatch_rows(tmp_path):
    warn = ("nccl_net_ofi_rdma_domain_get_ep:969 NCCL WARN NET/OFI Creating new endpoint for domain 0x7f02d5e6ece5 "
            "failed: Invalid argument")
    v = _verdict(tmp_path, {"algo-1.cloudwatch.tsv": _cloudwatch("ip-10-36-29-253", [warn, warn]),
                            "algo-2.cloudwatch.tsv": _cloudwatch("ip-10-36-18-77", [warn, warn])})
    assert v.category is Category.NETWORK and v.restartable is False
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_nccls_shared_memory_segment_quoted_by_torch_on_two_nodes_is_the_jobs_limit(tmp_path):
    lines = []
    for rank in (0, 8):
        lines += [f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:268, unhandled "
                  "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                  f"[rank{rank}]: Last error:",
                  f"[rank{rank}]: Error while creating shared memory segment /dev/shm/nccl-IdMWKL (size 7340384)"]
    banner = [f"[rank{r}]: host={'h100-sxm-03' if r < 8 else 'h100-sxm-04'} rank={r}" for r in range(16)]
    v = _verdict(tmp_path, {"slurm-4471.out": [*banner, *lines]})
    assert v.category is Category.HOST and v.restartable is False and v.culprit.nodes == ()


def test_a_peer_dialling_libvirts_bridge_is_the_set_up(tmp_path):
    using = "NCCL INFO NET/Socket : Using [0]virbr0:192.168.122.1<0> [1]enp129s0f0:10.10.1.12<0>"
    refused = "include/socket.h:382 NCCL WARN Connect to 192.168.122.1<40947> failed : Connection refused"
    v = _verdict(tmp_path, {"hpc-ws12_node1.log": [f"hpc-ws12:3120{r}:3120{r} [{r}] {t}"
                                                   for r in range(4) for t in (using, refused)]})
    assert v.category is Category.NETWORK and v.restartable is False


def test_sampling_from_nan_probabilities_is_numerical(tmp_path):
    lines = [f"[rank{r}]: RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"
             for r in range(4)]
    v = _verdict(tmp_path, {"node0_stdout.log": lines})
    assert v.category is Category.NUMERICAL and v.restartable is False


def test_gces_operations_list_naming_a_preempted_instance_is_the_schedulers(tmp_path):
    ops = ["NAME                                   TARGET                       TYPE                         STATUS",
           "systemevent-1710257620418-6137a2c1e4  llama-ft-7-2ea4-worker-q8zt  compute.instances.preempted  DONE"]
    v = _verdict(tmp_path, {"gcloud_preempted_ops.txt": ops, "sky_spot_logs_7.txt": ["Shared connection to "
                                                                                     "34.147.88.102 closed."]})
    assert v.category is Category.SCHEDULER and v.restartable


def test_the_kernel_killing_a_data_loader_worker_names_the_rank_that_reports_it(tmp_path):
    console = ["[rank1]: RuntimeError: DataLoader worker (pid 48215) is killed by signal: Killed.",
               "[rank1]: RuntimeError: DataLoader worker (pid(s) 48215) exited unexpectedly"]
    dmesg = ["[Tue Feb 21 10:57:12 2023] Out of memory: Killed process 48215 (python) total-vm:37229820kB, "
             "anon-rss:11617908kB, file-rss:0kB, shmem-rss:0kB, UID:1003"]
    v = _verdict(tmp_path, {"dist_train_console.log": console, "dmesg_ws-dl02.txt": dmesg})
    assert v.category is Category.HOST and v.culprit.ranks == (1,) and v.culprit.nodes == ("ws-dl02",)


def test_a_stamp_before_a_line_that_only_looks_like_a_journal_header_is_stripped(tmp_path):
    from nvrx_hpc.attribution.lines import split_prefixes

    assert split_prefixes("2024-05-14T21:03:17.000Z Initializing distributed: GLOBAL_RANK: 3")[2].startswith("Init")
    assert not split_prefixes("2024-05-14T21:03:17+0000 gpu-a07 kernel: NVRM: Xid")[2].startswith("gpu-a07")


def test_a_time_limit_after_many_undated_progress_lines_stays_the_schedulers(tmp_path):
    dated = [f"2026-08-11 02:0{i}:41,882\tINFO scripts.py:865 -- worker {i} up" for i in range(6)]
    steps = [line for s in range(1, 41) for line in (f"===== Step {s}/500 =====", "  • Avg Reward: 0.4640",
                                                     "  • Total step time: 86.41s")]
    end = "slurmstepd: error: *** JOB 771203 ON gpn-117 CANCELLED AT 2026-08-11T06:00:07 DUE TO TIME LIMIT ***"
    v = _verdict(tmp_path, {"slurm-771203.out": [*dated, *steps, end]})
    assert v.category is Category.SCHEDULER and v.restartable


def test_two_runs_timing_out_in_their_own_work_are_not_one_runs_odd_operation(tmp_path):
    def timeout(rank: int, seq: int, op: str) -> str:
        return (f"[rank{rank}]:[E0114 16:30:49.704437320 ProcessGroupNCCL.cpp:685] [Rank {rank}] Watchdog caught "
                f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, "
                f"Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")

    earlier = [timeout(r, 7, "BROADCAST") for r in (2, 9, 11)]
    banners = [f"[Rank {r}] fairseq2 log file: /runs/ws_64/logs/rank_{r}.log" for r in range(0, 16)]
    later = [timeout(r, 29817, "BARRIER") for r in range(1, 16)]
    v = _verdict(tmp_path, {"earlier_attempt_slurm-3291177.out": earlier, "slurm-3304581.out": [*banners, *later]})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_a_ray_node_known_only_by_its_address_is_named_by_it(tmp_path):
    lines = ["(raylet, ip=10.12.3.41) [2024-07-15 10:11:41,774 E 29467 29467] (raylet) node_manager.cc:3084: 1 Workers "
             "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
             "(ID: 8d1e4c07, IP: 10.12.3.41) over the last time period.",
             "Memory on the node (IP: 10.12.3.41, ID: 8d1e4c07) where the task (actor ID: 5c0a91e3, name=ActorModel"
             "RayActor.__init__, pid=31871, memory used=61.2GB) was running was 1890.42GB / 2015.56GB (0.937913)"]
    v = _verdict(tmp_path, {"ray_job_submit.log": lines})
    assert v.category is Category.HOST and v.culprit.nodes == ("10.12.3.41",)


def test_a_peer_dialling_the_wildcard_address_is_the_set_up(tmp_path):
    lines = [f"(RayWorkerWrapper pid=190{i}, ip=10.20.0.7) [W701 10:46:3{i}.991225 socket.cpp:697] [c10d] The client "
             "socket has failed to connect to [0.0.0.0]:41877 (errno: 111 - Connection refused)." for i in range(4)]
    v = _verdict(tmp_path, {"ray_job_submit.log": lines})
    assert v.category is Category.NETWORK and v.restartable is False


def test_glooes_monitored_barrier_names_the_rank_that_never_reached_it(tmp_path):
    lines = ["2024/07/18 09:56:01 [E ProcessGroupGloo.cpp:138] Rank 1 failed to pass monitoredBarrier in 30000 ms",
             "2024/07/18 09:56:01 RuntimeError: Rank 1 failed to pass monitoredBarrier in 30000 ms"]
    v = _verdict(tmp_path, {"asr-n1.train.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (1,) and v.restartable is False


def test_an_older_kernels_oom_kill_line_is_the_oom_killer(tmp_path):
    dmesg = ["[4011233.119146] Out of memory: Kill process 18844 (python) score 247 or sacrifice child",
             "[4011233.119177] Killed process 18844 (python) total-vm:164132012kB, anon-rss:128044104kB"]
    v = _verdict(tmp_path, {"dgx-s03.dmesg.txt": dmesg})
    assert v.category is Category.HOST and v.culprit.nodes == ("dgx-s03",)


def test_a_loss_scale_at_its_floor_on_every_rank_of_the_one_log_names_no_rank(tmp_path):
    banners = [f"[rank{r}]: distributed init: host=gpu-a800-03{1 + r // 8} rank={r} local_rank={r % 8}"
               for r in range(16)]  # the other node's log is not pasted
    lines = [f"[rank{r}]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
             "run." for r in range(8)]
    v = _verdict(tmp_path, {"node0_train.log": [*banners, *lines]})
    assert v.category is Category.NUMERICAL and v.culprit.ranks == () and v.culprit.nodes == ()


def test_kubernetes_preempting_a_pod_for_another_is_the_schedulers(tmp_path):
    events = ["$ kubectl -n vision get events --sort-by=.lastTimestamp",
              "49s  Normal  Preempted  pod/segformer-worker-2  Preempted by vision-infer/realtime-det-6d9f on node "
              "gpu-a10-pool-7c9qk"]  # fmt: skip
    lines = [f"[rank{r}]: RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
             "c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer" for r in (0, 1)]
    v = _verdict(tmp_path, {"kubectl_describe.txt": events, "master-0.log": lines})
    assert v.category is Category.SCHEDULER and v.restartable


def test_one_gpu_faulting_for_process_after_process_is_the_gpu(tmp_path):
    dmesg = [f"[Sat Jan 30 00:{m:02d}:20 2021] NVRM: Xid (PCI:0000:db:00): 31, pid={pid}, Ch 00000008, intr 00000000. "
             "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_10 faulted" for m, pid in ((5, 14390), (6, 40214), (31, 33108))]
    job = ["[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"]
    v = _verdict(tmp_path, {"gpu-s14_dmesg-T.txt": dmesg, "slurm-488213.out": job})
    assert v.category is Category.GPU_HARDWARE and v.restartable and v.culprit.nodes == ("gpu-s14",)


def test_one_process_faulting_once_stays_the_applications(tmp_path):
    dmesg = ["[Sat Jan 30 00:05:20 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=14390, Ch 00000008, intr 00000000. "
             "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_10 faulted"]
    job = ["[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"]
    v = _verdict(tmp_path, {"gpu-s14_dmesg-T.txt": dmesg, "slurm-488213.out": job})
    assert v.category is Category.APPLICATION


def test_a_prolog_that_drained_a_node_whose_gpu_fails_is_the_gpu(tmp_path):
    dmesg = [f"[  {t}.330121] NVRM: Xid (PCI:0001:00:00): 119, pid=41877, name=nvidia-smi, Timeout waiting for RPC "
             "from GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)." for t in (812, 824, 836)]
    sinfo = ["REASON               USER      TIMESTAMP           NODELIST",
             "Prolog error         root      2023-03-28T08:30:58 ndv4-hpc-0011"]
    v = _verdict(tmp_path, {"ndv4-hpc-0011_dmesg.txt": dmesg, "squeue_scontrol.txt": sinfo})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("ndv4-hpc-0011",)


def test_ucxs_transport_retry_error_is_the_network(tmp_path):
    lines = [f"[1,{r}]<stderr>:[lxbk1127:233085{r % 10}:0:233085{r % 10}] ib_mlx5_log.c:177  Transport retry count "
             "exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)" for r in (12, 15)]
    v = _verdict(tmp_path, {"hvd_resnet50_job.log": lines})
    assert v.category is Category.NETWORK


def test_connects_that_poll_in_vain_name_the_peer_a_bracketed_host_prefix_advertised(tmp_path):
    def line(rank: int, host: str, text: str) -> str:
        return f"[{rank:04d}/512][2025-02-16 22:21:34,680] [misc/socket.cc:586] [{host}:pid=394{rank:03d}] {text}"

    using = "NCCL INFO Bootstrap : Using ib0:172.16.30.229<0>"
    files = {"logs/rank_0296.s12gn1193.log": [line(296, "s12gn1193", using)]}
    for rank, host in ((9, "s12gn3007"), (133, "s12gn3112"), (404, "s12gn3350"), (415, "s12gn3357")):
        warn = "NCCL WARN socketPollConnect poll() returned 1, no POLLOUT events, connect to 172.16.30.229<39966>"
        files[f"logs/rank_{rank:04d}.{host}.log"] = [line(rank, host, warn)]
        files.setdefault("slurm-4031852.out", []).append(f"srun: error: {host}: task {rank}: Exited with exit code 1")
    v = _verdict(tmp_path, files)
    assert v.category is Category.NETWORK and v.culprit.nodes == ("s12gn1193",) and v.culprit.ranks == ()


def test_glooes_application_timeout_is_a_hang_and_the_silent_rank_its_suspect(tmp_path):
    lines = [f"2025-08-07T22:58:2{r % 10}.430Z [rank{r}] RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
             "pair.cc:534] Application timeout caused pair closure" for r in range(1, 8)]
    start = [f"2025-08-07T22:10:00.000Z [rank{r}] step 100 loss 2.31" for r in range(8)]
    v = _verdict(tmp_path, {"beaker-replica0.log": [*start, *lines]})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_megatrons_rerun_machine_names_the_rank_whose_result_was_nan(tmp_path):
    lines = ["[2026-05-27 22:41:59] iteration        2/     100 | lm loss: 1.079925E+01 |",
             "ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 invocation #1 "
             "(message='found NaN in local grad norm for bucket #0 in backward pass')"]
    v = _verdict(tmp_path, {"functional_test.log": lines})
    assert v.category is Category.NUMERICAL and v.culprit.ranks == (3,)


def test_deepspeeds_launcher_at_a_prompt_runs_on_the_prompts_host(tmp_path):
    lines = ["(lf) ml@gpu-srv07:~/LLaMA-Factory$ deepspeed --num_gpus 8 --master_port 29611 src/train_bash.py "
             "--deepspeed ds_z2.json --stage pt",
             "02/29/2024 21:04:19 - INFO - llmtuner.hparams.parser - Process rank: 0, device: cuda:0, n_gpu: 1",
             *[f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
               "SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800564 milliseconds "
               "before timing out." for r in range(1, 8)]]
    v = _verdict(tmp_path, {"train_pt_13b.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,) and v.culprit.nodes == ("gpu-srv07",)


def test_pbs_requeueing_a_job_for_a_node_failure_is_the_host(tmp_path):
    mail = ["PBS Job Id: 2471883[3].cbio-pbs", "Job Name:   sda_train-3",
            "Job was preempted due to node failure. Job will be requeued."]
    v = _verdict(tmp_path, {"pbs_mail_notices.txt": mail})
    assert v.category is Category.HOST and v.restartable
