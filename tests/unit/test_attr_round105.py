"""Rules drawn from round 105 after its first contact was scored: every rank of a node that raised the same error
under torchrun's boxes is named, not only the box's first; the addresses `hostname -I` prints at a host's prompt are
that host's; the one host at an end of every failed InfiniBand connection is the culprit when no peer is named by
two hosts; a node's GPFS client that lost its membership, and amdgpu's PCIe error handler called for a card; a
per-rank stdout file's start-up line gives its lines their rank; srun's one task exit names the traceback above it;
the one idle GPU of an `nvidia-smi --query-gpu` listing names its rank; mpirun naming one MCA parameter twice."""

from __future__ import annotations

from pathlib import Path

from _attr_helpers import verdict_of as _verdict
from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_PENDING = Path(__file__).resolve().parents[1] / "fixtures" / "attribution_pending" / "round105"


def test_every_rank_of_a_node_that_raised_the_same_error_is_named(tmp_path):
    """The second node's eight ranks each print the same FileNotFoundError, without a rank, above torchrun's box
    that lists the eight; the box's `Root Cause` (rank 8) is only the first of them to exit (round 105d)."""
    case = _PENDING / "heldout105d_fabric_rec_logdir_made_by_rank0_node_local_copy_second_node_filenotfound"
    v = analyze_run(case).verdict
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == list(range(8, 16))
    assert list(v.culprit.nodes) == ["gn-a18"]
    # the same file with one traceback left: one copy, so not every boxed rank raised it
    text = (case / "hstu-7730415.log").read_text().splitlines()
    first = next(i for i, line in enumerate(text) if line.startswith("1: FileNotFoundError"))
    kept = [line for i, line in enumerate(text) if i <= first or not line.startswith("1: ") or "FileNotFound" not in
            line and not line.startswith(("1: Traceback", "1:   File", "1:     "))]
    once = analyze_run(write_run(tmp_path, {"hstu-7730415.log": kept})).verdict
    assert list(once.culprit.ranks) != list(range(8, 16))


_RAY_TIMEOUT = ("(WorkerDict pid={pid}, ip={ip}) [rank{r}]:[E324 13:40:57.882190542 ProcessGroupNCCL.cpp:685] [Rank "
                "{r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9153, OpType={op}, NumelIn={n}, "
                "NumelOut={n}, Timeout(ms)=600000) ran for 600044 milliseconds before timing out.")


def test_the_addresses_hostname_prints_at_a_prompt_are_that_host_s(tmp_path):
    """Ray's lines give only `ip=10.20.4.14`; a pasted session on that node shows `hostname -I` printing it."""
    log = [_RAY_TIMEOUT.format(pid=48200 + r, ip=f"10.20.4.{13 + r // 4}", r=r,
                               op="ALLREDUCE" if r == 6 else "_ALLGATHER_BASE", n=1 if r == 6 else 1864048)
           for r in range(8)]
    session = ["ubuntu@a10g-04:~$ hostname -I", "10.20.4.14 172.17.0.1",
               "ubuntu@a10g-04:~$ nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader",
               "48204, 20118 MiB"]
    v = _verdict(tmp_path, {"ray-job.log": log, "pyspy-a10g-04.txt": session})
    assert v.category is Category.DISTRIBUTED_HANG and list(v.culprit.ranks) == [6]
    assert list(v.culprit.nodes) == ["a10g-04"]
    bare = _verdict(tmp_path / "bare", {"ray-job.log": log})
    assert "a10g-04" not in bare.culprit.nodes


def _ib_error(label: int, host: str, rank: int, peer: str) -> list[str]:
    return [f"{label}: {host}:2120{rank}:2125{rank} [{rank % 8}] transport/net_ib.cc:1985 NCCL WARN NET/IB : Got "
            f"completion from peer {peer}<40135> with status=12 opcode=0 len=0 vendor err 0 (Send) localGid "
            f"::ffff:192.168.1.{host[-2:]} remoteGids::ffff:192.168.1.{peer[-2:]}"]


