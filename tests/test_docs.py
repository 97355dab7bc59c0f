"""The README stays short and every link between it and docs/ leads somewhere: each relative link's file exists
and each `#anchor` names a heading of that file, as GitHub renders it."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

# CI (.ci/run) runs exactly these; the README is where a person copies them from.
TEST_COMMANDS = [
    'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python scripts/lint.py',
    'QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -n auto --dist worksteal -m "not slow" --durations=15',
    "QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -n auto --dist worksteal -m slow --durations=15",
]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); a target ends at whitespace (an optional "title" follows) or ")".
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, where a `#` or a `[x](y)` is only code."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lowercased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = text.replace("`", "").lower()
    kept = "".join(ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LN")  # letters and digits of any script
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")  # GitHub numbers repeated headings
    return result


def links(path: Path) -> list[str]:
    found = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found += LINK.findall(INLINE_CODE.sub("", line))
    return found


def relative_links(path: Path) -> list[str]:
    return [target for target in links(path) if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_there_are_docs_pages_and_the_readme_links_every_one() -> None:
    assert len(DOCS) >= 6
    linked = {(README.parent / unquote(target.split("#")[0])).resolve() for target in relative_links(README)}
    assert [page.name for page in DOCS if page.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / unquote(file_part)).resolve() if file_part else page.resolve()
        if not destination.exists():
            broken.append(f"{target}: no file {destination}")
        elif anchor and (destination.suffix != ".md" or anchor not in anchors(destination)):
            broken.append(f"{target}: no heading '#{anchor}' in {destination.name}")
    assert broken == []


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.name)
def test_each_docs_page_has_a_title_and_then_says_what_it_covers(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    assert lines[2] and not lines[2].startswith(("#", "!", "|", "-", "`")), "the first paragraph is prose"


def test_the_readme_keeps_the_test_commands_ci_runs_and_the_screenshot() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Run the tests", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert section.splitlines() == TEST_COMMANDS
    assert "![The window at 1280×720" in text and "](resources/screenshot-1280.png)" in text


def test_the_link_checker_sees_a_broken_anchor_and_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## The `run` command, again\n\nSee [here](#the-run-command-again), [gone](#nope), "
                    "[file](missing.md) and `[code](not-a-link.md)`.\n\n```\n[fenced](ignored.md)\n```\n",
                    encoding="utf-8")
    assert anchors(page) == {"a-page", "the-run-command-again"}
    assert relative_links(page) == ["#the-run-command-again", "#nope", "missing.md"]
