"""Rules from rounds 82 and 83 of blind cases, and from the stamped corpus they were checked on: mp.spawn's SIGKILLed
process under a pasted dmesg, `hostname` and `--rank` at a prompt, Kubernetes naming a preemptor by uid, the task
srun's teardown did not find, ssh's options, a launcher naming the host, a one-node hang's host, the later of two
ranks, NCCL on the loopback interface or failing in its shared-memory transport, a DataLoader worker SIGKILLed, a
node's loss declared after its peers' link errors, a pod's label before torchrun's, and collector stamps before a
prompt or a host's lead."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_pasted_oom_kill_is_the_process_mp_spawn_saw_sigkilled(tmp_path):
    dmesg = ["[604113.882480] Out of memory: Killed process 1190273 (python) total-vm:147217648kB, anon-rss:67560916kB"]
    out = ["(fq) dev@tensor02:~/fsdp_qlora$ python train.py --world_size 2 --model_name meta-llama/Llama-2-70b-hf",
           "Traceback (most recent call last):",
           "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL"]
    v = _verdict(tmp_path, {"dmesg.txt": dmesg, "terminal.txt": out})
    assert v.category is Category.HOST and v.culprit.ranks == (0,)


def test_hostname_at_a_containers_prompt_names_its_node_and_rank_flag_its_rank(tmp_path):
    out = ["root@c7d1e0a94f22:/work/pbg# hostname", "pbg-node-c",
           "root@c7d1e0a94f22:/work/pbg# torchbiggraph_train --rank 2 configs/wikidata_dist.py",
           "RuntimeError: unable to mmap 1207959552 bytes from file </torch_218_19304>: Cannot allocate memory (12)",
           "Bus error (core dumped)", "root@c7d1e0a94f22:/work/pbg# df -h /dev/shm",
           "Filesystem      Size  Used Avail Use% Mounted on", "shm              64M   64M     0 100% /dev/shm"]
    v = _verdict(tmp_path, {"pbg-machine2.log": out})
    assert v.category is Category.HOST
    assert v.culprit.ranks == (2,) and v.culprit.nodes == ("pbg-node-c",)


def test_a_rank_flag_of_a_command_that_spawns_its_processes_is_the_nodes(tmp_path):
    out = ["root@gpu-a3:/workspace# python3 main.py -a resnet50 --dist-backend nccl --multiprocessing-distributed "
           "--world-size 2 --rank 1 /data", "RuntimeError: CUDA error: out of memory"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert 1 not in v.culprit.ranks


def test_kubernetes_naming_the_preemptor_by_uid_is_a_preemption(tmp_path):
    events = ["11m  Warning  Preempted  pod/k-7f3b0c21e0002  Preempted by pod 4e1a9c07-52bd-4f3e-8d61-b09a7c5e2f13 on "
              "node gke-a3-pool-2-6f1c9d0e-x7qk"]
    v = _verdict(tmp_path, {"kubectl-events.txt": events})
    assert v.category is Category.SCHEDULER


def _timed(t: str, text: str) -> str:
    return f"{t} | INFO | __main__:cli_evaluate:310 - {text}"


def test_the_task_srun_did_not_find_at_the_time_limit_had_left_the_others_waiting(tmp_path):
    out = [f"{r:2d}: " + _timed(f"2025-02-11 21:{3 + i:02d}:10.000", f"step {i}") for i in range(8) for r in (0, 5, 9)]
    out += [" 5: 2025-02-11 21:44:18.402 | ERROR    | __main__:cli_evaluate:421 - Error during evaluation: Image "
            "features and image tokens do not match",
            "slurmstepd: error: *** JOB 664190 ON gx-07 CANCELLED AT 2025-02-12T09:03:02 DUE TO TIME LIMIT ***",
            "srun: error: gx-08: tasks 8-15: Terminated", "srun: error: gx-07: tasks 0-4,6-7: Terminated"]
    v = _verdict(tmp_path, {"slurm-664190.out": out})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (5,)


def test_sshs_option_arguments_are_not_its_host(tmp_path):
    out = ["(ds) root@lab-node17:~/cifar# ssh -o PasswordAuthentication=no 10.20.4.17 hostname",
           "root@10.20.4.17: Permission denied (publickey,password)."]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.culprit.nodes == ("10.20.4.17",)


def test_a_launcher_naming_the_host_its_error_is_about_places_it(tmp_path):
    out = ["[2023-05-29 16:47:03,512] [INFO] [runner.py:454:main] Using IP address of 172.16.9.31 for node gn-a",
           "ValueError: No slot '2' specified on host 'gn-a'"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.category is Category.APPLICATION and v.culprit.nodes == ("gn-a",)


def _seven_timeouts_and_a_box(host: str, local: int) -> list[str]:
    """Ranks 1-7 time out in one collective; torchrun's box names rank 5 (its local rank `local`) on `host`."""
    box = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-03-04_06:30:44",
           f"  host      : {host}", f"  rank      : 5 (local_rank: {local})", "  exitcode  : -6 (pid: 123)"]
    return [f"[rank{r}]:[E304 06:30:41.{r}1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600071 milliseconds before timing out." for r in range(1, 8)] + box  # fmt: skip


