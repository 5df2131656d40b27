"""Local branches stage-0 ... stage-N, each holding its stage's configuration at the top.

    stages/branches        (python -m tools.branches)

Each ``stage-N`` is one commit on the ladder's commit: ``stages/CURRENT`` (N, so a plain
``make run`` serves stage N), and ``uwsgi.ini``, ``nginx.conf``, ``stage.env`` and README.md
rendered for stage N, so ``git diff stage-3 stage-4`` shows what the step changes. The folders
under stages/ stay the source of truth: the runner reads them on every branch, and every branch
holds the whole ladder. Every commit is built first, with plumbing (no checkout), and the
branches move together at the end, in one transaction. A commit is the same for the same
ladder (its dates and names are the ladder commit's), so running it again from a stage branch
moves nothing; a branch that would move while checked out in some worktree is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tools.stages import ROOT, SERVING_SETTINGS, Stage, all_stages

# Where a stage commit says which stage it serves; the ladder's own commits have no such file.
CURRENT = "stages/CURRENT"
# Serving settings that say where the development server listens, not what the stage is.
WHERE = {"TWEEPY_HOST", "TWEEPY_PORT"}
# The serving settings the development server heeds; the rest are nginx's and uWSGI's.
DEV_SERVER = {"TWEEPY_SERVER", "TWEEPY_SCHEMA_REVISION"}
WRITTEN_BY = "written by stages/branches"


def git(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def title(stage: Stage) -> str:
    return f"Stage {stage.number} {stage.name}"


def stage_env(stage: Stage) -> str:
    """The stage's settings, every serving setting written out, defaults included."""
    serving = [f"TWEEPY_{s.name}" for s in SERVING_SETTINGS if f"TWEEPY_{s.name}" not in WHERE]
    heeded = serving if stage.server == "uwsgi" else [name for name in serving if name in DEV_SERVER]
    lines = [f"{name}={stage.get(name.removeprefix('TWEEPY_'))}" for name in heeded]
    lines += [f"{name}={value}" for name, value in stage.settings.items() if name not in serving]
    head = (
        f"# {title(stage)}, as `make run` serves it on this branch: {stage.folder.relative_to(ROOT)}/stage.env,\n"
        f"# with every serving setting its server heeds written out, defaults included ({WRITTEN_BY}).\n"
    )
    return head + "\n".join(lines) + "\n"


def uwsgi_section(stage: Stage) -> list[str]:
    """What the runner adds to uwsgi.ini on uWSGI's command line for this stage, as ini lines."""
    processes = stage.get("PROCESSES")
    if processes == "auto":
        lines = ["; processes: as many as the cores allow (TWEEPY_PROCESSES=auto, counted by the runner)"]
    else:
        lines = [f"processes = {processes}"]
    lines.append(f"listen = {stage.get('LISTEN')}")
    greenlets = int(stage.get("GEVENT"))
    lines += [f"gevent = {greenlets}", "gevent-early-monkey-patch = true"] if greenlets else ["harakiri = 30"]
    return lines


def uwsgi_ini(stage: Stage, shared: str) -> str:
    if stage.server != "uwsgi":
        tail = ["; This branch's stage does not use uWSGI: Flask's development server (run.py) serves it."]
    else:
        nodes = f", in each of its {stage.nodes} app nodes" if stage.nodes > 1 else ""
        tail = [
            f"; This branch's stage: what tools/stages/model.py adds on uWSGI's command line{nodes} ({WRITTEN_BY}).",
            "; By hand, with stage.env's settings in the environment:",
            ";   uwsgi --ini uwsgi.ini --ini uwsgi.ini:stage --socket var/uwsgi.sock",
            "[stage]",
            *uwsgi_section(stage),
        ]
    return shared.rstrip("\n") + "\n\n" + "\n".join(tail) + "\n"


def nginx_conf(stage: Stage, shared: str) -> str:
    if stage.server != "uwsgi":
        tail = ["# This branch's stage does not use nginx: Flask's development server (run.py) serves it."]
    elif stage.nodes > 1:
        sockets = " ".join(f"var/node{n}/uwsgi.sock" for n in range(1, stage.nodes + 1))
        tail = [f"# This branch's stage: the upstream spreads requests over {stage.nodes} app nodes ({sockets})."]
    else:
        tail = ["# This branch's stage: the upstream is one uWSGI instance (var/uwsgi.sock)."]
    tail.append(f"# ({WRITTEN_BY}; tools/stages/servers.py fills in the rest when it starts the stage)")
    return shared.rstrip("\n") + "\n\n" + "\n".join(tail) + "\n"


