"""The catalog's teardown part: what launchers, srun and Python print as a process ends (C++ terminate,
torchrun's and DeepSpeed's exits, srun's task exits, an uncaught exception). It comes after the failure
signatures (signatures.py) and before the localising ones, so a line that matches a failure is that failure."""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["TEARDOWN"]

_S, _A, _F = Category.SCHEDULER, Category.APPLICATION, Category.FRAMEWORK_CRASH
_ROOT, _CASC, _CTX = Role.ROOT, Role.CASCADE, Role.CONTEXT

TEARDOWN: tuple[Signature, ...] = (
    # ---- teardown and context -------------------------------------------------------------------
    Signature(
        "cxx_terminate", _F, _CASC, r"terminate called after throwing an instance of '(?P<type>[^']+)'",
        ("terminate called",), True, "C++ terminate ({type})",
        ("terminate called after throwing an instance of 'c10::DistBackendError'",),
    ),
    Signature(  # Intel's oneCCL failed a Level Zero call (`2024:06:10-09:19:22:(97125) |CCL_ERROR| ... ze error at
        # zeCommandQueueExecuteCommandLists, code: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY`): the collective library's
        # failure on the process of that pid (rounds 38a, 84d)
        "oneccl_ze_error", _F, _ROOT,
        r":\((?P<pid>\d+)\) \|CCL_ERROR\| [^\n]*?ze error at \w+, code: (?P<code>ZE_RESULT_ERROR_\w+)",
        ("|CCL_ERROR|",), False, "oneCCL's Level Zero call failed ({code})",
        ("2024:06:10-09:19:22:(97125) |CCL_ERROR| worker.cpp:338 ccl_worker_func: worker 0 caught internal exception: "
         "oneCCL: ze_call.cpp:28 do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists, code: "
         "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",),
    ),
    Signature(
        "elastic_child_failed", _F, _CASC,
        r"(?:ChildFailedError|failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local_rank>\d+))",
        ("ChildFailedError", "exitcode:"), True, "torchrun saw a worker fail",
        ("torch.distributed.elastic.multiprocessing.api:[ERROR] failed (exitcode: -6) local_rank: 3 (pid: 1237)",),
    ),
    Signature(  # DeepSpeed's launcher saw one of its local processes exit; so did torch.distributed.launch before
        # torchrun, whose CalledProcessError quotes the command of the first process that failed (round 31)
        "ds_launcher_exit", _F, _CASC,
        r"(?:sigkill_handler\] |CalledProcessError: Command ')\[[^\]]*'--local_rank=(?P<local_rank>\d+)'[^\]]*\]'? "
        r"(?:exits with return code = |returned non-zero exit status |died with <Signals\.SIG\w+: )(?P<code>-?\d+)",
        ("exits with return code", "returned non-zero exit status", "died with <Signals."), True,
        "the launcher saw local rank {local_rank} exit with {code}",
        ("n1: [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=3'] exits with "
         "return code = -11",
         "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=5', '--cv', "
         "'0']' returned non-zero exit status 1."),
    ),
    Signature(  # torch.multiprocessing.spawn saw a worker end by a signal or an exit code, with no traceback of its own
        # (older torch raises a bare Exception, round 74a); spawn_ranks.py gives it the worker's rank
        "mp_spawn_exited", _F, _CASC,
        r"(?:ProcessExitedException: |^Exception: )process (?P<local_rank>\d+) terminated with "
        r"(?:signal (?P<signal>SIG[A-Z]+)|exit code (?P<code>-?\d+))",
        ("terminated with signal", "terminated with exit code"), True, "mp.spawn saw process {local_rank} end",
        ("Exception: process 0 terminated with signal SIGKILL",),
    ),
    Signature(  # a wrapper (llamafactory-cli, a site script) reports that the launcher it ran failed: the launcher's
        # workers' own lines say why (round 51b)
        "launcher_subprocess_failed", _F, _CASC,
        r"CalledProcessError: Command '\['(?:[^']*/)?(?:torchrun|deepspeed|accelerate|mpirun|srun|python[\d.]*', '-m', "
        r"'torch\.distributed\.(?:run|launch))'[^\]]*\]' (?:returned non-zero exit status|died with) ",
        ("CalledProcessError",), True, "a wrapper saw its launcher fail",
        ("subprocess.CalledProcessError: Command '['torchrun', '--nnodes', '2', '--nproc_per_node', '4', 'train.py']' "
         "returned non-zero exit status 1.",),
    ),
    Signature(
        "srun_task_exit", _S, _CASC,
        r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): (?P<what>Exited with exit code (?P<code>\d+)|"
        r"Killed|Terminated|Segmentation fault|Aborted|Bus error)",
        ("srun: error",), True, "srun: task(s) {tasks} on {node}: {what}",
        ("srun: error: n3: task 3: Exited with exit code 1",),
    ),
    Signature(  # Flux's job shell on the job's tasks ending by a signal (`flux-job: task(s) Segmentation fault`): the
        # launcher's echo of a rank's own crash, which its output shows (round 88d)
        "flux_task_exit", _S, _CASC,
        r"^flux-job: task\(s\) (?:[\d,-]+ )?(?P<what>Exited with exit code (?P<code>\d+)|Killed|Terminated|"
        r"Segmentation fault|Aborted|Bus error|Floating point exception|Illegal instruction)",
        ("flux-job: task",), True, "flux-job: task(s) {what}",
        ("flux-job: task(s) Segmentation fault",),
    ),
    Signature(  # Composer's launcher: the rank that crashed first, then each rank's exit (`-15`: it stopped them)
        "composer_rank_exit", _F, _CASC,
        r"(?:^|composer\.cli\.launcher:)(?:Global rank|Rank) (?P<rank>\d+) (?:\(PID \d+\) exited with code|"
        r"crashed with exit code) (?P<code>-?\d+)",
        ("exited with code", "crashed with exit code"), True, "Composer's launcher saw a rank exit with {code}",
        ("ERROR:composer.cli.launcher:Rank 3 crashed with exit code 1.", "Global rank 3 (PID 4102) exited with code 1"),
    ),
    Signature(  # slurmd ran the site's prolog or epilog and it failed: Slurm drains the node (a broken health script
        # drains every node it runs on until an admin fixes it, round 45)
        "slurm_prolog_epilog_failed", _S, _ROOT, r"error: \[job (?P<job>\d+)\] (?P<which>prolog|epilog) failed status=",
        ("prolog failed", "epilog failed"), False, "the site's Slurm {which} failed (Slurm drains the node)",
        ("[2026-06-18T09:22:03.913] error: [job 118] epilog failed status=1:0",),
    ),
    Signature(  # argparse refused the command line (a launcher flag the script does not take, `--use-env`): the
        # job's own launch line, every restart meets it again (round 46)
        "argparse_error", _A, _ROOT, r"^(?:\S+: )?[\w.-]+\.py: error: (?P<why>unrecognized arguments: .*|the following "
        r"arguments are required: .*|argument .*)", (".py: error: ",), False, "the script refused its arguments: {why}",
        ("train.py: error: unrecognized arguments: --use-env",),
    ),
    Signature(  # the interpreter was given a script that is not there (a wrong path or a missing mount), round 43
        "python_script_missing", _A, _ROOT, r"python[\d.]*: can't open file '(?P<path>[^']+)': \[Errno 2\]",
        ("can't open file",), False, "python could not open {path}",
        ("python: can't open file '/opt/mnist/src/dist_mnist.py': [Errno 2] No such file or directory",),
    ),
    Signature(  # slurmd's own copy of the batch script is gone from its spool (a node's /tmp cleaned under it): the
        # node's Slurm, not the user's program (round 49)
        "slurm_script_missing", _S, _ROOT,
        r"slurmstepd(?:-[\w.-]+)?: error: execve\(\): (?P<prog>\S*/slurm_script): No such file or directory",
        ("slurm_script",), True, "slurmd lost the job's batch script ({prog})",
        ("slurmstepd: error: execve(): /tmp/slurmd/job00089/slurm_script: No such file or directory",),
    ),
    Signature(  # srun could not load the site's SPANK plugins (a plugstack file it cannot read): every step fails until
        # an admin fixes the configuration (round 49)
        # (Slurm's loader's words, not a plugin's own `spank: <plugin>: ...` message)
        "spank_init_failed", _S, _ROOT, r"srun: error: (?:spank: Failed to open .*|Plug-in initialization failed)",
        ("spank: Failed to open", "Plug-in initialization failed"), False,
        "srun could not load the site's SPANK plugins",
        ("srun: error: spank: Failed to open /opt/slurm/etc/plugstack.conf.d/sedXq3Lm0: Permission denied",),
    ),
    Signature(  # the program srun was told to start is not there on that node (a venv not activated)
        "srun_execve_failed", _A, _ROOT, r"slurmstepd(?:-[\w.-]+)?: error: execve\(\): (?P<prog>\S+): (?P<why>.*)",
        ("execve()",), False, "srun could not start {prog}: {why}",
        ("slurmstepd: error: execve(): accelerate: No such file or directory",),
    ),
    Signature(  # srun does not know an option the job's script gives it: a plugin it lacks on this cluster (pyxis's
        # `--container-image`, round 96a), or a typo; the launch, met on every run
        "launcher_unknown_option", _A, _ROOT,
        r"\b(?P<prog>srun|sbatch|salloc): unrecognized option '?(?P<opt>--?[\w-]+)",
        ("unrecognized option",), False, "{prog} does not know the option {opt} (a plugin missing, or a typo)",
        ("srun: unrecognized option '--container-image=nvcr.io/nvidia/nemo:25.02'",),
    ),
    Signature(  # Intel MPI's Hydra could not start a program on a node (`[proxy:1:1@c102] HYD_spawn (...): execvp
        # error on file X (No such file or directory)`, round 96h): the program is not there on that node
        "hydra_execvp_failed", _A, _ROOT,
        r"\[proxy:[\d:]+@(?P<node>[\w.-]+)\] HYD_spawn \([^)]*\): execvp error on file (?P<prog>\S+) "
        r"\((?P<why>[^)]*)\)",
        ("execvp error on file",), False, "Hydra could not start {prog} on {node}: {why}",
        ("[proxy:1:1@c102] HYD_spawn (../../src/pm/i_hydra/libhydra/spawn/intel/hydra_spawn.c:117): execvp error on "
         "file /opt/app/bin/ep_server (No such file or directory)",),
    ),
    Signature(  # Cray MPICH was asked for GPU buffers (MPICH_GPU_SUPPORT_ENABLED=1) by a program not linked with its
        # GPU transport layer (mpi4py built without GTL, round 97a): the build's, on every rank and run
        "cray_mpich_gtl_not_linked", _A, _ROOT, r"GPU_SUPPORT_ENABLED is requested, but GTL library is not linked",
        ("GTL library is not linked",), False, "Cray MPICH's GPU support is on but the program lacks its GTL",
        ("MPICH ERROR [Rank 0] [job id 718244.0] [nid006311] - Abort(-1) (rank 0 in comm 0): MPIDI_CRAY_init: "
         "GPU_SUPPORT_ENABLED is requested, but GTL library is not linked",),
    ),
    Signature(  # pdsh ran the launch command on a host that lacks it (127: not found, 126: not runnable), round 33
        "pdsh_remote_not_found", _A, _ROOT,
        r"^pdsh@[\w.-]+: (?P<node>[\w.-]+): ssh exited with exit code (?P<code>12[67])\b",
        ("ssh exited",), False, "the launch command could not run on {node} (pdsh: exit code {code})",
        ("pdsh@n11: n12: ssh exited with exit code 127",),
    ),
    Signature(  # PyTorch's flight-recorder analyser run afterwards found no dumps under the prefix it was given: the
        # user's tool, not the job's failure (round 87d)
        "fr_trace_no_files", _A, _CTX, r"AssertionError: no files loaded from \S+ with prefix",
        ("no files loaded from",), None, "the flight-recorder analyser found no dumps",
        ("AssertionError: no files loaded from /mnt/shared/fr with prefix nccl_trace_rank_",),
    ),
    Signature(
        "python_exception", _A, _ROOT,
        # (StopIteration: the one built-in a training step raises whose name says neither, round 74a)
        # (a module's own bare `Error` class counts with its module path: `wandb.errors.Error: ...`, round 92a)
        r"^(?:\[rank\d+\]: ?)?(?P<exc>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)|"
        # (a bare `assert` prints its name alone: `AssertionError`, round 93e)
        r"(?:[A-Za-z_]\w*\.)+(?:Error|Exception)|StopIteration)(?:: |(?<=^AssertionError)(?=\s*$)|"
        r"(?<=\]: AssertionError)(?=\s*$)|(?<=\]:AssertionError)(?=\s*$))"
        r"(?P<msg>.*)",
        ("Error: ", "Exception: ", "Interrupt: ", "StopIteration: ", "AssertionError"), False, "{exc}: {msg}",
        ("ValueError: shape mismatch: expected [4, 8], got [4, 9]", "AssertionError"),
    ),
)
