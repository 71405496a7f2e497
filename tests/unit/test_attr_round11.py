"""Round 11's rules, one small case each: environment listings under a shell prompt, a start-up line's rank
and pid, the job's nodelist, teardown on every node, NaN beyond one node, an Xid's PCI bus, the one rank a
launcher saw end on a faulted node, srun labels that are torchrun node ranks, Slurm's node names for cloud
host names, and torchrun's `--log-dir` layout."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_WD = ("[rank{r}]:[E1202 02:31:25.9 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum=20418, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=1800000) ran for "
       "1800044 milliseconds before timing out.")


def test_an_environment_listing_under_a_prompt_places_the_silent_rank(tmp_path):
    out = ["nodes: gpu-k[01-02]", *(_WD.format(r=r) for r in range(8) if r != 5)]
    paste = ["(venv) [alee@gpu-k02 ~]$ tr '\\0' '\\n' < /proc/77134/environ | grep -E '^(RANK|LOCAL_RANK)='",
             "LOCAL_RANK=1", "RANK=5", "(venv) [alee@gpu-k02 ~]$ py-spy dump --pid 77134",
             "Process 77134: python -u train.py"]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": out, "py-spy.txt": paste})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((5,), ("gpu-k02",))


def test_a_start_up_lines_pid_names_the_oom_victims_global_rank_and_the_nodelist_other_nodes(tmp_path):
    out = ["Running on gpu-f[01-04]; MASTER=gpu-f01:29400",
           *(f"| distributed init (rank {r}): env://, gpu {r % 4}, pid {1843371 + r}" for r in range(8)),
           "E0521 16:58:41.733000 1843359 torch/distributed/elastic/multiprocessing/api.py:869] failed "
           "(exitcode: -9) local_rank: 2 (pid: 1843377) of binary: /usr/bin/python"]
    dmesg = ["[u1203@gpu-f02 ~]$ dmesg -T | tail -n 40",
             "[Tue May 21 16:58:38 2024] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
             "mems_allowed=0-1,global_oom,task=python,pid=1843377,uid=1203",
             "[Tue May 21 16:58:38 2024] Out of memory: Killed process 1843377 (python) total-vm:264051508kB"]
    v = analyze_run(write_run(tmp_path, {"slurm-2.out": out, "dmesg_f02.txt": dmesg})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((6,), ("gpu-f02",))
    assert v.restartable  # the job's other nodes (its nodelist) ran the same work: that node's memory


def test_teardown_that_ends_every_node_alike_names_no_one(tmp_path):
    out = ["gpu-x01:901774:902101 [0] NCCL INFO comm 0x55 rank 0 nranks 12 cudaDev 0 busId 31000 - Init COMPLETE",
           "srun: error: gpu-x01: task 0: Killed", "srun: error: gpu-x02: task 1: Killed",
           "srun: error: gpu-x03: task 2: Killed"]
    v = analyze_run(write_run(tmp_path, {"slurm-3.out": out})).verdict
    assert v.category is Category.UNKNOWN and (v.culprit.ranks, v.culprit.nodes) == ((), ())


def test_numerical_errors_on_more_ranks_than_one_node_holds_name_no_one(tmp_path):
    err = "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
    box = ["Failures:", "[1]:", "  time      : 2024-04-22_10:48:11", "  host      : gpu-g03",
           "  rank      : 1 (local_rank: 1)", "  exitcode  : 1 (pid: 47750)", "Root Cause (first observed failure):",
           "[0]:", "  time      : 2024-04-22_10:48:10", "  host      : gpu-g03", "  rank      : 0 (local_rank: 0)",
           "  exitcode  : 1 (pid: 47749)"]
    out = [*(f"[rank{r}]: {err}" for r in (0, 1, 3, 4, 6, 8, 9, 11, 13, 14)), "[rank15]: step 10 loss 2.0", *box,
           "srun: error: gpu-g03: task 0: Exited with exit code 1",
           "srun: error: gpu-g07: task 1: Exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"slurm-4.out": out})).verdict
    assert v.category is Category.NUMERICAL and (v.culprit.ranks, v.culprit.nodes) == ((), ())


def test_an_xids_pci_bus_names_the_rank_nccl_put_on_that_bus_on_that_host(tmp_path):
    init = "{h}:5123{r}:51814 [5] NCCL INFO comm 0x55e8 rank {r} nranks 16 cudaDev 5 busId {b} - Init COMPLETE"
    out = [init.format(h="gpu-b12", r=5, b="ab000"), init.format(h="gpu-b14", r=13, b="ab000"),
           init.format(h="gpu-b14", r=12, b="9b000")]
    journal = ["Nov 19 03:13:59 gpu-b14 kernel: NVRM: Xid (PCI:0000:ab:00): 79, pid='<unknown>', name=<unknown>, "
               "GPU has fallen off the bus."]
    v = analyze_run(write_run(tmp_path, {"slurm-5.out": out, "journalctl-k-gpu-b14.txt": journal})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (13,) and v.culprit.nodes == ("gpu-b14",)


def test_a_gpu_fault_with_no_rank_names_the_one_rank_a_launcher_saw_end_on_its_node(tmp_path):
    mapping = ("gpu-c05: [INFO] [launch.py:163:main] global_rank_mapping=defaultdict(<class 'list'>, "
               "{'gpu-c05': [0, 1, 2, 3], 'gpu-c06': [4, 5, 6, 7]})")
    ds = ["gpu-c06: RuntimeError: CUDA error: uncorrectable ECC error encountered",
          "gpu-c06: [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=3'] exits "
          "with return code = 1", mapping]
    v = analyze_run(write_run(tmp_path, {"ds.log": ds})).verdict
    # `--local_rank=3` is the node's last child, whose command DeepSpeed prints whichever child ended (round 23)
    assert v.category is Category.GPU_HARDWARE and (v.culprit.ranks, v.culprit.nodes) == ((), ("gpu-c06",))


def test_srun_labels_that_are_torchrun_node_ranks_make_a_crashed_local_rank_global(tmp_path):
    nccl = "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."
    out = ["==> srun -l --ntasks-per-node=1 torchrun --nnodes=4 --nproc-per-node=8 -m train",
           f"0: [rank6]:{nccl}", f"1: [rank13]:{nccl}", f"3: [rank30]:{nccl}",
           "2: Fatal Python error: Segmentation fault",
           "2: E0509 14:41:21.44 40380 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -11) "
           "local_rank: 6 (pid: 40417) of binary: /usr/bin/python",
           "srun: error: gpu-s03: task 2: Exited with exit code 1", "srun: error: gpu-s01: task 0: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-6.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and (v.culprit.ranks, v.culprit.nodes) == ((22,), ("gpu-s03",))


def test_a_cloud_host_name_is_reported_under_its_slurm_node_name(tmp_path):
    listing = ["$ scontrol show node gpu-st-p5-[1-2]", "NodeName=gpu-st-p5-1 Arch=x86_64",
               "   NodeAddr=10.1.33.207 NodeHostName=ip-10-1-33-207", "NodeName=gpu-st-p5-2 Arch=x86_64",
               "   NodeAddr=10.1.45.12 NodeHostName=ip-10-1-45-12"]
    journal = ["Mar 14 02:51:07 ip-10-1-45-12 kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, "
               "GPU has fallen off the bus."]
    v = analyze_run(write_run(tmp_path, {"nodes.txt": listing, "ip-10-1-45-12.kern.log": journal})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("gpu-st-p5-2",)


def test_a_file_under_torchruns_log_dir_takes_the_rank_its_command_line_gives(tmp_path):
    out = ["gpu-j04: NODE_RANK=0 torchrun --nnodes 2 --nproc_per_node 4 --log-dir logs/gpu-j04 --redirects 3",
           "gpu-j06: NODE_RANK=1 torchrun --nnodes 2 --nproc_per_node 4 --log-dir logs/gpu-j06 --redirects 3"]
    err = ["Traceback (most recent call last):", '  File "/w/train.py", line 9, in <module>', "KeyError: 'yue'"]
    run = write_run(tmp_path, {"slurm-7.out": out, "logs/gpu-j06/55120_k3xq/attempt_0/3/stderr.log": err})
    v = analyze_run(run).verdict
    assert v.category is Category.APPLICATION and (v.culprit.ranks, v.culprit.nodes) == ((7,), ("gpu-j06",))
