"""Process supervision: a stage's servers started on 127.0.0.1 (the development server, or
nginx in front of uWSGI on each node), each with a pid file and a log under its var folder,
watched while they run and stopped."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tools import privileges
from tools.bench.procfs import children_of
from tools.stages.model import APP_SERVER_ENV, BIN, ROOT, VAR, Stage, instance_folder, prepare_database, stage_env


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it; another process could still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not found:
        raise SystemExit("nginx is missing: run `make run` as root once, or `sudo apt-get install nginx-light`")
    return found


def write_nginx_conf(stage: Stage, var: Path, port: int, user: privileges.User | None = None) -> Path:
    """nginx.conf with this run's paths and port, load-balancing over the stage's app nodes; its workers
    run as ``user`` (who runs the app servers), or as whoever starts it."""
    prefix = var / "nginx"
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (prefix / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    if user is not None:
        user_line = f"user {user.name} {user.group};"
    else:
        # As root, nginx's workers would drop to `nobody`, who cannot use our socket.
        user_line = f"user {getpass.getuser()};" if os.geteuid() == 0 else ""
    values = {
        "USER_LINE": user_line,
        "VAR": str(prefix),
        "ROOT": str(ROOT),
        "PORT": str(port),
        "NGINX_ETC": "/etc/nginx",
        # By browser: what a node keeps for a user (their merged timeline, its rows) is made on one node,
        # not on each; a browser yet to log in, with no key, goes round robin.
        "UPSTREAM_BALANCE": "hash $browser consistent;" if stage.serving_flag("NODE_AFFINITY") else "",
        "UPSTREAM_SERVERS": "\n        ".join(
            f"server unix:{n / 'uwsgi.sock'} max_fails=3 fail_timeout=2s;" for n in stage.node_folders(var)
        ),
    }
    text = stage.config_file("nginx.conf").read_text()
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    conf = prefix / "nginx.conf"
    conf.write_text(text)
    return conf


@dataclass
class Running:
    stage: Stage
    url: str
    var: Path
    children: list[tuple[str, subprocess.Popen]]

    def alive(self) -> bool:
        return all(process.poll() is None for _, process in self.children)

    def log_tail(self, characters: int = 3000) -> str:
        """The end of each server's output, for a failing test to show."""
        tails = []
        for name, _ in self.children:
            text = (self.var / f"{name}.log").read_text(errors="replace")
            tails.append(f"--- {name}.log ---\n{text[-characters:]}")
        return "\n".join(tails)

    def process(self, name: str) -> subprocess.Popen:
        """The server named ``name`` ("nginx", "uwsgi" or "dev"): its master process."""
        return next(process for child, process in self.children if child == name)

    def workers(self) -> list[int]:
        """The pids of uWSGI's workers: the master's children, which it respawns when one dies."""
        return children_of(self.process("uwsgi").pid)

    def ready_workers(self) -> list[int]:
        """The uWSGI workers that have loaded the app (lazy-apps: each after its fork), from uWSGI's log."""
        log = (self.var / "uwsgi.log").read_text(errors="replace")
        ready = {int(pid) for pid in re.findall(r"WSGI app \d+ \(mountpoint='[^']*'\) ready in .* pid: (\d+)", log)}
        return [pid for pid in self.workers() if pid in ready]

    def front_workers(self) -> list[int]:
        """The pids of nginx's workers (old ones finishing their requests after a reload included)."""
        return children_of(self.process("nginx").pid)

    def reload_app_servers(self) -> None:
        """Ask uWSGI for a chain reload: one worker at a time finishes its requests, exits and
        is replaced (lazy-apps load the app afresh), the next only once its replacement is ready,
        so the others keep serving throughout. Returns at once; watch ``workers()`` to see it done."""
        with open(self.var / "uwsgi.fifo", "w") as fifo:
            fifo.write("c")

    def reload_front(self) -> None:
        """Ask nginx to reload: new workers start with the config re-read, old ones finish
        the requests they have and close their idle connections. Returns at once."""
        self.process("nginx").send_signal(signal.SIGHUP)

    def stop(self) -> None:
        # Front first: nginx stops taking requests, then the app servers go.
        for name, process in self.children:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            (self.var / f"{name}.pid").unlink(missing_ok=True)

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


def _spawn(
    name: str, command: list[str], env: dict[str, str], var: Path, user: privileges.User | None = None
) -> subprocess.Popen:
    as_user = user.popen_options() if user is not None else {}
    with open(var / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **as_user
        )
    # Written aside and moved into place, the user's from the start: uWSGI writes the same file as that user.
    written = var / f".{name}.pid"
    written.write_text(f"{process.pid}\n")
    if user is not None:
        os.chown(written, user.uid, user.gid)
    written.replace(var / f"{name}.pid")
    return process


