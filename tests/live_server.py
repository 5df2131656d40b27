"""Starting real servers for integration tests: a free port, a checked set-up command,
and ``serve()``, which runs a server until its health check answers and always stops it.

The browser test starts ``run.py`` with it; later tests start nginx and uWSGI the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools.stages import free_port  # noqa: F401  (the tests take it from here)

ROOT = Path(__file__).resolve().parent.parent


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no output)"
    return "\n".join(text.splitlines()[-lines:]) or "(no output)"


def run(command: Sequence[str], env: Mapping[str, str], cwd: Path = ROOT, timeout: float = 60) -> str:
    """Run a set-up command to the end; fail with its output if it fails or hangs."""
    try:
        done = subprocess.run(
            list(command), env=dict(env), cwd=cwd, timeout=timeout,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
    except subprocess.TimeoutExpired as expired:
        raise RuntimeError(f"{' '.join(command)} did not finish in {timeout:g} s:\n{expired.output or ''}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}")
    return done.stdout


@dataclass(frozen=True)
class Server:
    url: str  # e.g. http://127.0.0.1:54321, no trailing slash
    process: subprocess.Popen
    log: Path  # the server's stdout and stderr

    def output(self, lines: int = 40) -> str:
        return _tail(self.log, lines)


@contextmanager
def serve(
    command: Sequence[str],
    env: Mapping[str, str],
    port: int,
    *,
    host: str = "127.0.0.1",
    health_path: str = "/healthz",
    cwd: Path = ROOT,
    log: Path | None = None,
    start_timeout: float = 30,
    stop_signal: int = signal.SIGTERM,
    stop_timeout: float = 10,
) -> Iterator[Server]:
    """Start ``command``, wait until ``GET health_path`` on ``host:port`` answers 200, yield a Server.

    Whatever happens, the server is stopped on the way out: ``stop_signal`` to its pid
    (SIGTERM suits Flask; uWSGI wants SIGINT, nginx SIGQUIT), then SIGKILL to its
    process group if it is still alive after ``stop_timeout`` seconds. The server runs
    in a session of its own, so that group holds only it and its workers.
    """
    url = f"http://{host}:{port}"
    log = log or Path(tempfile.gettempdir()) / f"live-server-{port}.log"
    with open(log, "wb") as out:
        # Output goes to a file, not a pipe: a chatty server must never block on a full pipe.
        process = subprocess.Popen(
            list(command), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = Server(url=url, process=process, log=log)
    try:
        _wait_until_healthy(server, url + health_path, start_timeout, command)
        yield server
    finally:
        _stop(process, stop_signal, stop_timeout)


def _wait_until_healthy(server: Server, health_url: str, timeout: float, command: Sequence[str]) -> None:
    deadline = time.monotonic() + timeout
    last_problem = "no answer yet"
    while time.monotonic() < deadline:
        # Checked first, so an old server on the same port cannot pass for ours.
        if server.process.poll() is not None:
            raise RuntimeError(
                f"{' '.join(command)} exited with {server.process.returncode} before {health_url} answered:\n"
                f"{server.output()}"
            )
        try:
            with urllib.request.urlopen(health_url, timeout=2) as response:
                if response.status == 200:
                    return
                last_problem = f"status {response.status}"
        except urllib.error.HTTPError as error:
            last_problem = f"status {error.code}"
        except (urllib.error.URLError, OSError) as error:
            last_problem = str(getattr(error, "reason", error))
        time.sleep(0.1)
    raise RuntimeError(
        f"{health_url} did not answer 200 within {timeout:g} s ({last_problem}); server output:\n{server.output()}"
    )


def _stop(process: subprocess.Popen, stop_signal: int, timeout: float) -> None:
    if process.poll() is not None:
        return
    try:
        os.kill(process.pid, stop_signal)
        process.wait(timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(5)
