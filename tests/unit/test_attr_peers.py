"""The peer several hosts' network errors name is the suspect, not the hosts that print them: 4 nodes x 2
ranks, `srun --label` output with NCCL's `host:pid:tid` prefix, InfiniBand completion errors (status 12)
naming the remote end by address, and the ways logs pair addresses with hosts."""

from __future__ import annotations

from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category
from nvrx_hpc.attribution.peers import names_peer, sample_addresses

HOSTS = ["ib-n01", "ib-n02", "ib-n03", "ib-n04"]  # ranks 2k and 2k+1 on HOSTS[k], IB address 10.9.0.(k+1)


def _ib_error(rank: int, peer: str, local: str | None = None) -> str:
    host = HOSTS[rank // 2]
    gid = f" localGid ::ffff:{local} remoteGids::ffff:{peer}" if local else ""
    return (f"{rank}: {host}:{4000 + rank}:{4100 + rank} [{rank % 2}] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
            f"Got completion from peer {peer}<{40000 + rank}> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
            f"{gid}")  # fmt: skip


def _job(tmp_path: Path, lines: list[str], bootstrap: bool = True) -> Path:
    run = tmp_path / "7001"
    run.mkdir()
    head = [f"{r}: {HOSTS[r // 2]}:{4000 + r}:{4000 + r} [{r % 2}] NCCL INFO NCCL version 2.21.5" for r in range(8)]
    if bootstrap:  # the OOB/IB address of each host, from NCCL's own start-up line
        head += [f"{2 * k}: {h}:{4000 + 2 * k}:{4050 + 2 * k} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; "
                 f"OOB ib0:10.9.0.{k + 1}<0>" for k, h in enumerate(HOSTS)]  # fmt: skip
    tail = [f"srun: error: {h}: tasks {2 * k}-{2 * k + 1}: Aborted (core dumped)" for k, h in enumerate(HOSTS)]
    (run / "slurm-7001.out").write_text("\n".join(head + lines + tail) + "\n")
    return run


def test_the_peer_three_hosts_name_is_the_suspect_not_the_reporters(tmp_path):
    # ib-n04 (10.9.0.4) prints nothing itself; only NCCL's start-up line maps its address.
    run = _job(tmp_path, [_ib_error(r, "10.9.0.4") for r in (0, 3, 5)])
    v = analyze_run(run).verdict
    assert v.category is Category.NETWORK
    assert v.culprit.nodes == ("ib-n04",) and v.culprit.ranks == ()
    assert v.action is Action.EXCLUDE_AND_RETRY and v.exclude_nodes == ("ib-n04",)
    assert "3 of 3 reporting hosts name their peer ib-n04" in v.root_cause


def test_the_reporters_own_gid_maps_the_peer_without_start_up_lines(tmp_path):
    lines = [_ib_error(r, "10.9.0.4", f"10.9.0.{r // 2 + 1}") for r in (0, 2, 4)]
    lines.append(_ib_error(6, "10.9.0.2", "10.9.0.4"))  # the peer itself names one reporter back
    v = analyze_run(_job(tmp_path, lines, bootstrap=False)).verdict
    assert v.culprit.nodes == ("ib-n04",)


def test_two_ends_naming_each_other_name_no_host(tmp_path):
    lines = [_ib_error(2, "10.9.0.4"), _ib_error(6, "10.9.0.2")]
    v = analyze_run(_job(tmp_path, lines)).verdict
    assert v.category is Category.NETWORK and v.restartable
    assert v.culprit.nodes == () and v.culprit.ranks == ()
    assert v.action is Action.RETRY


def test_a_peer_no_log_maps_to_a_host_names_nobody_with_less_confidence(tmp_path):
    mapped = analyze_run(_job(tmp_path, [_ib_error(r, "10.9.0.4") for r in (0, 3, 5)])).verdict
    (tmp_path / "b").mkdir()
    unmapped = analyze_run(_job(tmp_path / "b", [_ib_error(r, "10.77.0.9") for r in (0, 3, 5)])).verdict
    assert unmapped.culprit.nodes == () and unmapped.culprit.ranks == ()
    assert unmapped.confidence < mapped.confidence


def test_one_reporter_stays_the_suspect(tmp_path):
    v = analyze_run(_job(tmp_path, [_ib_error(3, "10.9.0.4")])).verdict
    assert v.culprit.ranks == (3,) and v.culprit.nodes == ("ib-n02",)


def test_address_lines_of_every_shape_pair_an_address_with_a_host():
    data = b"\n".join([
        b"[default0]:rc-node14:90211:90423 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eno1:10.10.0.114<0>",
        b"trn-02: trn-02:83060:88351 [0] NCCL INFO Bootstrap : Using ens1f0:10.20.0.12<0>",
        b"3: gpu-7:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.30.0.7<0> [1]eth1:10.31.0.7<0>",
        b"[INFO] [runner.py:463:main] Using IP address of 10.20.0.11 for node trn-01",
        b"10.40.0.5    cn-g005.cluster   cn-g005",
        b"10.40.0.6\tcn-g006",
        b"PING cn-g009 (10.40.0.9) 56(84) bytes of data.",
        b"step 100 loss 1.25 (10.2 s)",
    ])  # fmt: skip
    assert sample_addresses(data) == {
        "10.10.0.114": "rc-node14", "10.20.0.12": "trn-02", "10.30.0.7": "gpu-7", "10.20.0.11": "trn-01",
        "10.40.0.5": "cn-g005.cluster", "10.40.0.6": "cn-g006", "10.40.0.9": "cn-g009",
    }  # fmt: skip


def test_the_ways_a_line_names_its_peer():
    assert names_peer("NET/IB: Got completion from peer 10.0.0.7<40213> with status=transport retry counter")
    assert names_peer("n2:77:90 [0] NCCL WARN Net : Call to recv from 10.0.0.5<5521> failed : Connection reset")
    assert names_peer("socketProgress: Connection closed by remote peer gpu-d05<60213>")
    assert names_peer("retries exhausted waiting for peer (My host id: i-05c2 Peer host id: i-07f3) (110)")
    assert not names_peer("NCCL WARN NET/IB : Got async event : port error")
