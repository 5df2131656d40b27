"""Every setting of the project, gathered from the modules that declare them, as one table.

    python -m tools.settings            print the table
    python -m tools.settings --write    put it in README.md, between the settings markers

Each module declares its settings once, as ``tweepy.config.Setting(name, default, help)``;
this gathers them (``every_setting``) for the code that reads across groups (``compare``, the
bench's ``--set``), for the README's table and for the tests, which check that every
``TWEEPY_*`` name the project mentions is declared here, once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from tweepy.config import Setting

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START, END = "<!-- settings:start -->", "<!-- settings:end -->"

# Who reads each group of settings: (heading, module, attribute).
DECLARED_IN = (
    ("The app", "tweepy.config", "SETTINGS"),
    ("How a stage is served (the stage runner)", "tools.stages.model", "SERVING_SETTINGS"),
    ("The benchmark and the load generator", "tools.protocol", "SETTINGS"),
    ("The tests", "tests.helpers.services", "SETTINGS"),
)


def groups() -> list[tuple[str, str, tuple[Setting, ...]]]:
    """Each group of settings: who reads it, the module declaring it, and its settings."""
    return [
        (heading, module, getattr(importlib.import_module(module), attribute))
        for heading, module, attribute in DECLARED_IN
    ]


def every_setting() -> dict[str, Setting]:
    """Every setting by its environment variable; a variable declared twice is refused."""
    found: dict[str, Setting] = {}
    for _, module, settings in groups():
        for setting in settings:
            if setting.variable in found:
                raise ValueError(f"{setting.variable} is declared twice (again in {module})")
            found[setting.variable] = setting
    return found


def all_names() -> set[str]:
    return set(every_setting())


def table() -> str:
    lines = []
    for heading, module, settings in groups():
        path = module.replace(".", "/") + ".py"
        lines += [
            "",
            f"**{heading}** ([`{path}`]({path}))",
            "",
            "| variable | default | what it does |",
            "|---|---|---|",
        ]
        for setting in settings:
            default = f"`{setting.default}`" if setting.default != "" else "(see right)"
            lines.append(f"| `{setting.variable}` | {default} | {setting.help} |")
    return "\n".join(lines).strip() + "\n"


def readme_block(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0].strip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.settings", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="update README.md")
    args = parser.parse_args(argv)
    if not args.write:
        print(table(), end="")
        return 0
    text = README.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{table()}{END}{tail}")
    print("README.md: settings table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
