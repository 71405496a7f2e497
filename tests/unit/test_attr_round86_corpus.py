"""Rules that brought round 86 of blind cases into the corpus: a Kubernetes pod's node (and the pod beside it in the
culprit), the IOMMU refusing DMA and a hang that trains with NCCL's peer-to-peer transport off (the host's PCIe
path), a step skipped on one rank for NaN, DeepSpeed's world info numbering the ranks, PALS out of VNIs, a drained
node and a deleted pod, nvidia-smi's uncorrectable ECC column, and a collector's one stamp on many lines."""

from __future__ import annotations

from pathlib import Path

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
    assert v.culprit.ranks == (11,) and v.culprit.nodes == ("gpu-k8s-14",) and v.culprit.pods == ("sft-worker-1",)


def test_an_evicted_pod_names_its_node_and_itself(tmp_path):
    described = ["Name:             ft-0", "Namespace:        ml", "Node:             gke-a2-x2vd/10.1.0.7",
                 "Status:           Failed", "Reason:           Evicted",
                 "Message:          Pod ephemeral local storage usage exceeds the total limit of containers 5Gi."]
    log = ["ft-0:63:402 [0] NCCL INFO comm 0x55 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1000 - Init COMPLETE"]
    v = _verdict(tmp_path, {"kubectl_describe_pod.txt": described, "finetune.log": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gke-a2-x2vd",) and v.culprit.pods == ("ft-0",)


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


# ---- guards from a review of the rules above: each shape the first versions blamed wrongly ----


def test_an_iommu_fault_at_boot_does_not_outrank_a_gpu_that_fell_off(tmp_path):
    dmesg = ["[    2.310000] DMAR: [DMA Read NO_PASID] Request device [00:14.0] fault addr 0x7b000000 [fault reason "
             "0x06] PTE Read access is not set",
             "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."]
    v = _verdict(tmp_path, {"node07/dmesg.txt": dmesg})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("node07",)


def test_an_ecc_count_does_not_explain_the_codes_own_exception(tmp_path):
    smi = ["|   1  NVIDIA A100-SXM4-80GB          On  | 00000000:0F:00.0 Off |                    2 |"]
    out = ["[rank1]: Traceback (most recent call last):", "[rank1]: KeyError: 'labels'"]
    v = _verdict(tmp_path, {"nvidia-smi.txt": smi, "train.log": out})
    assert v.category is Category.APPLICATION


def test_a_pod_deleted_after_a_traceback_is_cleanup_not_the_cause(tmp_path):
    out = ["[rank1]: Traceback (most recent call last):", "[rank1]: KeyError: 'labels'",
           "$ kubectl delete pod train-worker-0", 'pod "train-worker-0" deleted']
    v = _verdict(tmp_path, {"worker.log": out})
    assert v.category is Category.APPLICATION


def test_a_failing_run_started_with_peer_to_peer_off_says_nothing_of_the_host(tmp_path):
    run = ["sam@tess:~/proj$ NCCL_P2P_DISABLE=1 torchrun --standalone --nproc_per_node=2 train.py",
           "[rank0]: epoch 0 iter 20/372 loss 2.4117 1.62 it/s", *_HUNG]
    v = _verdict(tmp_path, {"train.log": run})
    assert v.category is Category.DISTRIBUTED_HANG


def test_a_rerun_that_only_loaded_its_checkpoint_did_not_train(tmp_path):
    rerun = ["sam@tess:~/proj$ NCCL_P2P_DISABLE=1 torchrun --standalone --nproc_per_node=2 train.py",
             "Loading checkpoint shards: 100%|██████████| 4/4 [00:05<00:00,  1.25s/it]", "^C"]
    v = _verdict(tmp_path, {"train.log": _HUNG, "rerun.txt": rerun})
    assert v.category is Category.DISTRIBUTED_HANG


def test_another_users_pod_on_the_node_is_not_the_jobs(tmp_path):
    pods = ["NAME            READY   STATUS    RESTARTS   AGE   IP          NODE         NOMINATED NODE",
            "jupyter-alice   0/1     Pending   0          2m    <none>      gpu-node-7   <none>", ""]
    xid = ["[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."]
    v = _verdict(tmp_path, {"kubectl_get_pods.txt": pods, "gpu-node-7.dmesg.txt": xid})
    assert v.culprit.nodes == ("gpu-node-7",) and v.culprit.pods == ()


def test_a_start_up_hang_with_few_distinct_stamps_is_still_a_stall(tmp_path):
    out = [f"2025-01-08 09:16:2{i % 3},000 - INFO - Initializing process group ({i})" for i in range(6)]
    out += ["slurmstepd: error: *** JOB 1203391 ON gpu-w03 CANCELLED AT 2025-01-08T13:16:30 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"slurm-1203391.out": out})
    assert v.category is Category.DISTRIBUTED_HANG


def test_a_sentence_about_checking_for_nan_is_no_nan(tmp_path):
    out = ["INFO checking step for nan or inf in gradients", "[rank0]: KeyError: 'labels'"]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.category is Category.APPLICATION


# ---- round 87's shapes (scored blind, kept in tests/fixtures/attribution_pending/round87) ----


def test_an_ib_device_nccl_cannot_open_is_that_hosts_network(tmp_path):
    warn = ["h20-b04:3327:3409 [0] transport/net_ib.cc:652 NCCL WARN NET/IB : Unable to open device erdma_1", *_HUNG]
    v = _verdict(tmp_path, {"h20-b04.log": warn})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("h20-b04",) and v.restartable is False


def test_pmix_unable_to_reach_a_node_names_that_node(tmp_path):
    out = ["slurmstepd: error:  mpi/pmix_v4: pmixp_dconn_connect: gn102 [1]: pmixp_dconn.h:246: Cannot establish "
           "direct connection to gn103 (2)", "srun: error: gn101: tasks 0-7: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-2290417.out": out})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gn103",)


def test_no_socket_interface_is_the_hosts_launch_setting(tmp_path):
    out = ["gpu-r3n11:44907:44907 [0] misc/socket.cc:379 NCCL WARN Bootstrap : no socket interface found"]
    v = _verdict(tmp_path, {"console.txt": out})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpu-r3n11",) and v.restartable is False


def test_a_loopback_address_dialled_is_the_host_whose_name_resolves_to_it(tmp_path):
    checks = ["mlops@trn-cpu-07:~$ hostname; hostname -i", "trn-cpu-07", "127.0.1.1",
              "mlops@trn-head-01:~$ hostname -i", "10.40.12.21"]
    out = ["RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:22845: "
           "Connection refused"]
    v = _verdict(tmp_path, {"node_checks.txt": checks, "driver.log": out})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("trn-cpu-07",) and v.restartable is False


def test_a_container_runtime_that_cannot_start_the_task_is_its_nodes(tmp_path):
    out = ["2: docker: Error response from daemon: failed to create task for container: failed to create shim task: "
           "OCI runtime create failed: runc create failed: unable to start container process",
           "2: nvidia-container-cli: initialization error: cuda error: unknown error: unknown.",
           "srun: error: gpu-r2-14: task 2: Exited with exit code 125"]
    v = _verdict(tmp_path, {"slurm-553201.out": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-r2-14",)


def test_a_gpu_the_driver_does_not_support_is_the_gpus(tmp_path):
    dmesg = ["[Sun Jul 19 23:41:08 2026] NVRM: The NVIDIA GPU 000a:00:00.0 (PCI ID: 10de:2330)",
             "                           NVRM: installed in this system is not supported by the"]
    v = _verdict(tmp_path, {"aks-node-1.dmesg.txt": dmesg})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("aks-node-1",)


def test_efa_unable_to_post_receive_buffers_is_the_nodes_memlock(tmp_path):
    out = ["3: Libfabric error: (-12) Cannot allocate memory",
           "3: EFA internal error: (4112) Failure to post internal receive buffers",
           "srun: error: p4d-4: task 3: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-5521.out": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("p4d-4",) and v.restartable is False


def test_the_flight_recorder_tools_own_error_is_not_the_jobs(tmp_path):
    fr = ["$ python tools/flight_recorder/fr_trace.py /mnt/shared/fr -p nccl_trace_rank_",
          "AssertionError: no files loaded from /mnt/shared/fr with prefix nccl_trace_rank_"]
    v = _verdict(tmp_path, {"fr.txt": fr, "train.log": _HUNG})
    assert v.category is Category.DISTRIBUTED_HANG


def test_a_rank_claimed_twice_at_bootstrap_is_the_launch(tmp_path):
    out = ["0: npl-g017:201877:202031 [0] bootstrap.cc:250 NCCL WARN Bootstrap Root : rank 3 of 16 ranks has already "
           "checked in"]
    v = _verdict(tmp_path, {"slurm-5518207.out": out})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_uuid_named_container_is_a_host(tmp_path):
    out = ["3f9a61c2-7be4-4d0e-9a55-e21c08d4b7a1:61207:61552 [3] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp "
           "failed with error No such device"]
    v = _verdict(tmp_path, {"node0.log": out})
    assert v.culprit.nodes == ("3f9a61c2-7be4-4d0e-9a55-e21c08d4b7a1",)


def test_a_collector_whose_clock_lags_the_lines_does_not_date_the_others(tmp_path):
    # the collector stamps 04:05:00 on lines the node wrote at 04:21:57: its stamp on the NIC error is not its time,
    # and the kernel's link-down on ib-n09 (04:11:52) comes first
    out = ["2024-11-02T04:05:00.000Z ib-n08:5120:5201 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
           "from peer 10.44.0.9<41021> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
           "2024-11-02T04:05:00.000Z [rank8]:[E1102 04:21:57.551483 ProcessGroupNCCL.cpp:616] [Rank 8] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
           "Timeout(ms)=600000) ran for 600377 milliseconds before timing out."]
    kern = ["Nov  2 04:11:52 ib-n09 kernel: [431122.310882] mlx5_core 0000:c1:00.0 ibp193s0: Link down"]
    v = _verdict(tmp_path, {"train-31555.out": out, "ib-n09.kern.log": kern})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("ib-n09",)


def test_a_hosts_ipoib_name_is_the_host():
    from nvrx_hpc.attribution.aliases import short_hosts

    assert short_hosts(["tcn-g112-ib0", "gpu-r06n07-ib1.cluster", "10.0.0.5"]) == ["tcn-g112", "gpu-r06n07", "10.0.0.5"]


def test_an_ssh_session_that_dropped_ended_the_launcher(tmp_path):
    journal = ["Aug 28 22:53:46 dl-a6000-03 sshd[245801]: Timeout, client not responding from user swu 10.20.4.117 "
               "port 51532", "Aug 28 22:53:46 dl-a6000-03 sshd[245730]: pam_unix(sshd:session): session closed for "
               "user swu"]
    run = ["W0828 22:53:47.001000 139822188226368 torch/distributed/elastic/agent/server/api.py:688] Received "
           "Signals.SIGHUP death signal, shutting down workers",
           "torch.distributed.elastic.multiprocessing.api.SignalException: Process 245988 got signal: 1"]
    v = _verdict(tmp_path, {"journal_sshd.txt": journal, "run.log": run})
    assert v.category is Category.SCHEDULER and v.restartable is True


def test_a_culprit_named_by_address_is_the_host_the_logs_pair_it_with():
    # Ray names the dead worker by `ip: 10.1.4.23`; the start-up script paired that address with gpu-m03
    case = Path(__file__).parents[1] / "fixtures/attribution_corpus/heldout14b_ray_torchtrainer_worker_died"
    v = analyze_run(case).verdict
    assert "10.1.4.23" not in v.culprit.nodes and "gpu-m03" in v.culprit.nodes


def test_a_container_id_that_starts_with_a_digit_is_paired_whole_with_its_address():
    from nvrx_hpc.attribution.peers import sample_addresses

    line = b"7c41e0b9d2fa:214:214 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>\n"
    assert sample_addresses(line).get("172.17.0.2") == "7c41e0b9d2fa"


def test_the_terminal_summary_names_the_culprits_pod(tmp_path):
    import subprocess
    import sys

    described = ["Name:             ft-0", "Namespace:        ml", "Node:             gke-a2-x2vd/10.1.0.7",
                 "Message:          Pod ephemeral local storage usage exceeds the total limit of containers 5Gi."]
    log = ["ft-0:63:402 [0] NCCL INFO comm 0x55 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1000 - Init COMPLETE"]
    run = write_run(tmp_path, {"kubectl_describe_pod.txt": described, "finetune.log": log})
    out = subprocess.run([sys.executable, "-m", "nvrx_hpc", "attribute", str(run), "--no-write"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "culprit:      nodes gke-a2-x2vd; ranks -; GPUs -; pod ft-0" in out
