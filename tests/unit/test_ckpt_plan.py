"""Partner rings, XOR sets and restore planning, as pure functions of who holds what."""

from __future__ import annotations

import pytest

from nvrx_hpc.ckpt.api import Scheme
from nvrx_hpc.ckpt.layout import Layout, cut_sets
from nvrx_hpc.ckpt.manifest import Manifest, ParitySet, ShardRecord
from nvrx_hpc.ckpt.plan import SHARED, Holdings, plan_restore
from nvrx_hpc.core.errors import CheckpointError


def test_partner_is_the_same_local_rank_on_the_next_node():
    lay = Layout(("a", "a", "b", "b", "c", "c"))
    assert lay.local_ranks == [0, 1, 0, 1, 0, 1]
    assert lay.rings == {0: [0, 2, 4], 1: [1, 3, 5]}
    assert [lay.partner(r) for r in range(6)] == [2, 3, 4, 5, 0, 1]
    assert [lay.partner_source(r) for r in range(6)] == [4, 5, 0, 1, 2, 3]
    assert [lay.leader(r) for r in range(6)] == [True, False, True, False, True, False]
    assert lay.xor_sets(2) == [(0, 2, 4), (1, 3, 5)]


def test_rings_follow_domain_order_not_rank_order():
    lay = Layout(("b", "a", "b", "a"))
    assert lay.rings == {0: [0, 1], 1: [2, 3]}
    assert lay.partner(0) == 1 and lay.partner(1) == 0


@pytest.mark.parametrize(("n", "size", "expected"), [
    (8, 8, [8]), (9, 8, [9]), (16, 8, [8, 8]), (17, 8, [9, 8]), (5, 2, [3, 2]), (3, 8, [3]), (2, 2, [2]),
])
def test_xor_sets_have_size_to_twice_size(n, size, expected):
    sets = cut_sets(list(range(n)), size)
    assert [len(s) for s in sets] == expected
    assert [r for s in sets for r in s] == list(range(n))


@pytest.mark.parametrize("domains", [("a", "a"), ("a", "a", "b")])
def test_redundancy_needs_a_partner_in_another_domain(domains):
    with pytest.raises(CheckpointError, match="needs every rank's partner in another failure domain") as err:
        Layout(domains).check(Scheme.PARTNER, 8)
    assert "scheme='none'" in err.value.hint
    Layout(domains).check(Scheme.NONE, 8)


def manifest(step: int, domains: list[str], scheme: str = "partner", sets=()) -> Manifest:
    shards = tuple(ShardRecord(r, d, 100, 10, 1, f"{r:016x}") for r, d in enumerate(domains))
    parity = tuple(ParitySet(tuple(s), 64, tuple("0" * 16 for _ in s)) for s in sets)
    return Manifest(step=step, world_size=len(domains), scheme=scheme, shards=shards, parity_sets=parity, created=step)


def holdings(now: list[str], versions: dict[int, tuple[Manifest, dict]], failed=None) -> Holdings:
    files = {s: {k: frozenset(v) for k, v in where.items()} for s, (_, where) in versions.items()}
    return Holdings(tuple(now), files, {s: m for s, (m, _) in versions.items()}, failed or {})


D = ["d0", "d1", "d2", "d3"]


def partner_files(alive: set[str]) -> dict:
    """Shard r on d_r, its replica on d_(r+1)."""
    files = {}
    for r in range(4):
        files[("shard", r)] = {D[r]} & alive
        files[("replica", r)] = {D[(r + 1) % 4]} & alive
    return files


def test_all_local_needs_no_reprotection():
    plan, rejected = plan_restore(holdings(D, {3: (manifest(3, D), partner_files(set(D)))}))
    assert plan is not None and plan.step == 3 and rejected == {}
    assert plan.sources() == {"local": 4} and not plan.reprotect


