"""Rules from round 34 of blind cases: a cloud taking back a spot VM is the scheduler's; NCCL's OFI plugin unable to
add a peer's address on every node is the fabric's, no node named; a line saying a rank's communicator was aborted
is not that rank waiting; DeepSpeed's `process P spawned with command` gives a killed pid its rank."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_a_spot_vms_termination_notice_is_a_preemption(tmp_path):
    syslog = ["Feb 10 20:05:51Z worker-2 start-worker 2025/02/10 20:07:14 GCP Metadata Service says termination is "
              "imminent", "Feb 10 20:05:53Z worker-2 docker-worker aborting task, reason worker-shutdown"]
    v = analyze_run(write_run(tmp_path, {"worker-syslog.txt": syslog})).verdict
    assert v.category is Category.SCHEDULER and v.restartable


def test_an_ofi_address_failure_on_every_node_names_no_node(tmp_path):
    warn = "nccl_net_ofi_rdma.cpp:6112 NCCL WARN NET/OFI Unable to insert remote address into address vector"
    logs = {f"node{i}_torchrun.log": [f"ip-10-0-{i}-14:301{r}:302{r} [{r}] {warn} for device {r}." for r in range(2)]
            for i in range(2)}  # fmt: skip
    v = analyze_run(write_run(tmp_path, logs)).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == () and v.culprit.ranks == ()


def test_an_aborted_communicator_is_not_a_rank_waiting(tmp_path):
    out = [f"{r}: [rank{r}]:[E529 00:18:05.52 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=15003, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, "
           "Timeout(ms)=600000) ran for 600024 milliseconds before timing out." for r in range(1, 8)]
    out.append("0: [rank0]:[E529 00:20:53.11 ProcessGroupNCCL.cpp:2022] [PG ID 2 PG GUID 2 Rank 0] NCCL communicator "
               "was aborted ... remote process exited or there was a network error")
    v = analyze_run(write_run(tmp_path, {"slurm-34.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_deepspeeds_spawn_lines_give_a_killed_pid_its_rank(tmp_path):
    log = [f"[2025-03-19 21:04:17,33{r}] [INFO] [launch.py:256:main] process {2219476 + r} spawned with command: "
           f"['/opt/conda/bin/python', '-u', 'train.py', '--local_rank={r}', '--lora_enable', 'True']"
           for r in range(8)]  # fmt: skip
    dmesg = ["[Wed Mar 19 23:36:44 2025] Out of memory: Killed process 2219481 (python) total-vm:106920456kB, "
             "anon-rss:67720456kB, file-rss:91188kB, shmem-rss:2048kB, UID:1000 pgtables:138080kB oom_score_adj:0"]
    v = analyze_run(write_run(tmp_path, {"finetune.log": log, "dmesg-T_a800-n04.txt": dmesg})).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (5,)