def test_a_one_node_hangs_rank_is_on_the_jobs_one_host(tmp_path):
    out = _seven_timeouts_and_a_box("titan-cs-aus-231.reviz.ai2.in", 5)
    v = _verdict(tmp_path, {"job-logs.txt": out})
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (0,) and v.culprit.nodes == ("titan-cs-aus-231",)


def test_of_two_ranks_the_one_that_reported_only_its_peers_abort_was_late(tmp_path):
    a = ["[rank0]:[E416 21:19:02.884120553 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1638400, NumelOut=1638400, Timeout(ms)=600000) ran "
         "for 600071 milliseconds before timing out."]
    b = ["[rank1]:[E416 21:19:07.120448310 ProcessGroupNCCL.cpp:1955] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process "
         "group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network "
         "error, NCCL version 2.27.3",
         "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."]
    v = _verdict(tmp_path, {"spark-a_terminal.txt": a, "spark-b_terminal.txt": b})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (1,)


def test_nccl_on_the_loopback_interface_is_the_networks_set_up(tmp_path):
    out = [f"ctr-a{g}:221{g}:221{g} [{g}] NCCL INFO NET : Using interface lo:127.0.0.1<0>" for g in range(2)]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.category is Category.NETWORK and v.restartable is False


def test_nccl_failing_in_its_shared_memory_transport_is_its_own_crash(tmp_path):
    out = ["ip-10-20-4-22:18830:19254 [0] include/socket.h:390 NCCL WARN Net : Connection closed by remote peer",
           "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:272, unhandled system error",
           "ip-10-20-5-141:41874:42298 [3] include/shm.h:42 NCCL WARN Cuda failure 'invalid argument'"]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.category is Category.FRAMEWORK_CRASH


def test_a_dataloader_worker_sigkilled_is_the_oom_kill_whatever_the_stamps(tmp_path):
    out = ["2021-10-25T22:43:20.000Z 1: RuntimeError: DataLoader worker (pid 12847) is killed by signal: Killed.",
           "2021-10-25T22:43:20.000Z 1: RuntimeError: DataLoader worker (pid(s) 12847) exited unexpectedly"]
    dmesg = ["[Mon Oct 25 22:44:51 2021] Out of memory: Killed process 12847 (python) total-vm:39281640kB"]
    v = _verdict(tmp_path, {"slurm-5512.out": out, "cn-g14.dmesg": dmesg})
    assert v.category is Category.HOST


def test_a_nodes_loss_declared_after_its_peers_link_errors_is_the_cause(tmp_path):
    out = ["2024-11-02T07:35:30.000Z 3: gpu-d11:5120:5201 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
           "completion from peer 10.44.0.12<41021> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
           "srun: error: Node failure on gpu-d12",
           "slurmstepd: error: *** JOB 1209931 ON gpu-d09 CANCELLED AT 2024-11-02T07:39:40 DUE TO NODE FAILURE, "
           "SEE SLURMCTLD LOG FOR DETAILS ***"]
    v = _verdict(tmp_path, {"slurm-1209931.out": out})
    assert v.category is Category.HOST and "gpu-d12" in v.culprit.nodes


def test_a_pods_label_before_torchruns_keeps_nccls_own_rank(tmp_path):
    out = [f"[worker-1] [default{g}]:node1:{212 + g}:{540 + g} [{g}] NCCL INFO comm 0x5581a0c0 rank {8 + g} nranks "
           f"16 cudaDev {g} nvmlDev {g} busId {bus} commId 0x7c1e2d3f9a0b4411 - Init COMPLETE"
           for g, bus in enumerate(("18000", "2a000", "3a000", "5d000", "9a000", "a1000"))]
    dmesg = ["[Tue Apr  9 01:21:38 2024] NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has "
             "fallen off the bus."]
    v = _verdict(tmp_path, {"pod_logs.txt": out, "node1.dmesg-T.txt": dmesg})
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (13,)


