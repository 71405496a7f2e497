"""Rules from round 27 of blind cases, one small case each: Ray 1.x's dead-node line (`and ip:`) with a cloud
instance listing that names the address; Horovod's stall listing every rank but one as missing names that
one (it alone submitted the op); RETURNN's `Hostname h, pid p, rank r` banner places its rank; a container's id
in torchrun's failure box is not a node; an `AssertionError` raised in a framework's own frame is its crash, one
raised in the user's code stays the application's; an Xid's bus names its rank through `nvidia-smi`'s index for
that bus and the rank whose start-up line names that `cuda:` device."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_ray_1x_dead_node_line_names_the_instance_a_cloud_listing_gives_its_address(tmp_path):
    driver = [
        "(BaseWorkerMixin pid=5172, ip=10.128.0.32) 2022-02-15 16:41:13,018\tINFO torch.py:66 -- Setting up process "
        "group for: env://10.128.0.32:40413 [rank=0, world_size=2]",
        "(BaseWorkerMixin pid=5137, ip=10.128.0.103) 2022-02-15 16:41:13,021\tINFO torch.py:66 -- Setting up process "
        "group for: env://10.128.0.32:40413 [rank=1, world_size=2]",
        "2022-02-15 16:53:52,096\tWARNING worker.py:1462 -- The node with node id: 8f205b12 and ip: 10.128.0.103 has "
        "been marked dead because the detector has missed too many heartbeats from it.",
    ]
    listing = [
        "NAME                               ZONE           MACHINE_TYPE   PREEMPTIBLE  INTERNAL_IP   EXTERNAL_IP  "
        "STATUS",
        "ray-head-5d0b31c2-compute          us-central1-a  n1-standard-4               10.128.0.32   34.71.22.10  "
        "RUNNING",
        "ray-worker-8f1c2a7d-compute        us-central1-a  n1-standard-4               10.128.0.103               "
        "TERMINATED",
    ]
    v = analyze_run(write_run(tmp_path, {"driver.log": driver, "instances.txt": listing})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((1,), ("ray-worker-8f1c2a7d-compute",))


def test_horovod_listing_every_rank_but_one_as_missing_names_the_one_that_submitted(tmp_path):
    out = [f"[1,{r}]<stdout>:rank {r}/4 local_rank {r}: building resnet101" for r in range(4)]
    out += ["[1,0]<stderr>:2018-07-09 22:16:03.118742: W horovod/common/operations.cc:1281] WARNING: One or more "
            "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
            "remainder of ranks for more than 60 seconds.",
            "[1,0]<stderr>:Stalled ops: HorovodBroadcast_ema_logits_weights_0 [missing ranks: 1, 2, 3], "
            "HorovodBroadcast_ema_logits_biases_0 [missing ranks: 1, 2, 3]"]
    v = analyze_run(write_run(tmp_path, {"slurm-2287431.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_a_banner_that_says_hostname_with_a_capital_places_its_rank(tmp_path):
    out = [f"[1,{r}]<stdout>:Horovod initialized. Hostname gpu-k3{1 + r}, pid 1127{r}, rank {r} / size 4, local rank 0 "
           "/ local size 1." for r in range(4)]
    out += ["[1,0]<stderr>:W horovod/common/operations.cc:1281] WARNING: One or more tensors were submitted to be "
            "reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
            "than 60 seconds.",
            "[1,0]<stderr>:Stalled ops: ctc_loss_grad_0 [missing ranks: 3]"]
    v = analyze_run(write_run(tmp_path, {"slurm-3307741.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((3,), ("gpu-k34",))


def test_a_containers_id_in_torchruns_failure_box_is_not_named_as_the_node(tmp_path):
    out = ["[rank4]: RuntimeError: DataLoader worker (pid 2204) is killed by signal: Bus error. It is possible that "
           "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
           "Root Cause (first observed failure):", "[0]:", "  time      : 2024-06-11_09:19:22",
           "  host      : 7c41e0a9d2b3", "  rank      : 4 (local_rank: 4)", "  exitcode  : 1 (pid: 1874)"]
    v = analyze_run(write_run(tmp_path, {"run_0611.log": out})).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (4,) and v.culprit.nodes == ()


def _assert_traceback(frame: str) -> list[str]:
    return [f"[rank{r}]: Traceback (most recent call last):" for r in range(2)] + [
        '  File "/home/u/train.py", line 88, in on_train_epoch_end',
        f'  File "{frame}", line 148, in p_assert',
        "    raise AssertionError(s)",
        "AssertionError: Expects full precision but got torch.float32",
        "AssertionError: Expects full precision but got torch.float32",
    ]


def test_an_assertion_raised_in_a_frameworks_own_frame_is_a_framework_crash(tmp_path):
    frame = "/venv/lib/python3.10/site-packages/torch/distributed/fsdp/_utils.py"
    v = analyze_run(write_run(tmp_path, {"slurm-1187702.out": _assert_traceback(frame)})).verdict
    assert v.category is Category.FRAMEWORK_CRASH


def test_an_assertion_raised_in_the_users_code_stays_the_applications(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-1187702.out": _assert_traceback("/home/u/model/utils.py")})).verdict
    assert v.category is Category.APPLICATION


def test_a_frameworks_check_of_the_users_configuration_stays_the_applications(tmp_path):
    out = ["Traceback (most recent call last):",
           '  File "/home/u/train.py", line 40, in <module>',
           '  File "/venv/lib/python3.10/site-packages/deepspeed/runtime/config.py", line 899, in _batch_assertion',
           "    assert train_batch == micro_batch * grad_acc * self.world_size, (",
           "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
           "gradient_acc_step * world_size 256 != 8 * 1 * 16"]
    v = analyze_run(write_run(tmp_path, {"slurm-9.out": out})).verdict
    assert v.category is Category.APPLICATION


def test_an_xids_bus_names_the_rank_on_the_gpu_nvidia_smi_lists_at_that_bus(tmp_path):
    out = ["index, pci.bus_id, name, memory.total [MiB]"]
    out += [f"{i}, 00000000:{bus}:00.0, NVIDIA GeForce RTX 2080 Ti, 11264 MiB" for i, bus in enumerate(("02", "03",
                                                                                                           "82", "83"))]
    out += [f"torch.distributed: rank {r}/4, local_rank {r}, backend nccl, device cuda:{r}" for r in (2, 0, 3, 1)]
    dmesg = ["[Tue Jan  9 06:43:41 2024] NVRM: Xid (PCI:0000:03:00): 79, pid=21831, name=python3.11, GPU has fallen "
             "off the bus."]
    v = analyze_run(write_run(tmp_path, {"slurm-4418213.out": out, "dmesg-T-cn-317.txt": dmesg})).verdict
    assert v.category is Category.GPU_HARDWARE
    assert (v.culprit.ranks, v.culprit.nodes) == ((1,), ("cn-317",))


def test_a_ranks_start_up_line_that_names_its_bus_places_the_xid_on_that_rank(tmp_path):
    out = [f"[rank {r}] host=ailcm-ai{1 + r // 4} device=cuda:{r % 4} pci=0000:{('17', '65', 'ca', 'e3')[r % 4]}:00.0"
           for r in range(8)]
    syslog = ["Aug 26 15:58:16 ailcm-ai2 kernel: [89274.832736] NVRM: Xid (PCI:0000:65:00): 79, pid=0, GPU has fallen "
              "off the bus."]
    v = analyze_run(write_run(tmp_path, {"slurm-88213.out": out, "syslog-ailcm-ai2.txt": syslog})).verdict
    assert v.category is Category.GPU_HARDWARE
    assert (v.culprit.ranks, v.culprit.nodes) == ((5,), ("ailcm-ai2",))
