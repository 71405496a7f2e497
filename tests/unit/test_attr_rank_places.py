"""Where the logs place a rank or a host (round 7's rules): srun started one torchrun per node (its labels
are launchers, torch's `[rankN]` is the rank), a `ps` listing's worker under its torchrun, Lightning's
`[rank: N] Traceback`, a per-node directory, a `host  ip` table of the peers, FQDNs reported short."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_TIMEOUT = ("[E1118 03:24:11.88 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600041 "
            "milliseconds before timing out.")


def test_an_srun_label_beside_a_different_torch_rank_is_a_launcher_not_the_rank(tmp_path):
    kern = ["2025-11-18T03:13:57+0000 gx-b07 kernel: NVRM: Xid (PCI:0000:9d:00): 48, pid=80190, name=python, "
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer."]
    out = ["2: [rank21]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
           "0: [rank3]:" + _TIMEOUT.format(r=3),
           "2: E1118 03:14:02.554000 80123 torch/distributed/elastic/multiprocessing/api.py:869] failed "
           "(exitcode: 1) local_rank: 5 (pid: 80190) of binary: /opt/venv/bin/python",
           "srun: error: gx-b07: task 2: Exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": out, "gx-b07.journalctl-k.txt": kern})).verdict
    assert v.category is Category.GPU_HARDWARE
    assert v.culprit.ranks == (21,) and v.culprit.nodes == ("gx-b07",)


def test_a_ps_listing_places_a_hung_tasks_pid_on_its_global_rank(tmp_path):
    out = ["[rank3]:" + _TIMEOUT.format(r=3), "srun: error: jrc15: task 1: Killed"]
    ps = ["1188190 1188101 Sl do_wait /venv/bin/python /venv/bin/torchrun --nnodes 2 --nproc_per_node 8 "
          "--node_rank 1 train.py",
          "1188204 1188190 Dl cl_sync_io_wait /venv/bin/python -u train.py --local-rank=6"]
    kern = ["[Tue Jul 22 04:13:31 2025] INFO: task python:1188204 blocked for more than 122 seconds."]
    v = analyze_run(write_run(tmp_path, {"slurm-2.out": out, "jrc15_ps.txt": ps, "jrc15_dmesg-T.txt": kern})).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (14,) and v.culprit.nodes == ("jrc15",)


def test_a_lightning_traceback_header_gives_its_error_the_rank(tmp_path):
    err = ["[rank: 3] Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
           "RuntimeError: CUDA error: uncorrectable ECC error encountered",
           "srun: error: hpc-gpu-12: task 3: Exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"job.err": err})).verdict
    assert v.culprit.ranks == (3,) and v.culprit.nodes == ("hpc-gpu-12",)


def test_a_gpu_lost_in_a_per_node_directory_names_the_silent_rank_of_that_node(tmp_path):
    files = {f"n{n}/train.log": [f"[default{r}]:" + _TIMEOUT.format(r=r) for r in range(2 * n, 2 * n + 2) if r != 2]
             for n in range(2)}  # fmt: skip
    files["n1/dmesg.txt"] = ["[501822.913306] NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, "
                             "GPU has fallen off the bus."]
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("n1",) and v.culprit.ranks == (2,)


def test_a_host_ip_table_maps_the_peer_several_hosts_blame(tmp_path):
    out = ["a-17  10.4.2.17", "a-18  10.4.2.18", "a-23  10.4.2.23"]
    for host in ("a-17", "a-18"):
        ip = out[0 if host == "a-17" else 1].split()[1]
        out.append(f"{host}:5123:5190 [4] transport/net_ib.cc:1694 NCCL WARN NET/IB : Got completion from peer "
                   f"10.4.2.23<47611> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{ip} "
                   "remoteGids::ffff:10.4.2.23 hca mlx5_2")
    v = analyze_run(write_run(tmp_path, {"job.out": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("a-23",)


def test_a_host_named_by_its_fqdn_is_reported_by_its_short_name(tmp_path):
    err = ["srun: error: vg-0b.cluster.internal: task 11: Segmentation fault (core dumped)",
           "[rank11]: Fatal Python error: Segmentation fault"]
    v = analyze_run(write_run(tmp_path, {"node1_vg-0b.log": err})).verdict
    assert v.culprit.ranks == (11,) and v.culprit.nodes == ("vg-0b",)
