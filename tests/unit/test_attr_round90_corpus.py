"""Rules that brought round 90 of blind cases into the corpus: mpirun's ctime stamp before its tag, an exception
that the job's time limit ended long after, the rank whose NCCL id the others waited for, ROCm's memory access
fault, and Open MPI's TCP transport in its verbose wording."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_an_exception_hours_before_the_time_limit_is_the_cause(tmp_path):
    """mpirun --timestamp-output stamps each line `Tue Nov 19 11:58:41 2019[1,0]<stderr>:`: the exception's time
    puts it two hours before the time limit that ended the others' wait."""
    log = ["Tue Nov 19 11:58:41 2019[1,0]<stderr>:Traceback (most recent call last):",
           "Tue Nov 19 11:58:41 2019[1,0]<stderr>:  File \"train_imagenet.py\", line 128, in main",
           "Tue Nov 19 11:58:41 2019[1,0]<stderr>:OverflowError: integer 2861409637 does not fit in 'int'",
           "slurmstepd: error: *** JOB 884213 ON g0147 CANCELLED AT 2019-11-19T13:52:07 DUE TO TIME LIMIT ***"]
    v = _verdict(tmp_path, {"slurm-884213.out": log})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (0,)


def test_ranks_that_waited_for_rank_0s_nccl_id_name_rank_0(tmp_path):
    lines = []
    for rank in (1, 2, 3):
        lines.append(f"[rank{rank}]: torch.distributed.DistBackendError: [{rank}] is setting up NCCL communicator and "
                     "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got "
                     "error: wait timeout after 1800000ms, keys: /default_pg/0//cuda//0")  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.culprit.ranks == (0,)


def test_rocms_memory_access_fault_is_the_crashed_ranks(tmp_path):
    log = ["6: Memory access fault by GPU node-4 (Agent handle: 0x6f1a2b0) on address 0x7ffe4c400000. Reason: Page not "
           "present or supervisor privilege.",
           "srun: error: tuo-g115: task 6: Aborted (core dumped)"]  # fmt: skip
    v = _verdict(tmp_path, {"gpt.out": log})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (6,) and v.culprit.nodes == ("tuo-g115",)


def test_open_mpis_verbose_tcp_connect_failure_is_the_network(tmp_path):
    log = ["[hpc-c01:20431] btl: tcp: connect() to 10.12.0.42:1024 failed: No route to host (113)"]
    v = _verdict(tmp_path, {"run.log": log})
    assert v.category is Category.NETWORK and v.restartable is False


def test_the_host_whose_nccl_bootstrap_chose_docker0_is_the_culprit(tmp_path):
    """The peer that dials 172.17.0.1 only followed it: the host whose NCCL bootstrap used docker0 offered it."""
    dialler = ["vis-gpu07:88216:88305 [3] misc/socket.cc:456 NCCL WARN Net : Connect to 172.17.0.1<52841> failed : "
               "Connection refused"]
    offerer = ["vis-gpu11:40517:40517 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>"]
    v = _verdict(tmp_path, {"machine0_vis-gpu07.log": dialler, "machine1_vis-gpu11.log": offerer})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("vis-gpu11",)
