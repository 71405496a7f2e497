"""The catalog's first part: failures reported from native code before any Python sees them (round 32).

NCCL names the source file of a failed CUDA or system call (`transport/nvls.cc:158 NCCL WARN Cuda failure ...`),
and that file says which part of the node gave way: the NVSwitch fabric for NVLink SHARP, the node's /dev/shm
for the shared-memory transport, NCCL's own set-up for the other transports. torch's C++ threads (the NCCL
watchdog, a work's cleanup) abort with `terminate called ... what(): CUDA error: ...` where a fault reached the
framework's own code rather than a Python call of the user's. These come before the generic entries of
signatures.py (`nccl_internal`, `cuda_app_error`), which match the same lines with less to say.
"""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["NATIVE"]

_G, _H, _F = Category.GPU_HARDWARE, Category.HOST, Category.FRAMEWORK_CRASH
_ROOT = Role.ROOT

NATIVE: tuple[Signature, ...] = (
    Signature(  # NVLS needs the NVSwitch fabric up: on a node whose fabric manager is down its set-up fails
        "nccl_nvls_failure", _G, _ROOT, r"transport/nvls\.cc:\d+ NCCL WARN (?:Cuda|CUDA) failure",
        ("NCCL WARN",), True, "NCCL's NVLink SHARP set-up failed (the node's NVSwitch fabric or fabric manager)",
        ("hgx-b02:4108:4190 [3] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'",),
    ),
    Signature(  # CUDA's cudaErrorSystemNotReady: the fabric manager of an NVSwitch node is not running
        "cuda_system_not_ready", _G, _ROOT, r"(?:system not yet initialized|cudaErrorSystemNotReady)",
        ("not yet initialized", "SystemNotReady"), True,
        "the GPUs' fabric is not ready (the NVSwitch fabric manager is not running)",
        ("RuntimeError: CUDA error: system not yet initialized",),
    ),
    Signature(  # the fabric manager itself failed to start (it found fewer NVSwitches than its topology): the node's
        # NVSwitch fabric is down, so every GPU of the node fails its NVLink set-up (round 76c)
        "fabric_manager_failed", _G, _ROOT,
        r"(?:Failed to start NVIDIA fabric manager|nvidia-fabricmanager\.service: Failed with result|"
        r"fabric manager NVSwitch device count \d+ is not matching)",
        ("fabric manager", "fabricmanager"), True, "the node's NVSwitch fabric manager failed to start",
        ("Sep 12 02:58:47 dgx-c14 systemd[1]: Failed to start NVIDIA fabric manager service.",),
    ),
    Signature(  # the segment NCCL made is gone: /dev/shm was cleared under the job (systemd's RemoveIPC at a logout)
        "nccl_shm_removed", _H, _ROOT,
        r"NCCL WARN [^\n]*shared memory [^\n]*(?:failed|error)[^\n]*No such file or directory",
        ("shared memory",), True,
        "NCCL's shared-memory segment was removed under the job (the node's /dev/shm was cleared)",
        ("n12:2771:2815 [1] misc/shmutils.cc:94 NCCL WARN unlink shared memory /dev/shm/nccl-x7Lb failed, error: "
         "No such file or directory",),
    ),
    Signature(  # NCCL could not allocate its buffers on a GPU the model had filled: the job's memory, as a CUDA OOM is
        # (NCCL's proxy set-up, round 38); before the transport and generic NCCL entries below
        "nccl_cuda_oom", Category.APPLICATION, _ROOT, r"NCCL WARN (?:Cuda|CUDA) failure '?out of memory'?",
        ("NCCL WARN",), False, "NCCL ran out of GPU memory for its buffers (the model left it none)",
        ("ng41106:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",),
    ),
    Signature(  # another transport's set-up (P2P/IPC, net, collnet) hit a CUDA failure: NCCL's, or its settings'
        "nccl_transport_cuda_failure", _F, _ROOT,
        # or its shared-memory set-up in a header (`include/shm.h:42 NCCL WARN Cuda failure`, round 83c)
        r"(?:transport|include)/(?P<transport>\w+)\.(?:cc|h):\d+ NCCL WARN (?:Cuda|CUDA) failure",
        ("NCCL WARN",), True, "NCCL's {transport} transport set-up hit a CUDA failure",
        ("ip-10-1-2-3:811:811 [0] transport/p2p.cc:298 NCCL WARN Cuda failure 'invalid argument'",),
    ),
    Signature(  # pyxis could not start the task's container there (enroot's hooks, ldconfig, the node's driver
        # libraries): the node's, and pyxis's copy of enroot's log under it is part of the same report (round 35)
        "container_start_failed", _H, _ROOT,
        r"(?:^|\berror: )pyxis: (?:container start failed|couldn't start container|\s{3,}\S)",
        ("pyxis: ",), True, "the task's container did not start on its node (pyxis/enroot)",
        ("slurmstepd: error: pyxis: container start failed with error code: 1",
         "slurmstepd: error: pyxis:     nvidia-container-cli: ldcache error: process /sbin/ldconfig failed"),
    ),
    Signature(  # two processes claimed one rank at NCCL's bootstrap: two nodes started as the same machine rank (an
        # unexpanded `$SLURM_NODEID` in a quoted launch line, round 87a); the launch's, met on every run
        "nccl_rank_claimed_twice", Category.APPLICATION, _ROOT,
        r"NCCL WARN Bootstrap Root ?: rank \d+ of \d+ ranks has already checked in",
        ("has already checked in",), False, "two processes claimed the same rank (a node started with another's rank)",
        ("npl-g017:201877:202031 [0] bootstrap.cc:250 NCCL WARN Bootstrap Root : rank 3 of 16 ranks has already "
         "checked in",),
    ),
    Signature(  # a container runtime could not start the task's container on its node: the GPU hook
        # (`nvidia-container-cli` could not initialise CUDA or NVML, find a device) or runc itself (rounds 86a, 87c,
        # 87e): the node's
        "container_runtime_failed", _H, _ROOT,
        # an older kubelet's event names its node in the From column (`kubelet, k8s-v100-worker-04`)
        r"(?:\bkubelet, (?P<node>[A-Za-z][\w.-]*)\s[^\n]*?)?"
        r"(?:OCI runtime create failed|nvidia-container-cli: (?:initialization|device|ldcache|mount|detection) error|"
        # Apptainer/Singularity could not mount the image there (a truncated cached copy, no free loop device, round
        # 94b); docker found no GPU runtime on a host the toolkit was never installed on (round 94b)
        r"\bFATAL:\s+container creation failed: |"
        r"could not select device driver \"[^\"]*\" with capabilities: \[\[gpu\]\])",
        ("OCI runtime", "nvidia-container-cli", "container creation failed", "could not select device driver"), True,
        "the container runtime could not start the task's container",
        ("docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create "
         "failed: unable to start container process: error during container init",
         "FATAL:   container creation failed: mount /proc/self/fd/3->/var/apptainer/mnt/session/rootfs error: while "
         "mounting image /proc/self/fd/3: failed to find loop device",
         'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].'),
    ),
    Signature(  # srun's CPU binding asks for CPUs the step was not given on a node (`--cpu-bind` masks or a shared
        # node's partial allocation, round 98g): the job's launch options, met again on every retry
        "slurm_cpu_bind_unsatisfiable", Category.APPLICATION, _ROOT,
        r"srun: error: (?:CPU binding outside of job step allocation|(?:Task launch for \S+ failed on node "
        r"(?P<node>[\w.-]+): )?Unable to satisfy cpu bind request)",
        ("CPU binding outside", "cpu bind request"), False, "srun's CPU binding asks for CPUs outside the step's",
        ("srun: error: Task launch for StepId=771204.0 failed on node gpu-c12: Unable to satisfy cpu bind request",
         "srun: error: CPU binding outside of job step allocation, allocated CPUs are: 0x0000FFFF."),
    ),
    Signature(  # srun could not start the step's tasks on a node (an expired credential, a node that could not
        # launch): the scheduler's, before any training; the others then wait at the rendezvous (round 55b)
        "slurm_task_launch_failed", Category.SCHEDULER, _ROOT,
        r"srun: error: Task launch for \S+ failed on node (?P<node>[\w.-]+): (?P<why>[^\n]+)",
        ("Task launch for",), True, "srun could not launch the step's tasks on {node}: {why}",
        ("srun: error: Task launch for 5512.1 failed on node cn124: Job credential expired",),
    ),
    Signature(  # Slurm's job_container/tmpfs plugin could not join the job's namespace on a node (its per-job
        # directory missing: a node that missed a reboot after a configuration change); Slurm requeues and holds the
        # job (`launch failed requeued held`). The node's fault, not the training's (round 36)
        "job_container_join_failed", _H, _ROOT,
        r"\bcontainer_[pg]_join(?:\(\d+\))?:? (?:open failed (?:for )?\S+|No such file or directory|failed: \d+)",
        ("container_",), True, "Slurm could not join the job's container namespace on its node (job_container)",
        ("slurmstepd: error: container_p_join: open failed for /local/slurm_tmpfs/88216/.ns: No such file or directory",
         "slurmstepd: error: container_g_join(88216): No such file or directory"),
    ),
    Signature(  # mpirun's runtime lost its daemon on a node: the node died (rebooted, crashed) or its link did; the
        # node is on a `hostname:` line below (lost_node.place_lost_daemon, round 37). Weak: a network failure
        # before it is the cause (round 28)
        "mpi_daemon_lost", _H, Role.WEAK, r"\b(?:ORTE|PRTE|PRRTE) has lost communication with (?:its|a remote) daemon",
        ("lost communication",), True, "Open MPI lost its daemon on a node (the node went down or out of reach)",
        ("ORTE has lost communication with its daemon located on node:",),
    ),
    Signature(  # the line under it that names the node (context: alone it says nothing)
        # `a remote daemon` names its node in the block's `Remote daemon: [[22931,0],2] on node X` line (round 84b)
        "mpi_daemon_host", _H, Role.CONTEXT,
        r"^\s+(?:hostname:|Remote daemon\s*: \[\[\d+,\d+\],\d+\] on node)\s+(?P<host>[A-Za-z][\w.-]*)\s*$",
        ("hostname:", "Remote daemon"), None, "Open MPI's lost daemon ran on {host}",
        ("  hostname:  ip-10-15-20-17.ec2.internal", "  Remote daemon: [[22931,0],2] on node kws-cnn-hvd-worker-1"),
    ),
    Signature(  # a C++ extension's (or nccl-tests') NCCL check failed: `Failed, NCCL error <file>:<line> '<why>'`
        "cxx_nccl_check_failed", _F, _ROOT, r"^Failed[,:] NCCL error (?P<where>\S+\.(?:cpp|cc|cu|h):\d+)",
        ("NCCL error",), True, "an NCCL call in native code failed at {where}",
        ("Failed, NCCL error transformer_engine/pytorch/csrc/userbuffers/userbuffers-host.cpp:223 ''",),
    ),
    Signature(  # a memory fault that native code (torch's watchdog, a work's cleanup, Horovod's event wait, THC's
        # checks) met: not a Python call's
        "cxx_cuda_memory_fault", _F, _ROOT,
        r"(?:what\(\):\s+(?:CUDA error: |\w+ failed: )|THCudaCheck FAIL [^\n]*?: )"
        r"(?P<what>an illegal memory access was encountered|misaligned address)",
        ("illegal memory access", "misaligned address"), True, "native code aborted on CUDA error: {what}",
        ("  what():  CUDA error: an illegal memory access was encountered",
         "  what():  cudaEventQuery failed: an illegal memory access was encountered",
         "THCudaCheck FAIL file=/opt/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 error=700 : an illegal "
         "memory access was encountered"),
    ),
    Signature(  # glibc's assert() failing in a library's C++ source (`python: .../torch/csrc/autograd/input_buffer.cpp:
        # 14: void torch::autograd::InputBuffer::add(...): Assertion `pos >= 0' failed.`): the framework's own check
        # aborts the process (round 92f); a CUDA kernel's device-side assert is quoted with two backticks, not this
        "native_assert", _F, _ROOT,
        r"(?P<file>[\w./+-]+\.(?:cpp|cc|cxx|cu|cuh|c|h|hpp)):\d+: [^\n]*?: Assertion `[^\n]*' failed",
        ("Assertion `",), True, "a C++ assertion inside {file} failed",
        ("python: /opt/conda/conda-bld/pytorch_1533672544752/work/torch/csrc/autograd/input_buffer.cpp:14: void "
         "torch::autograd::InputBuffer::add(size_t, torch::autograd::Variable): Assertion `pos >= 0 && pos < "
         "buffer.size()' failed.",),
    ),
    Signature(  # a native library's C++ or CUDA source raised through its binding (Transformer Engine's
        # `/path/cublaslt_gemm.cu:326 in function cublas_gemm: cuBLAS Error: ...`, round 95e): the library's own state.
        # A CUDA runtime call it passes on (`CUDA Error: invalid argument`) stays the CUDA entries' (round 56a).
        "native_library_error", _F, _ROOT,
        r"(?:Error: )?(?P<file>/\S+\.(?:cu|cuh|cpp|cc|hpp)):\d+ in function [^:\s]+(?:\(\))?: "
        r"(?!CUDA Error)(?P<what>.+)",
        (" in function ",), True, "a native library failed inside its own code ({file}): {what}",
        ("RuntimeError: /opt/te/transformer_engine/common/gemm/cublaslt_gemm.cu:326 in function cublas_gemm: "
         "cuBLAS Error: the requested functionality is not supported",),
    ),
    Signature(  # torch.compile's own machinery failed (Inductor lowering or codegen, the Dynamo backend), round 95b;
        # a full disk or the job's memory behind it stays the generic entries' (disk_full, the OOM entries), and so
        # does a `BackendCompilerFailed: backend='inductor' raised:` whose cause is the next line (round 11)
        "torch_compile_internal", _F, _ROOT,
        r"torch\._(?:inductor|dynamo)\.exc\.(?P<exc>InductorError|BackendCompilerFailed|InternalTorchDynamoError|"
        r"CppCompileError|LoweringException)\b"
        r"(?!.*(?:No space left on device|Disk quota exceeded|out of memory|raised:\s*$))",
        ("torch._inductor.exc.", "torch._dynamo.exc."), True, "torch.compile failed inside its own machinery ({exc})",
        ("torch._inductor.exc.InductorError: TypeError: cannot pickle '_thread.RLock' object",),
    ),
    Signature(  # weak: a C++ runtime's own check failed (glog's `Check failed:`, Ray's GCS server, round 97e): the
        # framework's state, but a CUDA error or a lost peer behind it is what the stronger entries name
        "cpp_check_failed", _F, Role.WEAK, r"\S+\.(?:cc|cpp|h):\d+\]?:? +Check failed: (?P<what>.+)",
        ("Check failed:",), True, "a C++ runtime's own check failed: {what}",
        ("[2024-02-11 03:46:31,390 C 62 62] (gcs_server) id_def.h:25:  Check failed: binary.size() == Size() || "
         "binary.size() == 0 expected size is 28, but got data  of size 27",),
    ),
)
