"""Every stage page has the same shape, so an attendee finds the same things in the same places: six
sections in order, under 1,000 words of prose, a picture of the request's path, exercises that say how
long they take, with their answers folded away, and the figures `make bench` writes between its markers."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from tools import settings as tools_settings
from tools import stages
from tools.bench import __main__ as bench_main

SECTIONS = ["What changes", "The code it turns on", "Why it helps", "Measured", "Look inside", "Try it"]
MOST_WORDS = 1000
PAGES = sorted(stages.STAGES.glob("*/README.md"))
GENERATED = re.compile(r"<!-- bench(:[\w-]+)?:start -->.*?<!-- bench(:[\w-]+)?:end -->", re.DOTALL)
CODE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
WORD = re.compile(r"[A-Za-z0-9][\w'.-]*")


def prose_words(text: str) -> int:
    """Words a reader reads: code blocks and the tables `make bench` writes are not prose."""
    return len(WORD.findall(GENERATED.sub("", CODE.sub("", text))))


def section(text: str, name: str) -> str:
    start = text.index(f"\n## {name}\n")
    following = text.find("\n## ", start + 1)
    return text[start : following if following >= 0 else len(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_a_stage_page_has_the_six_sections_in_order(page):
    headings = re.findall(r"^## (.+)$", CODE.sub("", page.read_text()), re.MULTILINE)
    assert headings == SECTIONS


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_a_stage_page_is_under_a_thousand_words_of_prose(page):
    assert prose_words(page.read_text()) < MOST_WORDS


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_a_stage_page_draws_the_requests_path(page):
    assert "```mermaid\nflowchart" in section(page.read_text(), "Why it helps")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_every_exercise_says_how_long_it_takes_and_its_answer_is_folded(page):
    exercises = section(page.read_text(), "Try it")
    numbered = re.findall(r"^\d+\. \*\*[^*]+\*\*(.*)$", exercises, re.MULTILINE)
    assert numbered and all(re.match(r" \(\d+ min\)", rest) for rest in numbered), numbered
    answers = exercises[exercises.index("<details>") : exercises.index("</details>")]
    assert len(re.findall(r"^\d+\. ", answers, re.MULTILINE)) == len(numbered)


LINKED_PROFILE = re.compile(r"\]\(\.\./\.\./results/profiles/([^/)]+)/summary\.md\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_look_inside_quotes_the_profile_it_links_whose_flame_graph_shows_the_app_at_work(page):
    inside = section(page.read_text(), "Look inside")
    folder = stages.ROOT / "results" / "profiles" / LINKED_PROFILE.search(inside).group(1)
    summary = json.loads((folder / "summary.json").read_text())
    cores = re.search(r"(\d+) cores", (folder / "summary.md").read_text()).group(1)
    quoted = CODE.search(inside[inside.index(folder.name) :]).group(0).splitlines()[1:-1]
    # The hour's speed with the figures: the same stage costs more CPU a request on a slower hour.
    hour = f"{summary['cpu_ms_per_hash']:.0f} ms a hash"
    assert quoted[0].startswith(
        f"{summary['users']} users, bcrypt {summary['bcrypt_cost']}, {cores} cores, {hour}: "
        f"{summary['server_cpu_ms_per_request']:.1f} ms of server CPU a request"
    ), quoted[0]
    top = (folder / "top.txt").read_text()
    shares = [re.match(r"\s*(\d+\.\d%\s+\S+ \([^)]+\))", line) for line in quoted[1:] if "%" in line]
    assert shares and all(share and share.group(1) in top for share in shares), quoted
    # Drawn while the stage served its load: the app's own functions, not a server idling.
    assert "(tweepy/" in (folder / "flame.svg").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.parent.name)
def test_the_published_figures_sit_under_measured(page):
    measured = section(page.read_text(), "Measured")
    assert measured.count("<!-- bench:start -->") == 1 and measured.count("<!-- bench:end -->") == 1


def test_generated_tables_and_code_are_not_counted_as_prose():
    page = "Two words.\n```sh\nmake run STAGE=3\n```\n<!-- bench:start -->\n| a | b |\n<!-- bench:end -->\n"
    assert prose_words(page) == 2


def test_the_cheat_sheet_quotes_the_published_figures_beside_it():
    """The "ours" column is written by hand; the table `make bench` writes below it is the published run.
    After a new run, copy its figures into the column (a part's figure first, then the whole step's): of a
    ladder composed of parts, each stage's ratio to its own part's control, since only those compare."""
    text = (stages.STAGES / "README.md").read_text()
    published: dict[str, list[str]] = {}
    for row in re.findall(r"^\| \d+-[\w-]+(?:, \w+)? \|.*\|$", GENERATED.search(text).group(0), re.M):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        figure = re.match(r"\*\*([\d.]+)\*\*", cells[2]).group(1)
        ratio = cells[8] if len(cells) > 8 else None
        published.setdefault(cells[0].split("-")[0], []).append(ratio or figure)
    quoted = dict(re.findall(r"^\| \[(\d+) [\w-]+\]\([\w-]+/\) \|(?: [^|]+ \|){3} ([\d. /]+) \|", text, re.M))
    assert quoted and quoted.keys() == published.keys()
    assert {n: q.split(" / ") for n, q in quoted.items()} == published


# --- the exercises' commands -------------------------------------------------------

COMMAND = re.compile(r"`((?:[A-Z_]+=\S+ )*(?:make \w|\.venv/bin/python -m )[^`]*)`")


def exercise_commands(page) -> list[str]:
    """The make, pytest and tools commands an exercise asks an attendee to type."""
    return COMMAND.findall(section(page.read_text(), "Try it").split("<details>")[0])


EXERCISES = [(page, command) for page in PAGES for command in exercise_commands(page)]


def split_command(command: str) -> tuple[dict[str, str], list[str]]:
    words = shlex.split(command)
    env = {}
    while "=" in words[0] and words[0].split("=")[0].isupper():
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


@pytest.mark.parametrize(("page", "command"), EXERCISES, ids=lambda x: x if isinstance(x, str) else x.parent.name)
def test_every_exercise_command_runs_as_written(page, command):
    """Without its load: make runs dry, pytest collects what the exercise selects, and a bench's
    arguments parse into a plan. Each says what it would do, or why it cannot."""
    env, words = split_command(command)
    for name in env:
        assert name in settings_names(), f"{command}: {name} is not a setting"
    if words[0] == "make":
        dry = subprocess.run(["make", "-n", *words[1:]], cwd=stages.ROOT, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, f"{command}: {dry.stderr}"
    elif words[1:3] == ["-m", "pytest"]:
        selected = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *words[3:]],
            cwd=stages.ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert selected.returncode == 0 and "::" in selected.stdout, f"{command} selects no test"
    else:
        assert words[1:3] == ["-m", "tools.bench"], f"{command}: an exercise command this test cannot check"
        assert bench_main.parse(words[3:]).stages, f"{command} measures no stage"


def settings_names() -> set[str]:
    return tools_settings.all_names()
