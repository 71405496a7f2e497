"""Directories with an owner: private directories of user mode, per-job directories of the Prolog."""

from __future__ import annotations

import os
import stat

import pytest

from nvrx_hpc.core.errors import CheckpointError, NvrxError
from nvrx_hpc.core.safedir import job_dir, private_dir

OTHER = 65534  # nobody: "another user"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's directory needs root")


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_private_dir_is_created_0700_and_an_own_one_is_accepted(tmp_path):
    path = private_dir(tmp_path / "a" / "b" / "nvrx-1-2")
    assert _mode(path) == 0o700 and _mode(path.parent) == 0o755
    assert private_dir(path) == path


@pytest.mark.parametrize("plant", ["symlink", "group-writable", "file"])
def test_private_dir_refuses_what_it_did_not_make_safely(tmp_path, plant):
    path = tmp_path / "nvrx-1-2"
    if plant == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        path.symlink_to(tmp_path / "elsewhere")
    elif plant == "group-writable":
        path.mkdir()
        path.chmod(0o775)
    else:
        path.write_text("")
    with pytest.raises(CheckpointError, match="refusing"):
        private_dir(path, CheckpointError)


@root_only
def test_private_dir_refuses_another_users_directory_or_parent(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(NvrxError, match="refusing"):
        private_dir(theirs)
    shm = tmp_path / "shm-nvrx"  # /dev/shm/nvrx made by the first user's job
    shm.mkdir(mode=0o755)
    os.chown(shm, OTHER, OTHER)
    with pytest.raises(NvrxError, match="belongs to another user"):
        private_dir(shm / "42")
    assert not (shm / "42").exists()


@root_only
def test_job_dir_is_fresh_0700_and_the_users(tmp_path):
    path = job_dir(tmp_path / "run" / "42", OTHER, OTHER)
    st = os.lstat(path)
    assert (st.st_uid, st.st_gid, _mode(path)) == (OTHER, OTHER, 0o700)
    assert job_dir(path, OTHER, OTHER) == path  # another node's Prolog of the same job on this host


@root_only
@pytest.mark.parametrize("plant", ["symlink", "other-user", "wide-mode"])
def test_job_dir_refuses_a_pre_created_one(tmp_path, plant):
    sticky = tmp_path / "bb"
    sticky.mkdir()
    sticky.chmod(0o1777)
    path = sticky / "42"
    if plant == "symlink":
        path.symlink_to(tmp_path)
    else:
        path.mkdir(mode=0o700)
        os.chown(path, 1234 if plant == "other-user" else OTHER, OTHER)
        if plant == "wide-mode":
            path.chmod(0o777)
    with pytest.raises(NvrxError, match="refusing the job directory"):
        job_dir(path, OTHER, OTHER)
    assert _mode(tmp_path) != 0 and os.lstat(tmp_path).st_uid == 0  # nothing chowned through the symlink


@root_only
def test_job_dir_refuses_a_parent_others_may_write(tmp_path):
    wide = tmp_path / "wide"
    wide.mkdir()
    wide.chmod(0o777)
    with pytest.raises(NvrxError, match="others may write its parent"):
        job_dir(wide / "42", OTHER, OTHER)
