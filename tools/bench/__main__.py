"""``make bench``: every stage measured with the locust protocol, then a table and a chart.

    python -m tools.bench                      all stages, full size (10,000 users, 1,000,000 tweets)
    python -m tools.bench --stages "4 5 6"     some stages, into results/<run>-stages-4-5-6/ only
    python -m tools.bench --quick              a smoke run: tiny data, one short step per stage
    python -m tools.bench --report FOLDER      redo the reports from FOLDER/results.json
    python -m tools.bench --keep-from FOLDER   take the stages not run now from an earlier run
    python -m tools.bench --stages 7 --set TWEEPY_GEVENT=0 --out FOLDER    a variant, into FOLDER only
    python -m tools.bench --split 1/2          part 1 of a run in 2: its half of the ladder, and stage 4
    python -m tools.bench --compose A B        one ladder from the parts' folders, ratios to stage 4
    python -m tools.bench --recompute FOLDER   every figure made again from FOLDER/raw.tar.xz

The bcrypt bound, then each stage (``measure.bench_stage``) on a fresh copy of one seeded database;
a crashed stage or a search cut short exits with 1. Only a run (or parts) that measured every stage
publishes (``report``), its raw data kept. Settings: ``tools/protocol.py``; other hosts: the README."""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import socket
import sys
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from tools import stages
from tools.bench.machine import ROOT, bcrypt_bound, generator, git_commit, machine, say
from tools.bench.measure import bench_stage, crashed_stage
from tools.bench.plan import make_plan
from tools.bench.raw import pack, recompute, unpacked
from tools.bench.report import write_reports
from tools.bench.runs import RESULTS, in_ladder_order, normalize
from tools.bench.serving import WORK, seeded_master
from tools.bench.split import compose, control_alone, measured_in_part, parse_split, part_stages
from tools.bench.tables import markdown


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--stages", default="", help='stage numbers, e.g. "4 5 6" (default: all)')
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny data, one short step per stage")
    parser.add_argument("--out", type=Path, help="write the report here instead of results/<date>-<host>/")
    parser.add_argument(
        "--keep-from",
        type=Path,
        metavar="FOLDER",
        help="take the stages not run now from an earlier run's results.json",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FOLDER",
        help="only redo the table and chart from FOLDER/results.json, and the READMEs if it measured every stage",
    )
    parser.add_argument(
        "--recompute", type=Path, metavar="FOLDER", help="make every figure again from FOLDER's raw data"
    )
    parser.add_argument("--split", default="", metavar="K/N", help="measure part K of a run made in N parts")
    parser.add_argument(
        "--compose", nargs="+", type=Path, metavar="FOLDER", help="one ladder from the folders of a split run's parts"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="measure the stages with this setting changed (a variant; needs --out, publishes nothing)",
    )
    args = parser.parse_args(argv)
    args.variant = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or name not in stages.APP_SETTING_NAMES | set(stages.SERVING_DEFAULTS):
            parser.error(f"--set {item!r}: expected a setting's variable=value, as TWEEPY_GEVENT=0")
        args.variant[name] = value
    if args.variant and not args.out:
        parser.error("--set measures a variant of the stages: give it a folder of its own with --out")
    if args.split:
        try:
            parse_split(args.split)
        except ValueError as error:
            parser.error(str(error))
        if args.stages or args.keep_from:
            parser.error("--split chooses its own stages: give neither --stages nor --keep-from")
    return args


def results_folder(plan, now: datetime) -> Path:
    """A run's own folder under results/, named for its stages when it left some out."""
    every = {s.number for s in stages.all_stages()}
    some = "" if set(plan.stages) >= every else "-stages-" + "-".join(map(str, plan.stages))
    if plan.split:
        some = "-part-{}-of-{}".format(*parse_split(plan.split))
    return RESULTS / f"{now:%Y-%m-%d-%H%M}-{socket.gethostname()}{some}"


