"""nvrx_hpc.integrations.lightning in one process on the CPU (no Slurm, no agent): the callback's reports and stop,
checkpoints through NvrxCheckpointIO that resume bit for bit, the no-pickle codec, NvrxEnvironment."""

from __future__ import annotations

import argparse
import enum
import importlib.util
import logging
import pathlib
from collections import OrderedDict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from nvrx_hpc.ckpt.tree import flatten, unflatten  # noqa: E402
from nvrx_hpc.core.errors import CheckpointError  # noqa: E402
from nvrx_hpc.integrations import codec  # noqa: E402
from nvrx_hpc.integrations import lightning as nl  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("train_lightning", REPO / "examples" / "train_lightning.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


class FakeWorker:
    """Records what the callback tells the worker API; `stop_at` makes stop_requested() true from that iteration."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.events: list[tuple] = []
        self.iteration = 0
        self.stop_at = stop_at
        self.loaded: list[dict] = []

    def enabled(self) -> bool:
        return False

    def heartbeat(self) -> None:
        self.events.append(("hb",))

    def start_section(self, name: str) -> None:
        self.events.append(("open", name))

    def end_section(self, name: str) -> None:
        self.events.append(("close", name))

    def section(self, name: str):
        fake = self

        class _Section:
            def __enter__(self):
                fake.start_section(name)

            def __exit__(self, *exc):
                fake.end_section(name)
                return False

        return _Section()

    def set_iteration(self, n: int) -> None:
        self.iteration = n
        self.events.append(("iter", n))

    def stop_requested(self) -> bool:
        return self.stop_at is not None and self.iteration >= self.stop_at

    def state_dict(self) -> dict:
        return {"version": 1, "timeouts": {"heartbeat": 12.5}}

    def load_state_dict(self, state: dict) -> None:
        self.loaded.append(state)


@pytest.fixture
def fake_worker(monkeypatch):
    fake = FakeWorker()
    monkeypatch.setattr(nl, "worker", fake)
    return fake


def _fit(tmp_path: Path, steps: int, *, every: int = 3, bb: str = "bb", log: str = "loss.txt", resume: bool = True,
         module=None, callback=None):
    io = nl.NvrxCheckpointIO(str(tmp_path / bb / "{domain}"), scheme="none", failure_domain="node0")
    callback = callback or nl.NvrxCallback(every_n_train_steps=every)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, plugins=[io], callbacks=[callback],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, deterministic=True)  # fmt: skip
    model = module if module is not None else example.make_module(8, tmp_path / log)
    path = nl.latest_ckpt_path(trainer) if resume else None
    loader = torch.utils.data.DataLoader(example.Ticks(), batch_size=None)
    trainer.fit(model, train_dataloaders=loader, ckpt_path=path)
    return trainer, io, path


def _losses(path: Path) -> list[tuple[int, str]]:
    return [(int(s), v) for _, s, _, v in (line.split() for line in path.read_text().splitlines())]


# ---- the callback -------------------------------------------------------------------------------------------


def test_each_batch_opens_and_closes_its_sections_and_reports_the_iteration(tmp_path, fake_worker):
    _fit(tmp_path, 3, every=0)
    events = fake_worker.events
    first = events.index(("open", "step"))
    batch = events[first : events.index(("iter", 1)) + 1]
    assert batch == [("open", "step"), ("open", "backward"), ("close", "backward"), ("open", "optimizer"),
                     ("close", "optimizer"), ("close", "step"), ("iter", 1)]  # fmt: skip
    assert [e[1] for e in events if e[0] == "iter"] == [0, 1, 2, 3]  # on_train_start, then every batch
    opened = [e[1] for e in events if e[0] == "open"]
    closed = [e[1] for e in events if e[0] == "close"]
    assert sorted(opened) == sorted(closed) and opened.count("step") == 3
    assert events.count(("hb",)) >= 6


def test_a_requested_stop_saves_and_ends_fit_at_that_step(tmp_path, monkeypatch):
    fake = FakeWorker(stop_at=2)
    monkeypatch.setattr(nl, "worker", fake)
    callback = nl.NvrxCallback(every_n_train_steps=0)
    trainer, io, _ = _fit(tmp_path, 10, callback=callback)
    assert trainer.global_step == 2 and callback.stopped_at == 2
    assert ("open", "checkpoint") in fake.events
    trainer2 = pl.Trainer(accelerator="cpu", devices=1, max_steps=10, logger=False,
                          plugins=[nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none",
                                                       failure_domain="node0")])  # fmt: skip
    assert nl.latest_ckpt_path(trainer2) == "nvrx:step-2"


def test_the_worker_timeouts_travel_in_the_checkpoint(tmp_path, fake_worker):
    _fit(tmp_path, 3)
    _fit(tmp_path, 5, log="resumed.txt")
    assert fake_worker.loaded == [{"version": 1, "timeouts": {"heartbeat": 12.5}}]


def test_a_failed_save_is_logged_and_training_goes_on(tmp_path, fake_worker, monkeypatch):
    real = nl.NvrxCheckpointIO.save_checkpoint
    calls: list[int] = []

    def save(self, checkpoint, path, storage_options=None):
        calls.append(checkpoint["global_step"])
        if checkpoint["global_step"] == 3:
            raise CheckpointError("checkpoint of step 3 failed in the background", step=3)
        real(self, checkpoint, path, storage_options)

    monkeypatch.setattr(nl.NvrxCheckpointIO, "save_checkpoint", save)
    trainer, _, _ = _fit(tmp_path, 6)
    assert trainer.global_step == 6 and calls == [3, 6]
    trainer2 = pl.Trainer(accelerator="cpu", devices=1, max_steps=10, logger=False,
                          plugins=[nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none",
                                                       failure_domain="node0")])  # fmt: skip
    assert nl.latest_ckpt_path(trainer2) == "nvrx:step-6"


def test_stop_check_every_must_be_positive():
    with pytest.raises(ValueError):
        nl.NvrxCallback(stop_check_every=0)


# ---- checkpoints and resume ---------------------------------------------------------------------------------


def test_resume_from_the_newest_version_repeats_the_losses_bit_for_bit(tmp_path, fake_worker):
    _, _, first = _fit(tmp_path, 8, bb="ref", log="ref.txt")
    assert first is None
    reference = _losses(tmp_path / "ref.txt")
    assert [s for s, _ in reference] == list(range(8))

    _fit(tmp_path, 4, log="run.txt")  # saves at step 3; steps 0-3
    trainer, io, path = _fit(tmp_path, 8, log="run.txt")  # resumes at 3: step 3 again, then 4-7
    assert path == "nvrx:step-3" and trainer.global_step == 8
    run = _losses(tmp_path / "run.txt")
    assert [s for s, _ in run] == [0, 1, 2, 3, 3, 4, 5, 6, 7]
    assert sorted(set(run)) == reference  # every step's loss, replayed or not, is the reference's


def test_the_checkpoint_holds_lightning_state_without_pickle(tmp_path, fake_worker):
    _fit(tmp_path, 3)
    io = nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none", failure_domain="node0")
    state = io.load_checkpoint("nvrx:latest")
    io.teardown()
    assert state["global_step"] == 3 and state["pytorch-lightning_version"] == pl.__version__
    assert state["hyper_parameters"] == {"hidden": 8, "lr": 1e-2}
    assert set(state["state_dict"]) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    group = state["optimizer_states"][0]["param_groups"][0]
    assert group["betas"] == (0.9, 0.999) and group["params"] == [0, 1, 2, 3]
    assert isinstance(state["optimizer_states"][0]["state"][0]["exp_avg"], torch.Tensor)
    assert "_batches_that_stepped" in state["loops"]["fit_loop"]["epoch_loop.state_dict"]


def test_loading_a_file_path_is_refused(tmp_path):
    io = nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none", failure_domain="node0")
    with pytest.raises(ValueError, match="nvrx:latest"):
        io.load_checkpoint(tmp_path / "model.ckpt")


def test_loading_when_there_is_no_version_raises(tmp_path):
    io = nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none", failure_domain="node0")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        io.load_checkpoint("nvrx:latest")
    io.teardown()


def test_a_save_on_several_ranks_without_the_callback_raises_instead_of_hanging(tmp_path, monkeypatch):
    io = nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none", failure_domain="node0")
    monkeypatch.setattr(nl, "_world_size", lambda: 4)
    with pytest.raises(RuntimeError, match="NvrxCallback"):
        io.save_checkpoint({"global_step": 1}, "x")


def test_unsafe_hyperparameters_are_kept_as_their_repr(tmp_path, fake_worker):
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    model = example.make_module(8, tmp_path / "loss.txt")
    # a hyperparameter with no safe form, added in the hook (hparams assigned after __init__ did not reach the
    # checkpoint when this ran under pytest)
    model.on_save_checkpoint = lambda checkpoint: checkpoint["hyper_parameters"].update(thing=Opaque())
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("nvrx_hpc.integrations.codec").addHandler(handler)
    try:
        _fit(tmp_path, 3, module=model)
    finally:
        logging.getLogger("nvrx_hpc.integrations.codec").removeHandler(handler)
    assert any("kept as their repr" in m and "['thing']" in m for m in seen), seen
    io = nl.NvrxCheckpointIO(str(tmp_path / "bb" / "{domain}"), scheme="none", failure_domain="node0")
    assert io.load_checkpoint("nvrx:latest")["hyper_parameters"]["thing"] == "Opaque()"
    io.teardown()


# ---- the codec ----------------------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = 1


def test_codec_round_trips_what_lightning_checkpoints_hold_through_the_tree():
    np = pytest.importorskip("numpy")
    value = {
        "od": OrderedDict([("b", 1), ("a", torch.ones(2))]),
        "tuple_keys": {(1, 2): "x", 1.5: "y", True: "z"},
        "reserved": {codec.TAG: 1},
        "sets": [{1, 2}, frozenset({"a"})],
        "path": pathlib.Path("/a/b"),
        "big": 2**70,
        "dtype": torch.bfloat16,
        "device": torch.device("cpu"),
        "ns": argparse.Namespace(lr=0.1, name="n"),
        "array": np.arange(6, dtype=np.float32).reshape(2, 3),
        "scalar": np.float64(2.5),
        "enum": Color.RED,
        "betas": (0.9, 0.999),
        "none": None,
        "bytes": b"\x00\x01",
    }
    skeleton, tensors, _ = flatten(codec.encode(value))
    back = codec.decode(unflatten(skeleton, tensors))
    assert back["od"] == {"b": 1, "a": back["od"]["a"]} and torch.equal(back["od"]["a"], torch.ones(2))
    assert list(back["od"]) == ["b", "a"]
    assert back["tuple_keys"] == {(1, 2): "x", 1.5: "y", True: "z"}
    assert back["reserved"] == {codec.TAG: 1}
    assert back["sets"] == [{1, 2}, frozenset({"a"})] and isinstance(back["sets"][1], frozenset)
    assert back["path"] == pathlib.Path("/a/b") and back["big"] == 2**70
    assert back["dtype"] is torch.bfloat16 and back["device"] == torch.device("cpu")
    assert back["ns"] == argparse.Namespace(lr=0.1, name="n")
    assert isinstance(back["array"], np.ndarray) and (back["array"] == value["array"]).all()
    assert back["scalar"] == 2.5 and back["scalar"].dtype == np.float64
    assert back["enum"] == 1  # the value: no class is imported on load
    assert back["betas"] == (0.9, 0.999) and back["none"] is None and back["bytes"] == b"\x00\x01"


def test_codec_refuses_an_unknown_object_naming_where_it_sits():
    with pytest.raises(CheckpointError, match=r"checkpoint\['callbacks'\]\['cb'\]\[0\]"):
        codec.encode({"callbacks": {"cb": [object()]}})
    assert codec.encode({"hyper_parameters": {"f": len}}, lossy=("hyper_parameters",)) == {
        "hyper_parameters": {"f": {codec.TAG: ["repr", repr(len)]}}}


def test_codec_refuses_an_unknown_tag_on_load():
    with pytest.raises(CheckpointError, match="unknown tagged value"):
        codec.decode({codec.TAG: ["pickle", b"..."]})
    with pytest.raises(CheckpointError, match="malformed"):
        codec.decode({codec.TAG: "x"})


# ---- the environment ----------------------------------------------------------------------------------------


def test_environment_reads_the_launcher_variables(monkeypatch):
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "NODE_RANK": "1",
                        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29411"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    env = nl.NvrxEnvironment()
    assert nl.NvrxEnvironment.detect() and env.creates_processes_externally
    assert (env.global_rank(), env.world_size(), env.local_rank(), env.node_rank()) == (3, 4, 1, 1)
    assert (env.main_address, env.main_port) == ("10.0.0.1", 29411)
    env.set_global_rank(0)  # Lightning's own arithmetic never overrides the launcher's
    assert env.global_rank() == 3
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(ValueError, match="4 were started"):
        env.validate_settings(num_devices=1, num_nodes=2)
