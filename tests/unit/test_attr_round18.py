"""Round 18's rules, one small case each: Open MPI's own lines (`mpirun noticed ...`, `[host:pid]`, `-H`),
the C++ runtime's aborts, a pasted `sacct` row, srun's failed `execve()`, an OOM kill's rank from the one task
that exited with a code there, and a port a pasted `ibdev2netdev` shows down."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_mpiruns_report_of_a_sigkilled_rank_names_the_kernels_oom_victim_on_a_node_of_several(tmp_path):
    out = ["mpirun -np 8 -H gpu-c01:4,gpu-c02:4 -bind-to none -map-by slot python train.py",
           "mpirun noticed that process rank 1 with PID 0 on node gpu-c01 exited on signal 9 (Killed)."]
    dmesg = ["[Tue Dec  6 15:17:39 2022] Out of memory: Killed process 118398 (python) total-vm:86308480kB, "
             "anon-rss:80123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:170000kB oom_score_adj:0"]
    v = analyze_run(write_run(tmp_path, {"slurm-773312.out": out, "gpu-c01.dmesg": dmesg})).verdict
    assert v.category is Category.HOST and v.restartable  # one node of two: that node's memory
    assert (v.culprit.ranks, v.culprit.nodes) == ((1,), ("gpu-c01",))


def test_open_mpis_own_crash_lines_name_the_host_and_mpirun_the_rank(tmp_path):
    out = ["[h06c0901:07661] *** Process received signal ***", "[h06c0901:07661] Signal: Segmentation fault (11)",
           "mpirun noticed that process rank 0 with PID 7661 on node h06c0901 exited on signal 11 (Segmentation "
           "fault)."]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-2718830.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH
    assert (v.culprit.ranks, v.culprit.nodes) == ((0,), ("h06c0901",))


def test_the_cxx_runtimes_own_abort_is_a_framework_crash(tmp_path):
    out = ["[rank0]: pure virtual method called", "[rank0]: terminate called without an active exception"]
    v = analyze_run(write_run(tmp_path, {"train.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (0,)


def test_a_pasted_sacct_row_gives_the_jobs_state(tmp_path):
    out = ["slurmstepd: error: *** STEP 4714782.0 ON ib12gpu-001 CANCELLED AT 2023-11-29T15:47:21 ***"]
    sacct = ["JobID             State               Start                 End        NodeList",
             "4714782       PREEMPTED 2023-11-28T09:12:05 2023-11-29T15:47:21 ib12gpu-[001-002]",
             "4714782.0     CANCELLED 2023-11-28T09:12:11 2023-11-29T15:47:52 ib12gpu-[001-002]"]
    v = analyze_run(write_run(tmp_path, {"slurm-4714782.out": out, "sacct-4714782.txt": sacct})).verdict
    assert v.category is Category.SCHEDULER and v.restartable


def test_a_program_srun_cannot_start_is_the_applications(tmp_path):
    out = ["slurmstepd: error: execve(): accelerate: No such file or directory",
           "srun: error: cdr2601: task 1: Exited with exit code 2",
           "slurmstepd: error: *** STEP 19389846.0 ON cdr2550 CANCELLED AT 2023-11-27T16:36:09 ***",
           "srun: error: cdr2550: task 0: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-19389846.out": out})).verdict
    assert v.category is Category.APPLICATION and not v.restartable
    assert v.culprit.nodes == ("cdr2601",)


def test_an_oom_kill_of_a_dataloader_worker_names_the_one_task_that_exited_there(tmp_path):
    out = ["RuntimeError: DataLoader worker (pid 48211) is killed by signal: Killed.",
           "srun: error: node-1: task 11: Exited with exit code 1",
           "srun: error: node-0: tasks 0-7: Terminated", "srun: error: node-1: tasks 8-10,12-15: Terminated"]
    dmesg = ["[Mon Jan  6 09:58:12 2025] Out of memory: Killed process 48211 (pt_data_worker) total-vm:232879768kB, "
             "anon-rss:1000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:140000kB oom_score_adj:0"]
    v = analyze_run(write_run(tmp_path, {"slurm-4471.out": out, "node-1.dmesg": dmesg})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((11,), ("node-1",))


def test_when_no_peer_stands_out_the_host_whose_port_is_down_is_named(tmp_path):
    out = ["gpu-r01:22883:23094 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
           "172.30.8.22<41877> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:172.30.8.11",
           "gpu-r02:31553:31741 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
           "172.30.8.11<52011> with status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:172.30.8.22"]
    ports = {f"ibdev2netdev_gpu-r0{n}.txt": [f"[user@gpu-r0{n} ~]$ ibdev2netdev",
                                            "mlx5_2 port 1 ==> ens110np0 (Up)",
                                            f"mlx5_3 port 1 ==> ens111np0 ({'Down' if n == 2 else 'Up'})"]
             for n in (1, 2)}  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-51207.out": out, **ports})).verdict
    assert v.category is Category.NETWORK
    assert (v.culprit.ranks, v.culprit.nodes) == ((), ("gpu-r02",))
