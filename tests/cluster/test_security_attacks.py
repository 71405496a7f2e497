"""The attacks of issue 9, replayed by the ordinary job account `nvrxjob` on the real local cluster.

Each one must leave root's files and other users' processes untouched, drain no node, and let the job's
own work finish: planted symlinks, FIFOs and a flight-recorder bomb in the run directory (the Epilog's
attribution), forged pid records and a FIFO log (the Epilog's stop of a site agent), directories made
before the Prolog, a flood and a replay at the launcher's hub, and a forged checkpoint version.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from _as_user import job_account, run_as, user_dir
from _hook_log import hook_records

from nvrx_hpc.core.messages import AgentHello
from nvrx_hpc.core.proc_start import started_s
from nvrx_hpc.core.wire import Codec, new_token
from nvrx_hpc.launcher.hub import PREAUTH_PER_SOURCE, AgentHub

pytestmark = pytest.mark.slurm

PY = sys.executable


def _job_id(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    assert job.isdigit(), done.stdout
    return job


def _wait_job(cluster, job: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = cluster.dev.backend.job(job)
        if info.finished:
            return info.state
        time.sleep(0.5)
    cluster.run(["scancel", job])
    raise AssertionError(f"job {job} did not finish in {timeout} s")


def _wait_records(cluster, job: str, hook: str, count: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = [r for r in hook_records(cluster, job) if r["hook"] == hook]
        if len(records) >= count:
            return records
        time.sleep(0.3)
    raise AssertionError(f"no {count} {hook} record(s) for job {job} within {timeout} s (a hook blocked?)")


def _assert_no_drain(cluster) -> None:
    drained = [n.name for n in cluster.dev.backend.list_nodes() if "DRAIN" in n.flags]
    assert not drained, f"nodes drained: {drained}"


def _bomb() -> bytes:
    node: list = []
    for _ in range(40):
        node = [node, node]
    return pickle.dumps({"version": "2.4", "entries": [{"input_sizes": node}], "pg_config": {}}, protocol=4)


def test_a_hostile_run_dir_gets_a_report_as_its_user_and_root_writes_nothing(cluster):
    """.attribution.log -> a root path, a FIFO lock for the requeue, a pickle bomb: the Epilog's analysis runs as
    nvrxjob, creates nothing as root, and still writes the report."""
    account = job_account()
    work = user_dir(account, "attr-attack")
    victim = Path(f"/root/nvrx-victim-{uuid.uuid4().hex[:8]}")
    (work / "bomb.pkl").write_bytes(_bomb())
    script = work / "job.sh"
    script.write_text(f"""#!/bin/sh
run="$PWD/nvrx-runs/$SLURM_JOB_ID"
mkdir -p "$run/logs" "$run/fr"
ln -s {victim} "$run/.attribution.log"
mkfifo "$run/.attribution-1.lock"
cp bomb.pkl "$run/fr/rank-0.pkl"
echo "0: Traceback (most recent call last):" > "$run/logs/step-0.log"
echo "0: ValueError: shape mismatch <script>alert(1)</script>" >> "$run/logs/step-0.log"
exit 1
""")
    os.chown(script, account.uid, account.gid)
    job = _job_id(run_as(cluster, account, ["sbatch", "--parsable", "-N1", "-t1", "-o", str(work / "%j.out"),
                                            str(script)], timeout=30, cwd=work))  # fmt: skip
    assert _wait_job(cluster, job) == "FAILED"
    run = work / "nvrx-runs" / job
    report = run / "report.json"
    deadline = time.monotonic() + 120
    while not (report.exists() and (run / "report.md").exists()):
        assert time.monotonic() < deadline, f"no report in {run}: {sorted(p.name for p in run.iterdir())}"
        time.sleep(0.5)
    time.sleep(0.5)
    assert not victim.exists() and not os.path.lexists(victim)
    assert (run / ".attribution.log").is_symlink()  # left as planted, never followed
    for name in ("report.json", "report.md", "report.html", ".attribution-0.lock"):
        assert (run / name).stat().st_uid == account.uid, f"{name} was not written by the job's user"
    data = json.loads(report.read_text())
    assert any("rank-0.pkl" in e["source"] for e in data.get("errors", [])), data.get("errors")
    assert "<script>" not in (run / "report.md").read_text()
    _wait_records(cluster, job, "epilog", 1)
    _assert_no_drain(cluster)


def test_forged_pid_records_and_a_fifo_log_leave_other_processes_alone(cluster):
    """A --nvrx job of nvrxjob forges pid records where the Epilog used to read them (beside the socket) and
    tries root's record directory: the Epilog stops the job's own agent, signals nobody else, never blocks."""
    account = job_account()
    work = user_dir(account, "pid-attack")
    bystander = subprocess.Popen([PY, "-c", "import time, sys; time.sleep(180)", "agent", "--site"])
    forged = json.dumps({"pid": bystander.pid, "started_s": started_s(bystander.pid), "socket": "x", "uid": account.uid,
                         "exe": os.path.realpath(PY), "job": "0"})  # fmt: skip
    records = cluster.env["NVRX_AGENT__RECORD_DIR"]
    script = work / "job.sh"
    script.write_text(f"""#!/bin/sh
