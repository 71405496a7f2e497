"""Rules drawn from round 102 after its first contact was scored: an EC2 host name a shell prompt gives names the
address the logs place a fault by; a CUDA build that only one node's ranks could not run is that node's driver (on
every node, the build's); a process's temporary file removed under it is that process's race, not its node's."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_an_ec2_host_name_at_a_prompt_names_the_address_a_fault_is_placed_by(tmp_path):
    log = ["(raylet, ip=172.31.27.190) [2022-06-02 11:40:02,118 E 5123 5123] local_object_manager.cc:259: Failed to "
           "spill objects: OSError: [Errno 28] No space left on device"]
    df = ["ubuntu@ip-172-31-27-190:~$ df -h /tmp", "Filesystem      Size  Used Avail Use% Mounted on",
          "/dev/nvme0n1p1   97G   97G     0 100% /"]
    v = _verdict(tmp_path, {"train_output.log": log, "df_after_failure.txt": df})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["ip-172-31-27-190"]


def _kernels(ranks: range, node: str) -> list[str]:
    return [f"{r}: RuntimeError: CUDA error: device kernel image is invalid" for r in ranks] + [
        f"srun: error: {node}: tasks {ranks[0]}-{ranks[-1]}: Exited with exit code 1"]


def test_a_cuda_build_only_one_nodes_ranks_could_not_run_is_that_nodes_driver(tmp_path):
    log = _kernels(range(8, 16), "dgx-a11") + ["srun: error: dgx-a10: tasks 0-7: Terminated"]
    v = _verdict(tmp_path, {"slurm-1.out": log})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["dgx-a11"] and not v.culprit.ranks
    assert v.restartable is True
    every = _kernels(range(0, 8), "dgx-a10") + _kernels(range(8, 16), "dgx-a11")  # every node: the build's
    v = _verdict(tmp_path / "every", {"slurm-1.out": every})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_processs_temporary_file_removed_under_it_is_that_process_not_its_node(tmp_path):
    gone = "/tmp/torchinductor_u/triton/5/triton_.cubin.tmp.pid_211874_583021"
    log = [f"[rank45]: FileNotFoundError: [Errno 2] No such file or directory: '{gone}'",
           "srun: error: forge-03: tasks 40-47: Exited with exit code 1",
           "srun: error: forge-01: tasks 0-7: Terminated"]
    assert list(_verdict(tmp_path, {"forge-03.log": log}).culprit.ranks) == [45]
    kept = [log[0].replace(gone, "/tmp/cache/shard-0003.bin"), *log[1:]]  # a node-local file: every rank of the node
    assert list(_verdict(tmp_path / "kept", {"forge-03.log": kept}).culprit.ranks) != [45]
