"""The stage model: a stage's folder, its settings (the app's, and how it is served), the
environment its processes get, and the database it is prepared on."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools import services
from tweepy.config import BY_NAME, SETTINGS, Setting

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "stages"
VAR = ROOT / "var"
BIN = Path(sys.executable).parent

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
    Setting(
        "NODE_AFFINITY",
        False,
        "With NODES > 1: nginx sends each logged-in browser (by its device cookie) to the same node, else round robin",
    ),
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
SERVING_BY_NAME = {s.name: s for s in SERVING_SETTINGS}
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

    def serving_flag(self, name: str) -> bool:
        """A serving setting that is on or off."""
        return SERVING_BY_NAME[name].parse(self.get(name))

    @property
    def app_settings(self) -> dict[str, str]:
        return {k: v for k, v in self.settings.items() if k in APP_SETTING_NAMES}

    def app_setting(self, name: str) -> str:
        """What the app of this stage will read for ``name`` (its folder's value, or the default)."""
        return self.settings.get(f"TWEEPY_{name}", str(BY_NAME[name].default))

    def app_value(self, name: str):
        """``app_setting`` read as the app reads it (a boolean, a number...)."""
        return BY_NAME[name].parse(self.app_setting(name))

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


def instance_folder(env: dict[str, str]) -> Path:
    """The app's instance folder: its secret key, and the PostgreSQL role's password file."""
    return Path(env.get("TWEEPY_INSTANCE_PATH") or ROOT / "instance")


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


# The stage `make run`, `make soak` and a fresh clone serve: the best one-machine stage of the
# published run (the Makefile's fallback says the same number).
DEFAULT_STAGE = 6

# What `make run` seeds an empty database with.
SEED = "--users 1000 --tweets 100000 --follows 20"

# glibc raises its mmap threshold to the size of each large block it frees, so after one big
# request body the next ones are carved from the heap, which fragments and stays grown; held at
# its default of 128 KiB, a large body is mapped and given back. Holding it also holds the trim
# threshold, which would then give the heap's top back after a request and fault it in again for
# the next: 32 MiB of freed heap is kept instead (stages/6-vertical/README.md). The caller's own
# values, if any, win.
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
