"""Rules that brought round 86 of blind cases into the corpus: a Kubernetes pod's node (and the pod beside it in the
culprit), the IOMMU refusing DMA and a hang that trains with NCCL's peer-to-peer transport off (the host's PCIe
path), a step skipped on one rank for NaN, DeepSpeed's world info numbering the ranks, PALS out of VNIs, a drained
node and a deleted pod, nvidia-smi's uncorrectable ECC column, and a collector's one stamp on many lines."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.aliases import pod_nodes
from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


_PODS = [
    "NAME                 READY   STATUS                     RESTARTS   AGE   IP           NODE         NOMINATED",
    "sft-master-0         0/1     Error                      1          2h    10.42.3.11   gpu-k8s-03   <none>",
    "sft-worker-1         0/1     UnexpectedAdmissionError   0          11m   <none>       gpu-k8s-14   <none>",
    "",
]


def test_a_pod_the_node_never_started_is_still_that_nodes():
    assert pod_nodes("\n".join(_PODS).encode()) == {"sft-master-0": "gpu-k8s-03", "sft-worker-1": "gpu-k8s-14"}


def test_kubectl_describe_names_the_pods_node():
    described = "Name:         ft-0\nNamespace:    ml\nPriority:     0\nNode:         gke-a2-x2vd/10.1.0.7\n"
    assert pod_nodes(described.encode()) == {"ft-0": "gke-a2-x2vd"}


def test_a_lost_gpu_on_the_pods_node_explains_its_ranks_cuda_error(tmp_path):
    worker = ["sft-worker-1:44:212 [3] NCCL INFO comm 0x55 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId c1000 - Init "
              "COMPLETE",
              "[rank11]: Traceback (most recent call last):",
              '[rank11]:   File "/workspace/train.py", line 88, in <module>',
              "[rank11]: RuntimeError: CUDA error: unknown error"]
    smi = ["$ ssh gpu-k8s-14 nvidia-smi",
           "Unable to determine the device handle for GPU 0000:C1:00.0: GPU is lost.  Reboot the system to recover"]
    v = _verdict(tmp_path, {"kubectl_get_pods.txt": _PODS, "worker-1.log": worker, "checks.txt": smi})
    assert v.category is Category.GPU_HARDWARE
    assert v.culprit.ranks == (11,) and v.culprit.nodes == ("gpu-k8s-14", "sft-worker-1")


def test_an_evicted_pod_names_its_node_and_itself(tmp_path):
    described = ["Name:             ft-0", "Namespace:        ml", "Node:             gke-a2-x2vd/10.1.0.7",
                 "Status:           Failed", "Reason:           Evicted",
                 "Message:          Pod ephemeral local storage usage exceeds the total limit of containers 5Gi."]
    log = ["ft-0:63:402 [0] NCCL INFO comm 0x55 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1000 - Init COMPLETE"]
    v = _verdict(tmp_path, {"kubectl_describe_pod.txt": described, "finetune.log": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gke-a2-x2vd", "ft-0")


_HUNG = [
    "tess:140301:140377 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "[rank0]:[E314 10:33:02.772004118 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=27402312, NumelOut=27402312, Timeout(ms)=1800000) ran for "
    "1800089 milliseconds before timing out.",
    "[rank1]:[E314 10:33:02.771652214 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=27402312, NumelOut=27402312, Timeout(ms)=1800000) ran for "
    "1800077 milliseconds before timing out.",
]


def test_the_iommu_refusing_the_gpus_dma_is_the_hosts(tmp_path):
    dmesg = ["[Thu Mar 14 10:03:01 2024] DMAR: [DMA Write NO_PASID] Request device [02:00.0] fault addr 0xfbe00000 "
             "[fault reason 0x05] PTE Write access is not set"]
    v = _verdict(tmp_path, {"train.log": _HUNG, "tess.dmesg.txt": dmesg})
    assert v.category is Category.HOST and v.culprit.nodes == ("tess",) and v.restartable is False


def test_a_hang_that_trains_with_peer_to_peer_off_is_the_hosts_pcie_path(tmp_path):
    rerun = ["sam@tess:~/proj$ NCCL_P2P_DISABLE=1 torchrun --standalone --nproc_per_node=2 train.py",
             "[rank0]: epoch 0 iter 20/372 loss 2.4117 1.62 it/s"]
    v = _verdict(tmp_path, {"train.log": _HUNG, "rerun.txt": rerun})
    assert v.category is Category.HOST and v.culprit.nodes == ("tess",) and v.restartable is False


def test_a_rerun_with_peer_to_peer_off_that_hangs_too_says_nothing_of_the_host(tmp_path):
    rerun = ["sam@tess:~/proj$ NCCL_P2P_DISABLE=1 torchrun --standalone --nproc_per_node=2 train.py",
             "^C"]
    v = _verdict(tmp_path, {"train.log": _HUNG, "rerun.txt": rerun})
    assert v.category is Category.DISTRIBUTED_HANG


def test_a_step_skipped_for_nan_on_one_rank_is_the_hangs_cause(tmp_path):
    out = ["[rank5] Step: 3847. Iteration: 667/1093. loss is nan or inf (cls 0.559 reg 1.032 seg nan), "
           "skipping this batch", *_HUNG]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.category is Category.NUMERICAL and v.culprit.ranks == (5,)


def test_deepspeeds_world_info_numbers_the_rank_that_ran_out_of_files(tmp_path):
    world = ", ".join(f"'gpub{i}': [0, 1, 2, 3]" for i in range(1, 5))
    out = [f"gpub1: [2026-07-11 09:14:05,402] [INFO] [launch.py:146:main] WORLD INFO DICT: {{{world}}}",
           "gpub3: OSError: [Errno 24] Too many open files",
           "gpub3: [2026-07-11 09:27:52,004] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', "
           "'train.py', '--local_rank=1'] exits with return code = 1"]
    v = _verdict(tmp_path, {"neox.log": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpub3",) and v.culprit.ranks == (9,)


def test_pals_out_of_vnis_is_the_scripts_concurrent_launches(tmp_path):
    out = ["start failed on x4102c5s2b0n0: No VNIs available in internal allocator"]
    v = _verdict(tmp_path, {"sweep.o5231177": out})
    assert v.category is Category.APPLICATION and v.culprit.nodes == ("x4102c5s2b0n0",) and v.restartable is False


def test_a_pals_summary_names_its_node(tmp_path):
    v = _verdict(tmp_path, {"job.o1": ["ping failed on x4616c0s4b0n0: Application 8e21c6d4-7b0f not found"]})
    assert "gone from x4616c0s4b0n0" in v.root_cause


def test_a_node_drained_under_the_job_is_the_schedulers(tmp_path):
    events = ["NAMESPACE   LAST SEEN   TYPE     REASON               OBJECT             MESSAGE",
              "default     16m         Normal   NodeNotSchedulable   node/gn-h20-0417   Node gn-h20-0417 status "
              "is now: NodeNotSchedulable"]
    v = _verdict(tmp_path, {"kubectl_events.txt": events})
    assert v.category is Category.SCHEDULER and v.culprit.nodes == ("gn-h20-0417",) and v.restartable is True


def test_a_deleted_pod_is_the_schedulers_not_the_networks(tmp_path):
    session = ["$ kubectl -n ml delete pod resnet-worker-1", 'pod "resnet-worker-1" deleted']
    worker = ["[rank0]:[E1118 21:44:52.104418841 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
              "Process group watchdog thread terminated with exception: NCCL error: remote process exited or there "
              "was a network error, NCCL version 2.21.5"]
    v = _verdict(tmp_path, {"session.txt": session, "worker-0.log": worker})
    assert v.category is Category.SCHEDULER


def test_nvidia_smis_uncorrectable_ecc_count_names_the_gpu_and_its_node(tmp_path):
    smi = ["$ kubectl debug node/gpu-node-07 -it --image=cuda:11.4 -- nvidia-smi",
           "|   0  Tesla V100-SXM2...  On   | 00000000:1A:00.0 Off |                    0 |",
           "|   1  Tesla V100-SXM2...  On   | 00000000:1C:00.0 Off |                    1 |"]
    v = _verdict(tmp_path, {"nvidia-smi.txt": smi})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("gpu-node-07",)
    assert v.culprit.gpus == ("gpu-node-07:00000000:1C:00.0",)


def test_one_collector_stamp_on_every_line_shows_no_stall(tmp_path):
    steps = [f"2025-01-08T09:16:20.000Z {{'loss': 0.{60 - i}, 'epoch': 0.0{i}}}" for i in range(10)]
    end = ["2025-01-08T16:42:10.000Z slurmstepd: error: *** JOB 1203391 ON gpu-w03 CANCELLED AT "
           "2025-01-08T16:42:10 ***"]
    v = _verdict(tmp_path, {"slurm-1203391.out": steps + end})
    assert v.category is Category.SCHEDULER
