"""Peers are who they say: a rank tells nothing to an agent socket that another user listens on."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import tempfile
import time

import pytest
from _worker_stub import token_file

from nvrx_hpc.worker.client import Client
from nvrx_hpc.worker.env import WorkerEnv
from nvrx_hpc.worker.sender import peer_uid_of

OTHER = 65534


def _impostor(path: str, ready, result) -> None:
    """Listen on `path` as another user and report how many bytes a connecting rank sent."""
    os.setgid(OTHER)
    os.setuid(OTHER)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(4)
        ready.set()
        srv.settimeout(1)
        got, conns, deadline = 0, [], time.monotonic() + 6
        while time.monotonic() < deadline:
            try:
                conn, _ = srv.accept()
                conn.setblocking(False)
                conns.append(conn)
            except OSError:
                pass
            for conn in conns:
                try:
                    got += len(conn.recv(4096))
                except OSError:
                    pass
        result.put((len(conns), got))


@pytest.mark.skipif(os.geteuid() != 0, reason="listening as another user needs root")
def test_a_rank_sends_nothing_to_another_users_socket():
    directory = tempfile.mkdtemp(prefix="nvrx-peer-", dir="/tmp")
    os.chmod(directory, 0o777)
    sock = os.path.join(directory, "agent.sock")
    tok_path, _token = token_file(directory)
    ctx = multiprocessing.get_context("fork")
    ready, result = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_impostor, args=(sock, ready, result))
    proc.start()
    try:
        assert ready.wait(20)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(sock)
            assert peer_uid_of(probe) == OTHER
        client = Client(WorkerEnv(socket=sock, token_file=tok_path, run_dir=directory, rank=0, local_rank=0,
                                  restart=0)).start(register_signal=False)  # fmt: skip
        client.heartbeat()
        time.sleep(2)
        client.close(wait=0.5)
        connections, received = result.get(timeout=20)
        assert connections >= 2 and received == 0  # the probe's and the rank's: not one byte from the rank
    finally:
        proc.join(20)
        shutil.rmtree(directory, ignore_errors=True)
