"""Every module can be read in one sitting: none over 400 lines, and its docstring says what
lives there in at most 15 (a design argument belongs in docs/, a measurement in results/)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted([*(ROOT / "tweepy").rglob("*.py"), *(ROOT / "tools").rglob("*.py"), ROOT / "locustfile.py"])
MAX_LINES = 400
MAX_DOCSTRING_LINES = 15


def docstring_lines(path: Path) -> int:
    """How many lines the module's docstring spans in the file, quotes included (0 if it has none)."""
    tree = ast.parse(path.read_text())
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def test_the_modules_checked_include_the_app_the_tools_and_the_locustfile():
    names = {path.relative_to(ROOT).as_posix() for path in MODULES}
    assert {"tweepy/__init__.py", "tools/stages/model.py", "tools/bench/report.py", "locustfile.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_is_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it by job"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_docstring_is_over_15_lines(path):
    lines = docstring_lines(path)
    assert lines <= MAX_DOCSTRING_LINES, f"{path.relative_to(ROOT)}'s docstring has {lines} lines"


def test_a_docstring_is_counted_from_its_opening_quotes_to_its_closing_ones(tmp_path):
    module = tmp_path / "module.py"
    module.write_text('"""One line.\n\nTwo more\nlines."""\n\nx = 1\n')
    assert docstring_lines(module) == 4
    module.write_text("x = 1\n")
    assert docstring_lines(module) == 0
