"""Rules from round 81 of blind cases: a log whose banners place all its ranks on one host, the rendezvous store's
port held by another job, a launcher's refused ssh, a job script that cannot run its launcher, a monitored barrier
that lost rank 0, the peer address only the job's remaining host can have, a locked-memory limit, and torch's own
prefix before its OMP banner at a prompt."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def _fairseq_node(host: str, first: int) -> list[str]:
    return [f"2020-09-13 19:01:47 | INFO | fairseq.distributed_utils | initialized host {host} as rank {first + i}"
            for i in range(4)]


def test_an_unranked_oom_in_a_one_host_log_is_the_rank_that_drives_its_gpu(tmp_path):
    node1 = _fairseq_node("tn-gpu22", 4) + [
        "2020-09-13 19:44:57 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA out of memory. "
        "Tried to allocate 1.13 GiB (GPU 2; 15.78 GiB total capacity; 12.61 GiB already allocated; 846.50 MiB free)",
        "2020-09-13 19:44:57 | WARNING | fairseq.trainer | attempting to recover from OOM in forward/backward pass"]
    v = _verdict(tmp_path, {"train_node0.log": _fairseq_node("tn-gpu21", 0), "train_node1.log": node1})
    assert v.category is Category.APPLICATION
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("tn-gpu22",)


def test_a_log_whose_banners_name_two_hosts_places_nothing(tmp_path):
    both = _fairseq_node("tn-gpu21", 0) + _fairseq_node("tn-gpu22", 4) + [
        "RuntimeError: CUDA out of memory. Tried to allocate 1.13 GiB (GPU 2; 15.78 GiB total capacity)"]
    v = _verdict(tmp_path, {"train.log": both})
    assert v.category is Category.APPLICATION and v.culprit.ranks == ()


def test_the_stores_port_in_use_is_rank_0s(tmp_path):
    out = ['  File "/envs/mm/lib/python3.7/site-packages/torch/distributed/rendezvous.py", line 143, in '
           "_env_rendezvous_handler", "    store = TCPStore(master_addr, master_port, world_size, start_daemon)",
           "RuntimeError: Address already in use"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (0,) and v.restartable is False


def test_a_refused_ssh_is_the_launchers_set_up(tmp_path):
    out = ["[INFO] [runner.py:555:main] cmd = pdsh -S -f 1024 -w 10.244.5.19,10.244.3.41 export NCCL_DEBUG=WARN",
           "10.244.5.19: mchorse@10.244.5.19: Permission denied (publickey,password).",
           "pdsh@launcher-xq2lp: 10.244.5.19: ssh exited with exit code 255",
           "10.244.3.41: mchorse@10.244.3.41: Permission denied (publickey,password).",
           "pdsh@launcher-xq2lp: 10.244.3.41: ssh exited with exit code 255"]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_launcher_the_script_cannot_run_is_the_jobs_own(tmp_path):
    out = ["Running on gpu-c17", "/var/spool/slurmd/job9913570/slurm_script: line 29: /home/t/envs/ds/bin/deepspeed: "
           "Permission denied"]
    v = _verdict(tmp_path, {"slurm-9913570.out": out})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_ranks_that_lost_rank_0_after_the_monitored_barrier_name_rank_0(tmp_path):
    out = [f"(WorkerDict pid={8800 + r}, ip=10.60.1.{10 + r // 8}) RuntimeError: Rank {r} successfully reached "
           "monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0 logs "
           "for faulty rank." for r in (9, 13, 17)]
    v = _verdict(tmp_path, {"ray_job_driver.log": out})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_rank_0s_own_report_of_the_missing_rank_wins(tmp_path):
    out = ["[E ProcessGroupGloo.cpp:138] Rank 5 failed to pass monitoredBarrier in 30000 ms",
           "RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while waiting for "
           "send/recv from rank 0. Please check rank 0 logs for faulty rank."]
    v = _verdict(tmp_path, {"train.log": out})
    assert v.culprit.ranks == (5,)


def _roce(reporter: str, label: int, local: str, peer: str, port: int) -> str:
    return (f"{label}: [default1]:{reporter}:5103{label}:51247 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
            f"completion from peer {peer}<{port}> with status=9 opcode=0 len=0 vendor err 138 (Send) localGid "
            f"::ffff:{local} remoteGids::ffff:{peer} hca mlx5_0")


def test_the_peer_address_only_the_jobs_remaining_host_can_have_is_that_host(tmp_path):
    out = [f"{n}: [default0]:{host}:{880 + n}:{880 + n} [0] NCCL INFO Bootstrap : Using ens1:10.50.6.{15 + n}<0>"
           for n, host in enumerate(("cn-b05", "cn-b06", "cn-b07"))]
    out += [_roce("cn-b06", 1, "10.52.6.16", "10.52.6.17", 40428),
            _roce("cn-b06", 1, "10.52.6.16", "10.52.6.17", 40739),
            _roce("cn-b05", 0, "10.52.6.15", "10.52.6.17", 39822)]
    v = _verdict(tmp_path, {"slurm-71553.out": out})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("cn-b07",)


def test_a_peer_address_two_hosts_could_have_names_none(tmp_path):
    out = [f"{n}: [default0]:{host}:{880 + n}:{880 + n} [0] NCCL INFO Bootstrap : Using ens1:10.50.6.{15 + n}<0>"
           for n, host in enumerate(("cn-b05", "cn-b06", "cn-b07", "cn-b08"))]
    out += [_roce("cn-b06", 1, "10.52.6.16", "10.52.6.17", 40428),
            _roce("cn-b05", 0, "10.52.6.15", "10.52.6.17", 39822)]
    v = _verdict(tmp_path, {"slurm-71553.out": out})
    assert v.category is Category.NETWORK and v.culprit.nodes == ()


def test_a_memory_registration_out_of_locked_memory_is_not_restartable(tmp_path):
    out = [f"gpu-lab4:7731{g}:7737{g} [{g}] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error "
           "Cannot allocate memory" for g in (0, 3)]
    v = _verdict(tmp_path, {"terminal.txt": out})
    assert v.category is Category.NETWORK and v.restartable is False and v.culprit.nodes == ("gpu-lab4",)


def test_a_script_that_started_torchrun_at_a_prompt_places_its_output_there(tmp_path):
    out = ["root@llm-g72:/workspace/examples/llama3# sh run_pretrain_megatron_llama.sh dlc 8B 1 16",
           "[2024-05-10 16:02:11,418] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable "
           "for each process to be 1 in default, to avoid your system being overloaded",
           "Traceback (most recent call last):",
           "_pickle.UnpicklingError: Failed to interpret file '/dataset/index-cache/5c1f_shuffle_idx.npy' as a pickle"]
    v = _verdict(tmp_path, {"node1_terminal.txt": out, "node0_tail.txt": ["iteration 10 | lm loss 7.9"]})
    assert v.category is Category.APPLICATION and v.culprit.nodes == ("llm-g72",)