def test_a_lost_node_is_fetched_from_its_partner():
    now = ["d0", "d9", "d2", "d3"]
    plan, _ = plan_restore(holdings(now, {3: (manifest(3, D), partner_files({"d0", "d2", "d3"}))}))
    assert plan is not None and plan.sources() == {"local": 3, "peer": 1} and plan.reprotect
    (fetch,) = [f for f in plan.fetches if f.source == "peer"]
    assert (fetch.owner, fetch.holder, fetch.kind, fetch.location) == (1, 2, "replica", "d2")


def test_adjacent_losses_fall_back_to_an_older_version_with_the_reason():
    alive = {"d0", "d3"}
    versions = {
        5: (manifest(5, D), partner_files(alive)),
        4: (manifest(4, D), {("shard", r): {"x"} for r in range(4)}),
        2: (manifest(2, D), {**{("shard", r): {SHARED} for r in range(4)}}),
    }
    plan, rejected = plan_restore(holdings(["d0", "d8", "d9", "d3"], versions))
    assert plan is not None and plan.step == 2 and plan.sources() == {"shared": 4}
    assert rejected[5].startswith("no readable copy of the shard of rank 1 (was on d1)")
    assert set(rejected) == {5, 4}


def test_bad_files_are_excluded_and_failed_versions_skipped():
    h = holdings(D, {3: (manifest(3, D), partner_files(set(D))), 1: (manifest(1, D), partner_files(set(D)))})
    plan, _ = plan_restore(h, excluded=[(3, "d2", "shard", 2)])
    assert plan is not None and plan.step == 3
    (fetch,) = [f for f in plan.fetches if f.owner == 2]
    assert (fetch.holder, fetch.kind, fetch.location) == (3, "replica", "d3")
    plan, rejected = plan_restore(h, excluded=[(3, "d2", "shard", 2), (3, "d3", "replica", 2)])
    assert plan is not None and plan.step == 1 and "rank 2" in rejected[3]
    failed = holdings(D, {3: (manifest(3, D), partner_files(set(D))), 1: (manifest(1, D), partner_files(set(D)))},
                      failed={3: "bad"})
    plan, rejected = plan_restore(failed)
    assert plan is not None and plan.step == 1 and rejected == {3: "marked failed: bad"}


def test_world_size_must_match():
    plan, rejected = plan_restore(holdings(D[:2], {3: (manifest(3, D), partner_files(set(D)))}))
    assert plan is None and rejected == {3: "saved by 4 ranks, this job has 2"}


def xor_files(alive: set[str]) -> dict:
    files = {}
    for r in range(4):
        files[("shard", r)] = {D[r]} & alive
        files[("parity", r)] = {D[r]} & alive
    return files


def test_xor_rebuilds_one_loss_per_set_not_two():
    m = manifest(3, D, "xor", sets=[(0, 1), (2, 3)])
    plan, _ = plan_restore(holdings(["d0", "d8", "d2", "d9"], {3: (m, xor_files({"d0", "d2"}))}))
    assert plan is not None and plan.sources() == {"local": 2, "xor": 2}
    assert {(rb.members, rb.lost) for rb in plan.rebuilds} == {((0, 1), 1), ((2, 3), 3)}
    plan, rejected = plan_restore(holdings(["d8", "d9", "d2", "d3"], {3: (m, xor_files({"d2", "d3"}))}))
    assert plan is None and "rank 0 (was on d0), 1 (was on d1)" in rejected[3]


def test_peers_share_the_sending():
    """Two ranks that moved both need copies held on one node with two ranks: each holder sends one."""
    lay = ["a", "a", "b", "b"]
    m = manifest(3, lay)
    files = {("shard", 0): {"x"}, ("shard", 1): {"x"}, ("replica", 0): {"b"}, ("replica", 1): {"b"},
             ("shard", 2): {"b"}, ("shard", 3): {"b"}}
    plan, _ = plan_restore(holdings(["c", "c", "b", "b"], {3: (m, files)}))
    assert plan is not None
    holders = sorted(f.holder for f in plan.fetches if f.source == "peer")
    assert holders == [2, 3]
