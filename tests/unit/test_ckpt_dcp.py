"""The DCP adapter with real torch.distributed ranks (gloo on CPU, forked processes).

Resharded load by plain DCP, SIGKILL at random moments of a save loop, restore from partner copies.
NVRX_DCP_KILL_TRIALS sets the number of kill trials (default 10; 50 for the long run).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
dcp = pytest.importorskip("torch.distributed.checkpoint")
from torch.distributed.checkpoint import FileSystemReader  # noqa: E402

from nvrx_hpc.ckpt import DcpReader, DcpWriter, dcp_drain  # noqa: E402
from nvrx_hpc.ckpt.dcp import COMMIT, LATEST, METADATA, STAGE, committed_versions  # noqa: E402
from nvrx_hpc.core.errors import CheckpointError  # noqa: E402

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

KILL_TRIALS = int(os.environ.get("NVRX_DCP_KILL_TRIALS", "10"))


def full(step: int) -> torch.Tensor:
    return torch.arange(16 * 8, dtype=torch.float32).reshape(16, 8) + 1000 * step


def own(rank: int, step: int) -> torch.Tensor:
    return torch.full((5,), float(100 * step + rank))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(target, rank: int, world: int, port: int, args: tuple) -> None:
    code = 0
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=30))
        target(rank, world, *args)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def start(target, world: int, *args) -> list[mp.Process]:
    ctx = mp.get_context("fork")  # no pickling, no second torch import: a rank starts in milliseconds
    port = _port()
    procs = [ctx.Process(target=_child, args=(target, r, world, port, args)) for r in range(world)]
    for p in procs:
        p.start()
    return procs


def run(target, world: int, *args, timeout: float = 45.0) -> None:
    procs = start(target, world, *args)
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert [p.exitcode for p in procs] == [0] * world, "a rank failed (its traceback is in the captured output)"


# -- ranks ------------------------------------------------------------------------------------------------
def save_sharded(rank: int, world: int, bb: str) -> None:
    """4 ranks, domains a,a,b,b: a DTensor sharded by rows, a tensor per rank, a Python value (async_save)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from nvrx_hpc.ckpt import dcp_stage

    mesh = init_device_mesh("cpu", (world,))
    writers = []
    for step in (1, 2):  # async: step 2 is staged into the host copy kept from step 1 (dcp_stage)
        writers.append(DcpWriter(bb, failure_domain="ab"[rank // 2]))  # a writer per save, as with FileSystemWriter
        state = {"w": distribute_tensor(full(step), mesh, [Shard(0)]), f"r{rank}": own(rank, step), "step": step}
        dcp.async_save(state, storage_writer=writers[-1], checkpoint_id=f"step-{step}").result()
        writers[-1].wait_committed()
        assert len(dcp_stage._copies) == 1
    assert writers[1]._transport is writers[0]._transport is not None  # one partner-copy group per process


def load_resharded(rank: int, world: int, reader_args: dict, step: int) -> None:
    """2 ranks: the same DTensor sharded in halves, every rank's own tensor, the Python value."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    state = {"w": distribute_tensor(torch.zeros(16, 8), mesh, [Shard(0)]), "step": 0,
             **{f"r{r}": torch.zeros(5) for r in range(4)}}
    if "plain" in reader_args:
        reader = FileSystemReader(reader_args["plain"])
    else:
        reader = DcpReader(**reader_args)
    dcp.load(state, storage_reader=reader)
    assert state["w"].to_local().shape == (8, 8)
    assert torch.equal(state["w"].full_tensor(), full(step))
    assert all(torch.equal(state[f"r{r}"], own(r, step)) for r in range(4))
    assert state["step"] == step


def save_loop(rank: int, world: int, bb: str, trial: int) -> None:
    """2 ranks in 2 domains, saving as fast as they can until killed."""
    writer = DcpWriter(bb, failure_domain="ab"[rank], keep=2)
    for step in range(1, 10_000):
        state = {"w": torch.full((128, 128), float(step)), f"r{rank}": own(rank, step), "step": step}
        dcp.save(state, storage_writer=writer, checkpoint_id=f"t{trial}-s{step}")


# -- tests ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("dcp")
    run(save_sharded, 4, str(base / "bb" / "{domain}"))
    return base / "bb"


def test_four_ranks_save_two_ranks_load_resharded_with_plain_dcp(saved, tmp_path):
    for d in "ab":
        root = saved / d
        assert os.readlink(root / LATEST) == "step-2"
        assert [v for _, v in committed_versions(root)] == ["step-1", "step-2"]
        assert sorted(p.name for p in (root / "step-2").iterdir()) == sorted([
            COMMIT, METADATA, "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"])  # own + partner
        assert not list(root.glob(STAGE + "*"))
    result = dcp_drain([saved / "a"], tmp_path / "shared")
    assert result["complete"] and result["version"] == "step-2" and len(result["copied"]) == 4
    assert dcp_drain([saved / "a"], tmp_path / "shared")["complete"]  # idempotent
    run(load_resharded, 2, {"plain": str(tmp_path / "shared" / LATEST)}, 2)
    run(load_resharded, 2, {"plain": str(saved / "b" / "step-1")}, 1)


def test_restore_from_partner_copies_when_a_burst_buffer_is_gone(saved, tmp_path):
    bb = tmp_path / "bb"
    shutil.copytree(saved, bb, symlinks=True)
    shutil.rmtree(bb / "a")  # node a is gone: ranks 0 and 1's own files with it
    run(load_resharded, 2, {"root": str(bb / "{domain}"), "failure_domain": "a", "domains": ["b"]}, 2)
    run(load_resharded, 2, {"root": str(bb / "{domain}"), "failure_domain": "a", "domains": ["b"],
                            "version": "step-1"}, 1)
    assert dcp_drain([bb / "a", bb / "b"], tmp_path / "shared")["complete"]
    run(load_resharded, 2, {"plain": str(tmp_path / "shared" / LATEST)}, 2)
    (bb / "b" / "step-2" / "__0_0.distcp").unlink()  # and now rank 0's partner copy too: named, never committed
    result = dcp_drain([bb / "b"], tmp_path / "shared2")
    assert not result["complete"] and result["missing"] == ["__0_0.distcp"]
    assert not (tmp_path / "shared2" / "step-2").exists() and not os.path.lexists(tmp_path / "shared2" / LATEST)


def _check_root(root: Path) -> str | None:
    """`latest` of `root` names a committed version that plain DCP loads, with one step's values throughout."""
    if not os.path.lexists(root / LATEST):
        return None
    version = os.readlink(root / LATEST)
    vdir = root / version
    assert (vdir / COMMIT).is_file() and (vdir / METADATA).is_file(), f"{root} latest -> {version} uncommitted"
    step = int(version.split("-s")[1])
    state = {"w": torch.zeros(128, 128), "r0": torch.zeros(5), "r1": torch.zeros(5), "step": 0}
    dcp.load(state, storage_reader=FileSystemReader(vdir), no_dist=True)
    assert torch.equal(state["w"], torch.full((128, 128), float(step))), version
    assert torch.equal(state["r0"], own(0, step)) and torch.equal(state["r1"], own(1, step)), version
    assert state["step"] == step
    return version


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_kill_a_rank_at_random_moments_latest_is_always_a_whole_version(tmp_path):
    rng = random.Random(15)
    bb = tmp_path / "bb"
    moved = partial = 0
    previous: dict[str, str | None] = {"a": None, "b": None}
    for trial in range(KILL_TRIALS):
        procs = start(save_loop, 2, str(bb / "{domain}"), trial)
        time.sleep(rng.uniform(0.4, 1.6))
        victim = rng.randrange(2)
        os.kill(procs[victim].pid, signal.SIGKILL)
        time.sleep(rng.uniform(0.0, 0.05))  # the survivor runs on a little, then the job dies
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join()
        for d in "ab":
            now = _check_root(bb / d)
            moved += now != previous[d]
            partial += bool(list((bb / d).glob(STAGE + "*")))
            previous[d] = now
        try:  # the newest committed version over both roots loads whole too
            state = {"w": torch.zeros(128, 128), "r0": torch.zeros(5), "r1": torch.zeros(5), "step": 0}
            dcp.load(state, storage_reader=DcpReader(str(bb / "{domain}"), failure_domain="a", domains=["b"]),
                     no_dist=True)
            assert torch.equal(state["w"], torch.full((128, 128), float(state["step"])))
        except CheckpointError:
            assert previous == {"a": None, "b": None}  # nothing committed yet anywhere
    print(f"{KILL_TRIALS} kill trials: latest moved {moved} times, {partial} uncommitted staging dirs left")
    assert moved > 0, "no save ever committed: the kill window is too short for this machine"
