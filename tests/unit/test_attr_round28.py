"""Rules from round 28 of blind cases, one small case each: a torch.distributed.checkpoint failure that every
rank raises names the ranks it lists; NCCL's `Call to recv ... failed : Connection timed out` is the network's;
a rank whose communicator was aborted under it, with no timeout of its own, is the one the others waited on."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

FRAME = ('[rank0]:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 4164, '
         "in barrier")
DCP = ("torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([{ranks}])")


def test_a_checkpoint_failure_every_rank_raises_names_the_ranks_it_lists(tmp_path):
    files = {}
    for node, ranks in (("gpu-a07", range(4)), ("gpu-a11", range(4, 8))):
        lines = [f"[rank{r}]: Traceback (most recent call last):" for r in ranks[:1]]
        lines += [f"[rank{r}]:   File \"/opt/train.py\", line 88, in main" for r in ranks[:1]]
        lines += [f"[rank{r}]: " + DCP.format(ranks="4, 5, 6, 7") for r in ranks]
        lines += [f"srun: error: {node}: task {r}: Exited with exit code 1" for r in ranks]
        files[f"{node}.log"] = lines
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.category is Category.APPLICATION and not v.restartable
    assert (v.culprit.ranks, v.culprit.nodes) == ((4, 5, 6, 7), ("gpu-a11",))


def test_an_nccl_socket_recv_that_timed_out_is_the_network(tmp_path):
    out = [f"[1,{r}]<stdout>:epoch 4 step 10500 loss=0.45" for r in range(4)]
    out += ["[1,3]<stdout>:w-2:83:2526 [3] misc/socket.cc:503 NCCL WARN Net : Call to recv from 10.9.1.7<41468> "
            "failed : Connection timed out",
            "[1,3]<stdout>:w-2:83:2526 [3] transport/net_socket.cc:219 NCCL WARN NET/Socket : socket progress error"]
    v = analyze_run(write_run(tmp_path, {"launcher.log": out})).verdict
    assert v.category is Category.NETWORK and v.restartable


def test_a_rank_whose_communicator_was_aborted_without_a_timeout_of_its_own_is_the_one_waited_on(tmp_path):
    out = [f"INFO:train:rank {r}/4 on gpu-c0{5 if r < 2 else 6} (local_rank {r % 2})" for r in range(4)]
    out += [f"[rank{r}]:[E124 04:28:42.82 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=6411, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
            "1800064 milliseconds before timing out." for r in (1, 2, 3)]
    out += ["srun: error: gpu-c05: task 1: Aborted (core dumped)",
            "srun: error: gpu-c06: tasks 2-3: Aborted (core dumped)",
            "[rank0]: Traceback (most recent call last):",
            FRAME,
            "[rank0]:     work.wait()",
            "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
            "srun: error: gpu-c05: task 0: Exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"slurm-5512093.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((0,), ("gpu-c05",))


def test_a_rank_that_times_out_itself_and_is_then_aborted_still_reports(tmp_path):
    """Guard: every rank reports the timeout; one also prints the abort. Nobody is named."""
    out = [f"[rank{r}]:[E124 04:28:42.82 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
           "600064 milliseconds before timing out." for r in range(4)]
    out += ["[rank0]: Traceback (most recent call last):",
            FRAME,
            "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0."]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == ()


def test_a_framework_assertion_in_a_rich_traceback_is_its_crash_not_the_nan_beside_it(tmp_path):
    box = ["╭──────────── Traceback (most recent call last) ────────────╮",
           "│ /work/train.py:642 in main                                 │",
           "│ ❱ 642 │   optimizer.step()                                 │",
           "│ /opt/conda/lib/python3.8/site-packages/colossalai/gemini/chunk/chunk.py:242 in set_l2_norm │",
           "│   241 │   │   \"\"\"                                         │",
           "│ ❱ 242 │   │   assert self.l2_norm is None, \"twice\"        │",
           "│   243 │   │   if self.is_gathered:                         │",
           "╰────────────────────────────────────────────────────────────╯",
           "AssertionError: you are calculating the l2 norm twice",
           "Steps:   3%|▎         | 16024/500000 [3:08:37<94:57:08,  1.42it/s, loss=nan, lr=0.0001]"]
    v = analyze_run(write_run(tmp_path, {"train_node0.log": box})).verdict
    assert v.category is Category.FRAMEWORK_CRASH


def test_an_assertion_under_the_users_own_rich_frame_stays_the_application(tmp_path):
    box = ["╭──────────── Traceback (most recent call last) ────────────╮",
           "│ /opt/conda/lib/python3.8/site-packages/colossalai/nn/optimizer/zero_optimizer.py:219 in step │",
           "│ ❱ 219 │   │   combined_scale = self._get_combined_scale()   │",
           "│ /work/train.py:88 in check_batch                           │",
           "│ ❱ 88 │   assert batch.shape[0] == 8, \"bad batch\"        │",
           "╰────────────────────────────────────────────────────────────╯",
           "AssertionError: bad batch"]
    v = analyze_run(write_run(tmp_path, {"train_node0.log": box})).verdict
    assert v.category is Category.APPLICATION


def test_composer_output_blocks_give_their_rank_and_followers_point_at_the_culprit(tmp_path):
    def block(rank, *lines):
        return [f"Global rank {rank} (PID {4100 + rank}) exited with code 1",
                f"----------Begin global rank {rank} STDERR----------", "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/composer/utils/file_helpers.py", line 564, in get_file',
                *lines, f"----------End global rank {rank} STDERR----------"]
    out = ["root@llm-b2:/llm-foundry/scripts/train# composer --world_size 16 --node_rank 1 -n 8 train.py",
           *[f"Launching process for local_rank({r - 8}), global_rank({r}) with command(python train.py)"
             for r in range(8, 16)]]
    out += block(8, "FileNotFoundError: Local path /raid/ckpt/ep0-ba2000-rank0.pt does not exist")
    out += block(11, "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/tmpq0w7/rank0_checkpoint'", "",
                 "The above exception was the direct cause of the following exception:", "",
                 "FileNotFoundError: No such file or directory: /tmp/tmpq0w7/rank0_checkpoint. Please check local "
                 "rank 0 for more downloading / debugging info.")
    v = analyze_run(write_run(tmp_path, {"node1_llm-b2.log": out})).verdict
    assert v.category is Category.APPLICATION
    assert (v.culprit.ranks, v.culprit.nodes) == ((8,), ("llm-b2",))


def test_a_lost_determined_agent_is_its_node_and_the_ranks_of_its_container(tmp_path):
    trial = ["[2023-01-09T21:02:59.220401Z] 3f9a71c2 || INFO: [92] determined.exec.launch: New trial runner in "
             "(container 3f9a71c2-55d2-4b8e-9f1e-0e7ab3c4d218) on agent gpu-worker-03: {}",
             "[2023-01-09T21:02:59.230882Z] b81e04d7 || INFO: [91] determined.exec.launch: New trial runner in "
             "(container b81e04d7-2c1a-47f0-8d52-6a9be0f1c377) on agent gpu-worker-06: {}"]
    trial += [f"[2023-01-09T21:03:12.4{r:02d}000Z] {'3f9a71c2' if r < 2 else 'b81e04d7'} [rank={r}] || INFO: "
              f"distributed context: rank={r} size=4" for r in range(4)]
    master = ['<error>   [2023-01-10, 01:17:38] agent crashed  address="10.30.4.16" error="agent closed with '
              'allocated containers" id="gpu-worker-06" resource-pool="gpu-pool" system="master" type="agent"']
    v = analyze_run(write_run(tmp_path, {"trial_612_logs.txt": trial, "master_journal.txt": master})).verdict
    assert v.category is Category.HOST and v.restartable
    assert (v.culprit.ranks, v.culprit.nodes) == ((2, 3), ("gpu-worker-06",))


def test_the_one_rank_in_another_operation_at_the_same_call_is_named_and_not_restarted(tmp_path):
    def timeout(rank, op):
        return (f"[E ProcessGroupNCCL.cpp:737] [Rank {rank}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum=3738254, OpType={op}, Timeout(ms)=1800000) ran for 1809417 milliseconds")
    out = [timeout(r, "REDUCE" if r == 0 else "_ALLGATHER_BASE") for r in range(6)]
    v = analyze_run(write_run(tmp_path, {"train.log": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)
    assert not v.restartable


def test_a_pod_listing_names_the_node_of_the_peer_address_the_reporters_blame(tmp_path):
    pods = ["NAME                READY   STATUS    RESTARTS   AGE     IP              NODE      NOMINATED NODE",
            "llama-ft-master-0   0/1     Error     0          6h41m   10.216.210.229  gpu-n09   <none>",
            "llama-ft-worker-0   0/1     Error     0          6h41m   10.216.210.231  gpu-n11   <none>",
            "llama-ft-worker-2   0/1     Error     0          6h41m   10.216.210.236  gpu-n17   <none>"]
    def warn(host, pid):
        return (f"{host}:{pid}:53550 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                "10.216.210.236<58741> with status=12 opcode=32616 len=0 vendor err 129 (Recv)")
    v = analyze_run(write_run(tmp_path, {"kubectl_get_pods.txt": pods, "master-0.log": [warn("gpu-n09", 52814)],
                                         "worker-0.log": [warn("gpu-n11", 41022)]})).verdict  # fmt: skip
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpu-n17",)
