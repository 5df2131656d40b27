"""``python -m tools.stages``: run, explain, stop or list the stages of the ladder."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

from tools.stages import (
    BIN,
    LOAD_GENERATOR_ADDRESS,
    ROOT,
    SEED,
    VAR,
    all_stages,
    get_stage,
    prepare_database,
    stage_env,
    start,
    stop_all,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stages", description="Run any stage of the ladder.")
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