def test_the_one_host_at_an_end_of_every_failed_connection_is_named(tmp_path):
    boot = [f"{i}: gpu-r07n1{i + 1}:21{i}000:21{i}000 [0] NCCL INFO Bootstrap : Using eno1:10.40.7.1{i + 1}<0>"
            for i in range(4)]
    chained = boot + _ib_error(1, "gpu-r07n12", 9, "10.40.7.13") + _ib_error(1, "gpu-r07n12", 13, "10.40.7.13") \
        + _ib_error(2, "gpu-r07n13", 19, "10.40.7.14")
    v = _verdict(tmp_path, {"slurm-4471920.out": chained})
    assert v.category is Category.NETWORK and list(v.culprit.nodes) == ["gpu-r07n13"] and not v.culprit.ranks
    apart = boot + _ib_error(1, "gpu-r07n12", 9, "10.40.7.13") + _ib_error(3, "gpu-r07n14", 25, "10.40.7.11")
    assert list(_verdict(tmp_path / "apart", {"slurm-4471920.out": apart}).culprit.nodes) != ["gpu-r07n13"]


def test_a_node_s_gpfs_client_that_lost_its_membership_is_that_node_s_fault(tmp_path):
    """The ranks of one node see `Stale file handle` in their data loaders; the node's mmfs log says its GPFS client
    lost its lease and its cluster membership and unmounted the file systems (round 105h)."""
    ranks = [f"1: [rank{r}]: OSError: [Errno 116] Stale file handle: '/gpfs/projects/data/train-011962.tar'"
             for r in (6, 4, 5)] + ["srun: error: gn031: task 0: Exited with exit code 1",
                                     "srun: error: gn032: task 1: Exited with exit code 1"]
    mmfs = ["2025-11-18_03:40:50.611+0100: [E] Disk lease period expired 0.820 seconds ago in cluster stor1.hpc.local.",
            "2025-11-18_03:41:18.122+0100: [E] Lost membership in cluster stor1.hpc.local. Unmounting file systems.",
            "2025-11-18_03:41:18.480+0100: [I] File system projfs unmounted by the system with return code 2 reason "
            "code 0"]
    v = _verdict(tmp_path, {"slurm-771204.out": ranks, "gn032_mmfs.log.latest.txt": mmfs})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["gn032"]
    mounted = ["2025-11-17_06:02:11.884+0100: [I] Command: successful mount projfs"]
    assert _verdict(tmp_path / "ok", {"slurm-771204.out": ranks, "gn032_mmfs.log.latest.txt": mounted}).category \
        is not Category.HOST


def test_amdgpu_s_pcie_error_handler_called_for_a_card_is_that_gpu_s_fault(tmp_path):
    """A root port's fatal malformed TLP, then amdgpu's PCIe error callback for the card behind it (round 105f)."""
    kernel = ["2024-06-04T02:47:14+0000 wk-gpu02 kernel: pcieport 0000:c0:03.1: AER: Multiple Uncorrected (Fatal) "
              "error received: 0000:c0:03.1",
              "2024-06-04T02:47:14+0000 wk-gpu02 kernel: amdgpu 0000:c3:00.0: amdgpu: PCI error: detected callback, "
              "state(2)!!"]
    v = _verdict(tmp_path, {"wk-gpu02-journalctl-k.txt": kernel})
    assert v.category is Category.GPU_HARDWARE and list(v.culprit.nodes) == ["wk-gpu02"]
    assert any("0000:c3:00.0" in g for g in v.culprit.gpus)


def test_a_per_rank_stdout_file_whose_start_up_line_names_one_rank_is_that_rank_s(tmp_path):
    """torchrun's `--log-dir` keeps each worker's stdout in a file of its own; its first line names the process
    (`World(world_size=16, rank=11, local_rank=3, ...)`), and its traceback carries no rank (round 105h)."""
    own = ["10:14:46    INFO Starting RL trainer in World(world_size=16, rank=11, local_rank=3, local_world_size=8, "
           "num_nodes=2) in /beegfs/runs/grpo-0603",
           "10:18:19 SUCCESS Step 121 |  1m 37s | Loss 0.0187",
           "Traceback (most recent call last):",
           '  File "/home/svc/prime-rl/src/ckpt.py", line 212, in save',
           "    os.makedirs(step_dir)",
           "FileExistsError: [Errno 17] File exists: '/beegfs/runs/grpo-0603/weights/step_180'"]
    v = _verdict(tmp_path, {"torchrun_gpu-r3n16_attempt_0_3_stdout.log": own})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [11]
    shared = [own[0], own[0].replace("rank=11, local_rank=3", "rank=12, local_rank=4"), *own[1:]]
    assert list(_verdict(tmp_path / "shared", {"train.log": shared}).culprit.ranks) != [11]


