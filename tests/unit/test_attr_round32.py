"""Rules from round 32 of blind cases: NCCL's source file says which part of a node gave way (NVLink SHARP, the
shared-memory segment, another transport); torch's C++ meeting a memory fault, and a crash every rank met alike,
are the framework's and replay on a restart; TORCH_DISTRIBUTED_DEBUG's mismatch reports name the odd rank; py-spy
dumps pasted into one file each name their rank; a bootstrap address may be a link-local IPv6 one; one rank's NaN
on two nodes follows the rank."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def _nccl_warn(host: str, rank: int, where: str, what: str) -> str:
    return f"{rank}: {host}:{4100 + rank}:{4200 + rank} [{rank % 4}] {where} NCCL WARN {what}"


def test_a_failed_nvls_setup_is_the_nodes_fabric(tmp_path):
    out = [_nccl_warn("hgx-b02" if r >= 4 else "hgx-b01", r, "transport/nvls.cc:158", "Cuda failure 1 'invalid "
           "argument'") for r in range(4, 8)]  # fmt: skip
    out += [f"[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda "
            "error (run with NCCL_DEBUG=INFO for details)" for r in range(8)]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-41.out": out})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("hgx-b02",) and v.restartable


def test_a_p2p_transports_cuda_failure_on_every_rank_is_the_framework_and_replays(tmp_path):
    out = [_nccl_warn("n1" if r < 4 else "n2", r, "transport/p2p.cc:298", "Cuda failure 'invalid argument'")
           for r in range(8)]  # fmt: skip
    out += ["RuntimeError: Failed to update weights: the collective could not transfer them."]
    v = analyze_run(write_run(tmp_path, {"slurm-42.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and not v.culprit.ranks and v.restartable is False


def test_one_ranks_native_crash_stays_restartable(tmp_path):
    out = [_nccl_warn("n2", 5, "transport/p2p.cc:298", "Cuda failure 'invalid argument'")]
    v = analyze_run(write_run(tmp_path, {"slurm-47.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.restartable


def test_a_removed_shared_memory_segment_is_the_hosts(tmp_path):
    out = ["+ srun -l hostname", " 0: c01", " 1: c01", " 2: c02", " 3: c02"]
    out += [_nccl_warn("c02", r, "misc/shmutils.cc:94", f"unlink shared memory /dev/shm/nccl-Ab{r} failed, error: "
            "No such file or directory") for r in (2, 3)]  # fmt: skip
    out += [_nccl_warn("c01", r, "misc/socket.cc:47", "socketProgress: Connection closed by remote peer c02<4021>")
            for r in (0, 1)]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-43.out": out})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("c02",) and v.culprit.ranks == ()  # the node alone
    assert v.restartable  # a /dev/shm cleared at a logout is not the job's doing


def _aborts(what: str, n: int) -> list[str]:
    return [line for _ in range(n) for line in (
        "terminate called after throwing an instance of 'c10::CUDAError'", f"  what():  CUDA error: {what}",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x4d (0x14d485a0bcc1 in libc10.so)")]


def test_a_memory_fault_torchs_cxx_met_on_every_rank_is_the_frameworks_and_replays(tmp_path):
    v = analyze_run(write_run(tmp_path, {"train.out": _aborts("an illegal memory access was encountered", 4)})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and not v.culprit.ranks and v.restartable is False


def test_a_python_calls_memory_fault_is_the_applications_when_the_driver_blames_it(tmp_path):
    # round 43: without an Xid 13/31 beside it, an illegal access is a framework crash (most labels say a library's)
    log = ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
           "RuntimeError: CUDA error: an illegal memory access was encountered"]
    kern = ["Jan 22 07:11:50 n5 kernel: NVRM: Xid (PCI:0000:5d:00): 31, pid=12001, name=python, Ch 00000008, "
            "intr 00000000. MMU Fault: ENGINE GRAPHICS"]
    v = analyze_run(write_run(tmp_path, {"train.out": log, "n5.kern.log": kern})).verdict
    assert v.category is Category.APPLICATION
    v = analyze_run(write_run(tmp_path / "alone", {"train.out": log})).verdict
    assert v.category is Category.FRAMEWORK_CRASH


def test_a_cxx_extensions_failed_nccl_check_is_a_framework_crash(tmp_path):
    out = ["Failed, NCCL error transformer_engine/pytorch/csrc/userbuffers/userbuffers-host.cpp:223 ''"] * 8
    v = analyze_run(write_run(tmp_path, {"run.log": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.restartable is False


def _desync(me: int, other: int, shapes: tuple[str, str]) -> str:
    return (f"[rank{me}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running "
            f"collective: CollectiveFingerPrint(SequenceNumber=4421, OpType=ALLREDUCE, TensorShape=[{shapes[0]}]), "
            f"but Rank {other} is running collective: CollectiveFingerPrint(SequenceNumber=4421, OpType=ALLREDUCE, "
            f"TensorShape=[{shapes[1]}]).")


def test_the_rank_every_mismatch_report_names_is_the_hangs_culprit(tmp_path):
    out = [_desync(r, 5, ("", "6553600")) for r in range(8) if r != 5] + [_desync(5, 0, ("6553600", ""))]
    v = analyze_run(write_run(tmp_path, {"slurm-44.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (5,) and v.restartable is False


def test_one_mismatch_report_names_no_one(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-45.out": [_desync(0, 5, ("", "12"))]})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == ()


def test_py_spy_dumps_in_one_file_name_the_rank_outside_the_collective(tmp_path):
    timeouts = [f"[rank{r}]:[E901 02:32:04.09 ProcessGroupNCCL.cpp:685] [Rank {r}] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=460631, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=600000) ran for 600048 milliseconds before timing out." for r in (2, 5, 9, 13)]
    dumps = ["# py-spy dump --pid 2281988 (node-1, local_rank 0 / global rank 0)",
             'Thread 2281988 (active): "MainThread"', "    save_file (safetensors/torch.py:286)",
             "    save_model (train.py:231)", "",
             "# py-spy dump --pid 1440187 (node-2, global rank 12)",
             'Thread 1440187 (idle): "MainThread"', "    barrier (torch/distributed/distributed_c10d.py:4551)",
             "    save_model (train.py:236)"]
    v = analyze_run(write_run(tmp_path, {"train.log": timeouts, "pyspy-dumps.txt": dumps})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_a_link_local_bootstrap_address_names_the_peer_host(tmp_path):
    veth = "fe80::b4f1:9cff:fe2e:61d5%veth3a91c27"
    out = ["0: a03:3311:3311 [0] NCCL INFO Bootstrap : Using ib0:192.168.60.103<0>",
           f"1: a04:2907:2907 [0] NCCL INFO Bootstrap : Using veth3a91c27:{veth}<0>"]
    out += [f"0: a03:33{r}:39{r} [{r}] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to {veth}<412{r}> "
            "failed : Software caused connection abort" for r in range(4)]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-46.out": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("a04",)


def test_one_ranks_nan_on_two_nodes_names_the_rank_not_a_node(tmp_path):
    def nan(host: str) -> list[str]:
        return [f"11: [rank 11] host {host} local_rank 3 cuda:3",
                f"11: AssertionError: Rank 11: found NaN in local grad norm in backward pass. Device: 3, node: {host}"]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": nan("b-0212"), "slurm-2.out": nan("b-0306")})).verdict
    assert v.category is Category.NUMERICAL and v.culprit.ranks == (11,) and v.culprit.nodes == ()
