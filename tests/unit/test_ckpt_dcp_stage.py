"""The DCP adapter's kept host copy (ckpt.dcp_stage): refilled only when the previous save let go of it."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from nvrx_hpc.ckpt import dcp_stage  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh():
    dcp_stage.drop_staging()
    yield
    dcp_stage.drop_staging()


def state(step: float, n: int = 8) -> dict:
    return {"a": torch.full((n,), step), "b": {"c": torch.full((2, 3), step, dtype=torch.bfloat16)},
            "l": [torch.tensor(step), 7], "step": int(step), "name": "x"}


def ptrs(staged: dict) -> list[int]:
    return [staged["a"].data_ptr(), staged["b"]["c"].data_ptr(), staged["l"][0].data_ptr()]


def test_a_dropped_staged_state_is_refilled_in_place_with_the_new_values():
    first = dcp_stage.stage(state(1.0))
    where = ptrs(first)
    assert torch.equal(first["a"], torch.full((8,), 1.0)) and first["step"] == 1
    del first
    gc.collect()
    second = dcp_stage.stage(state(2.0))
    assert ptrs(second) == where  # the same host memory, no new allocation
    assert torch.equal(second["a"], torch.full((8,), 2.0))
    assert torch.equal(second["b"]["c"], torch.full((2, 3), 2.0, dtype=torch.bfloat16))
    assert second["l"][0].item() == 2.0 and second["l"][1] == 7 and second["step"] == 2 and second["name"] == "x"


def test_a_staged_state_still_referenced_is_never_overwritten():
    first = dcp_stage.stage(state(1.0))
    second = dcp_stage.stage(state(2.0))  # the first save may still be writing
    assert set(ptrs(first)).isdisjoint(ptrs(second))
    assert torch.equal(first["a"], torch.full((8,), 1.0)) and torch.equal(second["a"], torch.full((8,), 2.0))
    where = ptrs(second)
    del second
    third = dcp_stage.stage(state(3.0))
    assert ptrs(third) == where and torch.equal(first["a"], torch.full((8,), 1.0))


def test_a_new_structure_gets_its_own_copy_and_at_most_two_are_kept():
    where = ptrs(dcp_stage.stage(state(1.0)))
    other = dcp_stage.stage(state(1.0, n=9))  # another shape: never copied into the first structure's memory
    assert other["a"].shape == (9,) and other["a"].data_ptr() not in where
    del other
    assert ptrs(dcp_stage.stage(state(2.0))) == where  # both kept
    dcp_stage.stage({"z": torch.zeros(4)})


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_async_saves_through_the_writer_keep_each_steps_values(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from nvrx_hpc.ckpt import DcpWriter

    def values(step: int) -> dict:
        return {"w": torch.full((64, 4), float(step)), "b": torch.full((3,), step, dtype=torch.bfloat16), "step": step}

    a, b = (DcpWriter(tmp_path / "{domain}", failure_domain=d, keep=0) for d in "ab")
    first = dcp.async_save(values(1), storage_writer=a, checkpoint_id="s1")
    second = dcp.async_save(values(2), storage_writer=b, checkpoint_id="s2")  # while the first may still run
    first.result()
    second.result()
    third = dcp.async_save(values(3), storage_writer=a, checkpoint_id="s3")  # into a kept copy
    third.result()
    dcp.save(values(4), storage_writer=a, checkpoint_id="s4")  # a blocking save after async ones
    for domain, step in (("a", 1), ("b", 2), ("a", 3), ("a", 4)):
        into = {"w": torch.zeros(64, 4), "b": torch.zeros(3, dtype=torch.bfloat16), "step": 0}
        dcp.load(into, storage_reader=FileSystemReader(tmp_path / domain / f"s{step}"), no_dist=True)
        assert torch.equal(into["w"], values(step)["w"]) and torch.equal(into["b"], values(step)["b"])
        assert into["step"] == step


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("checkpoint_id", ["s1", None])  # without one, DCP never calls reset
def test_the_save_thread_plans_only_after_async_save_let_it_go(tmp_path, checkpoint_id):
    import torch.distributed.checkpoint as dcp

    from nvrx_hpc.ckpt import DcpWriter

    class Probe(DcpWriter):
        synced = planned_after_sync = False

        def synchronize_staging(self) -> None:
            self.synced = True
            super().synchronize_staging()

        def set_up_storage_writer(self, *args, **kwargs) -> None:
            self.planned_after_sync = self.synced
            super().set_up_storage_writer(*args, **kwargs)

    writer = Probe(tmp_path / "{domain}", failure_domain="a")
    dcp.async_save({"w": torch.ones(4)}, storage_writer=writer, checkpoint_id=checkpoint_id).result()
    assert writer.planned_after_sync and writer._go is None
    assert (tmp_path / "a" / (checkpoint_id or "v000001") / ".metadata").is_file()


def test_a_writer_no_one_holds_is_freed_and_its_commit_still_settles_at_exit(tmp_path):
    import weakref

    from nvrx_hpc.ckpt import dcp

    writer = dcp.DcpWriter(tmp_path / "bb", failure_domain="a")
    ref = weakref.ref(writer)
    assert writer in dcp._LIVE_WRITERS  # the exit hook would settle its background commit
    del writer
    gc.collect()
    assert ref() is None  # a writer-per-save loop does not keep every writer alive
    dcp._settle_live_writers()  # and the hook copes with the writers already gone
