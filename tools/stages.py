"""Run any stage of the ladder: its settings, its servers, their pid files under var/.

    python -m tools.stages run N [--port P]   start stage N in the foreground; Ctrl-C stops it
    python -m tools.stages stop               stop whatever the pid files under var/ name
    python -m tools.stages list               the ladder, one line a stage

A stage is a folder ``stages/N-name/`` holding ``stage.env``: values for the
app's settings (declared in ``tweepy/config.py``) and for how the stage is
served (``SERVING_SETTINGS`` below, read by this runner only), and, when a
stage needs a different front server, its own ``nginx.conf``. A step that
changes several things at once may also hold parts, ``part-<name>.env``: the
settings of the step half-way, measured by the bench on their own so that each
half's effect shows (``run N --part name`` serves one). The runner
passes processes, gevent and the listen queue to uWSGI itself, so one
``uwsgi.ini`` serves every stage. The tests and the benchmark start stages
through ``start()`` too, each in its own var folder.
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ROOT / "stages"
VAR = ROOT / "var"
BIN = Path(sys.executable).parent

sys.path.insert(0, str(ROOT))
from tools import privileges, services  # noqa: E402
from tools.bench.procfs import children_of  # noqa: E402
from tweepy.config import BY_NAME, SETTINGS, Setting, parse  # noqa: E402

# How a stage is served: read here, never by the app.
SERVING_SETTINGS: tuple[Setting, ...] = (
    Setting("SERVER", "dev", "'dev' (Flask's development server, run.py) or 'uwsgi' (nginx in front of uWSGI)"),
    Setting(
        "PROCESSES",
        "4",
        "uWSGI worker processes; 'auto': one per core, or with gevent and hashing threads one per HASHING_SLOTS cores",
    ),
    Setting("GEVENT", 0, "gevent greenlets per uWSGI process; 0 means plain synchronous workers"),
    Setting("LISTEN", 1024, "uWSGI listen queue: connections waiting for a free worker"),
    Setting("NODES", 1, "uWSGI instances behind nginx, each standing in for an app host with its own processes"),
    Setting("SCHEMA_REVISION", "head", "Alembic revision the stage runs at (0002: all but the timeline indexes)"),
    Setting(
        "SERVE_AS",
        "tweepy",
        "Started as root: the user uWSGI and nginx's workers run as, made if missing ('root': no change)",
    ),
    Setting("HOST", "127.0.0.1", "Address the development server (run.py) listens on"),
    Setting("PORT", 5000, "Port of the development server (run.py); the runner picks one per stage"),
)
APP_SETTING_NAMES = {f"TWEEPY_{s.name}" for s in SETTINGS}
SERVING_DEFAULTS = {f"TWEEPY_{s.name}": str(s.default) for s in SERVING_SETTINGS}
# App settings a caller's environment may pass through to a stage; every other
# TWEEPY_* variable is dropped, so a stage measures what its folder says.
PASSED_THROUGH = {
    "TWEEPY_DATABASE_URL",
    "TWEEPY_CACHE_URL",
    "TWEEPY_SECRET_KEY",
    "TWEEPY_INSTANCE_PATH",
    "TWEEPY_BCRYPT_LOG_ROUNDS",
}


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{number}: expected NAME=value, got {line!r}")
        values[name.strip()] = value.strip()
    return values


@dataclass
class Stage:
    number: int
    name: str
    folder: Path
    settings: dict[str, str] = field(default_factory=dict)
    part: str | None = None  # a part of the step (``part-<part>.env``), or None for the whole step

    @property
    def label(self) -> str:
        """How reports name it: "3 database", or "3 database, indexes" for a part."""
        return f"{self.number} {self.name}" + (f", {self.part}" if self.part else "")

    @property
    def slug(self) -> str:
        """Its name in file names: "3", or "3-indexes" for a part."""
        return str(self.number) + (f"-{self.part}" if self.part else "")

    def parts(self) -> list[Stage]:
        """The measured parts of the step, in their files' order."""
        return [
            Stage(self.number, self.name, self.folder, read_env_file(path), part=path.stem.removeprefix("part-"))
            for path in sorted(self.folder.glob("part-*.env"))
        ]

    def get(self, name: str) -> str:
        """A serving setting of this stage (the app's own settings are the app's to read)."""
        return self.settings.get(f"TWEEPY_{name}", SERVING_DEFAULTS[f"TWEEPY_{name}"])

    @property
    def app_settings(self) -> dict[str, str]:
        return {k: v for k, v in self.settings.items() if k in APP_SETTING_NAMES}

    def app_setting(self, name: str) -> str:
        """What the app of this stage will read for ``name`` (its folder's value, or the default)."""
        return self.settings.get(f"TWEEPY_{name}", str(BY_NAME[name].default))

    def app_value(self, name: str):
        """``app_setting`` read as the app reads it (a boolean, a number...)."""
        return parse(BY_NAME[name], self.app_setting(name))

    @property
    def server(self) -> str:
        return self.get("SERVER")

    @property
    def processes(self) -> int:
        value = self.get("PROCESSES")
        if value != "auto":
            return int(value)
        cores = len(os.sched_getaffinity(0))
        if int(self.get("GEVENT")) and self.app_value("BCRYPT_IN_THREADPOOL"):
            # A process runs its Python on one core at a time (the GIL), and its HASHING_SLOTS
            # native threads hash on whichever cores that leaves idle: together they fill this many.
            return max(1, cores // self.app_value("HASHING_SLOTS"))
        return cores

    def config_file(self, name: str) -> Path:
        """The stage's own server config when it has one, else the top-level one."""
        own = self.folder / name
        return own if own.exists() else ROOT / name

    @property
    def nodes(self) -> int:
        return int(self.get("NODES"))

    def node_folders(self, var: Path) -> list[Path]:
        """Where each app node keeps its socket, pid and log: ``var`` itself when there is one."""
        return [var] if self.nodes == 1 else [var / f"node{n}" for n in range(1, self.nodes + 1)]

    def uwsgi_options(self, var: Path) -> list[str]:
        """What the stage's settings change in uWSGI, as command-line options after ``--ini uwsgi.ini``."""
        options = [
            "--chdir",
            str(ROOT),
            "--socket",
            str(var / "uwsgi.sock"),
            "--pidfile",
            str(var / "uwsgi.pid"),
            # Commands to the master ("c": reload the workers one by one), for Running.reload_app_servers().
            "--master-fifo",
            str(var / "uwsgi.fifo"),
            "--processes",
            str(self.processes),
            # uWSGI does not expand $(VAR) in 'listen', so the queue length comes this way too.
            "--listen",
            self.get("LISTEN"),
        ]
        greenlets = int(self.get("GEVENT"))
        if greenlets:
            # Monkey-patched before the app loads, so nothing imported earlier keeps a blocking socket or lock.
            options += ["--gevent", str(greenlets), "--gevent-early-monkey-patch"]
        else:
            # A synchronous worker stuck on one request for 30 s is replaced, before nginx gives up (60 s).
            options += ["--harakiri", "30"]
        return options

    @property
    def default_port(self) -> int:
        return 5000 if self.server == "dev" else 8080


def all_stages() -> list[Stage]:
    found = []
    for folder in sorted(STAGES.iterdir()):
        number, _, name = folder.name.partition("-")
        if folder.is_dir() and number.isdigit():
            found.append(Stage(int(number), name, folder, read_env_file(folder / "stage.env")))
    return sorted(found, key=lambda s: s.number)


def get_stage(number: int, part: str | None = None) -> Stage:
    for stage in all_stages():
        if stage.number == number:
            if part is None:
                return stage
            for each in stage.parts():
                if each.part == part:
                    return each
            raise SystemExit(f"stage {number} has no part {part!r}: its parts are {[p.part for p in stage.parts()]}")
    raise SystemExit(f"no stage {number}: see stages/README.md")


def stage_env(stage: Stage, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the stage's processes: its app settings, and where run.py listens."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWEEPY_")}
    env.update(stage.app_settings)
    # The caller's own database, secret and cost win over the stage's defaults (a stage on
    # PostgreSQL names a local server; a deployment points elsewhere).
    env.update({k: v for k, v in os.environ.items() if k in PASSED_THROUGH})
    env.update(TWEEPY_HOST="127.0.0.1", TWEEPY_PORT=str(port), PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def prepare_database(stage: Stage, env: dict[str, str], seed: list[str] | None = None) -> None:
    """Bring the schema to the stage's revision, and seed the database if it is empty."""
    if (env.get("TWEEPY_CACHE") or stage.app_setting("CACHE")) == "redis":
        services.ensure_redis(env.get("TWEEPY_CACHE_URL") or stage.app_setting("CACHE_URL"))
    url = env.get("TWEEPY_DATABASE_URL", "")
    if url.startswith("postgresql"):
        # The app's role has a password of its own, which libpq reads from this file.
        env.setdefault("PGPASSFILE", str(instance_folder(env) / "pgpass"))
        services.ensure_database(url, Path(env["PGPASSFILE"]))
        services.check_connection_budget(url, stage.nodes * stage.processes, pool_of(stage, env))
    flask = [str(BIN / "flask"), "--app", "tweepy"]
    subprocess.run([*flask, "schema", stage.get("SCHEMA_REVISION")], env=env, cwd=ROOT, check=True)
    if seed is not None:
        subprocess.run([*flask, "seed", "--if-empty", *seed], env=env, cwd=ROOT, check=True)


# What `make run` seeds an empty database with.
SEED = "--users 1000 --tweets 100000 --follows 20"

# glibc raises its mmap threshold to the size of each large block it frees, so after one
# big request body (up to nginx's 1 MiB) the next ones are carved from the heap, which
# fragments and stays grown by megabytes. Held at glibc's default of 128 KiB, a large body
# is mapped and given back when freed.
# Holding it also holds the trim threshold, which glibc would have raised with it: at its
# default of 128 KiB, and as a start happened to lay out the heap, the top of the heap could
# go back to the kernel after every request and be faulted in again for the next (up to 37
# page faults a timeline read at stage 6, a fifth of the worker's CPU). 32 MiB of freed heap
# is kept for the next requests instead.
# The caller's own values, if any, win.
APP_SERVER_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": str(32 * 1024 * 1024)}

# Where the load generator of `make locust` and `make bench` sends from: the same machine.
LOAD_GENERATOR_ADDRESS = "127.0.0.1"


def schema_head() -> str:
    """The newest migration, so that databases made for an older schema are not reused."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(ROOT / "migrations")).get_current_head()


def pool_of(stage: Stage, env: dict[str, str]) -> int:
    """Database connections one process of the stage may hold: its pool and its overflow."""
    size = env.get("TWEEPY_DB_POOL_SIZE") or stage.app_setting("DB_POOL_SIZE")
    overflow = env.get("TWEEPY_DB_POOL_OVERFLOW") or stage.app_setting("DB_POOL_OVERFLOW")
    return int(size) + int(overflow)


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


def instance_folder(env: dict[str, str]) -> Path:
    return Path(env.get("TWEEPY_INSTANCE_PATH") or ROOT / "instance")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stages", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a stage in the foreground")
    run.add_argument("stage", type=int)
    run.add_argument("--part", help="one part of the step (stages/N-name/part-<part>.env)")
    run.add_argument("--port", type=int)
    run.add_argument("--seed", default=SEED, help="seed options if the database is empty")
    explain = commands.add_parser("explain", help="how the stage's database runs each read (EXPLAIN)")
    explain.add_argument("stage", type=int)
    explain.add_argument("--part", help="one part of the step (stages/N-name/part-<part>.env)")
    commands.add_parser("stop", help="stop anything left running")
    commands.add_parser("list", help="list the stages")
    args = parser.parse_args(argv)

    if args.command == "list":
        for stage in all_stages():
            for each in [*stage.parts(), stage]:
                print(f"{each.label:<24} {each.server:<6} {each.folder.relative_to(ROOT)}")
        return 0
    if args.command == "stop":
        stop_all()
        return 0

    stage = get_stage(args.stage, args.part)
    if args.command == "explain":
        # The database `make run` serves, at this stage's schema revision and with its settings.
        env = stage_env(stage, stage.default_port)
        prepare_database(stage, env, seed=SEED.split())
        return subprocess.run([str(BIN / "flask"), "--app", "tweepy", "explain"], env=env, cwd=ROOT).returncode
    print(f"==> stage {stage.label}: starting, runtime files under {VAR.relative_to(ROOT)}/")
    # Served on loopback for one person and their load generator (`make locust`), whose
    # thousands of simulated sign-ups come from this one address: never counted nor refused by address.
    local = {"TWEEPY_UNTHROTTLED_ADDRESSES": LOAD_GENERATOR_ADDRESS}
    running = start(stage, port=args.port, seed=args.seed.split(), env=local)
    print(f"==> stage {stage.label} is up at {running.url}  (Ctrl-C stops it)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while running.alive():
            time.sleep(0.5)
        print("==> a server exited; stopping the stage", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        return 0
    finally:
        running.stop()
        print(f"==> stage {stage.label} stopped")


if __name__ == "__main__":
    sys.exit(main())
