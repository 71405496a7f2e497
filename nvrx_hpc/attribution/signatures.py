"""The signature catalog: known failure lines as data (category, role, pattern, what to extract).

Each `Signature` matches one log line. Named groups in `pattern` are extracted: `rank`, `node` and `gpu`
localise the hit; every other group lands in `Hit.fields` and may be used in `summary`. `anchors` are
literal strings, one of which every matching line contains: fast engines look for them first, and a
unit test checks them against each signature's `examples`.

Order matters: a line is classified by the first signature (in this order) that matches it, so the
specific shapes come before the general ones (a `found NaN` assertion before any exception).
"""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature
from nvrx_hpc.attribution.signatures_hang import HANG
from nvrx_hpc.attribution.signatures_localising import LOCALISING
from nvrx_hpc.attribution.signatures_native import NATIVE
from nvrx_hpc.attribution.signatures_network import NETWORK
from nvrx_hpc.attribution.signatures_node import NODE
from nvrx_hpc.attribution.signatures_scheduler import SCHEDULER
from nvrx_hpc.attribution.signatures_teardown import TEARDOWN

__all__ = ["Signature", "CATALOG", "catalog_by_id", "XID_HARDWARE", "XID_APPLICATION",
           "VICTIM_SIGNATURES"]

# Xids that mean the GPU (or its link) is bad, and those that are usually the application's doing.
XID_HARDWARE = (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140, 154)
XID_APPLICATION = (13, 31, 43, 45)

_G, _N, _H, _S = Category.GPU_HARDWARE, Category.NETWORK, Category.HOST, Category.SCHEDULER
_A, _M, _F, _D = Category.APPLICATION, Category.NUMERICAL, Category.FRAMEWORK_CRASH, Category.DISTRIBUTED_HANG
_ROOT, _WEAK, _CASC, _CTX = Role.ROOT, Role.WEAK, Role.CASCADE, Role.CONTEXT


def _xids(codes: tuple[int, ...]) -> str:
    return "|".join(str(c) for c in sorted(codes, reverse=True))


_XID_HEAD = r"NVRM: Xid \((?:PCI:)?(?P<gpu>[0-9A-Fa-f:.]+)\): "

