"""The catalog's last part: context lines that only localise (rank -> node, the world size, which process
a traceback or a remote error belongs to, stacks inside a collective). They come after every other
signature (signatures.py), so a line that also matches a failure is classified as that failure."""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["LOCALISING", "FRAMEWORK_PACKAGES"]

# Installed frameworks whose own frames make an assertion theirs (library_asserts.py)
FRAMEWORK_PACKAGES = (r"torch|deepspeed|lightning|pytorch_lightning|lightning_fabric|transformers|accelerate|apex|"
                      r"transformer_engine|megatron|nemo|colossalai|fairscale|horovod|ray|vllm|deep_ep|flash_attn|"
                      r"xformers|triton")

_A, _F, _D = Category.APPLICATION, Category.FRAMEWORK_CRASH, Category.DISTRIBUTED_HANG
_S, _N = Category.SCHEDULER, Category.NETWORK
_CTX = Role.CONTEXT

LOCALISING: tuple[Signature, ...] = (
    Signature(
        "nccl_comm_init", _D, _CTX,
        r"^(?P<node>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO (?:ncclCommInitRank )?comm 0x[0-9a-f]+ "
        r"rank (?P<rank>\d+) n[Rr]anks (?P<world>\d+)(?:[^\n]*? busId (?:0x)?(?P<bus>[0-9a-fA-F]+))?",
        ("nranks", "nRanks"), None, "NCCL communicator of {world} ranks",
        ("n3:2231:2290 [5] NCCL INFO comm 0x55d0c0 rank 13 nranks 16 cudaDev 5 busId ab000 - Init COMPLETE",
         "n3:2231:2290 [5] NCCL INFO comm 0x55a8167a rank 13 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0"),
    ),
    Signature(  # a host telling its group to meet at a bridge's address (bridge_host.py, round 84c); before
        # `world_size`, which the same line would give
        "bridge_advertised", _N, _CTX,
        # or NCCL's bootstrap on a host that chose its bridge's interface (round 90h)
        r"(?:\bmaster_addr(?:ess)?[=:] ?|NCCL INFO Bootstrap ?: Using [\w.-]+:)"
        r"(?P<addr>(?:172\.17\.0|192\.168\.122)\.\d{1,3})\b",
        ("master_addr", "Bootstrap"), None, "the group's master address {addr} is a bridge's",
        ("(ActorModelRayActor pid=9921, ip=10.0.3.21) Init vllm process group: master_address=172.17.0.3, "
         "master_port=41229, world_size=5, backend=nccl",
         "vis-gpu11:40517:40517 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>"),
    ),
    Signature(
        "world_size", _D, _CTX,
        r"(?:\bworld_size[=:] ?(?P<world>\d+)|\bWORLD_SIZE=(?P<world2>\d+)|GLOBAL_RANK: (?P<rank>\d+), MEMBER: "
        r"\d+/(?P<world3>\d+)|\bglobal rank \d+ of (?P<world4>\d+)\b)",
        ("world_size", "WORLD_SIZE", "GLOBAL_RANK", "global rank"), None, "world size",
        ("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4",),
    ),
    Signature(  # Megatron prints each rank's global rank once as it seeds it: the file's ranks (round 35)
        "megatron_seed_rank", _F, _CTX, r"initializing model parallel cuda seeds on global rank (?P<rank>\d+)\b",
        ("cuda seeds on global rank",), None, "Megatron rank {rank} seeded",
        ("> initializing model parallel cuda seeds on global rank 5, model parallel rank 0, and data parallel rank 5",),
    ),
    Signature(
        "elastic_box_host", _F, _CTX, r"^\s+host\s+: (?P<node>[A-Za-z0-9][\w.-]*)\s*$", ("host      :",), None,
        "torchrun failure on host {node}", ("  host      : dgx-b-04",),
    ),
    Signature(
        "elastic_box_time", _F, _CTX, r"^\s+time\s+: (?P<at>\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)\s*$",
        ("time      :",), None, "torchrun failure time", ("  time      : 2024-08-23_13:16:09",),
    ),
    Signature(
        "elastic_box_exit", _F, _CTX, r"^\s+exitcode\s+: (?P<code>-?\d+) \(pid: (?P<pid>\d+)\)",
        ("exitcode  :",), None, "torchrun failure exit code {code}", ("  exitcode  : -6 (pid: 402117)",),
    ),
    Signature(  # DeepSpeed's launcher: which global ranks each host runs
        "ds_rank_mapping", _F, _CTX,
        r"global_rank_mapping=(?:defaultdict\(<class 'list'>, )?(?P<mapping>\{[^}]*\})",
        ("global_rank_mapping",), None, "DeepSpeed rank mapping",
        ("n1: [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, {'n1': [0], 'n2': [1]})",),
    ),
    Signature(  # DeepSpeed's launcher: each host's local devices, in the order it numbers the ranks (round 86d)
        "ds_world_info", _F, _CTX, r"WORLD INFO DICT: (?P<world>\{[^}]*\})",
        ("WORLD INFO DICT",), None, "DeepSpeed world info",
        ("n1: [INFO] [launch.py:146:main] WORLD INFO DICT: {'n1': [0, 1], 'n2': [0, 1]}",),
    ),
    Signature(  # torchrun's rendezvous names each node's rank; `-ib0` is the name of its InfiniBand interface
        "elastic_rdzv_join", _F, _CTX,
        r"The node '(?P<rhost>[A-Za-z][\w.-]*?)(?:-ib\d+)?_\d+_\d+' has joined round \d+ of the rendezvous "
        r"'[^'\n]*' as rank (?P<rdzv_rank>\d{1,5}) in a world of size \d+",
        ("has joined round",), None, "torchrun's rendezvous: {rhost} is node {rdzv_rank}",
        ("INFO:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'jean-zay-iam52-ib0_166430_0' has "
         "joined round 0 of the rendezvous 'none' as rank 2 in a world of size 4.",),
    ),
    Signature(  # DeepSpeed's launcher kills its children in the order it started them: local rank 0, 1, ...
        "ds_kill_subprocess", _F, _CTX, r"sigkill_handler\] Killing subprocess (?P<kpid>\d+)",
        ("Killing subprocess",), None, "DeepSpeed killed its child {kpid}",
        ("gpu-k02: [2023-07-19 10:45:06,318] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 52210",),
    ),
    Signature(  # DeepSpeed's launcher names each child's pid and local rank as it starts it (round 34)
        "ds_spawned", _F, _CTX,
        r"\] process (?P<pid>\d+) spawned with command: [^\n]*?'--local_rank=(?P<local_rank>\d+)'",
        ("spawned with command",), None, "DeepSpeed started process {pid} as local rank {local_rank}",
        ("[INFO] [launch.py:256:main] process 2219481 spawned with command: ['python', 't.py', '--local_rank=5']",),
    ),
    Signature(  # Ray Train lists its workers' pids with their global ranks; its log prefix names the pid
        "ray_worker_rank", _F, _CTX, r"\bpid=(?P<pid>\d+)\) world_rank=(?P<rank>\d+)", ("world_rank=",), None,
        "Ray Train worker of rank {rank}",
        ("(TorchTrainer pid=93, ip=10.0.0.1) - (node_id=9c1e, ip=10.0.0.2, pid=18870) world_rank=4, local_rank=0",),
    ),
    Signature(  # a Ray worker's line that names its host: the pid of its prefix places that host (round 9)
        "ray_worker_host", _F, _CTX,
        r"^\(\w+ pid=(?P<pid>\d+)(?:, ip=[\w.:]+)?\)[^\n]*?(?:\b|get)host(?:name)?(?:\(\))?[ =:][ \t]*"
        r"(?P<node>[A-Za-z][\w-]*[\d-][\w.-]*)",
        ("hostname", "host="), None, "Ray worker on {node}",
        ("(RayTrainWorker pid=22416, ip=10.0.12.31) [setup] socket.gethostname()=raynode-b2 cuda:2",),
    ),
    Signature(  # Ray's remote error header names the worker process whose traceback follows (round 9)
        "ray_task_error", _F, _CTX, r"RayTaskError(?:\((?P<exc>\w+)\))?: ray::\S+ \(pid=(?P<pid>\d+)",
        ("RayTaskError",), None, "Ray task error in pid {pid}",
        ("ray.exceptions.RayTaskError(KeyError): ray::_RayTrainWorker__execute.get_next() (pid=22416, ip=10.0.12.31)",),
    ),
    Signature(  # a `ps` row of a torchrun worker: pid, parent pid, its local rank (launchers.py makes it global)
        "ps_worker", _F, _CTX, r"^\s*(?P<wpid>\d+)\s+(?P<ppid>\d+)\s.*--local[-_]rank[= ](?P<wlocal>\d+)",
        ("--local-rank", "--local_rank"), None, "a worker process of local rank {wlocal}",
        ("1188204 1188190 Dl   cl_sync_io_wait      /p/venv/bin/python -u train.py --local-rank=6",),
    ),
    Signature(  # a `ps` row of torchrun itself: which node it is and how many workers it runs
        "ps_launcher", _F, _CTX,
        r"^\s*(?P<lpid>\d+)\s+\d+\s(?=.*--nproc[-_]per[-_]node[= ](?P<nproc>\d+))"
        r"(?=.*--node[-_]rank[= ](?P<node_rank>\d+)).*torchrun",
        ("--node_rank", "--node-rank"), None, "torchrun of node rank {node_rank}",
        ("1188190 1188101 Sl do_wait /p/venv/bin/torchrun --nnodes 2 --nproc_per_node 8 --node_rank 1 train.py",),
    ),
    Signature(  # torchrun's command line: its node rank and workers give each local rank its global one,
        # and `--role rank` makes its tee prefix `[rank<local>]:` (local_ranks.py, round 10); torchtune's `tune run`
        # passes its options to torchrun (round 35)
        "torchrun_cmd", _F, _CTX,
        r"(?=.*--nproc[-_]per[-_]node[= ](?P<nproc>\d+)\b)"
        r"(?=(?:.*(?:--node[-_]rank[= ]|\bNODE_RANK=)(?P<node_rank>\d+)\b)?)"
        r"(?=(?:.*--nnodes[= ](?P<nnodes>\S+))?)"
        r"(?=(?:.*--log[-_]dir[= ](?P<log_dir>[^\s;&|]+))?)"
        r"(?=(?:.*--role[= ](?P<role>\w+))?)"
        r"(?=(?:.*--local[-_]ranks[-_]filter[= ](?P<shown>\d+(?:,\d+)*))?)"  # only these ranks' output is printed
        r".*\b(?:torchrun|torch\.distributed\.(?:run|launch)|tune run)\b",
        ("--nproc_per_node", "--nproc-per-node"), None, "torchrun of {nproc} processes a node",
        ("+ torchrun --nnodes=2 --node-rank=1 --nproc-per-node=4 --role rank --tee 3 -m torchtitan.train",),
    ),
    Signature(  # the batch shell's job-control line for a command it ran that was killed (single_process.py)
        "batch_shell_killed", Category.HOST, _CTX,
        r"slurm_script: line \d+: +(?P<pid>\d+) (?P<how>Killed|Segmentation fault|Aborted|Bus error)\b"
        r"(?: \(core dumped\))?\s+(?P<command>.+)$",
        ("slurm_script: line",), None, "the batch script's command {command} was {how}",
        ("/var/spool/slurm/d/job4471852/slurm_script: line 21: 2481307 Killed       python train.py --cfg c.yaml",),
    ),
    Signature(  # `scontrol show job`'s batch node: where the batch step, and errors it prints without a host, ran
        # (batch_host.py, round 36: a node-side launch failure held the job before any training line)
        # sacct's `.batch` row names it too, in the NodeList column of the header above it (batch_host.py, round 85c)
        "slurm_batch_host", _S, _CTX,
        r"(?:^\s*BatchHost=(?P<host>[A-Za-z][\w.-]*)\s*$|^\s*(?P<job>\d+)\.bat(?:ch|\+)\s+batch\s)",
        ("BatchHost=", ".bat"), None, "the job's batch step ran on {host}",
        ("   BatchHost=g-d17", " 2998062.batch      batch      FAILED   00:00:00        1            c004     2:0"),
    ),
    Signature(  # the `pid:` and `ip:` of the actor a RayActorError says died (ray_actor.py)
        "ray_dead_actor", _S, _CTX, r"^\s+(?:pid: (?P<actor_pid>\d+)|ip: (?P<actor_ip>(?:\d{1,3}\.){3}\d{1,3}))\s*$",
        ("pid: ", "ip: "), None, "the dead actor's process",
        ("\tpid: 1942", "\tip: 10.1.4.23"),
    ),
    Signature(  # sacct's header: where its NodeList column ends (batch_host.py)
        "sacct_header", _S, _CTX, r"^\s*JobID\s[^\n]*\bNodeList\b", ("NodeList",), None, "sacct's columns",
        ("       JobID    JobName  Partition        NodeList      State ExitCode    Elapsed",),
    ),
    Signature(  # srun starting one launcher a node, each told its node rank by Slurm (`srun ... $LAUNCHER --node_rank
        # $SLURM_PROCID`): srun's tasks are launchers, not ranks (launchers._launcher_tasks, round 38)
        "srun_node_rank_launch", _F, _CTX, r"\bsrun\b[^\n]*--node[-_]rank[= ]\$\{?SLURM_(?:PROCID|NODEID)\b",
        ("srun",), None, "srun started one launcher a node",
        ("+ srun --jobid 2217304 --label bash -c '$LAUNCHER --node_rank $SLURM_PROCID pretrain_gpt.py'",),
    ),
    Signature(  # accelerate's command line as a job script echoes it per node: its machine rank (node_ranks.py:
        # two nodes launched with one machine rank collide, round 36)
        "accelerate_cmd", _F, _CTX,
        r"(?:\blaunching on (?P<host>[\w.-]+)\b[^\n]*?)?\baccelerate launch\b"
        r"(?=.*--num[-_]machines[= ](?P<nnodes>\d+)\b)(?=.*--machine[-_]rank[= ](?P<node_rank>\d+)\b)",
        ("accelerate launch",), None, "accelerate launch as machine {node_rank} of {nnodes}",
        ("launching on hpc-g032 with: accelerate launch --num_machines 2 --num_processes 8 --machine_rank 0",),
    ),
    Signature(  # torchrun's rendezvous result: the global ranks of this node's local ranks (round 10)
        "elastic_rdzv_ranks", _F, _CTX,
        r"(?:\blocal_ranks=\[(?P<locals>[\d, ]*)\][^\n]*?)?\b(?P<which>global|role)_ranks=\[(?P<globals>[\d, .-]*)\]",
        ("global_ranks=", "role_ranks="), None, "torchrun's global ranks on this node",
        ("I1016 21:04:09.399974 77186 torch/distributed/elastic/agent/server/api.py:525]   "
         "global_ranks=[8, 9, 10, 11, 12, 13, 14, 15]",),
    ),
    Signature(
        "elastic_box_rank", _F, _CTX, r"^\s+rank\s+: (?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)",
        ("(local_rank:",), None, "torchrun failure of rank", ("  rank      : 6 (local_rank: 6)",),
    ),
    Signature(  # a start-up line that names a process's global rank and its pid (round 11): the kernel's OOM
        # kill or an Xid that names only the pid then names that rank; `local_rank` is not the rank
        "rank_pid_banner", _D, _CTX,
        r"(?<![\w-])(?:global_|world_)?rank[ =:(]\s*(?P<rank>\d{1,6})\)?[^\n]{0,120}?(?<![\w-])pid[ =:]\s*(?P<pid>\d+)",
        ("pid",), None, "process {pid} of rank {rank}",
        ("| distributed init (rank 6): env://, gpu 2, pid 1843377", "[init] rank=12 local_rank=4 pid=88213"),
    ),
    Signature(  # a pasted py-spy dump's header naming its rank (round 32: several dumps in one file)
        "pyspy_dump_banner", _D, _CTX,
        r"py-spy dump[^\n]*?--pid[ =](?P<pid>\d+)[^\n]{0,120}?(?<![\w-])(?<!local )(?:global_|world_)?rank[ =:]\s*"
        r"(?P<rank>\d{1,6})\b",
        ("py-spy dump",), None, "py-spy dump of process {pid}, rank {rank}",
        ("# py-spy dump --pid 2281988 (gpu-h100-031, local_rank 0 / global rank 0)",),
    ),
    Signature(  # where one pasted dump starts: its command (`py-spy dump --pid 5590`) or py-spy's own first line
        # (`Process 5590: python3 -u train.py`); a file named after another pid holds it too (dump_pids.py, round 35)
        # its command line may carry its global rank (`--distributed-rank 1`: the dump's rank, hang_suspects.py)
        "pyspy_process", _D, _CTX, r"(?:py-spy dump[^\n]*?--pid[ =]|^Process )(?P<dump_pid>\d+)(?=: \S|\s*$)"
        r"(?:[^\n]*?(?<![\w-])--(?:distributed[-_]|global[-_])?rank[= ](?P<rank>\d{1,6})\b)?",
        ("py-spy dump", "Process "), None, "stack dump of process {dump_pid}",
        ("$ sudo py-spy dump --pid 5590", "Process 5590: /srv/venv/bin/python3 -u recipes/train.py"),
    ),
    Signature(  # the same with the pid first (round 26: `Hostname h, pid 40212, rank 1 / size 4, local rank 1`)
        "pid_rank_banner", _D, _CTX,
        r"(?<![\w-])pid[ =:]\s*(?P<pid>\d+)[^\n]{0,120}?(?<![\w-])(?<!local )(?:global_|world_)?(?:rank|RANK)[ =:]\s*"
        r"(?P<rank>\d{1,6})\b",
        ("pid",), None, "process {pid} of rank {rank}",
        ("Torch distributed initialized. Hostname gpu-n061, pid 40212, rank 1 / size 4, local rank 1 / local size 4.",
         "== dgx-b04 pid 30133 RANK=6"),  # a loop over a node's processes, each dump under its environment's RANK
    ),
    Signature(
        "stack_in_collective", _D, _CTX, r"distributed_c10d\.py|\(deepspeed/comm/(?:comm|torch)\.py:\d+\)",
        ("distributed_c10d", "deepspeed/comm/"), None, "a stack inside a collective",
        ("    all_reduce (torch/distributed/distributed_c10d.py:2501)",
         "    all_gather_into_tensor (deepspeed/comm/comm.py:305)"),
    ),
    Signature(  # py-spy's header of a process's main thread: a rank's dump, wherever it waits (hang_suspects.py)
        "stack_main_thread", _D, _CTX, r"^Thread (?:0x)?[0-9A-Fa-f]+ \([\w ,-]+\): \"MainThread\"", ("MainThread",),
        None, "a stack dump's main thread", ('Thread 0x7FA6E7C01740 (idle): "MainThread"',),
    ),
    Signature(  # a pasted `sacct` row of the job itself (no `.step`): Slurm's final state, as if asked (analyze.py);
        # any columns between the id and the state (`--format=JobID,JobName,Partition,QOS,NodeList,Start,End,State`)
        "sacct_job_state", _S, _CTX,
        r"^(?P<job>\d+)\s+(?:\S+\s+){0,10}?(?P<state>PREEMPTED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)\b",
        ("PREEMPTED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"), None,
        "sacct: job {job} {state}", ("4714782       PREEMPTED 2023-11-28T09:12:05 2023-11-29T15:47:21 ib12gpu-001",),
    ),
    Signature(  # a pasted port listing showing a port down (a port may be unused: context, read by peers.py)
        "ib_port_down", Category.NETWORK, _CTX,
        r"(?:==> \S+ \(Down\)|^\s*state:\s+1: DOWN|/sys/class/infiniband/\w+/ports/\d+:? 1: DOWN\b|"
        r"^\s*State: Down$)",  # ibstat's (round 76b)
        ("(Down)", "1: DOWN", "State: Down"), None, "an InfiniBand port is down",
        ("mlx5_3 port 1 ==> ens111np0 (Down)", "\tstate:\t\t 1: DOWN",
         "/sys/class/infiniband/mlx5_4/ports/1 1: DOWN | 2: Polling | 10 Gb/sec (4X SDR)",  # sysfs (round 52b)
         "\t\tState: Down"),
    ),
    Signature(  # torch.multiprocessing.spawn's report of one worker's failure: its local index (spawn_ranks.py)
        "mp_spawn_process", _A, _CTX, r"-- Process (?P<local_rank>\d+) terminated with the following error",
        ("-- Process",), None, "mp.spawn worker {local_rank} failed",
        ("-- Process 2 terminated with the following error:",),
    ),
    Signature(  # detectron2's launcher echoes its arguments: this machine's index among the job's machines and its
        # GPUs, one spawned worker each (spawn_ranks.py: worker L of machine M is rank M x GPUs + L, round 100g)
        "spawn_machine_args", _A, _CTX,
        r"Command Line Args: Namespace\([^\n]*\bmachine_rank=(?P<machine_rank>\d+)[^\n]*\bnum_gpus=(?P<num_gpus>\d+)",
        ("Command Line Args: Namespace(",), None, "machine {machine_rank} of the job, {num_gpus} GPUs",
        ("Command Line Args: Namespace(config_file='a.yaml', dist_url='tcp://10.40.2.11:23456', eval_only=False, "
         "machine_rank=1, num_gpus=8, num_machines=2, opts=[], resume=False)",),
    ),
    Signature(  # a GPU's index and PCI bus in `nvidia-smi --query-gpu=index,pci.bus_id` or nvidia-smi's table
        # (gpu_bus.py: the index of the GPU an Xid names by bus, round 27)
        "gpu_index_bus", Category.GPU_HARDWARE, _CTX,
        r"^(?:\|\s+(?P<index>\d{1,2})\s+[^|\n]*\|\s*|\s*(?P<index2>\d{1,2}), )0{4}(?:0{4})?:"
        r"(?P<bus>[0-9A-Fa-f]{2}):[0-9A-Fa-f]{2}\.\d\b",
        ("0000:",), None, "GPU {index}{index2} on bus {bus}",
        ("1, 00000000:03:00.0, NVIDIA GeForce RTX 2080 Ti, 11264 MiB",
         "|   1  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |"),
    ),
    Signature(  # a task's own line naming its rank in Slurm's or the launcher's variable (`[kgc-n02] SLURM_PROCID=1 ->
        # train --rank 1`): a file whose lines give one such rank is that rank's output (file_rank.py, round 40)
        # (an environment listing's bare `SLURM_PROCID=1` line is a prompt's, prompts.py)
        "proc_rank_var", _D, _CTX, r".\b(?:SLURM_PROCID|OMPI_COMM_WORLD_RANK|PMI_RANK)=(?P<frank>\d{1,6})\b",
        ("SLURM_PROCID=", "OMPI_COMM_WORLD_RANK=", "PMI_RANK="), None, "a process of rank {frank}",
        ("[kgc-n02] SLURM_PROCID=1 -> torchbiggraph_train --rank 1 configs/schemaorg_dist.py",),
    ),
    Signature(  # HF Trainer's (and LLaMA-Factory's) start-up line of each process: its global rank; under srun's
        # label of one launcher per node it shows the labels are launchers (launchers.py, round 44)
        "hf_process_rank", _D, _CTX, r"\bProcess rank: (?P<rank>\d{1,6}), device: cuda:\d+",
        ("Process rank: ",), None, "process of rank {rank}",
        ("03/30/2024 14:02:20 - INFO - llmtuner.hparams.parser - Process rank: 4, device: cuda:0, n_gpu: 1",),
    ),
    Signature(  # TORCH_DISTRIBUTED_DEBUG=DETAIL's check of each collective (fingerprints.py, round 44)
        "collective_fingerprint", _D, _CTX,
        r"\[Rank (?P<frank>\d+)\] Running collective: CollectiveFingerPrint\(SequenceNumber=(?P<seq>\d+), "
        r"OpType=(?P<op>\w+)", ("Running collective: CollectiveFingerPrint",), None,
        "rank {frank} runs collective {seq} ({op})",
        ("[I ProcessGroupWrapper.cpp:562] [Rank 1] Running collective: CollectiveFingerPrint(SequenceNumber=1270, "
         "OpType=ALLREDUCE, TensorShape=[], TensorDtypes=Float)",),
    ),
    Signature(  # a row of nvidia-smi's process table (`|    0     21880      C   ...python     7167MiB |`, newer
        # drivers with `N/A  N/A` GI/CI columns): a GPU that has a process (gpu_bus.py: the one GPU without, round 40)
        "smi_gpu_process", Category.GPU_HARDWARE, _CTX,
        r"^\|\s+(?P<gindex>\d{1,2})\s+(?:N/A\s+N/A\s+)?(?P<gpid>\d+)\s+[CG](?:\+G)?\s+\S.*?\d+MiB\s*\|$",
        ("MiB |", "MiB|"), None, "GPU {gindex} runs process {gpid}",
        ("|    0     21880      C   ...conda3/envs/detr/bin/python     7167MiB |",
         "|    3   N/A  N/A     41207      C   /opt/py310/bin/python                 71230MiB |"),
    ),
    Signature(  # a row of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv`: a GPU's load; one
        # at 0 % with no memory among busy ones lost its process (gpu_bus.idle_gpu_rank, round 105h)
        "smi_csv_load", Category.GPU_HARDWARE, _CTX,
        r"^\s*(?P<cindex>\d{1,2}), (?P<util>\d{1,3}) ?%, (?P<mem>\d+) ?MiB\s*$",
        ("MiB",), None, "GPU {cindex} at {util} % with {mem} MiB",
        ("2, 0 %, 0 MiB", "0, 100 %, 3811 MiB"),
    ),
    Signature(  # a rank's start-up line that names its CUDA device (`rank 1/4, local_rank 1, ... device cuda:1`);
        # `drank`, not `rank`: the line places nothing else (its rank may be a prefix's local one elsewhere)
        "rank_device", _D, _CTX,
        r"(?<![\w-])(?:global_)?rank[ =:]\s*(?P<drank>\d{1,6})\b(?:[^\n]{0,80}?\bhost(?:name)?[=:] ?"
        r"(?P<dhost>[A-Za-z][\w.-]*))?[^\n]{0,160}?\bcuda:(?P<device>\d{1,2})\b"
        r"(?:[^\n]{0,80}?\bpci(?:_bus_id)?[=: ] ?(?:0{4}){1,2}:(?P<pbus>[0-9A-Fa-f]{2}):)?",
        ("cuda:",), None, "rank {drank} on cuda:{device}",
        ("torch.distributed: rank 1/4, local_rank 1, backend nccl (+gloo for cpu sync), device cuda:1",
         "[rank 5] host=ailcm-ai2 device=cuda:1 pci=0000:65:00.0"),
    ),
    Signature(  # the start-up banner of DeiT/MAE-style and fairseq training scripts: `| distributed init (rank 7):
        # env://, gpu 3`; under srun's label of a node's launcher its rank is the line's own (round 101h)
        "dist_init_banner", _D, _CTX,
        r"\bdistributed init \(rank (?P<rank>\d{1,6})\)(?:[^\n]{0,80}?\bgpu (?P<device>\d{1,2})\b)?",
        ("distributed init (rank",), None, "a rank's start-up banner",
        ("| distributed init (rank 7): env://, gpu 3",
         "2023-03-19 22:41:01 | INFO | fairseq.distributed.utils | distributed init (rank 1): tcp://gpu-n11:12941"),
    ),
    Signature(  # a traceback frame inside an installed framework (library_asserts.py: whose assertion it is)
        "library_frame", _F, _CTX,
        r"File \"(?P<path>[^\"]*/(?:site|dist)-packages/(?:[\w.+-]+\.egg/)?(?P<pkg>" + FRAMEWORK_PACKAGES + r")/"
        r"[^\"]*)\", line \d+, in (?P<func>[^\s,]+)",
        ("-packages/",), None, "a frame in {pkg}",
        ('  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/fsdp/_utils.py", line 148, in p_assert',),
    ),
    Signature(  # Composer's launcher: a rank's captured output between these (output_blocks.py, round 28)
        "rank_output_block", _A, _CTX,
        r"-{3,}(?P<edge>Begin|End) global rank (?P<block>\d{1,6}) (?:STDOUT|STDERR)-{3,}",
        ("global rank",), None, "{edge} of rank {block}'s output",
        ("----------Begin global rank 8 STDERR----------",),
    ),
    Signature(  # a frame's header in rich's boxed traceback (Lightning, HF, ColossalAI consoles), any file's:
        # library_asserts.py takes the last one above an error as the frame that raised it (round 28)
        "rich_frame", _A, _CTX,
        r"│ (?P<path>\S+\.py):\d+(?: in (?P<func>\w+))?",
        ("│ ",), None, "a frame of {path}",  # the box's edge: `.py:` alone is on every logger's line (round 34)
        ("│ /opt/conda/lib/python3.8/site-packages/colossalai/gemini/chunk/chunk.py:242 in set_l2_norm       │",),
    ),
    Signature(
        "traceback_start", _A, _CTX, r"Traceback \(most recent call last\):", ("Traceback",), None,
        "Python traceback", ("Traceback (most recent call last):",),
    ),
)
