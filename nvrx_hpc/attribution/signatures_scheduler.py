"""The catalog's scheduler part: the batch system or the cluster ending the job (Slurm's time limit, LSF's and PBS's
run limits, preemption, a cloud taking a VM back, Kubernetes' preemption and evictions, a cancel). It sits after the
host's signatures and before the numerical ones in `signatures.CATALOG`, which keeps the order a line is tried in."""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["SCHEDULER"]

_H, _S = Category.HOST, Category.SCHEDULER
_ROOT, _WEAK = Role.ROOT, Role.WEAK
_SLURM_CANCEL = r"\*\*\* (?:JOB|STEP) (?P<job>[\d.]+(?:\.\w+)?) ON (?P<node>\S+) CANCELLED AT (?P<at>\S+)"

SCHEDULER: tuple[Signature, ...] = (
    Signature(  # Slurm's time limit; LSF's and PBS's run limits read as it (round 92g)
        "slurm_time_limit", _S, _ROOT, rf"{_SLURM_CANCEL} DUE TO TIME LIMIT|^TERM_RUNLIMIT: job killed after reaching|"
        r"PBS: job killed: walltime \d+ exceeded limit", ("TIME LIMIT", "TERM_RUNLIMIT", "walltime"), True,
        "job hit its scheduler's time limit",
        ("slurmstepd: error: *** JOB 494583 ON n1 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
         "TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "=>> PBS: job killed: walltime 3634 exceeded "
         "limit 3600"),
    ),
    Signature(  # `#SBATCH --signal=USR1@600` warns the job before its limit; a launcher that does not catch it dies of
        # it, and srun reports each task ended by the signal (round 52a): the scheduler ended the job, early
        "slurm_warning_signal", _S, _ROOT, r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): User defined "
        r"signal [12]\b", ("User defined signal",), True,
        "Slurm's warning signal (--signal=USR1) ended the job's tasks before its time limit",
        ("srun: error: gpu-c14: task 2: User defined signal 1",),
    ),
    Signature(  # PBS's record of a job deleted for a higher queue's (`qstat -xf` comment, round 57a)
        "pbs_preempted", _S, _ROOT, r"\bwas deleted: preempted by job\b", ("preempted by job",), True,
        "PBS preempted the job for another queue's",
        ("    comment = Job run at Mon Jun 10 at 23:58 on (x3102c0s1b0n0:ncpus=64)+... and was deleted: preempted "
         "by job in queue demand",),
    ),
    Signature(  # a node Slurm drained because its prolog failed there (`sinfo -R`): the job was requeued off it
        # (round 57a); one node's, restartable on others
        "slurm_node_prolog_error", _S, _ROOT,
        r"(?:^Prolog error\s+\S+\s+\S+\s+(?P<node>[A-Za-z][\w.-]*)\s*$|"
        r"^(?P<failed>[A-Za-z][\w.-]*)\s+drain(?:ed|ing)?\s+Prolog error\s*$)",
        ("Prolog error",), True, "Slurm drained {node} because its prolog failed there",
        ("Prolog error         root      2023-10-24T09:13:02 nvh-027", "nvh-027 drained Prolog error"),
    ),
    Signature(
        "slurm_preempted", _S, _ROOT, rf"{_SLURM_CANCEL} DUE TO (?:PREEMPTION|JOB REQUEUE)", ("PREEMPTION", "REQUEUE"),
        True, "job was preempted or requeued",
        ("slurmstepd: error: *** JOB 77 ON n2 CANCELLED AT 2024-04-20T09:09:37 DUE TO PREEMPTION ***",
         "slurmstepd: error: *** JOB 60814 ON n2 CANCELLED AT 2022-08-12T02:06:12 DUE TO JOB REQUEUE ***"),
    ),
    Signature(  # Azure ML's node agent told of a low-priority VM's eviction (`[tvmps_91d4..._p] Received pre-emption
        # warning signal (scheduled event Preempt ...)`), and the job's `PreemptionError` (round 92g)
        "azureml_preempted", _S, _ROOT,
        r"\[(?P<failed>tvm\w+)\] Received pre-emption warning signal|PreemptionError: Nodes of this job got pre-empted",
        ("pre-emption warning", "PreemptionError"), True, "Azure ML took back a low-priority node",
        ("2024-05-13T22:38:17.402Z WARN  [tvmps_91d4c3aa06be4f1f8c27_p] Received pre-emption warning signal (scheduled "
         "event Preempt, NotBefore=2024-05-13T22:38:47Z)",),
    ),
    Signature(  # a cloud taking back a spot/preemptible VM (GCP's metadata notice, AWS's interruption), round 34
        "cloud_preempted", _S, _ROOT,
        r"(?:termination is imminent|spot[- ]termination|[Ss]pot [Ii]nstance interruption|[Ii]nstance was preempted|"
        r"[Tt]he cluster is preempted|"  # SkyPilot's managed spot controller (round 42)
        r"^i-[0-9a-f]+\s+(?P<node>[A-Za-z][\w-]*)\S*\s.*\bServer\.SpotInstanceTermination|"  # EC2's state reason
        # a host's row (round 53b), or GCE's operations list naming the instance it preempted (round 61b)
        r"^(?:systemevent-\S+\s+)?(?!systemevent-)(?P<failed>[A-Za-z][\w-]*)\S*\s+(?:\w+\s+Server\.SpotInstance"
        r"Termination|compute\.instances\.preempted\b)|"
        r"Server\.SpotInstanceTermination|Spot Instance terminated due to|instance-terminated-(?:no-capa|by-pr))",
        ("imminent", "termination", "interruption", "preempted", "Termination", "terminated"), True,
        "the cloud took the instance back (spot)",
        ("start-worker 2025/02/10 20:07:14 GCP Metadata Service says termination is imminent",),
    ),
    Signature(  # Kubernetes' scheduler evicting a pod for a higher-priority one (its event names the node), a gang
        # scheduler's `Preempted by scheduler` (round 64a)
        "k8s_preempted", _S, _ROOT,
        # the scheduler's own event names the preemptor by uid (`Preempted by pod 4e1a9c07-... on node X`, round 82)
        r"\bPreempted by (?:(?:a pod|pod [\w-]+|(?:[\w.-]+/)?[\w.-]+) on node (?P<failed>[A-Za-z][\w.-]*)|scheduler\b)",
        ("Preempted by",), True, "the cluster's scheduler preempted a pod of the job",
        ("49s  Normal  Preempted  pod/train-worker-2  Preempted by infer/realtime-6d9f on node gpu-a10-pool-7c9qk",),
    ),
    Signature(  # someone deleted a pod of the running job (`kubectl delete pod`): its peers lose it (rounds 82f, 84b)
        "k8s_pod_deleted", _S, _ROOT, r'^pod "(?P<failed>[a-z0-9][\w.-]*)" deleted\b',
        ('" deleted',), True, "a pod of the job was deleted",
        ('pod "resnet-elastic-worker-1" deleted',),
    ),
    Signature(  # an admin cordoned or drained the node for maintenance: its pods are deleted under the job (86c)
        "k8s_node_drained", _S, _ROOT,
        r"\b[Nn]ode[ /](?P<failed>[A-Za-z][\w.-]*) (?:status is now: NodeNotSchedulable|cordoned|drained)\b",
        ("NodeNotSchedulable", "cordoned", "drained"), True, "the node was cordoned or drained under the job",
        ("16m  Normal  NodeNotSchedulable  node/gn-h20-0417  Node gn-h20-0417 status is now: NodeNotSchedulable",),
    ),
    Signature(  # the kubelet evicting pods when its node runs short of memory or disk: it evicts first the pods that
        # use more than they requested, so the job's own demand did it (round 74d); its node events name the node
        "k8s_evicted", _H, _ROOT,
        # a pod over its ephemeral-storage limit (a checkpoint written to the container's disk, round 86a)
        r"(?:The node was low on resource: \w[\w-]*|Pod ephemeral local storage usage exceeds|"
        r"\b(?:EvictionThresholdMet|NodeHasInsufficientMemory|"
        r"NodeHasDiskPressure)\s+node/(?P<node>[A-Za-z][\w.-]*))",
        ("low on resource", "node/", "ephemeral local storage"), False,
        "Kubernetes evicted the job's pod: it or its node ran short of memory or disk",
        ("2m  Warning  Evicted  pod/train-0  The node was low on resource: memory. Container main was using "
         "49837196Ki, which exceeds its request of 1Gi.",),
    ),
    Signature(  # Kueue took the workload's quota back: its pods were not all ready within the PodsReady timeout (a
        # replacement pod that could not be scheduled, round 96b); the queue's doing, and it requeues the workload
        "kueue_pods_ready_evicted", _S, _ROOT, r"(?:EvictedDueToPodsReadyTimeout|Exceeded the PodsReady timeout)",
        ("PodsReady",), True, "Kueue evicted the workload: its pods were not ready within the PodsReady timeout",
        ("31m  Warning  EvictedDueToPodsReadyTimeout  workload/jobset-llama3-pt-5e0c1  Exceeded the PodsReady timeout "
         "research/jobset-llama3-pt-5e0c1",),
    ),
    Signature(  # weak: srun cancels the step itself when a task dies; a cancel is a cause only alone
        "slurm_cancelled", _S, _WEAK, rf"{_SLURM_CANCEL}(?: DUE TO (?P<why>[A-Za-z_ ]+?))? \*\*\*",
        ("CANCELLED AT",), False, "job was cancelled",
        ("slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2024-04-20T09:09:37 ***",),
    ),
)
