"""Every pointer the docs give a reader leads somewhere: linked and named files, `module.function` names,
test names, settings, make targets and `python -m` modules. A rename that forgets a page fails here."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from tools import settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *ROOT.glob("stages/**/README.md"), *ROOT.glob("docs/*.md")]
)
TRACKED_TOP = {
    path.split("/", 1)[0]
    for path in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
}
# CONTRIBUTING's worked example adds a feature (likes) that the code does not have, on purpose.
EXAMPLE_NAMES = {"likes_of", "Like", "test_a_like_shows_at_once_to_the_person_who_liked"}
# Files a command writes rather than the repository holds: stages/branches writes CURRENT on a stage branch.
WRITTEN = {ROOT / "stages" / "CURRENT"}
FILE_NAME = re.compile(r"[\w.-]+\.(?:py|md|txt|json|svg|html|js|css|ini|conf|env|toml|acl|csv|sh|png)")

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
DOTTED = re.compile(r"(?:tweepy\.)?([a-z_]+)((?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
CLASS_ATTR = re.compile(r"([A-Z]\w+)\.([a-z_]\w*)(?:\(.*\))?")
TEST_NAME = re.compile(r"test_\w+")
MAKE = re.compile(r"(?:^\s*|`|\$ )make (?:-\w+ )*([a-z][\w-]*)", re.MULTILINE)
PYTHON_M = re.compile(r"python -m ([\w.]+)")
SETTING = re.compile(r"\bTWEEPY_[A-Z0-9_]*[A-Z0-9]\b")


def ids(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def spans(doc: Path) -> list[str]:
    """Backticked text outside code blocks: what the prose names."""
    return SPAN.findall(FENCE.sub("", doc.read_text()))


def path_of(span: str, doc: Path) -> Path | None:
    """The file a backticked span names, when it names one of the repository's."""
    if " " in span or "/" not in span or any(c in span for c in "<>*{}$=") or "://" in span:
        return None
    span = re.sub(r":\d+$", "", span.split("(")[0])
    if span.startswith(("../", "./")):
        path = (doc.parent / span).resolve()
        return path if path.is_relative_to(ROOT) and path not in WRITTEN else None
    path = ROOT / span
    return path if span.split("/", 1)[0] in TRACKED_TOP and path not in WRITTEN else None


def tweepy_modules() -> set[str]:
    return {p.stem for p in (ROOT / "tweepy").glob("*.py")} | {
        p.parent.name for p in (ROOT / "tweepy").glob("*/__init__.py")
    }


def resolves(module: str, attributes: list[str]) -> bool:
    """Import the longest importable module of the dotted name, then find the rest as attributes."""
    names = [module, *attributes]
    for cut in range(len(names), 0, -1):
        try:
            found = importlib.import_module(
                "tweepy." + ".".join(names[:cut]) if module != "tweepy" else ".".join(names[:cut])
            )
        except ImportError:
            continue
        for name in names[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def our_classes() -> set[str]:
    """Classes defined in tweepy/ and tools/; a library's (``Flask.__call__``) is not ours to check."""
    sources = [*ROOT.glob("tweepy/**/*.py"), *ROOT.glob("tools/**/*.py")]
    return {name for source in sources for name in re.findall(r"^class (\w+)", source.read_text(), re.MULTILINE)}


def class_defines(cls: str, attribute: str) -> bool:
    """A class of tweepy/ or tools/ that defines the attribute, read from the source (no import)."""
    for source in [*ROOT.glob("tweepy/**/*.py"), *ROOT.glob("tools/**/*.py")]:
        text = source.read_text()
        match = re.search(rf"^class {cls}\b.*?(?=^\S|\Z)", text, re.MULTILINE | re.DOTALL)
        if match and re.search(rf"^\s+(?:async )?(?:def {attribute}\b|{attribute}\s*[:=])", match.group(0), re.M):
            return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=ids)
