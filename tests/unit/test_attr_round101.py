"""Rules drawn from round 101 after its first contact was scored: ranks that timed out waiting for one rank's NCCL id
name that rank in a hang; a store that may not use its port is rank 0's; one rank alone at a later group's barrier
took a path of its own; torchrun's box under another srun label makes the labels launchers; agents under different
rendezvous ids, or a store address that lists several hosts, are the launch command's; a kernel OOM with nothing to
kill before a time limit is that node's, and so is one GPU idling in a listing whose others work."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category

_UID = ("[rank{r}]: torch.distributed.DistBackendError: [{r}] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout")


def test_ranks_that_timed_out_waiting_for_one_ranks_nccl_id_name_it_in_a_hang(tmp_path):
    files = {f"kubectl-logs-job-{'master' if n == 0 else 'worker'}-{n}.txt": [_UID.format(r=r)
             for r in range(8 * n + (1 if n == 0 else 0), 8 * n + 8)] for n in (0, 1)}
    v = _verdict(tmp_path, files)
    assert v.category is Category.DISTRIBUTED_HANG and list(v.culprit.ranks) == [0] and v.restartable is False


def test_a_store_that_may_not_listen_on_its_port_is_rank_0s_set_up_error(tmp_path):
    log = ["torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
           "port: 1, useIpv6: false, code: -13, name: EACCES, message: permission denied"]
    v = _verdict(tmp_path, {"node0_gpu-c03.log": log})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [0] and v.restartable is False


def test_one_rank_alone_at_a_later_groups_barrier_took_a_path_of_its_own(tmp_path):
    alone = ["RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
             "store_based_barrier_key:2 (world_size=16, worker_count=1, timeout=0:30:00)"]
    watchdog = [f"[E ProcessGroupNCCL.cpp:828] [Rank {r}] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=4, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800431 ms" for r in (3, 7)]
    v = _verdict(tmp_path, {"node0.log": alone + watchdog})
    assert v.category is Category.DISTRIBUTED_HANG and list(v.culprit.ranks) == [0]
    first = [alone[0].replace("key:2", "key:1")]  # the default group's barrier: the others never started
    assert _verdict(tmp_path / "default", {"node0.log": first + watchdog}).category is not Category.DISTRIBUTED_HANG


def test_torchruns_box_under_another_srun_label_makes_the_labels_launchers(tmp_path):
    log = ["2: Traceback (most recent call last):", "2: json.decoder.JSONDecodeError: Expecting value: line 1 column 1 "
           "(char 0)", "2: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "2: Root Cause (first "
           "observed failure):", "2: [0]:", "2:   time      : 2024-03-04_16:23:49", "2:   host      : c3-gpu07",
           "2:   rank      : 9 (local_rank: 1)", "2:   exitcode  : 1 (pid: 228114)",
           "srun: error: c3-gpu07: task 2: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-771204.out": log})
    assert list(v.culprit.ranks) == [9] and list(v.culprit.nodes) == ["c3-gpu07"]


def test_agents_under_different_rendezvous_ids_or_a_listed_store_address_are_the_launch_commands(tmp_path):
    def node(n: int, run_id: str) -> list[str]:
        return [f"{n}: I0411 11:02:45.412000 3311 dist-packages/torch/distributed/launcher/api.py:194]   run_id"
                f"           : {run_id}", f"{n}: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"]
    v = _verdict(tmp_path, {"slurm-1.out": node(0, "6188") + node(1, "413")})
    assert v.category is Category.APPLICATION and not v.culprit.ranks and v.restartable is False
    same = _verdict(tmp_path / "same", {"slurm-1.out": node(0, "6188") + node(1, "6188")})
    assert same.category is Category.NETWORK
    listed = [f"{r}: torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying "
              "to connect to (dgx-a14,dgx-b03, 15517)." for r in range(8)]
    v = _verdict(tmp_path / "listed", {"slurm-2.out": listed})
    assert v.category is Category.APPLICATION and not v.culprit.ranks and not v.culprit.nodes


def test_a_kernel_oom_with_nothing_to_kill_before_a_time_limit_is_that_nodes(tmp_path):
    kern = ["Sep 18 14:52:07 gpu-r07 kernel: [845472.118203] mksquashfs invoked oom-killer: gfp_mask=0x1100cca, "
            "order=0, oom_score_adj=-1000", "Sep 18 14:52:07 gpu-r07 kernel: [845472.118863] Out of memory and no "
            "killable processes..."]
    out = ["slurmstepd: error: *** JOB 5520931 ON gpu-r07 CANCELLED AT 2024-09-18T16:41:22 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"gpu-r07.kern.log": kern, "slurm-5520931.out": out})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["gpu-r07"]


def test_one_gpu_idling_in_a_listing_whose_others_work_is_that_gpus_slowdown(tmp_path):
    def listing(states: list[int]) -> list[str]:
        out = ["$ nvidia-smi -q -d PERFORMANCE", "==============NVSMI LOG=============="]
        for i, p in enumerate(states):
            out += [f"GPU 00000000:{5 + i:02X}:00.0", f"    Performance State                     : P{p}"]
        return out
    out = ["slurmstepd: error: *** JOB 731544 ON kgpu12 CANCELLED AT 2021-03-18T22:45:01 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"kgpu12_nvidia-smi-q-perf.txt": listing([0, 0, 0, 8]), "slurm-731544.out": out})
    assert v.category is Category.GPU_HARDWARE and list(v.culprit.nodes) == ["kgpu12"]
    assert [g.split(":")[-1] for g in v.culprit.gpus] == ["3"]
    idle = _verdict(tmp_path / "idle", {"kgpu12_nvidia-smi-q-perf.txt": listing([8, 8, 8, 8]), "slurm-731544.out": out})
    assert idle.category is Category.SCHEDULER  # a listing taken after the job: every GPU idles


def test_a_ranks_start_up_banner_under_another_srun_label_makes_the_labels_launchers(tmp_path):
    banners = [f"{r // 4}: | distributed init (rank {r}): env://, gpu {r % 4}" for r in range(8)]
    hosts = ["0: job 731544 on kgpu07: node_rank=0", "1: job 731544 on kgpu12: node_rank=1"]
    smi = ["$ nvidia-smi -q -d PERFORMANCE", *[line for i, p in enumerate([0, 0, 0, 8]) for line in (
           f"GPU 00000000:{5 + i:02X}:00.0", f"    Performance State                     : P{p}")]]
    out = [*hosts, *banners, "srun: error: kgpu12: task 1: Terminated", "srun: error: kgpu07: task 0: Terminated",
           "slurmstepd: error: *** JOB 731544 ON kgpu07 CANCELLED AT 2021-03-18T22:45:01 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"slurm-731544.out": out, "kgpu12_nvidia-smi-q-perf.txt": smi})
    assert v.category is Category.GPU_HARDWARE and list(v.culprit.ranks) == [7]


def _left_early_log(ended: str) -> list[str]:
    out = [f"{r}: 2020-03-24 09:02:54 | INFO | fairseq.distributed_utils | initialized host "
           f"{'asr-n031' if r < 8 else 'asr-n032'} as rank {r}" for r in range(16)]
    out += ["0: 2020-03-24 09:03:31 | INFO | fairseq.trainer | loaded checkpoint checkpoint_last.pt (epoch 30)",
            "0: 2020-03-24 09:04:03 | INFO | fairseq_cli.train | done training in 0.0 seconds",
            "slurmstepd: error: *** JOB 5531207 ON asr-n031 CANCELLED AT 2020-03-24T13:02:29 DUE TO TIME LIMIT ***",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            "srun: error: asr-n032: tasks 8-15: Terminated",
            f"srun: error: asr-n031: tasks {ended}: Terminated"]
    return out


def test_the_rank_srun_does_not_list_at_a_time_limit_had_left_and_the_others_waited_for_it(tmp_path):
    """srun reports no task that exited 0: at a time limit after hours of silence, it lists every rank as terminated
    but rank 0, which had ended its training loop (round 101g)."""
    v = _verdict(tmp_path, {"slurm-5531207.out": _left_early_log("1-7")})
    assert v.category is Category.DISTRIBUTED_HANG and list(v.culprit.ranks) == [0] and v.restartable is False
    every = _verdict(tmp_path / "every", {"slurm-5531207.out": _left_early_log("0-7")})
    assert list(every.culprit.ranks) == []
