"""A run's raw data, kept beside its report in ``raw.tar.xz``: each stage's windows as the load
shapes recorded them (request type by request type) and locust's CSVs; and ``recompute``, which
judges every window, ramp and step again from those per-type figures with the run's bar, so
every figure of the report is made again from the raw data, not copied from results.json."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from tools import stages
from tools.bench.figures import cold_summary, herd_figures, herds_summary, judged, plain_stats, step_verdict
from tools.bench.plan import COLD_FILES
from tools.protocol import AGGREGATED, Bar, RequestStats, completed_tasks, hashes_done

ARCHIVE = "raw.tar.xz"
KEPT = ("*.csv", "*-steps.json", "*-cold.json", "*-ceiling.json")


def pack(folder: Path) -> Path:
    """Compress the run's raw folder into ``raw.tar.xz`` beside its report (logs left out)."""
    raw = folder / "raw"
    with tarfile.open(folder / ARCHIVE, "w:xz") as archive:
        for pattern in KEPT:
            for path in sorted(raw.glob(pattern)):
                archive.add(path, arcname=path.name)
    return folder / ARCHIVE


def unpacked(folder: Path) -> dict[str, bytes]:
    """The raw files of a run by name, from its archive (or its raw folder, before it was packed)."""
    if (folder / ARCHIVE).exists():
        with tarfile.open(folder / ARCHIVE, "r:xz") as archive:
            return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    return {p.name: p.read_bytes() for pattern in KEPT for p in (folder / "raw").glob(pattern)}


def slug_of(row: dict) -> str:
    """The file name's part for a row: its stage's slug, or its part of a step's."""
    stage = stages.get_stage(row["stage"])
    return next((p.slug for p in stage.parts() if p.part == row.get("part")), stage.slug)


def rejudged_window(window: dict, bar: Bar) -> dict:
    """A window's figures made again from its per-type stats: verdict, throughput, tasks and hashes."""
    by_type = plain_stats(window["by_request"])
    total = RequestStats(
        AGGREGATED, window["requests"], window["failures"], window["p95_ms"], window.get("max_ms") or 0
    )
    seconds = window.get("window_s") or window.get("seconds") or 0
    found = {**window, **judged(by_type, total, seconds, bar)}
    if seconds and "window_s" in window:
        found["rps"] = round(total.requests / seconds, 1)
        found["tasks_per_s"] = round(completed_tasks(by_type) / seconds, 1)
        found["hashes"] = hashes_done(by_type)
    return found


def rejudged_step(step: dict, bar: Bar) -> dict:
    """A step of the search judged again: its ramp, its window and its repeats, then its verdict."""
    ramp = rejudged_window(step["ramp"], bar) if step.get("ramp") else None
    window = rejudged_window(step, bar) if "by_request" in step else None
    met, reasons = step_verdict(ramp, window, step.get("ramp_problem"))
    found = {**(window or step), "ramp": ramp, "met_bar": met}
    found.pop("met", None)
    if window is not None:
        found["window_met"] = window["met"]
    found.pop("reasons", None)
    if reasons:
        found["reasons"] = reasons
    if step.get("repeats"):
        found["repeats"] = [rejudged_window(w, bar) for w in step["repeats"]]
    return found


def recompute(report: dict, files: dict[str, bytes]) -> dict:
    """The report with every stage's steps, overload, cold start and ceiling made again from the raw files
    (run details, such as the machine and the bcrypt probe, are taken as the report gives them)."""
    bar = Bar(**report["bar"]) if report.get("bar") else Bar()
    again = json.loads(json.dumps(report))
    for row in again["stages"]:
        slug = slug_of(row)
        searched = files.get(f"stage{slug}-steps.json")
        if searched is not None:  # none: a stage that crashed before locust wrote anything
            data = json.loads(searched)
            row["steps"] = [rejudged_step(step, bar) for step in data.get("steps", [])]
            overload = data.get("overload")
            row["overload"] = rejudged_step(overload, bar) if overload else None
            for stale in ("best", "capacity"):
                row.pop(stale, None)
        if f"stage{slug}-ceiling.json" in files:
            row["ceiling"] = json.loads(files[f"stage{slug}-ceiling.json"])
        for key, name in COLD_FILES.items():
            if f"stage{slug}-{name}.json" in files:
                row[key] = recomputed_cold(json.loads(files[f"stage{slug}-{name}.json"]), bar, row.get(key))
    return again


def recomputed_cold(cold: dict, bar: Bar, earlier: dict | None) -> dict:
    windows = [rejudged_window(w, bar) for w in cold.get("windows", [])]
    over = cold.get("herds")
    if over is None:  # a run made before herds were repeated: its one herd, if it got that far
        over = [{"herd": cold["herd"], "recovery": cold.get("recovery", [])}] if cold.get("herd") else []
    herds = []
    for each in over:
        herd, recovery = rejudged_window(each["herd"], bar), [rejudged_window(w, bar) for w in each["recovery"]]
        herds.append({"herd": herd, "recovery": recovery, "figures": herd_figures(windows, herd, recovery)})
    found = {**cold, "windows": windows, "herds": herds}
    if herds:
        found["herd"], found["recovery"] = herds[-1]["herd"], herds[-1]["recovery"]
        found["herd_figures"] = herds_summary([h["figures"] for h in herds])
    if windows:
        found["cold"] = cold_summary(windows)
    state = (earlier or {}).get("state")
    return {**found, "state": state or ("complete" if cold.get("state") == "done" else "cut short")}


def archive_of(files: dict[str, bytes]) -> bytes:
    """A raw.tar.xz holding these files (for tests and fixtures)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
