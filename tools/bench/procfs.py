"""CPU time and memory of process trees, read from /proc (Linux): the servers' cost, and the load
generator's own. No locust here, so the bench and the load shape share it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (which may hold spaces and parentheses)."""
    return Path(path).read_text().rsplit(")", 1)[1].split()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parent = int(_stat_fields(f"/proc/{entry.name}/stat")[1])
            except OSError:
                continue
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def children_of(parent: int) -> list[int]:
    """The pids of a process's children."""
    return sorted(_children().get(parent, ()))


def process_tree(roots: list[int]) -> list[int]:
    tree, found, todo = _children(), [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, ()))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes, and of their children that exited."""
    ticks = 0
    for pid in pids:
        try:
            fields = _stat_fields(f"/proc/{pid}/stat")
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / CLOCK_TICKS


def minor_faults(pids: list[int]) -> int:
    """Pages these processes touched for the first time (or again, after giving them back)."""
    faults = 0
    for pid in pids:
        try:
            faults += int(_stat_fields(f"/proc/{pid}/stat")[7])  # minflt
        except OSError:
            continue
    return faults


def _threads(pids: list[int]) -> Iterator[tuple[str, str]]:
    """Each thread of these processes: its folder under /proc, and what it calls itself (its comm)."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            folder = f"/proc/{pid}/task/{tid}"
            try:
                yield folder, Path(f"{folder}/comm").read_text().rstrip("\n")
            except OSError:
                continue


def thread_cpu_seconds(pids: list[int], name: str) -> float:
    """User + system CPU of the threads of these processes that call themselves ``name`` (their comm)."""
    ticks = 0
    for folder, comm in _threads(pids):
        if comm != name:
            continue
        try:
            fields = _stat_fields(f"{folder}/stat")
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime stime
    return ticks / CLOCK_TICKS


def run_and_wait_seconds(pids: list[int], but_not: str) -> tuple[float, float]:
    """Seconds the threads of these processes not called ``but_not`` spent on a core, and runnable but
    waiting for one (the scheduler's own counts, /proc/<pid>/task/<tid>/schedstat)."""
    on_core = waiting = 0
    for folder, comm in _threads(pids):
        if comm == but_not:
            continue
        try:
            ran, waited, _ = Path(f"{folder}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        on_core, waiting = on_core + int(ran), waiting + int(waited)
    return on_core / 1e9, waiting / 1e9


def memory_mb(pids: list[int]) -> float:
    """Proportional set size: shared pages are split between the processes sharing them."""
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
                    break
        except OSError:
            try:
                total_kb += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KB
            except OSError:
                pass
    return total_kb / 1024