def _srun_traceback(exits: list[str]) -> list[str]:
    return ["Traceback (most recent call last):",
            '  File "/home/mh/t5/finetune_t5.py", line 301, in <module>',
            "    convert_zero_checkpoint_to_fp32_state_dict(ckpt, out)",
            "ValueError: Expected 16 of '*_optim_states.pt' under 'last.ckpt/global_step5622' but found 8 files.",
            *exits]


def test_an_unranked_traceback_right_above_srun_s_one_task_exit_is_that_task_s(tmp_path):
    """Lightning under srun: srun's tasks are the ranks, and the one task that exited with a code of its own is the
    one whose traceback is right above it (round 105d)."""
    v = _verdict(tmp_path, {"t5-ds2_5530921.out": _srun_traceback(["srun: error: gpu-r3n07: task 0: Exited with exit "
                                                                   "code 1"])})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [0]
    two = _srun_traceback(["srun: error: gpu-r3n07: task 0: Exited with exit code 1",
                           "srun: error: gpu-r3n08: task 13: Exited with exit code 1"])
    assert list(_verdict(tmp_path / "two", {"t5-ds2_5530921.out": two}).culprit.ranks) != [0]


def test_the_one_idle_gpu_of_a_query_listing_names_the_rank_whose_error_had_no_rank(tmp_path):
    """pdsh's host prefix places the error on the second node and DeepSpeed's hostfile gives each host eight slots;
    `nvidia-smi --query-gpu` on that node shows GPU 2 idle while the seven others spin (round 105h): rank 10."""
    log = ["[2025-07-06 21:26:58,101] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w ip-172-31-20-41,"
           "ip-172-31-27-9 ...",
           "ip-172-31-20-41: [2025-07-06 21:27:02,311] [INFO] [launch.py:163:main] global_rank_mapping="
           "defaultdict(<class 'list'>, {'ip-172-31-20-41': [0, 1, 2, 3, 4, 5, 6, 7], 'ip-172-31-27-9': [8, 9, 10, "
           "11, 12, 13, 14, 15]})",
           "ip-172-31-27-9: Traceback (most recent call last):",
           'ip-172-31-27-9:   File "/home/ubuntu/Megatron-LM/megatron/data/dataset.py", line 88, in __init__',
           "ip-172-31-27-9:     os.makedirs(lazypath)",
           "ip-172-31-27-9: FileExistsError: [Errno 17] File exists: '/fsx/data/webtext/openwebtext.lazy'"]
    def notes(idle: set[int]) -> list[str]:
        return ["ubuntu@ip-172-31-27-9:~$ nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv",
                "index, utilization.gpu [%], memory.used [MiB]",
                *(f"{i}, 0 %, 0 MiB" if i in idle else f"{i}, 100 %, 3811 MiB" for i in range(8))]
    v = _verdict(tmp_path, {"run.log": log, "notes_after_kill.txt": notes({2})})
    assert v.category is Category.APPLICATION and list(v.culprit.ranks) == [10]
    two = _verdict(tmp_path / "two", {"run.log": log, "notes_after_kill.txt": notes({2, 5})})
    assert list(two.culprit.ranks) != [10]


def test_mpirun_refusing_a_command_that_names_one_mca_parameter_twice_is_the_launch_command_s(tmp_path):
    """DeepSpeed's OpenMPI launcher adds `--mca btl_tcp_if_include`, and the user's `--launcher_args` names it again:
    mpirun prints its help message and no rank starts (round 105c)."""
    log = ["[2023-10-12 18:40:33,918] [INFO] [runner.py:570:main] cmd = mpirun -n 8 -hostfile ./hostfile_1473390 "
           "--mca btl_tcp_if_include eth0 -mca btl_tcp_if_include ib0 python train.py",
           "---------------------------------------------------------------------------",
           "The following MCA parameter has been listed multiple times on the",
           "command line:", "", "  MCA param:   btl_tcp_if_include", "",
           "MCA parameters can only be listed once on a command line to ensure there",
           "is no ambiguity as to its value.  Please correct the situation and", "try again.",
           "---------------------------------------------------------------------------", "+ rc=1"]
    v = _verdict(tmp_path, {"slurm-1473390.out": log})
    assert v.category is Category.APPLICATION and v.restartable is False