def test_every_link_and_named_file_in_the_docs_exists(doc):
    missing = []
    for target in LINK.findall(doc.read_text()):
        if not target.startswith(("http://", "https://", "mailto:")) and not (doc.parent / target).exists():
            missing.append(target)
    for span in spans(doc):
        path = path_of(span, doc)
        if path is not None and not path.exists():
            missing.append(span)
    assert not missing, f"{ids(doc)} points at {missing}"


ANCHORED = re.compile(r"\]\(([^)\s#]*\.md)?#([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=ids)
def test_every_link_to_a_heading_finds_it(doc):
    broken = [
        f"{page}#{anchor}"
        for page, anchor in ANCHORED.findall(doc.read_text())
        if (doc.parent / page if page else doc).exists() and anchor not in anchors(doc.parent / page if page else doc)
    ]
    assert not broken, f"{ids(doc)} links to headings that do not exist"


@pytest.mark.parametrize("doc", DOCS, ids=ids)
def test_every_module_function_the_docs_name_exists(doc):
    modules, classes, missing = tweepy_modules() | {"tweepy"}, our_classes(), []
    for span in spans(doc):
        if FILE_NAME.fullmatch(span):  # a file's name, which the test of files checks where it has a folder
            continue
        if (dotted := DOTTED.fullmatch(span)) and dotted.group(1) in modules:
            attributes = dotted.group(2).lstrip(".").split(".")
            if not EXAMPLE_NAMES & set(attributes) and not resolves(dotted.group(1), attributes):
                missing.append(span)
        elif (pair := CLASS_ATTR.fullmatch(span)) and pair.group(1) in classes:
            missing += [] if class_defines(pair.group(1), pair.group(2)) else [span]
    assert not missing, f"{ids(doc)} names {missing}"


def defined_tests() -> set[str]:
    return {name for path in ROOT.glob("tests/**/*.py") for name in re.findall(r"def (test_\w+)", path.read_text())}


@pytest.mark.parametrize("doc", DOCS, ids=ids)
def test_every_test_the_docs_name_exists(doc):
    named = {m.group(0) for span in spans(doc) for m in [TEST_NAME.fullmatch(span.split("[")[0])] if m}
    assert named - defined_tests() - EXAMPLE_NAMES == set(), f"{ids(doc)} names tests that do not exist"


@pytest.mark.parametrize("doc", DOCS, ids=ids)
def test_every_setting_the_docs_name_is_declared(doc):
    declared = settings.all_names()
    assert set(SETTING.findall(doc.read_text())) - declared == set()


@pytest.mark.parametrize("doc", DOCS, ids=ids)
def test_every_command_the_docs_give_exists(doc):
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    text = doc.read_text()
    assert set(MAKE.findall(text)) - targets == set(), f"{ids(doc)}: make targets that do not exist"
    modules = set(PYTHON_M.findall(text))
    assert {m for m in modules if importlib.util.find_spec(m) is None} == set(), f"{ids(doc)}: python -m"


def test_the_pointer_checks_catch_what_they_are_for(tmp_path):
    """The patterns above find a broken pointer of each kind, so a green run means something."""
    page = tmp_path / "page.md"
    page.write_text(
        "See `tweepy/nowhere.py`, `queries.no_such_read`, `LocalCache.no_such_method`, `test_nothing_here`.\n"
        "```sh\nmake no-such-target\n```\n"
    )
    assert path_of("tweepy/nowhere.py", page) == ROOT / "tweepy/nowhere.py"
    assert not resolves("queries", ["no_such_read"]) and resolves("queries", ["timeline_of"])
    assert not class_defines("LocalCache", "no_such_method") and class_defines("LocalCache", "derived")
    assert "test_nothing_here" not in defined_tests()
    assert MAKE.findall(page.read_text()) == ["no-such-target"]
    assert "the-bar" in anchors(ROOT / "docs" / "glossary.md") and "no-such-term" not in anchors(
        ROOT / "docs" / "glossary.md"
    )
