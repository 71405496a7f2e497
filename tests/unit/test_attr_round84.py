"""Rules from rounds 84 and 85 of blind cases: a gang scheduler's `task=N host=H` lead, an ops export of several hosts'
kernel logs, TORCH_DISTRIBUTED_DEBUG's fingerprints, NCCL's prefix behind a Ray actor's, a rendezvous host that does
not resolve, AMD's driver on a failing card, Slurm's older memory-limit kill, Open MPI's remote daemon, a
`rank N/M on host` banner, sacct's batch host for a lost batch script, the prompt a one-process job ran at, a
container's host, newer CUDA's busy devices and oneCCL's Level Zero failures."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_gang_schedulers_task_and_host_lead_names_the_rank_and_node(tmp_path):
    out = [f"2026-10-02T06:51:{10 + r:02d}.402Z task={r} host=s{r}hx I1002 06:51:10.402118  88213 train.py:1181] "
           f"step 41288 loss=2.0913" for r in range(4)]
    out += ["2026-10-02T06:53:49.551Z task=2 host=s2hx 2026-10-02 06:53:49.551203: E external/xla/xla/stream_executor/"
            "cuda/cuda_driver.cc:1412] failed to synchronize the stop event: CUDA_ERROR_CONTAINED: Invalid access of "
            "peer GPU memory over nvlink or a hardware error"]
    v = _verdict(tmp_path, {"job.log": out})
    assert v.category is Category.GPU_HARDWARE
    assert v.culprit.ranks == (2,) and v.culprit.nodes == ("s2hx",)


def test_an_ops_export_of_kernel_logs_led_by_each_host_places_each_line(tmp_path):
    export = ["s4kdxr71 kernel: [Thu Oct  2 06:53:48 2026] NVRM: Xid (PCI:0008:01:00): 79, pid=91442, name=python3, "
              "GPU has fallen off the bus.",
              "s2wqxr68 kernel: [Thu Oct  2 06:53:49 2026] NVRM: Xid (PCI:0019:01:00): 45, pid=12, name=python3, Ch 7"]
    v = _verdict(tmp_path, {"ops-kernel-log.txt": export})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("s4kdxr71",)


def _mismatch(me: int, mine: int, other: int, theirs: int) -> str:
    opts = ("TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided "
            "(default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))")
    return (f"[rank{me}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running "
            f"collective: CollectiveFingerPrint(SequenceNumber=15987, OpType=_REDUCE_SCATTER_BASE, TensorShape=[{mine}]"
            f", {opts}, but Rank {other} is running collective: CollectiveFingerPrint(SequenceNumber=15987, "
            f"OpType=_REDUCE_SCATTER_BASE, TensorShape=[{theirs}], {opts}.")


def test_the_rank_whose_collective_fingerprint_differs_from_the_others_is_named(tmp_path):
    # rank 11 names rank 0 as its odd peer, the three others name rank 11: no rank is in every report
    out = [_mismatch(11, 268435456, 0, 301989888), *(_mismatch(r, 301989888, 11, 268435456) for r in (3, 9, 14))]
    v = _verdict(tmp_path, {"slurm-771204.out": out})
    assert v.culprit.ranks == (11,)


def test_fingerprints_split_evenly_name_nobody(tmp_path):
    out = [_mismatch(0, 4, 1, 8), _mismatch(1, 8, 0, 4)]
    v = _verdict(tmp_path, {"slurm-1.out": out})
    assert v.culprit.ranks == ()


def test_nccls_prefix_behind_a_ray_actors_names_the_host(tmp_path):
    out = [f"(WorkerDict pid=86940{g}) ml-a100-07:86940{g}:87021{g} [{g}] misc/shmutils.cc:72 NCCL WARN Error: failed "
           f"to extend /dev/shm/nccl-UmqSM{g} to 7340388 bytes" for g in range(2)]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("ml-a100-07",)


def test_a_rendezvous_host_that_does_not_resolve_is_the_resolving_hosts_network(tmp_path):
    gai = ("[W socket.cpp:401] [c10d] The IPv4 network addresses of (lab01, 51873) cannot be retrieved (gai error: -2 "
           "- Name or service not known).")
    v = _verdict(tmp_path, {"node-lab02-terminal.txt": ["ops@lab02:~$ torchrun --nnodes=2 train.py", gai,
                                                        "TimeoutError: The client socket has timed out after 1800s "
                                                        "while trying to connect to (lab01, 51873)."]})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("lab02",) and v.restartable is False


def test_a_rendezvous_address_that_is_a_path_is_the_launch_configs(tmp_path):
    gai = ("[W socket.cpp:697] [c10d] The IPv6 network addresses of (/root/envs/cu118.bashrc, 29500) cannot be "
           "retrieved (gai error: -3 - Temporary failure in name resolution).")
    v = _verdict(tmp_path, {"train.log": [gai]})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_amds_driver_on_a_failing_card_is_the_gpus_fault_not_the_hosts(tmp_path):
    kern = ["Oct 02 08:04:51 mx3-n12 kernel: amdgpu 0000:9f:00.0: {4}[Hardware Error]: Accelerator Check Architecture "
            "events logged", "Oct 02 08:04:51 mx3-n12 kernel: amdgpu 0000:9f:00.0: amdgpu: HBM 3 UE 1 (umc channel 14)",
            "Oct 02 08:05:07 mx3-n12 kernel: amdgpu 0000:9f:00.0: amdgpu: GPU Recovery Failed: -110"]
    v = _verdict(tmp_path, {"journal.txt": kern})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("mx3-n12",)


def test_slurms_older_memory_limit_kill_is_the_nodes_memory(tmp_path):
    out = ["mmvl.utils.distributed: Initialized Host gpu-q031 as Rank 0",
           "slurmstepd: error: Job 5519034 exceeded memory limit (169384386560 > 167772160000), being killed",
           "slurmstepd: error: Exceeded job memory limit",
           "slurmstepd: error: *** JOB 5519034 ON gpu-q031 CANCELLED AT 2020-10-02T10:42:17 ***"]
    v = _verdict(tmp_path, {"vlbert-5519034.out": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-q031",)


def test_open_mpis_remote_daemon_names_the_lost_node_and_a_banner_its_rank(tmp_path):
    out = ["[1,0]<stdout>:rank 0/2 on kws-hvd-worker-0", "[1,1]<stdout>:rank 1/2 on kws-hvd-worker-1",
           "[1,0]<stdout>:Epoch 1/40", "ORTE has lost communication with a remote daemon.", "",
           "  HNP daemon   : [[22931,0],0] on node kws-hvd-launcher",
           "  Remote daemon: [[22931,0],2] on node kws-hvd-worker-1", ""]
    v = _verdict(tmp_path, {"launcher.log": out})
    assert v.culprit.nodes == ("kws-hvd-worker-1",) and v.culprit.ranks == (1,)


def test_sacct_names_the_batch_host_whose_slurmd_lost_the_script(tmp_path):
    err = ["slurmstepd: error: execve(): /tmp/slurmd/job2997814/slurm_script: No such file or directory"]
    sacct = ["       JobID    JobName  Partition      State ExitCode        NodeList",
             "2997814        pf-train        gpu     FAILED      2:0      c[009,013]",
             "2997814.bat+      batch                FAILED      2:0            c009",
             "2997660.bat+      batch  COMPLETED            c011   1-03:12:40"]
    v = _verdict(tmp_path, {"error_2997814.err": err, "sacct.txt": sacct})
    assert v.culprit.nodes == ("c009",)


def test_a_one_process_job_started_at_a_prompt_is_that_hosts_rank_0(tmp_path):
    dmesg = ["[Thu Jan 25 14:10:22 2024] NVRM: Xid (PCI:0000:4f:00): 48, pid=1184420, name=python, An uncorrectable "
             "double bit error (DBE) has been detected on GPU in the framebuffer at partition 5, subpartition 1."]
    out = ["(lf) hsun@a100-ws02:~/LLaMA-Factory$ CUDA_VISIBLE_DEVICES=0 python src/train_bash.py --stage pt",
           "RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    v = _verdict(tmp_path, {"dmesg_T.txt": dmesg, "pt_run11.log": out})
    assert v.category is Category.GPU_HARDWARE
    assert v.culprit.nodes == ("a100-ws02",) and v.culprit.ranks == (0,)


def test_a_prompt_showing_the_last_exit_status_still_names_its_host(tmp_path):
    dmesg = ["[Sat Nov  9 03:41:52 2024] amdgpu 0000:9f:00.0: amdgpu: MES might be in unrecoverable state, issue a GPU "
             "reset"]
    out = ["Traceback (most recent call last):", "RuntimeError: HIP error: an illegal memory access was encountered",
           "(axolotl) 134 mlops@gpu-enc2-svr04:~/axolotl$"]
    v = _verdict(tmp_path, {"dmesg-T.txt": dmesg, "axolotl_train.log": out})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("gpu-enc2-svr04",)


def test_a_container_started_from_a_hosts_prompt_is_on_that_host(tmp_path):
    out = ["kira@dgx-lab-02:~/vdm$ docker run --gpus all --rm -it vdm:latest /bin/bash",
           "root@5e1b7c93a0d4:/workspace# torchrun --standalone --nproc_per_node 8 train.py",
           "5e1b7c93a0d4:71:311 [3] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-pZ3qLd to "
           "7340036 bytes, error: No space left on device (28)"]
    v = _verdict(tmp_path, {"terminal.log": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("dgx-lab-02",)


def test_newer_cudas_busy_devices_are_the_nodes(tmp_path):
    out = [f"{r}: RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable" for r in (8, 9)]
    out += ["srun: error: nid003817: tasks 8-9: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-1.out": out})
    assert v.category is Category.HOST and v.restartable is True


def test_oneccls_level_zero_failure_is_the_framework_on_the_rank_of_its_pid(tmp_path):
    out = ["[rank=17]: host=x1921c3s5b0n0 pid=97125 device=xpu:5",
           "[rank=4]: host=x1921c3s4b0n0 pid=118402 device=xpu:4",
           "2024:06:10-09:19:22:(97125) |CCL_ERROR| worker.cpp:338 ccl_worker_func: worker 0 caught internal "
           "exception: oneCCL: ze_call.cpp:28 do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists, "
           "code: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
           "terminate called after throwing an instance of 'ccl::v1::exception'"]
    v = _verdict(tmp_path, {"fsdp.o7731904": out})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (17,) and v.restartable is False


# Guards from the review of these rules: shapes where they blamed the wrong place.


def test_c10ds_ipv6_warning_on_a_cluster_without_ipv6_is_not_the_failure(tmp_path):
    out = ["[W socket.cpp:697] [c10d] The IPv6 network addresses of (gpu-a017, 29500) cannot be retrieved (gai error: "
           "-3 - Temporary failure in name resolution).", "step 200 loss 2.104",
           "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    v = _verdict(tmp_path, {"slurm-1.out": out})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (5,)


def test_a_login_nodes_prompt_that_submits_and_reads_the_log_is_not_where_the_job_ran(tmp_path):
    out = ["[alice@login01 ~]$ sbatch train.sbatch", "Submitted batch job 4242",
           "[alice@login01 ~]$ tail -n 6 slurm-4242.out",
           "RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    v = _verdict(tmp_path, {"session.txt": out})
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_a_launcher_of_several_processes_at_the_prompt_leaves_the_rank_open(tmp_path):
    out = ["(llm) alice@dgx-07:~/proj$ accelerate launch --multi_gpu --num_processes 8 train.py",
           "RuntimeError: CUDA error: unspecified launch failure", "(llm) alice@dgx-07:~/proj$ sudo dmesg -T",
           "[Tue Jun 11 10:03:12 2024] NVRM: Xid (PCI:0000:b7:00): 79, pid=412233, name=python, GPU has fallen off the "
           "bus."]
    v = _verdict(tmp_path, {"session.txt": out})
    assert v.culprit.nodes == ("dgx-07",) and v.culprit.ranks == ()


def test_sacct_without_a_nodelist_column_names_no_batch_host(tmp_path):
    out = ["slurmstepd: error: execve(): /var/spool/slurmd/job2998062/slurm_script: No such file or directory",
           "       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode",
           "2998062.bat+      batch               proj42          1     FAILED      2:0"]
    assert _verdict(tmp_path / "a", {"slurm.out": out}).culprit.nodes == ()
    out[1:] = ["       JobID    JobName    Account      State ExitCode        NodeList",
               "2998062.bat+      batch     proj42     FAILED      2:0        gpu-c004"]
    assert _verdict(tmp_path / "b", {"slurm.out": out}).culprit.nodes == ("gpu-c004",)


def test_amds_corrected_errors_do_not_outrank_the_applications_own(tmp_path):
    out = ["[rank3]: KeyError: 'lr_schedule'", "srun: error: mi300-n07: task 3: Exited with exit code 1"]
    dmesg = ["[Tue Jun 11 09:58:02 2024] amdgpu 0000:05:00.0: amdgpu: [Hardware Error]: Accelerator Check Architecture "
             "events logged", "[Tue Jun 11 09:58:02 2024] amdgpu 0000:05:00.0: amdgpu: socket: 0, die: 0, 1 new "
             "correctable hardware errors detected in umc block"]
    v = _verdict(tmp_path, {"slurm-31337.out": out, "dmesg-mi300-n07.txt": dmesg})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (3,)


def test_amdgpu_firmware_missing_is_the_nodes_install_not_its_cards(tmp_path):
    dmesg = [f"[Tue May 14 08:41:{19 + i} 2024] amdgpu 0000:{bus}:00.0: Direct firmware load for "
             "amdgpu/aldebaran_sos.bin failed with error -2" for i, bus in enumerate(("c1", "c9"))]
    dmesg += ["[Tue May 14 08:41:22 2024] amdgpu 0000:c1:00.0: amdgpu: Fatal error during GPU init"]
    v = _verdict(tmp_path, {"dmesg-mi-n04.txt": dmesg})
    assert v.category is Category.HOST and v.culprit.nodes == ("mi-n04",)


def test_a_logfmt_process_field_is_a_pid_not_a_rank(tmp_path):
    out = ['process=48213 host=gpu-n03 level=error msg="RuntimeError: CUDA error: uncorrectable ECC error encountered"']
    v = _verdict(tmp_path, {"train.log": out})
    assert 48213 not in v.culprit.ranks


def _bridge_run(advertisers: tuple[str, ...]) -> list[str]:
    out = [f"(ActorModelRayActor pid=99{i}, ip={a}) Init vllm process group: master_address=172.17.0.3, "
           "master_port=41229, world_size=3, backend=nccl" for i, a in enumerate(advertisers)]
    out += ["(LLMRayActor pid=8114, ip=10.0.3.22) init_process_group: master_address=172.17.0.3, master_port=41229, "
            "rank=1, world_size=3", "(LLMRayActor pid=8114, ip=10.0.3.22) [E311 09:46:45.204455910 socket.cpp:957] "
            "[c10d] The client socket has timed out after 1800s while trying to connect to (172.17.0.3, 41229)."]
    return out


def test_the_host_that_advertised_a_bridges_address_is_named_not_the_peer_that_dialled_it(tmp_path):
    v = _verdict(tmp_path, {"ray-job-driver.log": _bridge_run(("10.0.3.21",))})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("10.0.3.21",)


def test_two_hosts_advertising_a_bridges_address_name_neither(tmp_path):
    v = _verdict(tmp_path, {"ray-job-driver.log": _bridge_run(("10.0.3.21", "10.0.3.23"))})
    assert "10.0.3.21" not in v.culprit.nodes and "10.0.3.23" not in v.culprit.nodes
