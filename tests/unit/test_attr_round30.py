"""Rules from round 30 of blind cases, one small case each: a rank whose watchdog reports another operation at
the next call than all the others; py-spy dumps of which one waits outside any collective; Ray's memory monitor
naming the node's address and the killed task's pid; `kubectl get pods -o wide` with NODE as its last column;
a SIGBUS beside a `df` that shows /dev/shm full; one host's ranks all failing to connect to the same peer."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def _watchdog(rank: int, seq: int, op: str) -> str:
    return (f"[E ProcessGroupNCCL.cpp:828] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL("
            f"SeqNum={seq}, OpType={op}, Timeout(ms)=1800000) ran for 1809852 milliseconds before timing out.")


def test_the_rank_timed_out_in_another_operation_at_the_next_call_is_named(tmp_path):
    out = [_watchdog(r, 4412, "BROADCAST") for r in (1, 3, 0)] + [_watchdog(2, 4413, "ALLREDUCE")]
    v = analyze_run(write_run(tmp_path, {"train_4xA100.log": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (2,)
    assert v.restartable is False  # its code took another path: a restart replays it


def test_a_rank_one_call_ahead_in_the_same_operation_is_not_a_mismatch(tmp_path):
    out = [_watchdog(r, 4412, "ALLREDUCE") for r in (1, 3, 0)] + [_watchdog(2, 4413, "ALLREDUCE")]
    v = analyze_run(write_run(tmp_path, {"train_4xA100.log": out})).verdict
    assert v.culprit.ranks != (2,)


PYSPY = """# py-spy dump --pid {pid}
Process {pid}: /opt/conda/bin/python -u train.py
Python v3.8.13 (/opt/conda/bin/python3.8)

Thread 0x7FA6E7C01740 (idle): "MainThread"
{frames}
Thread 0x7FA51B7FE700 (idle): "Thread-3"
    wait (threading.py:306)
    run (tqdm/_monitor.py:60)
"""


def test_the_dumped_rank_waiting_outside_any_collective_is_named(tmp_path):
    queue = "    get (queue.py:170)\n    __next__ (fairseq/data/iterators.py:648)\n    train (fairseq_cli/train.py:274)"
    collective = ("    all_reduce (torch/distributed/distributed_c10d.py:1322)\n"
                  "    all_reduce_dict (fairseq/distributed/utils.py:693)\n    train (fairseq_cli/train.py:277)")
    out = ["2022-10-14 09:17:07 | INFO | train_inner | epoch 002:    129 / 571 loss=6.958",
           "slurmstepd: error: *** JOB 5530418 ON sgc-n041 CANCELLED AT 2022-10-14T12:41:26 ***"]
    files = {"slurm-5530418.out": out, "rank0.stack": PYSPY.format(pid=118207, frames=queue).splitlines(),
             "rank13.stack": PYSPY.format(pid=40711, frames=collective).splitlines()}
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (0,)


def test_rays_memory_monitor_names_the_node_by_address_and_the_rank_by_pid(tmp_path):
    out = ['+ echo "head node: h200-a01 (10.1.180.84), worker: h200-a02 (10.1.180.91)"',
           "(head, rank=0, pid=4503) [INFO|2025-10-11 16:40:31] parser:406 >> Process rank: 0, world size: 16",
           "(worker, rank=9, pid=21878, ip=10.1.180.91) [INFO|2025-10-11 16:40:31] parser:406 >> Process rank: 9",
           "(head, rank=0, pid=4503) [INFO|trainer.py:3993] 2025-10-11 23:21:49,117 >> Saving model checkpoint",
           "(raylet) [2025-10-11 23:27:14,561 E 2981 2981] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
           "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: ba65c80c8aec, "
           "IP: 10.1.180.84) over the last time period.",
           "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
           "Memory on the node (IP: 10.1.180.84, ID: ba65c80c8aec) where the task (actor ID: d221d262, "
           "name=RayTrainWorker.__init__, pid=4503, memory used=1187.41GB) was running was 1908.61GB / 2003.52GB"]
    v = analyze_run(write_run(tmp_path, {"slurm-5532817.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((0,), ("h200-a01",))


def test_a_pod_listing_whose_last_column_is_node_maps_addresses_to_nodes(tmp_path):
    pods = ["$ kubectl get pods -o wide -l skypilot-cluster=lf405b-2f1c",
            "NAME                    READY   STATUS    RESTARTS   AGE   IP            NODE",
            "lf405b-2f1c-head        1/1     Running   0          7h    10.4.212.37   h200-node-07",
            "lf405b-2f1c-worker1     1/1     Running   0          7h    10.4.212.41   h200-node-12"]
    out = ["(raylet) [2025-10-11 17:49:06,881 E 2271 2271] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
           "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5d2e19cf, "
           "IP: 10.4.212.37) over the last time period."]
    v = analyze_run(write_run(tmp_path, {"sky-status.txt": pods, "sky-logs-job1.log": out})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("h200-node-07",)


BUS = ["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 2 (pid: 413) of binary",
       "  traceback : Signal 7 (SIGBUS) received by PID 413"]


def test_a_bus_error_beside_a_full_dev_shm_is_the_hosts_shared_memory(tmp_path):
    df = ["user@a100-box-07:~$ docker exec axolotl df -h /dev/shm", "Filesystem      Size  Used Avail Use% Mounted on",
          "shm              64M   64M     0 100% /dev/shm"]
    v = analyze_run(write_run(tmp_path, {"train.log": BUS, "container_check.txt": df})).verdict
    assert v.category is Category.HOST and v.restartable is False


def test_a_bus_error_alone_is_the_hosts_not_a_crash(tmp_path):
    v = analyze_run(write_run(tmp_path, {"train.log": BUS})).verdict
    assert v.category is Category.HOST and not v.restartable  # round 47 (was unknown): a container's small /dev/shm


def test_one_hosts_ranks_failing_to_reach_the_same_peer_name_the_peers_node(tmp_path):
    out = ["orc-dbg03:2210871:2210871 [0] NCCL INFO Bootstrap : Using ib0:10.36.14.3<0>",
           "orc-h17b:913355:913355 [0] NCCL INFO Bootstrap : Using ib0:10.36.21.117<0>"]
    out += [f"orc-dbg03:{2210871 + r}:2211199 [{r}] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            f"10.36.21.117<{52941 + r}> failed : Software caused connection abort" for r in (0, 3)]
    v = analyze_run(write_run(tmp_path, {"slurm-4417263.out": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("orc-h17b",)
