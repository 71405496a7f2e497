"""The catalog's node part: a node's GPUs failing outside NVIDIA's Xids (AMD's driver, a GPU that did not
initialise, CUDA's `unknown error`, ROCm's memory access fault, a GPU too hot or wanting a reset), its storage failing
under a write, its driver stack out of step, its IOMMU refusing DMA, and a node its launcher or cluster lost (HPE's
PALS, Kubernetes' kills).
It sits after the network signatures and before the host's in `signatures.CATALOG`: AMD's driver prints its own
`[Hardware Error]`, which the host's kernel-fault signature would take."""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["NODE"]

_G, _H, _F, _S = Category.GPU_HARDWARE, Category.HOST, Category.FRAMEWORK_CRASH, Category.SCHEDULER
_ROOT, _CTX = Role.ROOT, Role.CONTEXT

NODE: tuple[Signature, ...] = (
    Signature(  # GPFS (Spectrum Scale) on one node lost its disk lease and then its cluster membership, and unmounted
        # the file systems under the job (`/var/adm/ras/mmfs.log.latest`; the ranks see `[Errno 116] Stale file
        # handle`, round 105h): that node's mount, not the code; elsewhere the files read
        "gpfs_lost_membership", _H, _ROOT,
        r"(?:Lost membership in cluster \S+\. Unmounting file systems|Disk lease period expired [\d.]+ seconds ago|"
        r"File system \S+ unmounted by the system with return code [1-9])",
        ("Lost membership in cluster", "Disk lease period expired", "unmounted by the system"), True,
        "the node's GPFS client lost its lease or its cluster membership and unmounted the file systems",
        ("2025-11-18_03:41:18.122+0100: [E] Lost membership in cluster stor1.hpc.local. Unmounting file systems.",
         "2025-11-18_03:40:50.611+0100: [E] Disk lease period expired 0.820 seconds ago in cluster stor1.hpc.local."),
    ),
    Signature(  # a read or write the kernel failed with EIO (`[Errno 5] Input/output error`): the node's disk or file
        # system under the call (round 93e: an async checkpoint save on one worker node); a rerun elsewhere writes
        "storage_io_error", _H, _ROOT, r"\[Errno 5\] Input/output error",
        ("Input/output error",), True, "a file read or write failed with an I/O error (the node's storage)",
        ("RuntimeError: Worker failure: [Errno 5] Input/output error",),
    ),
    Signature(  # torch's shared-memory tensors could not be mapped (`unable to mmap 16777216 bytes from file
        # </torch_88412_...>: Cannot allocate memory (12)`): the host's memory-map limit or its /dev/shm, not the
        # code (round 92d: one node's vm.max_map_count left at its default); met again on that host
        "torch_mmap_enomem", _H, _ROOT,
        r"unable to mmap \d+ bytes from file <[^>\n]*>: Cannot allocate memory \(12\)",
        ("unable to mmap",), False, "the host could not map shared memory for a tensor (its map limit or /dev/shm)",
        ("RuntimeError: unable to mmap 16777216 bytes from file </torch_88412_2017443619_61209>: Cannot allocate "
         "memory (12)",),
    ),
    Signature(  # a process could not start a thread (EAGAIN from pthread_create, OpenBLAS's or OpenMP's thread pool,
        # Python's `can't start new thread`): the node's per-user process limit was full, often of another job of the
        # same user on a shared node (round 95h); the code is not at fault, and elsewhere it starts
        "thread_limit", _H, _ROOT,
        r"(?:pthread_create failed[^\n]*Resource temporarily unavailable|can't start new thread|"
        r"Thread creation failed: Resource temporarily unavailable|RLIMIT_NPROC \d+ current, \d+ max)",
        ("pthread_create failed", "can't start new thread", "Thread creation failed", "RLIMIT_NPROC"), True,
        "a process could not start a thread (the node's process limit was full)",
        ("OpenBLAS blas_thread_init: pthread_create failed for thread 9 of 16: Resource temporarily unavailable",
         "RuntimeError: can't start new thread"),
    ),
    Signature(  # the GPU operator's driver manager drained the node to reinstall its NVIDIA driver and evicted the
        # job's pod from it (round 96b): that node's driver under the job, not the code; elsewhere, or later, it runs;
        "gpu_driver_reinstall", _H, _ROOT,
        # torch then finds no driver on that node (`Found no NVIDIA driver on your system`): the node's, not the code's
        r"(?:Drain(?:ing)? node (?P<node>[A-Za-z][\w.-]*) for driver (?:uninstall|upgrade|install)|"
        r"Found no NVIDIA driver on your system)",
        ("for driver", "Found no NVIDIA driver"), True, "the node's GPU driver was missing or being reinstalled",
        ("Drain node gpu-node-07 for driver uninstall", "RuntimeError: Found no NVIDIA driver on your system. Please "
         "check that you have an NVIDIA GPU and installed a driver"),
    ),
    Signature(  # a file lock on a file system mounted without flock (Lustre without `-o flock`, round 97f): the mount's
        # settings, met again on every run until it is remounted or the code uses another lock
        "flock_unsupported", _H, _ROOT, r"FileSystem does not appear to support flock",
        ("support flock",), False, "the file system does not support flock (its mount options)",
        ("NotImplementedError: FileSystem does not appear to support flock; use SoftFileLock instead",),
    ),
    Signature(  # GCE's operations list whose TARGET column names the instance (`systemevent-...  compute.instances.
        # preempted  us-central1-a/instances/gce-a100-spot-1`, round 92g); before the cloud's own preemption signature
        "gce_operation_preempted", _S, _ROOT,
        r"^systemevent-\S+\s+compute\.instances\.preempted\s+\S*?instances/(?P<failed>[A-Za-z][\w-]*)",
        ("compute.instances.preempted",), True, "the cloud took the instance back (spot)",
        ("systemevent-1717388247118-61a0e3f2c4d18  compute.instances.preempted  us-central1-a/instances/gce-spot-1  "
         "200  DONE",),
    ),
    Signature(  # Blackwell's NVLink units (137, 144-150; 149 is taken by the NVLink signature below): a link's error
        # that the driver does not call `Nonfatal` (round 91e); the non-fatal ones beside a GPU's fatal error are noise
        "xid_nvlink", _G, _ROOT,
        r"NVRM: Xid \((?:PCI:)?(?P<gpu>[0-9A-Fa-f:.]+)\): (?P<xid>137|14[4-8]|150)\b(?![^\n]*Nonfatal)(?P<rest>.*)",
        ("Xid",), True, "Xid {xid} (NVLink) on GPU {gpu}",
        ("[1187942.010000] NVRM: Xid (PCI:0000:1b:00): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error",),
    ),
    Signature(  # NVML lost its GPUs under a running process: the GPU left the bus (`GpuIsLost`), or the container's
        # device access went with a reload of systemd's cgroups (`Unknown Error`, round 94b); the node's, a rerun
        # elsewhere runs
        "nvml_lost_gpus", _H, _ROOT,
        r"\bNVMLError_(?P<kind>GpuIsLost|Unknown)\b|Failed to initialize NVML: Unknown Error",
        ("NVMLError_", "Failed to initialize NVML"), True, "NVML lost access to the node's GPUs",
        ("[rank8]: pynvml.NVMLError_Unknown: Unknown Error",),
    ),
    Signature(  # Kubernetes' node controller lost the kubelet of a node (a host error, maintenance, a crash) or saw it
        # come back rebooted: the node was lost under the job's pod (round 91c)
        "k8s_node_not_ready", _H, _ROOT,
        r"\b[Nn]ode[ /](?P<failed>[A-Za-z][\w.-]*) (?:status is now: NodeNotReady|has been rebooted)\b",
        ("NodeNotReady", "has been rebooted"), True, "Kubernetes lost the node {node} (not ready or rebooted)",
        ("52m  Warning  NodeNotReady  node/gke-a100-pool-wv8s  Node gke-a100-pool-wv8s status is now: NodeNotReady",),
    ),
    Signature(  # torchrun's rendezvous found a member's keep-alive gone: that agent's host died or was cut off
        # (round 91f); the member is `<host>_<pid>_<n>`
        "elastic_dead_node", _H, _ROOT, r"Detected dead node '(?P<failed>[A-Za-z][\w.-]*?)_\d+_\d+'",
        ("Detected dead node",), True, "torchrun's rendezvous lost the agent on {node}",
        ("[2023-11-14 09:05:04,993] torch.distributed.elastic.rendezvous.dynamic_rendezvous: [DEBUG] Detected dead "
         "node 'gpu-a07_90417_0', removing it from the rendezvous",),
    ),
    Signature(  # the dynamic loader refusing a program (an MPI daemon, a launcher, a tool) for a library that one
        # host's installation or environment lacks (round 90g: orted on the third host without libcudart); the same
        # launch fails again until the host is fixed
        "shared_library_missing", _H, _ROOT,
        r"error while loading shared libraries: (?P<lib>[^\s:]+): cannot open shared object file",
        ("error while loading shared libraries",), False, "a program could not start: {lib} is missing on its host",
        ("/usr/local/openmpi-4.0.3/bin/orted: error while loading shared libraries: libcudart.so.10.1: cannot open "
         "shared object file: No such file or directory",),
    ),
    Signature(  # the node's amdgpu firmware missing: its install, not its cards (`Fatal error during GPU init` follows)
        "amdgpu_firmware_missing", _H, _ROOT, r"Direct firmware load for amdgpu/\S+ failed with error",
        ("Direct firmware load",), False, "the node's amdgpu firmware is missing",
        ("[Tue May 14 08:41:19 2024] amdgpu 0000:d6:00.0: Direct firmware load for amdgpu/aldebaran_sos.bin failed "
         "with error -2",),
    ),
    Signature(  # AMD's driver on a failing card: an uncorrectable (RAS/HBM) error, a card that fails to start, a
        # reset that does not bring it back, its microcode scheduler gone (rounds 84d, 85f, 105f)
        "amdgpu_fault", _G, _ROOT,
        r"amdgpu (?P<gpu>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d)?[^\n]*?(?:uncorrectable hardware error|"
        r"Fatal error during GPU init|GPU Recovery Failed|HBM \d+ UE|"
        r"MES might be in unrecoverable state|PCIe Bus Error: severity=Uncorrected|"
        # the driver's PCIe error handler called for the card: its link took an uncorrectable error (a root port's
        # malformed TLP, round 105f); not a reset that fails and then succeeds (round 95c)
        r"amdgpu: PCI error: detected callback)",
        ("amdgpu",), True, "AMD GPU hardware fault",
        ("[Tue May 14 08:41:22 2024] amdgpu 0000:d6:00.0: amdgpu: Fatal error during GPU init",
         "Oct 02 08:04:51 mx3-n12 kernel: amdgpu 0000:9f:00.0: amdgpu: HBM 3 UE 1 (umc channel 14)",
         "2024-06-04T02:47:14+0000 wk-gpu02 kernel: amdgpu 0000:c3:00.0: amdgpu: PCI error: detected callback, "
         "state(2)!!"),
    ),
    Signature(  # an `nvidia-smi` table whose `Volatile Uncorr. ECC` column counts errors on a GPU since its driver
        # loaded (rounds 47b, 54a, 64b, 73b, 84c): that GPU's memory is failing; its index and bus place it
        # (gpu_bus.py). Weak: a count since boot explains a CUDA error on that node (verdict.py), not an exception of
        # the code
        "smi_uncorrected_ecc", _G, Role.WEAK,
        r"^\|\s+(?P<index>\d{1,2})\s+[^|\n]*\|\s+(?P<gpu>0{4}(?:0{4})?:(?P<bus>[0-9A-Fa-f]{2}):[0-9A-Fa-f]{2}\.[0-7])"
        r"\s+(?:On|Off)\s+\|\s+(?P<ecc>[1-9]\d*)\s+\|",
        ("Off |", "On |"), True, "nvidia-smi counts {ecc} uncorrectable ECC error(s) on GPU {gpu}",
        ("|   1  Tesla V100-SXM2...  On   | 00000000:1C:00.0 Off |                    1 |",),
    ),
    Signature(  # the rest of its RAS log (`[Hardware Error]: Accelerator Check Architecture events logged`, the ACA
        # banks): corrected errors too, so context, not the host's `[Hardware Error]`
        "amdgpu_ras_log", _G, _CTX, r"amdgpu [^\n]*\[Hardware Error\]", ("amdgpu",), None,
        "AMD GPU RAS log",
        ("amdgpu 0000:05:00.0: amdgpu: [Hardware Error]: Accelerator Check Architecture events logged",),
    ),
    Signature(  # the kernel driver could not bring a GPU up (round 86b: a VM that then lists seven GPUs of eight)
        # or refused one (`installed in this system is not supported by the ... driver release`: one GPU of eight
        # left out on an AKS node, round 87c)
        "gpu_init_failed", _G, _ROOT,
        r"\bRmInitAdapter failed|\brm_init_adapter failed|"
        r"NVRM: The NVIDIA GPU (?P<gpu>[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.\d) \(PCI ID: [0-9a-f:]+\)",
        ("RmInitAdapter", "rm_init_adapter", "NVRM: The NVIDIA GPU"), True,
        "the NVIDIA driver could not initialise a GPU",
        ("NVRM: RmInitAdapter failed! (0x22:0x56:742)", "NVRM: The NVIDIA GPU 000a:00:00.0 (PCI ID: 10de:2330)"),
    ),
    Signature(  # the runtime's `unknown error`: the driver lost the GPU under the rank, most often with an Xid the
        # logs lack (rounds 89e: one rank of 176B's training, restarted fine without its node); the GPU's
        "cuda_unknown_error", _G, _ROOT, r"CUDA error: unknown error", ("CUDA error",), True,
        "CUDA error: unknown error (the driver lost the GPU)",
        ("[default3]:  what():  CUDA error: unknown error",),
    ),
    Signature(  # ROCm's illegal memory access: a kernel touched memory it does not own (round 90c: a torch build for an
        # older ROCm at its first collective). A bug in the stack unless the card's own errors say otherwise
        "rocm_memory_access_fault", _F, _ROOT,
        r"Memory access fault by GPU node-\d+ \(Agent handle: \S+\) on address \S+\. Reason: (?P<what>[^\n]+)",
        ("Memory access fault",), None, "GPU memory access fault (ROCm): {what}",
        ("Memory access fault by GPU node-4 (Agent handle: 0x6f1a2b0) on address 0x7ffe4c400000. Reason: Page not "
         "present or supervisor privilege.",),
    ),
    Signature(  # the node's storage failed under a write: torch.save's writer lost its file, a FUSE mount (HDFS, S3,
        # blobfuse) lost its daemon (rounds 88c); the node's, and a relaunch may well find it back
        "storage_write_failed", _H, _ROOT,
        r"(?:PytorchStreamWriter failed writing file \S+: file write failed|"
        r"\[Errno 107\] Transport endpoint is not connected)",
        ("file write failed", "Transport endpoint is not connected"), True,
        "the node's storage failed under a write",
        ("RuntimeError: [enforce fail at inline_container.cc:857] . PytorchStreamWriter failed writing file "
         "data/322: file write failed", "OSError: [Errno 107] Transport endpoint is not connected"),
    ),
    Signature(  # `nvidia-smi -q`: a GPU slowed down because it runs too hot (round 88b: the one slow rank that held a
        # job of four nodes back); the card's or its cooling's, restartable without it
        "gpu_thermal_slowdown", _G, _ROOT, r"^\s*(?:HW|SW) Thermal Slowdown\s*:\s*Active\b",
        ("Thermal Slowdown",), True, "a GPU slows down because it runs too hot",
        ("            HW Thermal Slowdown           : Active",),
    ),
    Signature(  # `nvidia-smi -q -d PAGE_RETIREMENT`: a page of a GPU's memory waits to be retired after an
        # uncorrectable error (round 98d); weak like the table's ECC count: it explains a crash on that node
        "smi_page_retirement_pending", _G, Role.WEAK, r"^\s*Pending Page (?:Blacklist|Retirement)\s*:\s*Yes\b",
        ("Pending Page",), True, "a GPU's memory has a page waiting to be retired after an uncorrectable error",
        ("        Pending Page Blacklist      : Yes",),
    ),
    Signature(  # NCCL found two GPUs wired by NVLink that cannot reach each other: their link, or a GPU, is broken
        # (round 98d); each rank of the node prints it, the two GPUs are the culprits (gpu_bus.named_pair_ranks)
        "nccl_nvlink_p2p_disabled", _G, _ROOT,
        r"P2P is disabled between NVLINK connected GPUs (?P<gpu_a>\d+) and (?P<gpu_b>\d+)",
        ("P2P is disabled",), True, "two GPUs wired by NVLink cannot reach each other (a bad link or GPU)",
        ("h:1:2 [0] graph/paths.cc:319 NCCL WARN P2P is disabled between NVLINK connected GPUs 5 and 4. This should "
         "not be the case given their connectivity, and is probably due to a hardware issue.",),
    ),
    Signature(  # a row of `nvidia-smi --query-gpu=index,...,clocks_event_reasons.* --format=csv` with a column Active:
        # which column it is, only the header says (smi_sections.py makes a throttled GPU's row a slowdown)
        "smi_csv_active", _G, _CTX,
        r"^(?:\d{4}/\d\d/\d\d [\d:.]+,\s*)?(?P<index>\d{1,2}),(?:[^,\n]*,)*?\s*Active\s*(?:,|$)",
        ("Active",), True, "a GPU's row of an nvidia-smi query shows a clock event reason active",
        ("2025/03/12 15:03:18.144, 1, 87, 510 MHz, 277.00 W, 100 %, 0x0000000000000020, Active, Not Active",),
    ),
    Signature(  # `nvidia-smi -q`'s performance state of a GPU: a fact, until one GPU of a listing stands out in an idle
        # state while the others work (smi_sections.py makes it that GPU's slowdown, round 101h)
        "smi_perf_state", _G, _CTX, r"^\s*Performance State\s*: P(?P<pstate>\d{1,2})\s*$",
        ("Performance State",), True, "a GPU's performance state is P{pstate}",
        ("    Performance State                     : P8",),
    ),
    Signature(  # the driver's word that a GPU must be reset before it works again: its GSP firmware calls failing with
        # NV_ERR_RESET_REQUIRED, `nvidia-smi -q -d RESET_STATUS` saying so (round 88b); the card's, restartable
        # without it
        "gpu_reset_required", _G, _ROOT,
        r"\bNV_ERR_RESET_REQUIRED\b|^\s*Reset Required\s*:\s*Yes\b",
        ("NV_ERR_RESET_REQUIRED", "Reset Required"), True, "a GPU needs a reset before it works again",
        ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned "
         "from status @ kernel_channel.c:2874", "        Reset Required                    : Yes"),
    ),
    Signature(  # the node's driver and its CUDA or NVML libraries out of step: a driver upgraded under a running
        # system, a container toolkit newer than the host's driver (rounds 86a, 86b); the node's, restartable without it
        "driver_stack_mismatch", _H, _ROOT,
        r"(?:[Dd]river/library version mismatch|NVRM: API mismatch|system has unsupported display driver / cuda "
        r"driver combination|forward compatibility was attempted on non supported HW)",
        ("version mismatch", "API mismatch", "unsupported display driver", "forward compatibility"), True,
        "the node's NVIDIA driver and its CUDA or NVML libraries do not match",
        ("Failed to initialize NVML: Driver/library version mismatch",
         "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination"),
    ),
    Signature(  # HPE's PALS launcher lost a node: `ping failed on A: No reply from B` (B is gone), or `ping failed on
        # B: Application <uuid> not found` (B rebooted under the job), round 86f
        "pals_node_no_reply", _H, _ROOT, r"\bping failed on [\w.-]+: No reply from (?P<failed>[A-Za-z][\w-]*)",
        ("ping failed",), True, "the launcher lost touch with {node}",
        ("ping failed on x4102c3s0b0n0: No reply from x4209c5s1b0n0.hostmgmt2209.cm.aurora.alcf.anl.gov after 93s",),
    ),
    Signature(
        "pals_node_app_lost", _H, _ROOT,
        r"\bping failed on (?P<failed>[A-Za-z][\w-]*)[\w.-]*: Application \S+ not found",
        ("ping failed",), True, "the job's processes are gone from {node} (the node restarted under it)",
        ("ping failed on x4616c0s4b0n0: Application 8e21c6d4-7b0f-4c3a-9a51-2f6e0d94b1c7 not found",),
    ),
    Signature(  # PALS could not start the job's processes on a node: the network's virtual ids are taken by the other
        # `mpiexec` runs the same job started at once on its nodes (round 86f): the script's, met on every run
        "pals_no_vnis", Category.APPLICATION, _ROOT,
        r"\bstart failed on (?P<failed>[A-Za-z][\w-]*)[\w.-]*: No VNIs available",
        ("No VNIs",), False, "PALS could not start the processes on a node: no network VNIs left for this launch",
        ("start failed on x4102c5s2b0n0: No VNIs available in internal allocator",),
    ),
    Signature(  # EFA could not post its receive buffers because it could not pin memory: the node's locked-memory limit
        # (`ulimit -l` 64 KiB under slurmd, round 87c), met again on every run there until it is raised
        "efa_memory_pin_failed", _H, _ROOT, r"EFA internal error: \(4112\) Failure to post internal receive buffers",
        ("Failure to post internal receive buffers",), False,
        "EFA could not post its receive buffers (the node's locked-memory limit)",
        ("EFA internal error: (4112) Failure to post internal receive buffers",),
    ),
    Signature(  # the ssh session the job was started from dropped (its client stopped answering): the shell's hangup
        # ends the launcher and its workers (torchrun's `Received Signals.SIGHUP death signal`, round 68a). Weak: the
        # same lines close every login, and a failure of the job's own explains it better
        "ssh_session_dropped", Category.SCHEDULER, Role.WEAK,
        r"sshd\[\d+\]: (?:Timeout, client not responding|pam_unix\(sshd:session\): session closed for user)",
        ("client not responding", "session closed for user"), True,
        "the ssh session that started the job closed (its hangup ended the launcher)",
        ("Aug 28 22:53:46 dl-a6000-03 sshd[245801]: Timeout, client not responding from user swu 10.20.4.117",),
    ),
    Signature(  # a process out of file descriptors: the node's open-file limit (`ulimit -n 1024`), met again on every
        # run until it is raised (rounds 85e, 86d)
        "open_files_exhausted", _H, _ROOT, r"\[Errno 24\] Too many open files|\bToo many open files\b",
        ("Too many open files",), False, "a process ran out of file descriptors (the node's open-file limit)",
        ("gpub3a6: OSError: [Errno 24] Too many open files",),
    ),
    Signature(  # Kubernetes killed a container over its memory limit (`kubectl get pods`' row, `describe`'s reason):
        # the job's own demand, like Slurm's cgroup kill (round 86a)
        "k8s_oom_killed", _H, _ROOT,
        r"(?:^(?P<failed>[a-z][\w.-]*)\s+\d+/\d+\s+OOMKilled\b|^\s*Reason:\s+OOMKilled\b)",
        ("OOMKilled",), False,
        "Kubernetes killed a container over its memory limit",
        ("gpt-efa-worker-2         0/1     OOMKilled   0          14m", "      Reason:       OOMKilled"),
    ),
    Signature(  # the IOMMU refused a device's DMA: with it translating, peer copies between GPUs fault or stall
        # (Intel's DMAR, AMD-Vi's IO_PAGE_FAULT; round 86b). Weak: a fault at boot from another device (a USB or
        # network controller's) is common, and any root-strength failure explains the job better: the host's set-up,
        # met again on every run until it changes
        "iommu_dma_fault", _H, Role.WEAK,
        r"DMAR: \[DMA (?:Read|Write)[^\]]*\] Request device \[[0-9a-f:.]+\] fault addr|"
        r"AMD-Vi: Event logged \[IO_PAGE_FAULT|\bIO_PAGE_FAULT device=[0-9a-f:.]+",
        ("DMAR:", "IO_PAGE_FAULT"), False, "the IOMMU refused a device's DMA (peer-to-peer copies between GPUs stall)",
        ("[Thu Mar 14 10:03:01 2024] DMAR: [DMA Write NO_PASID] Request device [02:00.0] fault addr 0xfbe00000 "
         "[fault reason 0x05] PTE Write access is not set",
         "AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0xf4000000 flags=0x0020]"),
    ),
)
