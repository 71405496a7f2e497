"""Hostlist expand/compress: Slurm's documented examples, 22.05's observed behaviour, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvrx_hpc.core.errors import SlurmParseError
from nvrx_hpc.slurm.hostlist import MAX_HOSTS, HostlistError, compress, expand, host_sort_key, sort_hosts

# Each case was checked with `scontrol show hostnames` on Slurm 22.05.8.
EXPAND_CASES = [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[01-10,15]", [f"n{i:02d}" for i in range(1, 11)] + ["n15"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("n[01-2]", ["n01", "n02"]),  # the low end sets the padding
    ("n[1-02]", ["n1", "n2"]),
    ("gpu-a[1-2]-b[3-4]", ["gpu-a1-b3", "gpu-a1-b4", "gpu-a2-b3", "gpu-a2-b4"]),  # first bracket outermost
    ("rack[1-2]-node[001-002]", ["rack1-node001", "rack1-node002", "rack2-node001", "rack2-node002"]),
    ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ("n[1-3],n[2-4]", ["n1", "n2", "n3", "n2", "n3", "n4"]),  # duplicates kept, as Slurm keeps them
    ("n1 n2", ["n1", "n2"]),
    ("n[1-2],,n3", ["n1", "n2", "n3"]),
    ("[1-3]", ["1", "2", "3"]),
    ("n[1,1-2]", ["n1", "n1", "n2"]),
    # the forms Slurm's documentation uses (slurm.conf NodeName=, scontrol show hostnames)
    ("linux[0-64,128]", [f"linux{i}" for i in range(65)] + ["linux128"]),
    ("lx[10-20]", [f"lx{i}" for i in range(10, 21)]),
    ("tux[1-3,5]", ["tux1", "tux2", "tux3", "tux5"]),
    ("", []),
    ("(null)", []),
]


@pytest.mark.parametrize(("text", "names"), EXPAND_CASES)
def test_expand_matches_slurm(text: str, names: list[str]) -> None:
    assert expand(text) == names


def test_expand_accepts_text_after_a_bracket_like_newer_slurm() -> None:
    # 22.05 rejects this form ("Invalid hostlist"); 23.x+ accepts it, and so do we.
    assert expand("n[1-2]-ib") == ["n1-ib", "n2-ib"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("n[1-", "'[' is never closed"),
        ("n[3-1]", "runs backwards"),
        ("n[]", "empty brackets"),
        ("n1]", "']' without '['"),
        ("n[1--2]", "bad range '1--2'"),
        ("n[-1]", "bad range '-1'"),
        ("n[1-2]]", "']' without '['"),
        ("n[a]", "bad range 'a'"),
        ("n[[1]]", "nested '['"),
        ("n[ 1-2]", "whitespace inside brackets"),
        ("n[1-99999999]", f"cap of {MAX_HOSTS}"),
        ("n[1-1000][1-1001]", f"cap of {MAX_HOSTS}"),
        ("n[1-900000,1-900000]", f"cap of {MAX_HOSTS}"),
    ],
)
def test_malformed_hostlists_are_rejected_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(HostlistError) as caught:
        expand(text)
    assert why in str(caught.value)
    assert repr(text) in str(caught.value)  # the message quotes the input
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, SlurmParseError)
    assert caught.value.hint and "prefix[1-4,7]" in caught.value.hint


def test_expand_refuses_a_non_string() -> None:
    with pytest.raises(TypeError):
        expand(["n1"])  # type: ignore[arg-type]


# Each expected string is what `scontrol show hostlist` prints for the sorted input on 22.05.8.
@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["n3", "n1", "n2", "n10"], "n[1-3,10]"),
        (["n1"], "n1"),
        (["n098", "n099", "n100"], "n[098-100]"),
        (["b1", "a1", "a2"], "a[1-2],b1"),
        (["x", "n1", "n2"], "n[1-2],x"),
        (["gpu-a1-b3", "gpu-a1-b4", "gpu-a2-b3"], "gpu-a1-b[3-4],gpu-a2-b3"),
        (["n1-ib", "n2-ib"], "n1-ib,n2-ib"),  # 22.05 would not accept n[1-2]-ib, so it is not written
        (["n1", "n1", "n2"], "n[1-2]"),
        (["n01", "n02", "n10"], "n[01-02,10]"),
        ([], ""),
    ],
)
def test_compress(names: list[str], text: str) -> None:
    assert compress(names) == text


def test_compress_keeps_mixed_padding_apart() -> None:
    text = compress(["n8", "n9", "n08", "n09", "n10"])
    assert sorted(expand(text)) == sorted(["n8", "n9", "n08", "n09", "n10"])


@pytest.mark.parametrize("bad", ["n[1]", "a,b", "n 1", "", "n\t1"])
def test_compress_rejects_names_that_are_not_names(bad: str) -> None:
    with pytest.raises(HostlistError):
        compress(["n1", bad])


def test_compress_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError):
        compress("n1")  # type: ignore[arg-type]


def test_sort_hosts_is_natural() -> None:
    assert sort_hosts(["n10", "n2", "n1", "n2", "login"]) == ["login", "n1", "n2", "n10"]
    assert host_sort_key("n10") > host_sort_key("n9")


# ---- round trips -------------------------------------------------------------------------------
_prefix = st.text(alphabet="abcxyz-_.", min_size=1, max_size=4).filter(lambda p: not p[-1].isdigit())
_number = st.integers(min_value=0, max_value=2000)
_name = st.one_of(
    st.builds(lambda p, n: f"{p}{n}", _prefix, _number),  # unpadded
    st.builds(lambda p, n: f"{p}{n:04d}", _prefix, _number),  # padded to 4
    st.builds(lambda p, n, s: f"{p}{n}{s}", _prefix, _number, st.sampled_from(["-ib", "x"])),  # suffix
    _prefix,  # no number at all
)


@given(st.lists(_name, max_size=40))
def test_round_trip_gives_the_sorted_unique_names(names: list[str]) -> None:
    assert set(expand(compress(names))) == set(names)
    assert len(expand(compress(names))) == len(set(names))


@given(st.lists(st.builds(lambda p, n: f"{p}{n}", _prefix, _number), max_size=40))
def test_round_trip_order_is_natural_when_padding_is_uniform(names: list[str]) -> None:
    assert expand(compress(names)) == sort_hosts(names)


@given(st.lists(st.builds(lambda p, n: f"{p}{n}", _prefix, _number), min_size=1, max_size=40))
def test_compressed_form_is_stable(names: list[str]) -> None:
    text = compress(names)
    assert compress(expand(text)) == text


@given(st.text(alphabet="n0123456789[],- ", max_size=20))
def test_expand_never_fails_with_anything_but_hostlist_error(text: str) -> None:
    try:
        expand(text)
    except HostlistError:
        pass
