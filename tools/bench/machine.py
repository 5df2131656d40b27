"""Where a bench run runs, and what it says as it goes: the machine, the load generator, the
commit, and the bcrypt bound (how many hashes a second this machine can do)."""

from __future__ import annotations

import multiprocessing
import os
import platform
import queue
import socket
import subprocess
import time
from pathlib import Path

from tools import stages
from tools.bench.figures import protocol_qps_bound
from tools.bench.plan import Plan
from tools.protocol import SEED_PASSWORD
from tweepy import passwords

ROOT = stages.ROOT


def say(message: str) -> None:
    print(f"==> {message}" if not message.startswith("  ") else message, flush=True)


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "host": socket.gethostname(),
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def generator(plan: Plan) -> dict:
    """Where the load came from: the bench always runs locust here, beside the servers."""
    return {"host": socket.gethostname(), "processes": plan.locust_processes, "same_machine_as_servers": True}


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    commit = done.stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return commit + ("+changes" if dirty.stdout.strip() else "")


# --- the bcrypt bound ------------------------------------------------------------------------------


def _hash_for(args: tuple[str, int, float]) -> tuple[int, float, float]:
    """Hashes for ``seconds`` with one bcrypt library: how many, in how long, and the CPU time they took
    (this process's own)."""
    name, cost, seconds = args
    make = passwords.LIBRARIES[name].hash
    count, started, cpu = 0, time.monotonic(), time.process_time()
    while time.monotonic() < started + seconds or count == 0:
        make(SEED_PASSWORD, cost)
        count += 1
    return count, time.monotonic() - started, time.process_time() - cpu


def _hash_together(args: tuple[str, int, float], start, loops) -> None:
    start.wait()
    try:
        loops.put(_hash_for(args))
    except Exception as error:  # reported, so the probe fails at once instead of at its deadline
        loops.put(error)


def _probe(name: str, cost: int, seconds: float, cores: int, deadline: float | None = None) -> dict:
    """One hashing process a core, started together. Plain processes, not a ``multiprocessing.Pool``,
    whose teardown can deadlock (cpython #73945, #78178), and "spawn", so a child inherits neither
    the bench's SIGTERM handler nor a lock some thread held; a child that never reports fails the
    probe after ``deadline`` instead of holding up the run."""
    spawn = multiprocessing.get_context("spawn")
    start, loops = spawn.Barrier(cores), spawn.Queue()
    children = [spawn.Process(target=_hash_together, args=((name, cost, seconds), start, loops)) for _ in range(cores)]
    deadline = deadline or 10 * seconds + 120
    counted = []
    try:
        for child in children:
            child.start()
        counted = [loops.get(timeout=deadline) for _ in children]
    except queue.Empty:
        raise RuntimeError(f"bcrypt probe: a hashing process did not report within {deadline:g}s") from None
    finally:
        for child in children:
            child.join(timeout=5 if len(counted) == cores else 0)  # every one reported: each is leaving
            if child.is_alive():
                child.kill()
                child.join()
    if failed := next((loop for loop in counted if isinstance(loop, Exception)), None):
        raise RuntimeError(f"bcrypt probe: {failed!r}")
    per_second = sum(count / wall for count, wall, _ in counted)
    return {
        "hashes_per_s": round(per_second, 2),
        "cpu_ms_per_hash": round(1000 * sum(cpu for _, _, cpu in counted) / sum(count for count, _, _ in counted), 1),
    }


def bcrypt_bound(cost: int, seconds: float) -> dict:
    """Hashes a second with every core hashing, the CPU time of one, and the protocol QPS that allows.

    pyca's figures are the run's bound; each bcrypt library this machine has is probed too
    (``libraries``), so a stage is measured against the library it hashes with. Each worker times
    its own hashing loop, so starting its process is not counted."""
    cores = len(os.sched_getaffinity(0))
    names = [name for name, library in passwords.LIBRARIES.items() if passwords.makes_pycas_hashes(library)]
    libraries = {name: _probe(name, cost, seconds, cores) for name in names}
    return {
        "cost": cost,
        "cores": cores,
        **libraries["pyca"],
        "protocol_qps_bound": round(protocol_qps_bound(libraries["pyca"]["hashes_per_s"]), 1),
        "libraries": libraries,
    }