def readme(stage: Stage, shared: str) -> str:
    folder = stage.folder.relative_to(ROOT)
    line = (
        f"> **Branch `stage-{stage.number}`**: `make run` serves [stage {stage.number}, {stage.name}]"
        f"({folder}/README.md); `uwsgi.ini`, `nginx.conf` and `stage.env` here are its configuration."
    )
    return f"{line}\n\n{shared}"


def ladder_commit() -> str:
    """The commit the branches are made from: HEAD, or on a stage branch the ladder commit under it."""
    commit = git("rev-parse", "HEAD").strip()
    while git("ls-tree", "--name-only", commit, CURRENT).strip():
        commit = git("rev-parse", f"{commit}^").strip()
    return commit


def stage_commit(stage: Stage, base: str, identity: dict[str, str]) -> str:
    """Stage ``stage``'s commit on ``base``, built in a temporary index."""
    files = {
        CURRENT: f"{stage.number}\n",
        "stage.env": stage_env(stage),
        "uwsgi.ini": uwsgi_ini(stage, git("show", f"{base}:uwsgi.ini")),
        "nginx.conf": nginx_conf(stage, git("show", f"{base}:{stage.config_file('nginx.conf').relative_to(ROOT)}")),
        "README.md": readme(stage, git("show", f"{base}:README.md")),
    }
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, **identity, "GIT_INDEX_FILE": os.path.join(scratch, "index")}
        git("read-tree", base, env=env)
        for path, text in files.items():
            blob = git("hash-object", "-w", "--stdin", stdin=text).strip()
            git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        tree = git("write-tree", env=env).strip()
        message = f"Stage {stage.number}: make run serves {stage.folder.relative_to(ROOT)}\n"
        return git("commit-tree", tree, "-p", base, "-m", message, env=env).strip()


def identity_of(commit: str) -> dict[str, str]:
    """The ladder commit's names and dates, so the same ladder always gives the same stage commits."""
    fields = git("log", "-1", "--format=%an%n%ae%n%ad%n%cn%n%ce%n%cd", "--date=raw", commit).splitlines()
    names = ("AUTHOR_NAME", "AUTHOR_EMAIL", "AUTHOR_DATE", "COMMITTER_NAME", "COMMITTER_EMAIL", "COMMITTER_DATE")
    return {f"GIT_{name}": value for name, value in zip(names, fields, strict=True)}


def checked_out() -> dict[str, str]:
    """Branches checked out in some worktree of this repository, and where."""
    found, path = {}, ""
    for line in git("worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line.startswith("branch refs/heads/"):
            found[line.removeprefix("branch refs/heads/")] = path
    return found


def current_tip(branch: str) -> str | None:
    done = subprocess.run(["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"], cwd=ROOT, capture_output=True)
    return done.stdout.decode().strip() or None


def main() -> int:
    base = ladder_commit()
    # The stages are read from the working tree, the commits made on ``base``: they must agree.
    changed = git("diff", "--name-only", base, "--", "stages", f":!{CURRENT}")
    if changed.strip() or git("ls-files", "--others", "--exclude-standard", "--", "stages").strip():
        print(f"stages/branches: stages/ differs from {base[:7]}: commit it first; no branch moved", file=sys.stderr)
        return 1
    identity = identity_of(base)
    print(f"==> building stage branches on {base[:7]} ({git('log', '-1', '--format=%s', base).strip()})")
    built = {f"stage-{stage.number}": (stage, stage_commit(stage, base, identity)) for stage in all_stages()}
    moving = {branch: commit for branch, (_, commit) in built.items() if current_tip(branch) != commit}
    busy = {branch: where for branch, where in checked_out().items() if branch in moving}
    if busy:
        for branch, where in busy.items():
            print(f"stages/branches: {branch} would move, but it is checked out in {where}", file=sys.stderr)
        print("stages/branches: check out another branch there (git checkout main); no branch moved", file=sys.stderr)
        return 1
    updates = [
        f"update refs/heads/{branch} {commit} {current_tip(branch) or '0' * 40}" for branch, commit in moving.items()
    ]
    if updates:
        git("update-ref", "--stdin", stdin="start\n" + "\n".join(updates) + "\ncommit\n")
    for branch, (stage, commit) in built.items():
        state = "made" if branch in moving else "unchanged"
        print(f"{branch}  <- {stage.folder.relative_to(ROOT)}  ({commit[:7]}, {state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
