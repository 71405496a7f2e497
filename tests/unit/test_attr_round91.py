"""Rules drawn from rounds 90 and 91 of blind cases: MPI's transport layers that disagree, a program its host's
loader refuses, Blackwell's NVLink Xids, a node Kubernetes or torchrun's rendezvous lost, Cray MPICH's fabric
completion, an adapter's own completion error, the rank that went ahead of the others' hang, a tensor-parallel
group's NCCL ranks, a pod's description, torch.distributed.launch's failed worker, and Megatron's Inf check."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.lines import LineContext
from nvrx_hpc.attribution.localise import rank_nodes
from nvrx_hpc.attribution.scanner import Scanner


def test_ranks_that_chose_different_mpi_transport_layers_are_the_network(tmp_path):
    log = ["2: [gn07:3301] [[4127,1],2] selected pml ob1, but peer [[4127,1],0] on gn07 selected pml ucx",
           "2:   PML add procs failed",
           "srun: error: gn07: task 2: Exited with exit code 14",
           "srun: error: gn08: tasks 4-7: Killed"]
    v = _verdict(tmp_path, {"slurm-5521.out": log})
    assert v.category is Category.NETWORK and v.culprit.ranks == (2,) and v.restartable is True


def test_a_program_its_loader_refuses_for_a_missing_library_is_the_hosts(tmp_path):
    log = ["mpirun -np 8 -H localhost:4,w03:4 python train.py",
           "/opt/ompi/bin/orted: error while loading shared libraries: libcudart.so.12: cannot open shared object "
           "file: No such file or directory",
           "ORTE was unable to reliably start one or more daemons."]
    v = _verdict(tmp_path, {"launch.log": log})
    assert v.category is Category.HOST and v.restartable is False


def test_a_fatal_blackwell_nvlink_xid_is_the_gpus_but_a_nonfatal_one_is_not_a_cause(tmp_path):
    hang = [f"[rank{r}]:[E1117 06:48:18.589 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=2917, OpType=_ALLGATHER_BASE, NumelIn=16, NumelOut=128, Timeout(ms)=600000)"
            for r in range(4)]  # fmt: skip
    fatal = ["[1187942.010000] NVRM: Xid (PCI:0000:1b:00): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV "
             "Error"]
    v = _verdict(tmp_path, {"train.log": hang, "b2-n02_dmesg.txt": fatal})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("b2-n02",)
    nonfatal = ["[1187942.010000] NVRM: Xid (PCI:0000:3a:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (0x0409a0c2)"]
    v = _verdict(tmp_path / "b", {"train.log": hang, "b2-n02_dmesg.txt": nonfatal})
    assert v.category is Category.DISTRIBUTED_HANG


def test_a_node_kubernetes_saw_go_not_ready_is_lost_with_its_ranks(tmp_path):
    events = ["52m  Warning  NodeNotReady  node/gke-a100-wv8s  Node gke-a100-wv8s status is now: NodeNotReady",
              "49m  Warning  Rebooted      node/gke-a100-wv8s  Node gke-a100-wv8s has been rebooted, boot id: 1f07"]
    log = [f"[rank{r}]:[E1008 05:54:10.1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
           f"timeout: WorkNCCL(SeqNum=186044, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=180000)"
           for r in range(4)]  # fmt: skip
    v = _verdict(tmp_path, {"events.txt": events, "master-0.log": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gke-a100-wv8s",) and v.restartable is True


def test_a_member_torchruns_rendezvous_found_dead_names_its_host(tmp_path):
    log = ["[2023-11-14 08:40:02,117] torch.distributed.elastic.agent.server.api: [INFO] [default] Rendezvous "
           "complete for workers. Result: restart_count=0 master_addr=gpu-a03 group_rank=0 group_world_size=2 "
           "local_ranks=[0, 1, 2, 3] role_ranks=[0, 1, 2, 3] global_ranks=[0, 1, 2, 3] role_world_sizes=[8, 8, 8, 8] "
           "global_world_sizes=[8, 8, 8, 8]",
           "[2023-11-14 09:05:04,993] torch.distributed.elastic.rendezvous.dynamic_rendezvous: [DEBUG] Detected dead "
           "node 'gpu-a07_90417_0', removing it from the rendezvous"]  # fmt: skip
    v = _verdict(tmp_path, {"gpu-a03_torchrun.log": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-a07",)


def test_cray_mpichs_failed_fabric_completion_is_the_reporting_ranks_network(tmp_path):
    log = ["37: MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:"
           "Input/output error - UNDELIVERABLE)",
           "srun: error: frontier04418: task 37: Exited with exit code 255",
           "srun: error: frontier04418: tasks 32-36,38-39: Terminated"]
    v = _verdict(tmp_path, {"gnn.out": log})
    assert v.category is Category.NETWORK and v.culprit.ranks == (37,) and v.culprit.nodes == ("frontier04418",)


def test_an_adapters_local_protection_error_names_its_host_not_the_peer(tmp_path):
    """status 4 is raised by the reporting host's own adapter; its peer reports only retries exceeded (12)."""
    log = ["6: gn-05:4028:4029 [6] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
           "10.60.18.6<51233> with status=4 opcode=0 len=0 vendor err 81 (Recv)",
           "14: gn-06:1173:1174 [6] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
           "10.60.17.5<40917> with status=12 opcode=1 len=0 vendor err 129 (Send)"]
    v = _verdict(tmp_path, {"slurm-884120.out": log})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gn-05",) and v.restartable is False


def _timeout(rank: int, seq: int, op: str) -> list[str]:
    return [f"{rank}: [rank{rank}]:[E1023 04:51:37.1 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=1800000)",
            f"{rank}: [rank{rank}]:[E1023 04:51:37.2 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank "
            f"{rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
            f"work: {seq}, last completed NCCL work: {seq - 1}."]  # fmt: skip


