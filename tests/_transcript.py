"""The commands a cluster test ran (tests/cluster/conftest.py records every subprocess.run); the root
conftest prints them under the failure when the test fails."""

from __future__ import annotations

import subprocess

TRANSCRIPT: list[str] = []
_TAIL = 2000


def record(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """Add one finished command (argv, rc, the tails of stdout and stderr) to the transcript."""

    def tail(text) -> str:
        text = text.decode(errors="replace") if isinstance(text, bytes) else (text or "")
        return text if len(text) <= _TAIL else "..." + text[-_TAIL:]

    argv = done.args if isinstance(done.args, (list, tuple)) else [done.args]
    TRANSCRIPT.append(f"$ {' '.join(str(a) for a in argv)}\nrc={done.returncode}\n"
                      f"--- stdout\n{tail(done.stdout)}\n--- stderr\n{tail(done.stderr)}")
    return done