sock=$(echo '{cluster.env["NVRX_AGENT__SOCKET"]}' | sed "s/%n/$SLURMD_NODENAME/; s/%j/$SLURM_JOB_ID/")
base="${{sock%.sock}}"
echo '{forged}' > "$base.pid"
rm -f "$base.log"; mkfifo "$base.log"
name=$(echo "$sock" | sed 's|^/||; s|/|_|g; s|\\.sock$||')
for target in "{records}/$name.pid" "{records}/forged.pid"; do
  if echo '{forged}' > "$target" 2>/dev/null; then echo "FORGED $target"; else echo "REFUSED $target"; fi
done
if ln -s /root "{records}/$name.log.x" 2>/dev/null; then echo FORGED-LINK; else echo REFUSED-LINK; fi
sleep 1
""")
    os.chown(script, account.uid, account.gid)
    try:
        argv = ["sbatch", "--parsable", "-N1", "-t1", "--nvrx", "-o", str(work / "%j.out"), str(script)]
        job = _job_id(run_as(cluster, account, argv, timeout=30, cwd=work))
        assert _wait_job(cluster, job) == "COMPLETED"
        out = (work / f"{job}.out").read_text()
        assert "FORGED" not in out and out.count("REFUSED") == 3, out
        prolog = _wait_records(cluster, job, "prolog", 1)[0]
        epilog = _wait_records(cluster, job, "epilog", 1, timeout=60)[0]
        assert prolog["site_agent"].get("pid"), prolog
        assert epilog["site_agent"]["pid"] == prolog["site_agent"]["pid"], epilog
        assert epilog["site_agent"]["outcome"] in ("stopped", "gone"), epilog
        assert bystander.poll() is None, "the Epilog signalled a process that is not the job's agent"
        _assert_no_drain(cluster)
    finally:
        bystander.kill()
        bystander.wait()


def test_directories_made_before_the_prolog_are_refused_not_used(cluster, tmp_path):
    """nvrxjob pre-creates the burst-buffer directory of root's next --nvrx job (a sticky node directory):
    the Prolog refuses it (fails open: no drain, the job runs), and never chowns it."""
    account = job_account()
    held = cluster.run(["sbatch", "--parsable", "--hold", "-N1", "-w", "n1", "-t1", "--nvrx",
                        "-o", str(tmp_path / "%j.out"), "--wrap", "sleep 1"], timeout=30)  # fmt: skip
    job = _job_id(held)
    planted = cluster.state_dir / "bb" / "n1" / job
    made = run_as(cluster, account, ["mkdir", "-m", "0700", str(planted)], timeout=10)
    assert made.returncode == 0, made.stderr
    try:
        cluster.run(["scontrol", "release", job], timeout=10)
        assert _wait_job(cluster, job) == "COMPLETED"
        prolog = _wait_records(cluster, job, "prolog", 1)[0]
        assert "refusing the job directory" in prolog["site_agent"].get("error", ""), prolog
        assert planted.stat().st_uid == account.uid  # untouched: not adopted, not chowned
        _assert_no_drain(cluster)
    finally:
        subprocess.run(["rm", "-rf", str(planted)], timeout=10, check=False)


_FLOOD = """
import socket, sys, time
host, port, frame = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
socks = []
for _ in range(300):
    try:
        s = socket.create_connection((host, port), timeout=5)
        socks.append(s)
    except OSError:
        pass