def test_the_rank_that_timed_out_calls_ahead_of_the_others_is_the_one_they_wait_on(tmp_path):
    log = [line for r in (1, 2, 3) for line in _timeout(r, 41877, "ALLREDUCE")] + _timeout(0, 41885, "BROADCAST")
    v = _verdict(tmp_path, {"slurm-4471820.out": log})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_a_tensor_parallel_communicators_ranks_do_not_place_the_global_ones(tmp_path):
    """Each node's NCCL lines are its own eight-rank group's; torchrun's command says the world is sixteen, so
    group rank 0 on n02 is not global rank 0, and the launch lines keep ranks 0-7 on n01."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "[n01] launching torchrun --nnodes 2 --node-rank 0 --nproc-per-node 8 train_tp.py",
        "[n02] launching torchrun --nnodes 2 --node-rank 1 --nproc-per-node 8 train_tp.py",
        "n02:98410:98522 [0] NCCL INFO comm 0x55f0b9a1c3d0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0",
        "n01:211504:211611 [0] NCCL INFO comm 0x5610aa38e2b0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0",
    ]) + "\n")  # fmt: skip
    hits = Scanner(engine="python").scan_file(log, LineContext("train.log"))
    assert rank_nodes(hits).get(0) != "n02"


def test_the_lines_of_a_pod_description_are_that_pods(tmp_path):
    describe = ["$ kubectl describe pod -n vision vitl-head-7x2qp", "Name:             vitl-head-7x2qp",
                "Namespace:        vision", "Node:             cpu-pool-4kq1/10.128.0.52", "Containers:",
                "  ray-head:", "    Last State:     Terminated", "      Reason:       OOMKilled",
                "      Exit Code:    137"]
    pods = ["NAME              READY   STATUS    RESTARTS   AGE   IP           NODE",
            "vitl-head-7x2qp   1/1     Running   1          11h   10.8.4.21    cpu-pool-4kq1",
            "vitl-worker-a1   1/1     Running   0          11h   10.8.5.14    gpu-pool-n1"]
    v = _verdict(tmp_path, {"describe_head_pod.txt": describe, "pods.txt": pods})
    assert v.category is Category.HOST and v.culprit.nodes == ("cpu-pool-4kq1",)
    assert v.culprit.pods == ("vitl-head-7x2qp",)


def test_the_legacy_launchers_failed_worker_names_the_global_rank(tmp_path):
    """torch.distributed.launch on node 5 of 4 GPUs each raised for local rank 2: the ECC error above it is rank 22's,
    not srun's task 5's (the task is the node's launcher)."""
    node = ["START r9n3 SLURM_PROCID=5",
            "python -u -m torch.distributed.launch --nproc_per_node 4 --nnodes 8 --node_rank 5 --master_addr r6n1 "
            "pretrain_gpt.py",
            "Traceback (most recent call last):",
            "RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "Traceback (most recent call last):",
            "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'pretrain_gpt.py', '--local_rank=2', "
            "'--num-layers', '40']' died with <Signals.SIGABRT: 6>."]  # fmt: skip
    head = ["srun: error: r9n3: task 5: Exited with exit code 1"]
    v = _verdict(tmp_path, {"job-r9n3.out": node, "job-r6n1.out": head})
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (22,)


def test_megatrons_inf_in_a_local_grad_norm_is_numerical(tmp_path):
    log = ["[rank4]: RuntimeError: Rank 4, node dgx-0417, device 4, iteration -1: Unexpected result inf "
           "(message='found Inf in local grad norm for bucket #6 in backward pass before data-parallel communication "
           "collective')"]  # fmt: skip
    v = _verdict(tmp_path, {"pretrain.log": log})
    assert v.category is Category.NUMERICAL and v.culprit.ranks == (4,)


def test_a_bus_a_ranks_start_up_line_names_places_the_lost_gpu(tmp_path):
    """nvidia-smi's lost GPU, pasted into a file of its own: the start-up line that named its bus gives the rank."""
    console = ["[rank 0] using cuda:0 NVIDIA GeForce RTX 2080 Ti (pci 0000:04:00.0)",
               "[rank 1] using cuda:1 NVIDIA GeForce RTX 2080 Ti (pci 0000:0B:00.0)",
               "[rank 2] using cuda:2 NVIDIA GeForce RTX 2080 Ti (pci 0000:84:00.0)"]
    smi = ["Unable to determine the device handle for GPU0000:0B:00.0: Unknown Error"]
    v = _verdict(tmp_path, {"train.log": console, "smi.txt": smi})
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (1,)


def test_ranks_that_never_issued_the_call_stay_behind_when_one_rank_reports_its_own(tmp_path):
    """The guard of the rule above (round 88a): rank 5 timed out in call 518 of its own; ranks 1-4's dumps say they
    enqueued only 517. They never issued the call the rest wait in: they are behind, not rank 5 ahead."""
    log = [f"{r}: [rank{r}]:[E914 21:20:34.1 ProcessGroupNCCL.cpp:1683] [PG ID 4 PG GUID 31 Rank {r}] Timeout at "
           f"NCCL work: 517, last enqueued NCCL work: 517, last completed NCCL work: 517." for r in (1, 2, 3, 4)]
    log += ["5: [rank5]:[E914 21:20:34.6 ProcessGroupNCCL.cpp:2268] [PG ID 4 PG GUID 31 Rank 5]  failure detected by "
            "watchdog at work sequence id: 518 PG status: last enqueued work: 518, last completed work: 517"]
    v = _verdict(tmp_path, {"job.log": log})
    assert 5 not in v.culprit.ranks