CATALOG: tuple[Signature, ...] = NATIVE + (
    # ---- GPU hardware -------------------------------------------------------------------------
    Signature(
        "xid_hardware", _G, _ROOT, _XID_HEAD + rf"(?P<xid>{_xids(XID_HARDWARE)})\b(?P<rest>.*)",
        ("Xid",), True, "Xid {xid} (GPU hardware) on GPU {gpu}",
        ("[ 123.456] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",),
    ),
    Signature(
        "ecc_uncorrectable", _G, _ROOT,
        r"(?:uncorrectable ECC error|double[- ]bit ECC|ECC error encountered|Uncorrectable ECC|DBE error)",
        ("ECC", "DBE"), True, "uncorrectable ECC error",
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered",),
    ),
    Signature(
        "gpu_lost", _G, _ROOT,
        r"(?:fallen off the bus|GPU is lost|Unable to determine the device handle for GPU ?"
        r"(?P<gpu>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)?|"
        r"CUDA driver error: unknown error|no CUDA-capable device is detected)",
        ("fallen off", "GPU is lost", "device handle", "CUDA driver error", "CUDA-capable"), True,
        "GPU lost or unreachable", ("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.",),
    ),
    Signature(
        "nvlink_error", _G, _ROOT,
        r"(?:NVLink[^\n]{0,60}?(?:error|down|fatal|uncorrectable|recovery failed)|"
        r"Invalid access of peer GPU memory over nvlink|CUDA_ERROR_CONTAINED)",  # cudaErrorContained (round 37)
        ("NVLink", "nvlink", "CUDA_ERROR_CONTAINED"), True, "NVLink error",
        ("NVLink: fatal error detected on link 3",
         "torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error"),
    ),
) + NETWORK + NODE + (
    # ---- host -----------------------------------------------------------------------------------
    Signature(
        "linux_oom_kill", _H, _ROOT,
        # kernels before 4.19 say `Out of memory: Kill process N (python) score 247 or sacrifice child` (round 63b)
        r"(?:(?:(?P<memcg>Memory cgroup) out of memory|(?P<whole>Out) of memory): Kill(?:ed)? process (?P<pid>\d+) "
        r"\((?P<proc>[^)]*)\)|oom-kill:constraint=(?P<constraint>\w+)[^\n]*?,pid=(?P<pid2>\d+)|"
        r"(?P<memcg_limit>Task in /\S+ killed as a result of limit))",
        ("Killed process", "Kill process", "oom-kill:", "killed as a result of limit"), False,
        "Linux OOM killer killed a process",
        ("Out of memory: Killed process 4242 (python) total-vm:9000kB, anon-rss:8000kB",
         "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),oom_memcg=/slurm/uid_1/job_4/step_0/task_3,"
         "task=python,pid=8812,uid=1"),
    ),
    Signature(  # the kernel's OOM killer found nothing it may kill (every process of the cgroup is exempt,
        # oom_score_adj -1000): the allocation stalls, and so does the job on that node until something ends it (101f)
        "oom_no_killable", _H, _ROOT, r"Out of memory and no killable processes",
        ("no killable processes",), False, "the kernel ran out of memory and found no process it could kill",
        ("[845472.118863] Out of memory and no killable processes...",),
    ),
    Signature(  # the kernel gave up: the node went down with every process on it, a node lost (round 99e: a kdump's
        # vmcore-dmesg the only trace, the other node's ranks timing out on it)
        "kernel_panic", _H, _ROOT, r"Kernel panic - not syncing", ("Kernel panic",), True,
        "the host's kernel panicked: the node went down",
        ("[1212325.028009] Kernel panic - not syncing: Fatal exception",),
    ),
    Signature(
        "host_kernel_fault", _H, _ROOT,
        r"(?:BUG: soft lockup|(?:task (?P<proc>[^\s:]+):(?P<pid>\d+) )?blocked for more than \d+ seconds|"
        r"nfs: server (?P<server>\S+) not responding|"
        r"Machine check events logged|\[Hardware Error\]|EDAC MC\d+: \d+ UE |EXT4-fs error|"
        r"XFS \(\S+\): (?:Corruption|metadata I/O error)|Buffer I/O error|Kernel panic)",
        ("soft lockup", "blocked for more than", "not responding", "Machine check", "Hardware Error", " UE ",
         "EXT4-fs error", "XFS (", "Buffer I/O error", "Kernel panic"),
        True, "the host's kernel reported a hardware, storage or lockup fault",
        ("Apr 21 11:05:13 c12 kernel: INFO: task python:51234 blocked for more than 122 seconds.",
         "[Wed Aug  7 03:18:40 2024] mce: [Hardware Error]: Machine check events logged"),
    ),
    Signature(  # `last -x`: sessions cut by a crash, not a shutdown: the host went down under the job (round 76b)
        "host_crashed", _H, _ROOT, r"^[a-z_][\w.-]*\s+(?:pts/\d+|tty\w*|:\d+)\s.*\s- crash\s+\(\d",
        ("- crash",), True, "the host went down without a shutdown (a crash or a power loss)",
        ("ali      pts/1        10.30.1.77       Thu Mar  9 11:45 - crash  (00:03)",),
    ),
    Signature(  # context: the kernel says the server answers again (see localise.drop_recovered)
        "nfs_recovered", _H, _CTX, r"nfs: server (?P<server>\S+) OK\b", ("nfs: server",), None,
        "the NFS server answers again",
        ("Mar 14 01:58:03 gpu-b07 kernel: nfs: server fs01-ib OK",),
    ),
    Signature(  # the NIC's health poll missed, then recovered: transient (round 12)
        "nic_recovered", _N, _CTX,
        r"mlx5_core (?P<device>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d)[^\n]*(?:health recovered|back to normal)",
        ("health recovered", "back to normal"), None, "the network device recovered",
        ("Mar 03 17:33:41 hgx-b02 kernel: mlx5_core 0000:1a:00.0: poll_health:835:(pid 0): health recovered",),
    ),
    Signature(
        "slurm_oom_kill", _H, _ROOT,
        r"(?:Detected (?P<count>\d+) oom[-_]kill event|Some of the step tasks have been OOM Killed|"
        # the accounting plugin's older kill, before cgroups enforced memory (round 85c)
        r"(?:Job|Step) [\d.]+ exceeded memory limit \(\d+ > \d+\), being killed|"
        r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): Out Of Memory)",
        ("oom_kill", "oom-kill", "OOM Killed", "Out Of Memory", "exceeded memory limit"), False,
        "Slurm killed tasks for their memory (its cgroup OOM killer or the job's memory limit)",
        ("slurmstepd: error: Detected 1 oom_kill event in StepId=11.0. Some of the step tasks have been OOM Killed.",
         "slurmstepd: error: Job 5519034 exceeded memory limit (169384386560 > 167772160000), being killed"),
    ),
    Signature(  # context: which node Slurm lost, when its node-failure line names only a survivor (lost_node.py)
        "slurm_node_not_responding", _H, _CTX,
        r"(?:^Not responding\s+\S+\s+\S+\s+(?P<node>[A-Za-z][\w.\[\],-]*)\s*$|"
        r"\bNodes? (?P<failed>[A-Za-z][\w.\[\],-]*) not responding|"
        r"NodeName=(?P<host>[A-Za-z][\w.-]*)\s[^\n]*\bState=\S*NOT_RESPONDING)",
        ("Not responding", "not responding", "NOT_RESPONDING"), None, "Slurm: node {node} not responding",
        ("Not responding       slurm     2024-09-02T18:03:41 gpu-c-106",
         "slurmctld: error: Nodes gpu-c-106 not responding"),
    ),
    Signature(
        "node_failure", _H, _ROOT,
        r"(?:\*\*\* (?:JOB|STEP) [\d.]+\w* ON (?P<survivor>\S+) CANCELLED AT \S+ DUE TO NODE FAILURE|"
        # salloc's own (round 77d); Flux's job exception and its broker's word on the node it lost (round 88d)
        r"(?:(?:srun|salloc|sbatch): error: Node failure on |\btype=node-failure\b[^\n]*\bnode failure on |"
        r"\bbroker\.err\[\d+\]: (?=[A-Za-z][\w-]* \(rank \d+\) has disconnected unexpectedly, marking it LOST))"
        r"(?P<failed>[\w.-]+)|"
        r"[Jj]ob (?:was|has been) (?:preempted|requeued|killed|aborted) due to node failure)",  # PBS's mail (71a)
        ("NODE FAILURE", "Node failure", "due to node failure", "node-failure", "marking it LOST"), True,
        "the scheduler (Slurm, PBS, Flux) reported a node failure",
        ("srun: error: Node failure on n3", "salloc: error: Node failure on worker-6",
         "1296.552s: job.exception type=node-failure severity=0 node failure on pinyon103 (shell rank 2)",
         "Mar 11 02:41:51.208366 broker.err[0]: pinyon103 (rank 2) has disconnected unexpectedly, marking it LOST"),
    ),
    Signature(  # the kubelet's graceful node shutdown (a cloud VM taken back or maintained): the node went away
        "k8s_node_shutdown", _H, _ROOT, r"Pod was terminated in response to imminent node shutdown",
        ("imminent node shutdown",), True, "Kubernetes: the pod's node was shut down",
        ("97m  Warning  NodeShutdown  pod/job-worker-1  Pod was terminated in response to imminent node shutdown.",),
    ),
    Signature(  # Ray's GCS lost a node's raylet: the node crashed, hung or fell off the network (Ray 1.x: `and ip:`)
        "ray_node_dead", _H, _ROOT,
        r"The node with node id: \w+ and (?:address|ip): (?P<failed>[\w.:-]+)(?: and node name: \S+)? has been marked "
        r"dead because the detector has missed too many heartbeats",
        ("has been marked dead",), True, "Ray lost a node (it missed too many heartbeats)",
        ("2024-04-11 15:10:16,464\tWARNING worker.py:2037 -- The node with node id: 5c7a1e0f and address: "
         "10.8.2.33 and node name: 10.8.2.33 has been marked dead because the detector has missed too many "
         "heartbeats from it.",),
    ),
    Signature(  # Ray's memory monitor killed a worker: the node's host memory ran low (round 29); not CUDA's OOM
        "ray_memory_oom", _H, _ROOT,
        r"(?:Workers \(tasks / actors\) killed due to memory pressure \(OOM\)"
        r"(?:[^\n]*?\bat node \(ID: \w+, IP: (?P<ray_ip>[\d.]+)\))?|"  # the raylet's own node (round 30)
        r"Task was killed due to the node running low on memory)",
        ("memory pressure", "running low on memory"), False, "Ray killed a worker: its node ran low on memory",
        ("(raylet, ip=10.40.2.12) [2025-05-14 15:52:26,703 E 2286951 2286951] (raylet) node_manager.cc:3069: 1 Workers "
         "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reason",
         "(raylet) [2025-10-11 23:27:14,561 E 2981 2981] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
         "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: ba65c80c8a, "
         "IP: 10.1.180.84) over the last time period."),
    ),
    Signature(  # Ray's OutOfMemoryError goes on to name the node and the task it killed: its pid is a rank's
        "ray_memory_oom_task", _H, _ROOT,
        r"Memory on the node \(IP: (?P<ray_ip>[\d.]+), ID: \w+\) where the task \([^\n]*?\bpid=(?P<pid>\d+)",
        ("Memory on the node",), False, "Ray killed a task: its node ran low on memory",
        ("Memory on the node (IP: 10.4.212.37, ID: 5d2e19cf) where the task (task ID: 8f0a3c1b, name=head, rank=0,, "
         "pid=4503, memory used=0.09GB) was running was 1908.61GB / 2003.52GB (0.952628)",),
    ),
    Signature(  # Determined's master lost an agent, the node it runs on (round 28); its id is the node's name
        "determined_agent_lost", _H, _ROOT,
        r"agent (?:crashed|did not reconnect within the reconnect period)[^\n]*?\bid=\"(?P<failed>[\w.-]+)\"|"
        # the master's logfmt (round 45): `msg="agent closed with allocated containers" agent-id=gpu-a14`
        r"msg=\"agent (?:failed to reconnect within timeout|closed with allocated containers)[^\"]*\"[^\n]*?"
        r"\bagent-id=(?P<node>[\w.-]+)",
        ("agent crashed", "did not reconnect", "failed to reconnect", "closed with allocated"), True,
        "Determined lost the agent of a node",
        ('<error>   [2023-01-10, 01:17:38] agent crashed  address="10.30.4.16" error="agent closed with allocated '
         'containers" id="gpu-worker-06" resource-pool="gpu-pool" system="master" type="agent"',),
    ),
    Signature(
        "disk_full", _H, _ROOT, r"(?:No space left on device|Disk quota exceeded)",
        ("No space left", "quota exceeded"), False, "disk full or quota exceeded",
        ("OSError: [Errno 28] No space left on device: '/ckpt/step-100'",),
    ),
    # ---- scheduler: signatures_scheduler.py ----------------------------------------------------------
) + SCHEDULER + (
    # ---- numerical (before any exception: the assertion that carries it is not the point) ---------
    Signature(
        "nan_loss", _M, _ROOT,
        r"(?:(?<!best_)(?<!best_train_)(?<!best_valid_)"  # a best-so-far loss starts at inf (round 92h)
        r"(?:loss|grad[ _]norm|Loss)[^\n|]{0,24}?(?::\s+|=)(?:nan|-?inf)\b|[Ll]oss (?:is )?(?:NaN|nan|Inf|inf)\b|"
        r"found (?:NaN|Inf) in|Unexpected result (?:nan|inf)(?: on rank (?P<culprit>\d+))?|"  # Inf too (91h)
        r"non-finite (?:loss|gradient|value)|"
        r"[Ll]oss became (?:NaN|nan|inf|Inf)|"
        r"returned nan values|= (?:nan|-?inf) is not finite|loss scale already at minimum|gradient scale is too small|"
        r"[Mm]inimum loss scale reached|[Tt]raining has diverged|\bNaN detected\b|"  # dinov2's check (round 53a)
        r"\b(?:nan|NaN|inf|Inf) loss (?:encountered|detected)|"  # OLMo's `ValueError: nan loss encountered` (57b)
        r"Found NaN, decreased lg_loss_scale|^\|\s*(?:loss|grad_norm)\s*\|\s*nan\s*\||"  # guided-diffusion's (93h)
        r"reducing loss scale to (?:0\.0\b|[\d.]+e-\d\d)|"  # apex's scale gone to nothing (round 52a)
        r"\(jitter = [\d.]+\)\s+(?:nan|-?inf)\b|"  # tf_cnn_benchmarks' loss column (Horovod's, round 45)
        r"probability tensor contains either `?inf`?, `?nan`? or element < 0|"  # sampling from NaN logits (61b)
        r"Skipping backward and optimizer step for nan or inf|"  # one rank skipped its step (78b): others wait
        r"matrix contains invalid numeric entries)",  # scipy's Hungarian matching on a NaN cost (DETR heads, 99h)
        (": nan", "=nan", ": inf", "=inf", ": -inf", "=-inf", "NaN", "Loss is", "result nan", "result inf", "found Inf",
         "non-finite", "became", "returned nan", "not finite", "at minimum", "scale reached", "has diverged",
         "loss nan", "loss inf", "  nan", "scale is too small", "jitter = ", "loss scale to", "nan loss", "NaN loss",
         "inf loss", "Inf loss", "lg_loss_scale", "| nan", "probability tensor", "loss is nan", "loss is inf",
         "step for nan or inf", "invalid numeric entries"),
        # torchtitan pads its metrics: `loss:     nan` (round 42), hence "  nan"
        False, "loss or gradients became NaN/Inf",
        (" iteration 120/1000 | lm loss: nan | grad norm: nan |",
         "AssertionError: Rank 13: found NaN in local grad norm in backward pass. Device: 5, node: node-15-11"),
    ),
    # ---- application ----------------------------------------------------------------------------
    Signature(
        "cuda_oom", _A, _ROOT,
        r"(?:CUDA out of memory|(?<!ray\.exceptions\.)OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED)"
        r"(?:[^\n]*?(?:\(GPU|GPU) (?P<gpu>\d+)"
        r"(?: has|;))?",
        ("out of memory", "OutOfMemoryError", "ALLOC_FAILED"), False, "CUDA out of memory",
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity",),
    ),
    Signature(
        "cuda_app_error", _A, _ROOT,
        r"CUDA error: (?P<what>device-side assert triggered|misaligned address|invalid device ordinal|"
        r"invalid argument)",
        ("CUDA error",), False, "CUDA error: {what}",
        ("RuntimeError: CUDA error: device-side assert triggered",),
    ),
    Signature(  # a kernel read or wrote outside its memory: a library's kernel as often as the user's (the writers'
        # labels, round 43); an Xid 13/31 beside it names the application (verdict's application rule)
        "cuda_illegal_access", _F, _ROOT,
        r"(?:CUDA error|Error \[CUDA\]): (?P<what>an illegal memory access was encountered)",  # Triton's too
        ("CUDA error", "Error [CUDA]"), None, "CUDA error: {what}",
        ("RuntimeError: CUDA error: an illegal memory access was encountered",),
    ),
    Signature(  # the device aborted a kernel: a GPU fault (an Xid beside it says so) or a kernel bug
        "cuda_launch_failure", _F, _ROOT,
        r"CUDA error: (?P<what>unspecified launch failure|an illegal instruction was encountered|"
        r"launch timed out and was terminated)",
        ("CUDA error",), True, "CUDA error: {what}",
        ("[rank5]:[E314 02:14:42.118 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 5] Process group "
         "watchdog thread terminated with exception: CUDA error: unspecified launch failure",),
    ),
    Signature(  # a C++ exception from torch's own CUDA code (its caching allocator, a collective): a crash, not
        # the user's Python (round 12); the driver's `unknown error` is the GPU's (matched earlier)
        "cxx_cuda_driver_error", _F, _ROOT, r"what\(\):\s+CUDA driver error: (?P<what>[^\n]+)", ("CUDA driver error",),
        True, "CUDA driver error in torch: {what}", ("[1,13]<stderr>:  what():  CUDA driver error: invalid argument",),
    ),
    Signature(
        "xid_application", _A, _CTX, _XID_HEAD + rf"(?P<xid>{_xids(XID_APPLICATION)})\b",
        ("Xid",), False, "Xid {xid} (usually the application)",
        ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",),
    ),
    # ---- framework crash --------------------------------------------------------------------------
    Signature(  # before the crash signatures: the bus error of a full /dev/shm is the host's limit
        "shm_exhausted", _H, _ROOT,
        r"(?:insufficient shared memory \(shm\)|out of shared memory|No space left on device[^\n]*/dev/shm)",
        ("shared memory",), False, "the host's shared memory (/dev/shm) ran out",
        ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
         "(shm).",),
    ),
    Signature(  # NCCL's SHM transport on a node whose /dev/shm is full: that node's limit, not the fabric's
        "nccl_shm_segment", _H, _ROOT,
        # also as torch's exception quotes it after `Last error:` (round 60a)
        r"(?:NCCL WARN |^)Error(?::)? (?:while creating shared memory segment|failed to extend /dev/shm)",
        ("shared memory segment", "failed to extend /dev/shm"), True,
        "NCCL could not create its shared-memory segment (the node's /dev/shm is full)",
        ("node7:1842:1912 [2] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-Ab12Cd to 9637892 "
         "bytes",),
    ),
    Signature(  # Ray's message for a dead worker lists causes it guesses (OOM, SIGSEGV, ...): no cause itself
        "ray_worker_died", _F, _CASC, r"There are some potential root causes\.", ("potential root causes",), True,
        "Ray saw a worker process die",
        ("Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some "
         "potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage.",),
    ),
    Signature(  # horovodrun's report of a worker's end (its process name is the rank); the first is the failure
        "horovod_process_exit", _F, _CASC, r"^Process (?P<rank>\d+) exit with status code (?P<code>-?\d+)\.",
        (" exit with status code ",), True, "horovodrun saw a worker exit with code {code}",
        ("Process 5 exit with status code 137.",),
    ),
    Signature(  # Open MPI's report of the first process that died: it places the rank and names the signal
        "mpirun_rank_exit", _F, _CASC,
        r"mpirun noticed that process rank (?P<rank>\d+) with PID (?P<pid>\d+) on node (?P<node>[\w.-]+) exited "
        r"on signal (?P<signo>\d+)",
        ("mpirun noticed",), True, "mpirun saw a rank end by signal {signo}",
        ("mpirun noticed that process rank 1 with PID 0 on node gpu-c01 exited on signal 9 (Killed).",),
    ),
    Signature(  # mpirun's summary of the first process that exited with a nonzero status (`The first process to do
        # so was:` then its name, `[[jobid,1],rank]`): the one that raised an error printed with no rank (round 98a)
        "mpirun_first_exit", _F, _CASC, r"^\s*Process name: \[\[\d+,\d+\],(?P<rank>\d+)\]",
        ("Process name: [[",), True, "mpirun saw rank {rank} exit first with a nonzero status",
        ("  Process name: [[14207,1],3]",),
    ),
    Signature(
        "segfault", _F, _ROOT,
        r"(?:(?<!flux-job: task\(s\) )[Ss]egmentation fault|segfault at [0-9a-f]+|"
        r"Fatal Python error: (?!Bus error|Aborted)(?P<what>[A-Za-z ]+)|"
        r"Illegal instruction|SIGSEGV|SIGILL)",  # `Unexpected segmentation fault encountered in worker.`: DataLoader's
        ("Segmentation fault", "segmentation fault", "segfault", "Fatal Python error", "Illegal instruction", "SIGSEGV",
         "SIGILL"),
        True, "process crashed (segfault or illegal instruction)",
        ("Fatal Python error: Segmentation fault",),
    ),
    Signature(  # most often a /dev/shm or mapped file that ran out (resources.py), rarely a crash; weak, its cause is
        # elsewhere when printed. Alone it is the host's: the writers' labels (a container's small /dev/shm, round 47)
        "bus_error", Category.HOST, _WEAK, r"(?:Bus error|SIGBUS)", ("Bus error", "SIGBUS"), False,
        "process ended by SIGBUS (most often a /dev/shm or mapped file that ran out)",
        ("traceback : Signal 7 (SIGBUS) received by PID 94",),
    ),
    Signature(
        "heap_corruption", _F, _ROOT,
        r"(?:double free or corruption|free\(\): (?:invalid|corrupted)|malloc\(\): (?:corrupted|memory corruption|"
        r"unaligned)|corrupted size vs\. prev_size|munmap_chunk\(\): invalid pointer|corrupted double-linked list)",
        ("double free", "free(): invalid", "free(): corrupted", "malloc(): ", "corrupted size", "munmap_chunk",
         "double-linked"), True,
        "the process corrupted its heap and aborted", ("free(): invalid next size (fast)",),
    ),
    Signature(  # torch's own consistency check failed ("please report a bug to PyTorch"): the framework's bug
        "torch_internal_assert", _F, _ROOT, r"INTERNAL ASSERT FAILED at", ("INTERNAL ASSERT FAILED",), True,
        "a PyTorch internal assertion failed",
        ("what():  !block->expandable_segment_ INTERNAL ASSERT FAILED at \"../c10/cuda/CUDACachingAllocator.cpp\"",),
    ),
    Signature(  # the C++ runtime aborting the process on its own bug: a virtual call on a destroyed object,
        # a std::thread destroyed while joinable (round 18: Megatron at exit)
        "cxx_runtime_abort", _F, _ROOT, r"(?:pure virtual method called|terminate called without an active exception)",
        ("pure virtual", "without an active exception"), True, "the C++ runtime aborted the process",
        ("terminate called without an active exception",),
    ),
    Signature(
        "nccl_internal", _F, _WEAK,
        r"(?:NCCL error[^\n]*(?:internal error|unhandled cuda error|invalid usage)|ncclInternalError|"
        r"NCCL WARN Cuda failure)",
        ("NCCL error", "ncclInternalError", "NCCL WARN"), True, "NCCL internal error",
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, internal error",),
    ),
    Signature(  # NCCL (GPUDirect-TCPX's plugin) cannot reach its peers' listening sockets at set-up: on several
        # hosts the fabric's set-up (a driver the plugin does not match, a firewall), which every restart meets
        # again; on one host that node's (fabric.refused_everywhere, rounds 38 and 45)
        # A connect that times out (a container's bridge or a wrong interface picked, round 81) is the same set-up.
        "nccl_connect_refused", _N, _ROOT,
        r"NCCL INFO Call to connect returned Connection (?P<how>refused|timed out), retrying",
        ("Call to connect returned",), True, "NCCL could not connect to its peers (connection {how})",
        ("a3h-1:40219:40511 [0] NCCL INFO Call to connect returned Connection refused, retrying",
         "3f9a1c07be42:412:604 [0] NCCL INFO Call to connect returned Connection timed out, retrying"),
    ),
    Signature(  # rank 0's rendezvous store could not take its port: another job's store holds it (round 81)
        "store_port_in_use", _A, _ROOT,
        r"(?:^|Error: )Address already in use$|[Ss]erver socket has failed to (?:bind|listen)[^\n]*"
        r"(?:EADDRINUSE|address already in use)|"
        # older torch's final error quotes each bind's `(errno: 98 - Address already in use)`; those binds alone are
        # warnings (`[W socket.cpp]`: another address may still work), round 88f
        r"[Ss]erver socket has failed to listen on any local network address[^\n]*Address already in use",
        ("already in use", "EADDRINUSE"), False, "the rendezvous store's port is already in use (rank 0's store)",
        ("RuntimeError: Address already in use",
         "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
         "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"),
    ),
    Signature(  # rank 0's store may not listen on its port: one below 1024, or one a policy forbids (round 101c)
        "store_port_denied", _A, _ROOT,
        r"[Ss]erver socket has failed to (?:bind|listen)[^\n]*(?:EACCES|[Pp]ermission denied)",
        ("socket has failed to",), False, "the rendezvous store may not listen on its port (rank 0's store)",
        ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
         "port: 1, useIpv6: false, code: -13, name: EACCES, message: permission denied",),
    ),
    Signature(  # a launcher's remote shell refused: the job's passwordless ssh was never set up (round 81)
        "ssh_auth_denied", _A, _ROOT,
        r"Permission denied \((?:publickey|password|gssapi|keyboard-interactive)[\w,-]*\)",
        ("Permission denied (",), False, "the launcher's ssh to the job's nodes was refused",
        ("10.244.5.19: mchorse@10.244.5.19: Permission denied (publickey,password).",),
    ),
    Signature(  # the job script's shell could not run a program (not executable): exit 126 (round 81)
        "exec_permission_denied", _A, _ROOT,
        r"(?:slurm_script|\.sh): line \d+: (?P<path>/?[\w./+-]+): Permission denied$",
        ("Permission denied",), False, "the job script could not run {path} (permission denied)",
        ("/var/spool/slurmd/job9913570/slurm_script: line 29: /home/t/envs/ds/bin/deepspeed: Permission denied",),
    ),
    Signature(  # Open MPI's help message for an mpirun command that names one MCA parameter twice (DeepSpeed's
        # `--launcher_args` adding its own `btl_tcp_if_include`, round 105c): the launch command, before any rank ran
        "mpi_mca_param_twice", _A, _ROOT, r"The following MCA parameter has been listed multiple times on the",
        ("listed multiple times",), False, "mpirun's command line names one MCA parameter twice (the launch command)",
        ("The following MCA parameter has been listed multiple times on the",),
    ),
    Signature(  # cudaErrorDevicesUnavailable: the node's GPUs are held (exclusive-process mode and a stray process
        # of an earlier job): the node's state, restartable on others (round 47)
        # newer CUDA says `CUDA-capable device(s) is/are busy or unavailable` (round 85c)
        "gpu_devices_busy", Category.HOST, _ROOT,
        r"(?:all CUDA-capable devices are|CUDA-capable device\(s\) is/are) busy or unavailable",
        ("devices are busy", "is/are busy"), True, "the node's GPUs are busy or unavailable (held by another process)",
        ("RuntimeError: cuda runtime error (46) : all CUDA-capable devices are busy or unavailable at THC.cpp:70",),
    ),
    Signature(  # two ranks of a job on one GPU: the job's device mapping (LOCAL_RANK not used), round 45
        "nccl_duplicate_gpu", _A, _ROOT, r"Duplicate GPU detected : rank \d+ and rank \d+ both on",
        ("Duplicate GPU detected",), False, "two ranks were given the same GPU (the job's device mapping)",
        ("h0:179:197 [0] init.cc:573 NCCL WARN Duplicate GPU detected : rank 2 and rank 3 both on CUDA device 1cb000",),
    ),
    Signature(  # registering memory with the adapter ran out: the locked-memory limit (`ulimit -l`, the daemon's
        # LimitMEMLOCK) is too low where the job runs, and a restart meets it again (round 81)
        "nccl_ibv_memlock", _N, _ROOT,
        r"NCCL WARN Call to (?P<call>ibv_reg_mr\w*) failed with error Cannot allocate memory",
        ("NCCL WARN Call to ibv_",), False, "memory registration with the adapter failed ({call}: locked-memory limit)",
        ("gpu-lab4:77310:77371 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot "
         "allocate memory",),
    ),
    Signature(  # the verbs library refused a call (a memory registration without GPUDirect RDMA, a bad GID): the
        # adapter's set-up on that host, the system error NCCL then raises is its consequence (round 42)
        # UCX's own words under MPI (`UCX  ERROR ibv_reg_mr(address=0x7f1c..., ...) failed: Bad address`: a node whose
        # adapter cannot register GPU memory, no GPUDirect RDMA there, round 106e)
        "nccl_ibv_call_failed", _N, _ROOT,
        r"(?:NCCL WARN Call to (?P<call>ibv_\w+) failed|UCX\s+ERROR (?P<ucall>ibv_reg_mr\w*)\([^\n]*\) failed)",
        ("NCCL WARN Call to ibv_", "ERROR ibv_reg_mr"), True, "the InfiniBand verbs call {call} failed",
        ("gn0:1272040:1480527 [0] misc/ibvwrap.cc:182 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid "
         "argument",
         "[1716275655.208113] [gpu-rtx3090-01:50412:0]           ib_md.c:349  UCX  ERROR ibv_reg_mr(address="
         "0x7f1c4ba00000, length=2097152, access=0xf) failed: Bad address"),
    ),
    Signature(
        "nccl_system_error", _N, _WEAK, r"unhandled system error", ("unhandled system error",), True,
        "NCCL unhandled system error",
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",),
    ),
) + HANG + TEARDOWN + LOCALISING

# Hits that victims print about a peer or a collective: who prints them is not who caused them.
# A whole node went (Slurm's node failure, Ray's dead node, a lost agent or daemon): its ranks, not one of them.
NODE_LOST_SIGNATURES = frozenset({"node_failure", "slurm.node_fail", "ray_node_dead", "determined_agent_lost",
                                  "pdsh_remote_not_found", "mpi_daemon_lost", "host_crashed", "kernel_panic",
                                  "pals_node_no_reply", "pals_node_app_lost", "k8s_node_not_ready",
                                  "elastic_dead_node"})
VICTIM_SIGNATURES = ("watchdog_timeout", "collective_timeout", "watchdog_progress", "watchdog_dump_progress",
                     "heartbeat_stuck", "nccl_remote_error", "stack_in_collective", "nccl_ib_flush", "net_peer_timeout",
                     "horovod_stall", "collective_desync")


def catalog_by_id() -> dict[str, Signature]:
    return {sig.id: sig for sig in CATALOG}
