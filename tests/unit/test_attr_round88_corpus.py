"""Rules that brought round 88 of blind cases into the corpus: a node's storage failing under a write (and the
checkpoint's own list of the ranks whose write failed), Flux's word on a lost node and on a crashed task, and a GPU
the driver wants reset, which refuses the rank on it as "busy"."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def _save_failed(rank: int, tail: list[str]) -> list[str]:
    return [f"[rank{rank}]: Traceback (most recent call last):",
            f'[rank{rank}]:   File "/opt/conda/lib/python3.11/site-packages/torch/serialization.py", line 850, in save',
            f"[rank{rank}]: RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed "
            "writing file data/1187: file write failed", *tail]  # fmt: skip


def test_a_failed_write_of_torch_save_is_the_nodes_storage(tmp_path):
    log = ["[rank0]:[I716 09:01:02] host=cn-g012 rank=0 world=8", *_save_failed(0, [])]
    v = _verdict(tmp_path, {"slurm-1.out": log})
    assert v.category is Category.HOST and v.restartable is True and v.culprit.ranks == (0,)


def test_a_full_disk_under_the_failed_write_is_the_cause(tmp_path):
    log = _save_failed(0, ["[rank0]: During handling of the above exception, another exception occurred:",
                           "[rank0]: OSError: [Errno 28] No space left on device"])
    v = _verdict(tmp_path, {"train.log": log})
    assert v.category is Category.HOST and v.restartable is False
    assert "disk full" in v.root_cause


def test_the_checkpoint_names_the_rank_whose_mount_failed(tmp_path):
    """Every rank raises the FUSE mount's ENOTCONN and DCP's exception; the exception lists the one that failed."""
    lines = []
    for rank in (0, 3, 5, 11):
        lines += [f"[rank{rank}]: OSError: [Errno 107] Transport endpoint is not connected",
                  f"[rank{rank}]: torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
                  "ranks:dict_keys([11])"]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.HOST and v.culprit.ranks == (11,)


def test_flux_reports_the_node_it_lost(tmp_path):
    log = ["8: [2025-03-11 02:14:07] world_size=16 rank=8 local_rank=0 host=pinyon103 device=cuda:0",
           "Mar 11 02:41:51.208366 broker.err[0]: pinyon103 (rank 2) has disconnected unexpectedly, marking it LOST",
           "1296.552s: job.exception type=node-failure severity=0 node failure on pinyon103 (shell rank 2)"]
    v = _verdict(tmp_path, {"flux-f3x.out": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("pinyon103",)


def test_flux_jobs_echo_of_a_crash_is_not_a_host_and_the_crashed_rank_is_named(tmp_path):
    log = ["9: 2025-02-04 19:02:11,612 INFO  rank 9 on larch0233 -> cuda:1",
           "8: 2025-02-04 19:02:11,611 INFO  rank 8 on larch0233 -> cuda:0",
           "9: Fatal Python error: Segmentation fault",
           "8: larch0233:91402:91566 [0] NCCL INFO [Service thread] Connection closed by localRank 1",
           "flux-job: task(s) Segmentation fault"]
    v = _verdict(tmp_path, {"run.log": log})
    assert v.category is Category.FRAMEWORK_CRASH
    assert v.culprit.ranks == (9,) and "flux-job" not in v.culprit.nodes


def test_a_gpu_the_driver_wants_reset_takes_the_rank_it_refused(tmp_path):
    worker = ["gpu-wk-b07:59:350 [1] NCCL INFO comm 0x56 rank 9 nranks 16 cudaDev 1 nvmlDev 1 busId 2a000 - Init START",
              "[rank9]: Cuda failure 'CUDA-capable device(s) is/are busy or unavailable'"]
    checks = ["root@gpu-wk-b07:~# dmesg -T | grep NVRM",
              "[Tue Jan 14 09:34:58 2025] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
              "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874"]  # fmt: skip
    v = _verdict(tmp_path, {"worker-0.log": worker, "gpu-wk-b07_checks.txt": checks})
    assert v.category is Category.GPU_HARDWARE and v.restartable is True
    assert v.culprit.ranks == (9,) and v.culprit.nodes == ("gpu-wk-b07",)


def test_a_gpu_in_thermal_slowdown_on_the_node_a_file_is_named_after(tmp_path):
    """`nvidia-smi -q` on one node, in a file named `<host>_<what>.txt`: that host's GPU runs too hot."""
    log = ["[init] rank= 3 local_rank=3 host=ndv5-h100-07 device=cuda:3",
           "[init] rank=13 local_rank=5 host=ndv5-h100-03 device=cuda:5",
           "slurmstepd: error: *** JOB 66104 ON ndv5-h100-07 CANCELLED AT 2026-11-18T10:03:02 ***"]
    smi = ["GPU 0000000A:00:00.0", "    Clocks Event Reasons", "        HW Slowdown                       : Active",
           "            HW Thermal Slowdown           : Active"]
    v = _verdict(tmp_path, {"slurm-66104.out": log, "ndv5-h100-03_nvsmi_perf.txt": smi})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("ndv5-h100-03",)


def test_torchs_store_port_taken_in_its_errno_wording(tmp_path):
    """Older torch spells the store's bind failure `(errno: 98 - Address already in use)`: two tasks of a node each
    started a store on the same port (the launch's doing)."""
    log = ["MASTER_ADDR=d-14-7-1",
           "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
           "The server socket has failed to bind to [::]:11204 (errno: 98 - Address already in use).",
           "srun: error: d-14-7-1: task 1: Exited with exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-771204.out": log})
    assert v.category is Category.APPLICATION and v.restartable is False and v.culprit.nodes == ("d-14-7-1",)


def test_open_mpis_tcp_transport_failing_to_reach_a_peer_is_the_network(tmp_path):
    log = [f"[dgx-b03][[52817,1],{r}][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to "
           "192.168.122.1 failed: No route to host (113)" for r in range(4)]  # fmt: skip
    v = _verdict(tmp_path, {"hvd.log": log})
    assert v.category is Category.NETWORK and v.restartable is False
    assert "dgx-b03" not in v.culprit.nodes  # the node that reports it cannot reach the peer is not the culprit
