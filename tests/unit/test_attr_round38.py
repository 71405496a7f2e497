"""Rules from round 38 of blind cases: srun starting one launcher a node (`--node_rank $SLURM_PROCID`) makes its
labels node ranks, so a launcher's `--local_rank=L` under label T is rank T x nproc + L; NCCL's `NET : Using
interface` pairs a host with its address, and UCX's endpoint timeout names its peer; a bare `$ ssh host cmd`
prompt places the output on that host; UCX's `[host:pid:0:tid]` prefix names the host, and a segfault on two nodes
is the code's; NCCL out of GPU memory is the job's."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_LAUNCH = ["+ export LAUNCHER='python -u -m torch.distributed.launch --nproc_per_node 4 --nnodes 32'",
           "+ srun --jobid 2217304 --label bash -c '$LAUNCHER --node_rank $SLURM_PROCID pretrain_gpt.py --deepspeed'"]
_ECC = ["21: RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: uncorrectable ECC error",
        "21: subprocess.CalledProcessError: Command '['/conda/bin/python', '-u', 'pretrain_gpt.py', '--local_rank=2', "
        "'--deepspeed']' died with <Signals.SIGABRT: 6>.",
        "srun: error: jzg-r9i3n7: task 21: Exited with exit code 1",
        "srun: error: jzg-r6i0n1: task 0: Exited with exit code 1"]


def test_a_launchers_local_rank_under_a_node_rank_label_is_its_global_rank(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-2217304.out": [*_LAUNCH, *_ECC]})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (86,) and v.culprit.nodes == ("jzg-r9i3n7",)


def test_without_the_node_rank_on_the_srun_line_the_label_is_not_read_as_one(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-2217304.out": _ECC})).verdict
    assert 86 not in v.culprit.ranks


def test_nccls_net_interface_line_names_the_peer_a_connect_failure_could_not_reach(tmp_path):
    run = {
        "node0_bigbox1.log": ["bigbox1:23117:23117 [0] NCCL INFO NET : Using interface enp5s0:10.40.7.21<0>"],
        "node1_bigbox2.log": ["bigbox2:8841:8841 [0] NCCL INFO NET : Using interface enp5s0:10.40.7.22<0>",
                              *[f"bigbox2:884{d}:884{d} [{d}] include/socket.h:382 NCCL WARN Connect to "
                                "10.40.7.21<41327> failed : No route to host" for d in (1, 2)]],
    }
    v = analyze_run(write_run(tmp_path, run)).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("bigbox1",)


def test_ucx_endpoint_timeouts_name_their_peer(tmp_path):
    lines = [f"[1,{r}]<stdout>:[1530172089.51] [{h}:6138:0]      ucp_worker.c:373  UCX  ERROR Error Endpoint "
             f"timeout was not handled for ep 0x1d3a9c0 - gpn-c14" for r, h in ((22, "gpn-c16"), (9, "gpn-c13"))]
    job_map = []
    for rank, host in enumerate(("gpn-c13", "gpn-c14", "gpn-c16")):  # mpirun's --display-map
        job_map += [f" Data for node: {host}\tNum slots: 1\tMax slots: 0\tNum procs: 1",
                    f" \tProcess OMPI jobid: [51377,1] App: 0 Process rank: {rank} Bound: N/A"]
    v = analyze_run(write_run(tmp_path, {"run.log": [*job_map, *lines]})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpn-c14",)


def test_a_bare_ssh_prompt_places_the_remote_kernel_log_and_a_plugged_cable_is_not_a_link_down(tmp_path):
    lines = ["$ ssh gpn-c14 dmesg -T | tail -n 3",
             "[Thu Jun 28 07:55:14 2018] mlx5_core 0000:5e:00.0: Port module event: module 0, Cable plugged",
             "[Thu Jun 28 09:48:06 2018] mlx5_ib: mlx5_ib_event:3019:(pid 0): port 1 link down"]
    v = analyze_run(write_run(tmp_path, {"after_failure.txt": lines})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpn-c14",)
    assert "09:48:06" in v.root_cause


def _segv(host: str, rank: int, pid: int) -> str:
    return (f"{rank}: [{host}:{pid}:0:{pid}] Caught signal 11 (Segmentation fault: address not mapped to object at "
            "address (nil))")


def test_a_segfault_on_two_nodes_alike_is_the_codes(tmp_path):
    lines = [_segv("g0417", 0, 3300), _segv("g0417", 1, 3301), _segv("g0418", 8, 2976)]
    v = analyze_run(write_run(tmp_path, {"slurm-330912.out": lines})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.nodes == () and v.restartable is False


def test_a_segfault_on_one_node_names_that_node(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-330912.out": [_segv("g0418", 8, 2976)]})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.nodes == ("g0418",)


def test_nccl_out_of_gpu_memory_is_the_jobs(tmp_path):
    lines = ["ng41106:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
             "ng41106:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes"]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": lines})).verdict
    assert v.category is Category.APPLICATION and v.restartable is False
