"""Rules drawn from round 100 after its first contact was scored: a launcher's NIC health check names the node whose
port went down, a framework's own error printed with no rank is the one task that exited with a code of its own,
and a launcher that echoes its machine's index and GPU count places its spawned workers; a CUDA error naming no GPU
before a node failure is that node lost."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_a_launchers_nic_health_check_names_the_node_whose_port_went_down(tmp_path):
    log = [f"dgx-b10{n}:9119{n}:9131{n} [3] NCCL WARN NET/IB : Got completion from peer 10.44.3.10{6 - n}<48211> with "
           "status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_5" for n in (5, 6)]
    log += ["2026-01-08 09:27:53,086 [ERROR] [dgx-b106] health_check.py:793 NIC device mlx5_5: Port state changed "
            "from ACTIVE to DOWN. Health check FAILED.",
            "2026-01-08 09:27:53,086 [ERROR] [dgx-b106] ft_rendezvous_barrier.py:1204 NIC link state health check "
            "failed for node dgx-b106_911870_0: Node dgx-b106_911870_0 has unhealthy NIC link(s)."]
    v = _verdict(tmp_path, {"slurm-2291740.out": log})
    assert v.category is Category.NETWORK and list(v.culprit.nodes) == ["dgx-b106"]


def test_a_frameworks_error_with_no_rank_is_the_task_that_exited_on_its_own(tmp_path):
    log = ["Traceback (most recent call last):", '  File "torch/utils/data/dataloader.py", line 521, in __next__',
           'RuntimeError: falseINTERNAL ASSERT FAILED at "../aten/src/ATen/MapAllocator.cpp":263, please report a bug '
           "to PyTorch. unable to open shared memory object </torch_51877_2604176355> in read-write mode",
           "srun: error: cn-g014: task 6: Exited with exit code 1",
           "srun: error: cn-g014: tasks 4-5,7: Aborted (core dumped)", "srun: error: cn-g011: tasks 0-3: Aborted"]
    v = _verdict(tmp_path, {"slurm-2874119.out": log})
    assert v.category is Category.FRAMEWORK_CRASH and list(v.culprit.ranks) == [6]


def test_a_spawned_workers_rank_is_its_machines_index_times_its_gpus_plus_its_own(tmp_path):
    head = ("Command Line Args: Namespace(config_file='a.yaml', dist_url='tcp://10.40.2.11:23456', eval_only=False, "
            "machine_rank={m}, num_gpus=8, num_machines=2, opts=[], resume=False)")
    one = [head.format(m=1), "-- Process 3 terminated with the following error:", "Traceback (most recent call last):",
           "json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 1048566 (char 1048565)"]
    v = _verdict(tmp_path, {"machine0.txt": [head.format(m=0)], "machine1.txt": one})
    assert list(v.culprit.ranks) == [11]
    both = [head.format(m=0), head.format(m=1), *one[1:]]  # two machines' lines in one stream: which one is unsure
    assert list(_verdict(tmp_path / "both", {"out.txt": both}).culprit.ranks) != [11]


def test_a_processs_cuda_error_that_names_no_gpu_before_its_node_is_lost_is_the_node(tmp_path):
    log = ["terminate called after throwing an instance of 'c10::CUDAError'", "  what():  CUDA error: unknown error",
           "Exception raised from query at ../aten/src/ATen/cuda/CUDAEvent.h:91 (most recent call first):",
           "srun: error: Node failure on a100-n046",
           "slurmstepd: error: *** STEP 1913352.0 ON a100-n041 CANCELLED AT 2023-03-10T11:48:09 ***"]
    v = _verdict(tmp_path, {"main_log.txt": log})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["a100-n046"]
    xid = ["Mar 10 11:47:02 a100-n046 kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1873302, GPU has fallen off the "
           "bus."]
    with_xid = _verdict(tmp_path / "xid", {"main_log.txt": log, "a100-n046.kern.log": xid})
    assert with_xid.category is Category.GPU_HARDWARE