def shown_path(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def plan_of(args: argparse.Namespace):
    """The plan the command line asks for: its stages (a part's share, with its control), variant and folders."""
    every = [s.number for s in stages.all_stages()]
    numbers = [int(n) for n in args.stages.replace(",", " ").split()] or every
    if args.split:
        numbers = part_stages(every, args.split)
    plan = make_plan(numbers, args.quick, os.environ)
    plan.variant, plan.split = args.variant, args.split
    if args.keep_from:
        plan.kept_from = shown_path(args.keep_from)
    if args.out:
        plan.out = shown_path(args.out)
    return plan


def plan_for(plan, stage: stages.Stage):
    """The plan for one stage: all of it, or its capacity alone (no overload step, no cold start) for what is
    read only for its capacity: a part of a step, shown beside its step, and a split run's control stage."""
    if stage.part or (plan.split and control_alone(stage, plan.split)):
        return replace(plan, overload=0, cold_windows=0)
    return plan


def stop_cleanly_on_sigterm() -> None:
    """Make SIGTERM (``kill``, a CI timeout) leave as Ctrl-C does, through every ``finally``: the servers and
    the load generator a run started stop with it instead of running on."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stop_cleanly_on_sigterm()
    if args.report:
        folder = args.report.resolve()
        report = json.loads((folder / "results.json").read_text())
        write_reports(report, folder)
        return 0
    if args.compose:
        return compose_parts(args.compose, args.out)
    if args.recompute:
        return recompute_from_raw(args.recompute.resolve())

    plan = plan_of(args)
    now = datetime.now(UTC)
    folder = args.out or (WORK / "quick" if args.quick else results_folder(plan, now))
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    say(f"bcrypt bound at cost {plan.bcrypt_cost}: hashing on every core for {plan.bcrypt_probe_s:g}s")
    bound = bcrypt_bound(plan.bcrypt_cost, plan.bcrypt_probe_s)
    say(f"  {bound['hashes_per_s']} hashes/s: the protocol alone can reach {bound['protocol_qps_bound']} QPS")
    master = seeded_master(plan)

    report = {
        "date": f"{now:%Y-%m-%d %H:%M} UTC",
        "commit": git_commit(),
        "machine": machine(),
        "generator": generator(plan),
        "plan": asdict(plan),
        "bar": asdict(plan.bar),
        "bcrypt": bound,
        "stages": [],
    }
    this_run = {key: report[key] for key in ("date", "commit", "machine", "generator", "plan", "bcrypt")}
    if args.keep_from:
        earlier = json.loads((args.keep_from / "results.json").read_text())
        earlier_run = {key: earlier.get(key) for key in ("date", "commit", "machine", "generator", "plan", "bcrypt")}
        report["stages"] = [
            {**r, "run": r.get("run", earlier_run)} for r in earlier["stages"] if r["stage"] not in plan.stages
        ]
    # Each step, after its parts (a step that changes several things measures each half on its own).
    measured = [part for n in plan.stages for part in (*stages.get_stage(n).parts(), stages.get_stage(n))]
    if plan.split:
        measured = measured_in_part(plan.stages, plan.split)
    for stage in measured:
        stage.settings = {**stage.settings, **plan.variant}
        if plan.variant:
            stage.name += " with " + " ".join(f"{k.removeprefix('TWEEPY_')}={v}" for k, v in plan.variant.items())
    for stage in measured:
        try:
            result = bench_stage(plan_for(plan, stage), stage, master, raw, bound)
        except Exception as error:  # reported, and the other stages still measured
            say(f"  stage {stage.label}: crashed: {error}")
            result = crashed_stage(stage, error)
        report["stages"].append({**result, "run": this_run})
        report["stages"].sort(key=in_ladder_order)
        (folder / "results.json").write_text(json.dumps(report, indent=1))

    archive = pack(folder)
    say(f"raw data kept in {shown_path(archive)} ({archive.stat().st_size / 1024:.0f} KiB)")
    incomplete = [f"{r['stage']} {r['name']}" for r in report["stages"] if r["search"]["state"] != "complete"]
    if not write_reports(report, folder):
        say("a partial run, a smoke run or a variant: results/LATEST.md and the READMEs are left as they were")
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    if incomplete:
        say(f"done, but the search of stage(s) {incomplete} did not run to its end: {shown}/RESULTS.md")
        return 1
    say(f"done: {shown}/RESULTS.md")
    return 0


def recompute_from_raw(folder: Path) -> int:
    """The run's reports made again from its raw data; 1 if a figure differs from its results.json."""
    report = json.loads((folder / "results.json").read_text())
    again = recompute(report, unpacked(folder))
    before, after = markdown(normalize(report)).splitlines(), markdown(normalize(copy.deepcopy(again))).splitlines()
    write_reports(again, folder)
    differing = [line for line in after if line not in before]
    for line in differing:
        say(f"  recomputed differently: {line}")
    say(f"{len(differing)} line(s) of {shown_path(folder)}/RESULTS.md differ from results.json's figures")
    return 1 if differing else 0


def compose_parts(folders: list[Path], out: Path | None) -> int:
    """One ladder from a split run's parts, into a folder of its own; published if, across them, every
    stage was measured."""
    shown = [shown_path(folder) for folder in folders]
    parts = [json.loads((folder / "results.json").read_text()) for folder in folders]
    now = datetime.now(UTC)
    try:
        report = compose(parts, shown, f"{now:%Y-%m-%d %H:%M} UTC", git_commit())
    except ValueError as error:
        say(f"cannot compose these parts: {error}")
        return 2
    folder = out.resolve() if out else RESULTS / f"{now:%Y-%m-%d-%H%M}-composed-of-{len(parts)}-parts"
    folder.mkdir(parents=True, exist_ok=True)
    # Compact: it holds every part's rows again, and the parts' own folders stay beside it.
    (folder / "results.json").write_text(json.dumps(report, separators=(",", ":")))
    published = write_reports(report, folder)
    say(f"composed {len(parts)} parts into {folder}/RESULTS.md" + ("" if published else " (not published)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