def wait_for_sockets(sockets: list[Path], children, var: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(socket_path.exists() for socket_path in sockets):
        for name, process in children:
            if process.poll() is not None:
                tail = (var / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with {process.returncode} while starting:\n{tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{', '.join(map(str, sockets))} did not appear within {timeout:.0f}s (logs in {var})")
        time.sleep(0.05)


def wait_healthy(url: str, children, var: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, process in children:
            if process.poll() is not None:
                tail = (var / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited with {process.returncode} while starting:\n{tail}")
        try:
            with urllib.request.urlopen(url + "healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}healthz did not answer within {timeout:.0f}s (logs in {var})")


def written_folders(env: dict[str, str]) -> list[Path]:
    """Where the app servers write besides var: the instance folder (the secret key), and the SQLite
    database's folder (the database, its journal, the cache's write signal)."""
    instance = instance_folder(env)
    url = env.get("TWEEPY_DATABASE_URL", "")
    database = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite:///") else instance
    return [instance, database]


def start(
    stage: Stage,
    *,
    port: int | None = None,
    var: Path = VAR,
    env: dict[str, str] | None = None,
    seed: list[str] | None = None,
) -> Running:
    """Start a stage on 127.0.0.1 and return once /healthz answers."""
    port = port or stage.default_port
    var.mkdir(parents=True, exist_ok=True)
    full_env = stage_env(stage, port, env)
    prepare_database(stage, full_env, seed)
    # The development server is one person's, on their own machine: it runs as they do.
    user = None
    if stage.server == "uwsgi":
        # Whom to serve as is the runner's to know, not the app's: the caller's word, else the stage's.
        serve_as = full_env.pop("TWEEPY_SERVE_AS", None) or os.environ.get("TWEEPY_SERVE_AS")
        user = privileges.serving_user(serve_as or stage.get("SERVE_AS"))
    if user is not None:
        print(f"==> serving as {user.name}: the app servers, and nginx's workers", flush=True)
        privileges.hand_over(user, [var, *written_folders(full_env)])
    app_env = {**APP_SERVER_ENV, **full_env}
    url = f"http://127.0.0.1:{port}/"
    children: list[tuple[str, subprocess.Popen]] = []
    try:
        if stage.server == "dev":
            children.append(("dev", _spawn("dev", [sys.executable, "run.py"], app_env, var)))
        elif stage.server == "uwsgi":
            app_servers = []
            for node in stage.node_folders(var):
                node.mkdir(parents=True, exist_ok=True)
                name = "uwsgi" if node == var else f"uwsgi-{node.name}"
                uwsgi = [str(BIN / "uwsgi"), "--ini", str(ROOT / "uwsgi.ini"), *stage.uwsgi_options(node)]
                if user is not None:
                    privileges.hand_over(user, [node])
                app_servers.append((name, _spawn(name, uwsgi, app_env, var, user)))
            # The front comes up once every node listens: nginx counts a refused connection
            # against a node and would leave it out for a while.
            wait_for_sockets([node / "uwsgi.sock" for node in stage.node_folders(var)], app_servers, var)
            conf = write_nginx_conf(stage, var, port, user)
            if user is not None:
                privileges.hand_over(user, [conf.parent])  # its workers write request bodies there
            nginx = [nginx_binary(), "-p", str(conf.parent), "-e", str(conf.parent / "error.log"), "-c", str(conf)]
            children += [("nginx", _spawn("nginx", nginx, full_env, var)), *app_servers]
        else:
            raise SystemExit(f"stage {stage.number}: unknown TWEEPY_SERVER={stage.server!r}")
        wait_healthy(url, children, var)
    except BaseException:
        Running(stage, url, var, children).stop()
        raise
    return Running(stage, url, var, children)


def stop_all(var: Path = VAR) -> None:
    """Stop every server a pid file under ``var`` names, if it is still ours."""
    for pid_file in sorted(var.rglob("*.pid")):
        try:
            pid = int(pid_file.read_text().split()[0])
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (ValueError, IndexError, OSError):
            pid_file.unlink(missing_ok=True)
            continue
        if not any(name in command for name in ("nginx", "uwsgi", "run.py")):
            pid_file.unlink(missing_ok=True)
            continue
        print(f"==> stopping {pid_file.stem} (pid {pid})")
        os.kill(pid, signal.SIGTERM)
        for _ in range(150):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)