def test_a_collectors_stamp_before_a_prompt_keeps_its_host(tmp_path):
    out = ["2025-01-24T18:23:11.000Z root@dgx-lab02:/workspace# df -h /dev/shm",
           "2025-01-24T18:23:11.000Z Filesystem      Size  Used Avail Use% Mounted on",
           "2025-01-24T18:23:11.000Z shm              64M   64M     0 100% /dev/shm",
           "2025-01-24T18:23:11.000Z Bus error (core dumped)"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.culprit.nodes == ("dgx-lab02",)


# Guards from the review of these rules: each shape below once made a new rule blame the wrong place.


def test_a_hosts_label_before_torchruns_is_the_lines_node_not_a_global_rank(tmp_path):
    out = ["[gpu-n04] torchrun node_rank=1: local ranks 0-7 -> global ranks 8-15",
           "[gpu-n03] torchrun node_rank=0: local ranks 0-7 -> global ranks 0-7",
           "[gpu-n04] [default3]:RuntimeError: CUDA error: an illegal memory access was encountered"]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.culprit.nodes == ("gpu-n04",)  # its local rank 3 stays unmapped: no box or command line gives its node's


def test_ssh_that_cannot_reach_a_host_is_no_refused_login(tmp_path):
    out = ["pdsh@gpu-n01: gpu-n02: ssh: connect to host gpu-n02 port 22: No route to host",
           "pdsh@gpu-n01: gpu-n02: ssh exited with exit code 255"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.category is not Category.APPLICATION


def test_a_login_scripts_permission_error_is_not_the_jobs_failure(tmp_path):
    out = ["/home/u/.bashrc: line 12: /opt/site/init.sh: Permission denied",
           "slurmstepd: error: Detected 1 oom_kill event in StepId=77.0. Some of the step tasks have been OOM Killed."]
    v = _verdict(tmp_path, {"slurm-77.out": out})
    assert v.category is Category.HOST


def test_nccl_on_loopback_in_a_one_host_job_is_no_cause(tmp_path):
    out = ["node7:2211:2211 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
           "srun: error: node7: task 0: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-9.out": out})
    assert v.category is not Category.NETWORK


def test_a_hang_in_a_job_whose_box_shows_a_second_node_names_no_host(tmp_path):
    v = _verdict(tmp_path, {"job-logs.txt": _seven_timeouts_and_a_box("nodeb-17", 1)})
    assert v.culprit.nodes == ()


def test_gpu_0_in_a_one_host_log_names_no_rank(tmp_path):
    node1 = [f"2020-09-13 19:01:47 | INFO | fairseq.distributed_utils | initialized host tn-gpu22 as rank {4 + i}"
             for i in range(4)] + ["RuntimeError: CUDA out of memory. Tried to allocate 1.13 GiB (GPU 0; 15.78 GiB "
                                   "total capacity)"]
    v = _verdict(tmp_path, {"train_node1.log": node1})
    assert v.culprit.ranks == ()


def test_a_launchers_rank_flag_at_a_prompt_names_no_rank(tmp_path):
    out = ["u@login-01:~$ mpirun -np 8 python train.py --rank 0", "RuntimeError: CUDA error: out of memory"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.culprit.ranks == () and "login-01" not in v.culprit.nodes


def test_task_0_left_out_of_the_teardown_is_not_named(tmp_path):
    out = [f"{r:2d}: " + _timed(f"2025-02-11 21:{3 + i:02d}:10.000", f"step {i}") for i in range(8) for r in (0, 5, 9)]
    out += ["slurmstepd: error: *** JOB 664190 ON gx-07 CANCELLED AT 2025-02-12T09:03:02 DUE TO TIME LIMIT ***",
            "srun: error: gx-08: tasks 8-15: Terminated", "srun: error: gx-07: tasks 1-7: Terminated"]
    v = _verdict(tmp_path, {"slurm-664190.out": out})
    assert v.culprit.ranks in ((), (0,)) and v.category is Category.DISTRIBUTED_HANG
