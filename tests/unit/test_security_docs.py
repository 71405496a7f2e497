"""docs/security.md's table of files and directories matches what the code creates: each row's id names a
function below that makes the thing with nvrx-hpc's own code; its owner and mode must be the documented ones."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from pathlib import Path

import pytest

from nvrx_hpc.agent.site import _open_log, _write_record, record_dir_ready
from nvrx_hpc.ckpt import key as ckpt_key
from nvrx_hpc.ckpt.api import version_name
from nvrx_hpc.cli.hooks import _append
from nvrx_hpc.core.safedir import job_dir
from nvrx_hpc.core.wire import new_token, save_token

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
USER = 65534  # the job's user in these checks (root makes things for it)
ROW = re.compile(r"^\| (?P<id>[a-z-]+) \| .* \| (?P<owner>root|user)[^|]* \| (?P<mode>0[0-7]{3}) \| [^|]+ \|$")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making root's and a user's files needs root")


def _documented() -> dict[str, tuple[str, int]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m["id"]] = (m["owner"], int(m["mode"], 8))
    return rows


def _make(ident: str, tmp: Path, monkeypatch) -> tuple[Path, int]:
    """Create the documented thing; returns it and the uid the job's user has in this check."""
    me = os.geteuid()
    if ident == "hook-log":
        _append(tmp / "log" / "hooks.jsonl", {"x": 1})
        return tmp / "log" / "hooks.jsonl", me
    if ident == "record-dir":
        record_dir_ready(tmp / "agents")
        return tmp / "agents", me
    if ident == "pid-record":
        _write_record(tmp / "a.pid", {"pid": 1})
        return tmp / "a.pid", me
    if ident == "agent-log":
        os.close(_open_log(tmp / "a.log", USER))
        return tmp / "a.log", me
    if ident in ("socket-job-dir", "bb-job-dir"):
        return job_dir(tmp / "run" / "42", USER, USER), USER
    if ident in ("agent-socket", "user-socket-dir"):
        from nvrx_hpc.agent.server import RankSocketServer

        server = RankSocketServer(tmp / "s" / "a.sock", None, print, print, print)
        mode: list[int] = []

        async def start() -> None:
            await server.start()
            mode.append(os.lstat(tmp / "s" / "a.sock").st_mode)
            await server.close()

        asyncio.run(start())
        (tmp / "s" / "a.sock").touch()
        os.chmod(tmp / "s" / "a.sock", stat.S_IMODE(mode[0]))  # what it was while listening
        return tmp / "s" / ("a.sock" if ident == "agent-socket" else ""), me
    if ident in ("version-dir", "shard", "manifest", "ckpt-key", "ckpt-key-dir"):
        import torch

        from nvrx_hpc.ckpt import AsyncCheckpointer

        monkeypatch.setenv("NVRX_CKPT_KEY_FILE", str(tmp / "keys" / "ckpt.key"))
        ckpt_key._load.cache_clear()
        with AsyncCheckpointer(tmp / "bb" / "{domain}", None, scheme="none", comm="local", failure_domain="n1") as ck:
            assert ck.save({"w": torch.ones(8)}, 1).wait().committed
        ckpt_key._load.cache_clear()
        vdir = tmp / "bb" / "n1" / version_name(1)
        return {"version-dir": vdir, "shard": vdir / "shard-r00000.h5", "manifest": vdir / "MANIFEST.json",
                "ckpt-key": tmp / "keys" / "ckpt.key", "ckpt-key-dir": tmp / "keys"}[ident], me  # fmt: skip
    if ident == "token":
        save_token(tmp / "token", new_token())
        return tmp / "token", me
    if ident == "attribution-lock":
        from nvrx_hpc.attribution.trigger import take_lock

        assert take_lock(tmp, "0", "n1")
        return tmp / ".attribution-0.lock", me
    if ident == "attribution-log":
        from nvrx_hpc.attribution.trigger import _open_log as open_attr_log

        os.close(open_attr_log(tmp))
        return tmp / ".attribution.log", me
    raise AssertionError(f"docs/security.md documents {ident!r}, which this test does not know how to make")


def test_the_table_lists_what_the_code_makes():
    assert len(_documented()) >= 15


@pytest.mark.parametrize("ident", sorted(_documented()))
def test_documented_owner_and_mode_match_the_code(ident, tmp_path, monkeypatch):
    old = os.umask(0o022)  # the usual umask; the code must not depend on a stricter one
    try:
        path, user_uid = _make(ident, tmp_path, monkeypatch)
    finally:
        os.umask(old)
    owner, mode = _documented()[ident]
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == mode, f"{ident}: {path} is {stat.S_IMODE(st.st_mode):04o}, documented {mode:04o}"
    expected_uid = 0 if owner == "root" else user_uid
    assert st.st_uid == expected_uid, f"{ident}: {path} belongs to uid {st.st_uid}, documented {owner}"
