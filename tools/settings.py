"""Every ``TWEEPY_*`` variable, from the modules that declare them, as the README's table.

    python -m tools.settings            print the table
    python -m tools.settings --write    put it in README.md, between the settings markers

Each module declares its settings once, as ``Setting(name, default, help)``;
this only gathers them. A test checks that every ``TWEEPY_*`` name the
project mentions is declared here, and that the README shows this table.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

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


def variable(setting) -> str:
    """The environment variable of a setting (the app's are declared without their TWEEPY_ prefix)."""
    return setting.name if setting.name.startswith(("TWEEPY_", "LOCUST_")) else f"TWEEPY_{setting.name}"


def groups() -> list[tuple[str, str, tuple]]:
    found = []
    for heading, module, attribute in DECLARED_IN:
        found.append((heading, module, getattr(importlib.import_module(module), attribute)))
    return found


def all_names() -> set[str]:
    return {variable(setting) for _, _, settings in groups() for setting in settings}


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
            lines.append(f"| `{variable(setting)}` | {default} | {setting.help} |")
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
