"""Rules drawn from round 96 after its first contact was scored: launch options srun does not know, a program
Hydra could not start on a node, Open MPI's TCP transport reaching the wrong process, Omni-Path contexts that did
not open, Kueue's PodsReady eviction, NCCL's socket helpers' resets, an adapter's work-queue error, and a node whose
GPU driver was taken away."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_an_option_srun_does_not_know_is_the_launchs_mistake(tmp_path):
    log = ["llama32_1b/0 srun: unrecognized option '--container-image=nvcr.io/nvidia/nemo:25.02'",
           "llama32_1b/0 srun: unrecognized option '--container-mounts=/scratch/exp:/nemo_run'"]
    v = _verdict(tmp_path, {"sbatch_91735.out": log})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_program_hydra_could_not_start_names_its_node(tmp_path):
    log = [f"[{r}] [proxy:1:1@c102] HYD_spawn (../../src/pm/i_hydra/libhydra/spawn/intel/hydra_spawn.c:117): execvp "
           f"error on file /opt/mlsl/intel64/bin/ep_server (No such file or directory)" for r in (4, 5)]
    v = _verdict(tmp_path, {"console.txt": log})
    assert v.category is Category.APPLICATION and v.culprit.nodes == ("c102",) and v.restartable is False


def test_open_mpi_reaching_an_unexpected_process_is_the_network_as_launched(tmp_path):
    log = [f"[dgx-n12][[31407,1],{r}][btl_tcp_endpoint.c:626:mca_btl_tcp_endpoint_recv_connect_ack] received "
           f"unexpected process identifier [[31407,1],{7 - r}]" for r in (4, 5, 6, 7)]
    v = _verdict(tmp_path, {"console.txt": log})
    assert v.category is Category.NETWORK and v.restartable is False


def test_an_omni_path_context_that_did_not_open_is_the_network(tmp_path):
    log = ["[2] kn041.228417hfi_userinit: assign_context command failed: Invalid argument",
           "[2] kn041.228417hfp_gen1_context_open: hfi_userinit: failed, trying again (1/3)"]
    assert _verdict(tmp_path, {"slurm-311874.out": log}).category is Category.NETWORK


def test_kueues_pods_ready_eviction_is_the_schedulers(tmp_path):
    events = ["31m  Warning  EvictedDueToPodsReadyTimeout  workload/jobset-llama3-pt-5e0c1  Exceeded the PodsReady "
              "timeout research/jobset-llama3-pt-5e0c1"]
    v = _verdict(tmp_path, {"kubectl-events.txt": events})
    assert v.category is Category.SCHEDULER and v.restartable is True


def test_a_reset_nccls_socket_helper_reports_is_the_network(tmp_path):
    log = ["ddp-b-m2kz8:16:91 [2] include/socket.h 398 NCCL WARN Call to recv failed : Connection reset by peer",
           "ddp-b-m2kz8:16:91 [2] transport.cu:153 NCCL WARN transport.cu:153 -> 2 [Proxy thread error]"]
    assert _verdict(tmp_path, {"pod-worker1.log": log}).category is Category.NETWORK


def test_a_work_queue_error_on_a_queue_pair_is_the_printing_hosts_adapter(tmp_path):
    log = ["[default0]:gpu-h03:139577:139678 [0] transport/net_ib.cc:154 NCCL WARN NET/IB : mlx5_1:1 async fatal "
           "event on QP (0x7309dc3bb338): invalid request local work queue error"]
    v = _verdict(tmp_path, {"train_node0.log": log})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpu-h03",)


def test_a_node_drained_for_a_driver_reinstall_is_the_nodes(tmp_path):
    manager = ["Drain node gpu-node-07 for driver uninstall", "evicting pod ml/ddp-worker-2"]
    worker = [f"[rank{r}]: RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
              f"GPU and installed a driver from http://www.nvidia.com/Download/index.aspx" for r in (12, 13)]
    v = _verdict(tmp_path, {"k8s-driver-manager-gpu-node-07.log": manager, "worker-2-previous.log": worker})
    assert v.category is Category.HOST and v.restartable is True
