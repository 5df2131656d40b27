"""``make compare A=3 B=4``: what a step changes, in settings and in the code those settings switch on.

    python -m tools.compare 3 4                  stage 3 against stage 4
    python -m tools.compare 2 3 --part indexes   stage 2 against the first part of step 3

For every setting whose value differs, it prints the old and new values, what the setting is for
(its declaration), and every place that reads it: the function in ``tweepy/`` that an app setting
turns on, or the part of the stage runner (``tools/stages/``) a serving setting changes. A new
schema revision lists the migrations it adds. The places are found in the code itself (where a
setting's name is read), so the list stays true as the code moves.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from tools import stages
from tweepy.config import BY_NAME

ROOT = stages.ROOT
# Where the app reads its settings (config.py only declares and checks them).
APP_CODE = sorted(p for p in (ROOT / "tweepy").rglob("*.py") if p.name != "config.py")
RUNNER = sorted((ROOT / "tools" / "stages").glob("*.py"))


@dataclass(frozen=True)
class Place:
    path: Path
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} ({self.function})"


def _reads(tree: ast.AST, name: str) -> list[tuple[int, list[str]]]:
    """Lines where ``name`` is read as a setting: ``config["NAME"]``, ``app_value("NAME")``, ``get("NAME")``..."""
    found = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        is_key = isinstance(node, ast.Subscript) and _is_name(node.slice, name) and _ends_with_config(node.value)
        is_argument = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"get", "app_setting", "app_value"}
            and node.args
            and _is_name(node.args[0], name)
        )
        if is_key or is_argument:
            found.append((node.lineno, scope))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == name


def _ends_with_config(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "config") or (
        isinstance(node, ast.Name) and node.id in {"config", "settings"}
    )


def places(name: str, files: list[Path]) -> list[Place]:
    """Where the code reads the setting ``name`` (without its ``TWEEPY_`` prefix)."""
    found = []
    for path in files:
        for line, scope in _reads(ast.parse(path.read_text()), name):
            found.append(Place(path, line, ".".join(scope) or "module"))
    return found


def describe(name: str) -> str:
    if name in BY_NAME:
        return BY_NAME[name].help
    return next(s.help for s in stages.SERVING_SETTINGS if s.name == name)


def migrations_between(old: str, new: str) -> list[str]:
    """The migrations a stage at ``new`` has that one at ``old`` has not (each file and its summary)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(ROOT / "migrations"))
    revisions = list(script.iterate_revisions(new, old if old != "base" else "base"))
    return [f"{Path(r.path).relative_to(ROOT)}: {r.doc}" for r in reversed(revisions) if r.revision != old]


def compare(a: stages.Stage, b: stages.Stage) -> str:
    lines = [f"stage {a.label}  ->  stage {b.label}", ""]

    def default(variable: str) -> str:
        name = variable.removeprefix("TWEEPY_")
        return str(BY_NAME[name].default) if name in BY_NAME else stages.SERVING_DEFAULTS[variable]

    def effective(stage: stages.Stage, variable: str) -> str:
        return stage.settings.get(variable, default(variable)).lower()

    changed = [v for v in sorted({*a.settings, *b.settings}) if effective(a, v) != effective(b, v)]
    if not changed:
        lines.append("No setting changes.")
    for variable in changed:
        name = variable.removeprefix("TWEEPY_")
        old, new = a.settings.get(variable), b.settings.get(variable)
        shown_old = old if old is not None else f"{default(variable)} (default)"
        shown_new = new if new is not None else f"{default(variable)} (default)"
        lines.append(f"{variable}: {shown_old} -> {shown_new}")
        lines.append(f"    {describe(name)}")
        if name == "SCHEMA_REVISION":
            head = stages.schema_head()
            before, after = (effective(stage, variable) for stage in (a, b))
            for migration in migrations_between(
                head if before == "head" else before, head if after == "head" else after
            ):
                lines.append(f"    adds {migration}")
        found = places(name, APP_CODE) if name in BY_NAME else places(name, RUNNER)
        for place in found:
            lines.append(f"    read in {place}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compare", description=__doc__.split("\n")[0])
    parser.add_argument("a", type=int, help="the stage before")
    parser.add_argument("b", type=int, help="the stage after")
    parser.add_argument("--part", help="compare with this part of stage b instead of the whole step")
    args = parser.parse_args(argv)
    sys.stdout.write(compare(stages.get_stage(args.a), stages.get_stage(args.b, args.part)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