replay = socket.create_connection((host, port), timeout=5)
replay.recv(4096)  # the challenge
replay.sendall(frame)
replay.settimeout(10)
try:
    closed = replay.recv(4096) == b""
except OSError:
    closed = True
print("REPLAY-CLOSED" if closed else "REPLAY-OPEN", len(socks), flush=True)
time.sleep(1)
"""


def test_a_flood_and_a_replayed_hello_at_the_hub_change_nothing(cluster):
    """From a job step of nvrxjob: 300 silent connections and a recorded ag.hello replayed."""
    account = job_account()
    work = user_dir(account, "hub-attack")
    token = new_token()
    codec = Codec(token)
    loop = asyncio.new_event_loop()
    hub = AgentHub(token, host="127.0.0.1", job="1")
    port = loop.run_until_complete(hub.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def real_agent(node: str) -> tuple[bytes, asyncio.StreamWriter]:
        from nvrx_hpc.core.wire import read_message

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        challenge = await read_message(reader, codec, timeout=5)
        frame = codec.encode(AgentHello(node=node, pid=1, nonce=challenge["nonce"]).to_wire())
        writer.write(frame)
        await writer.drain()
        return frame, writer

    def call(coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    try:
        recorded, writer = call(real_agent("n1"))
        call(hub.wait_for_agents(["n1"], 10))
        writer.close()  # the real agent is gone; the eavesdropper replays its hello
        deadline = time.monotonic() + 10
        while "n1" in hub.agents and time.monotonic() < deadline:
            time.sleep(0.05)
        (work / "flood.py").write_text(_FLOOD)
        done = run_as(cluster, account, ["srun", "-N1", "-t1", "--quiet", PY, str(work / "flood.py"), "127.0.0.1",
                                         str(port), recorded.hex()], timeout=90, cwd=work)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "REPLAY-CLOSED" in done.stdout, done.stdout
        assert "n1" not in hub.agents and hub.rejected > 0
        assert hub._connections <= PREAUTH_PER_SOURCE + 1
        _frame, kept = call(real_agent("n2"))  # a real agent still gets in once the flood is gone
        assert call(hub.wait_for_agents(["n2"], 20)) == []
        _assert_no_drain(cluster)
    finally:
        call(hub.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_a_forged_checkpoint_version_is_not_restored(cluster):
    """nvrxjob plants a newer version (a manifest with its own key, a bogus shard) in a directory root's job
    reads: root's `nvrx-hpc ckpt ls` does not count it as committed, and root's own version still counts."""
    account = job_account()
    shared = user_dir(account, "shared")
    forge = f"""
import json, os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from nvrx_hpc.ckpt.manifest import Manifest, ShardRecord, write_manifest
v = os.path.join({str(shared)!r}, "v000000000099")
os.makedirs(v)
m = Manifest(step=99, world_size=1, scheme="none", shards=(ShardRecord(0, "n1", 10, 5, 1, "ab" * 8),))
write_manifest(__import__("pathlib").Path(v), m)   # with nvrxjob's own key, not root's
open(os.path.join(v, "shard-r00000.h5"), "wb").write(b"not a shard")
print("PLANTED")
"""
    done = run_as(cluster, account, [PY, "-c", forge], timeout=60)
    assert "PLANTED" in done.stdout, done.stderr
    from nvrx_hpc.ckpt.manifest import Manifest, ShardRecord, write_manifest

    own = shared / "v000000000098"  # root's own version next to it: committed (the check can tell them apart)
    own.mkdir()
    shards = (ShardRecord(0, "n1", 10, 5, 1, "0" * 16),)
    write_manifest(own, Manifest(step=98, world_size=1, scheme="none", shards=shards))
    listed = subprocess.run([PY, "-m", "nvrx_hpc", "ckpt", "ls", "--shared-dir", str(shared), "--json"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, **cluster.env})  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    status = {r["step"]: r["status"] for r in json.loads(listed.stdout)}
    assert status == {99: "incomplete", 98: "committed"}, status
