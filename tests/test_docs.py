"""The documents a reader follows: every relative link in README.md, BENCHMARKS.md and the
benchmark pages leads to a file or folder of the repository, and every command line in README's
usage block is one the CLI's parser accepts (no model is run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from specdecode.app.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
# [text](target) and [text](target "title"); images too
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def documents() -> list[Path]:
    pages = [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted(REPO.glob("docs/**/*.md"))]
    return [p for p in pages if p.exists()]


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose target does not exist (an anchor after the
    path is not checked; web and mail links are not followed)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok too](there.md#part) [web](https://example.org) "
                    "[gone](missing/file.txt) [anchor](#top)\n```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == ["missing/file.txt"]


def usage_commands(readme: Path = REPO / "README.md") -> list[str]:
    """The `specdecode ...` command lines of README's usage block (after `## Usage`), joined
    where a line ends in a backslash, each from `specdecode` to its comment."""
    text = readme.read_text(encoding="utf-8")
    block = re.search(r"^## Usage\n.*?```\n(.*?)```", text, flags=re.S | re.M)
    assert block, "README.md has no usage block"
    lines = block.group(1).replace("\\\n", " ").splitlines()
    commands = []
    for line in lines:
        start = line.find("specdecode ")
        if start >= 0:
            commands.append(line[start:].split(" #", 1)[0].strip())
    return commands


def test_the_usage_block_has_commands():
    assert len(usage_commands()) >= 10


@pytest.mark.parametrize("command", usage_commands())
def test_every_usage_command_is_accepted_by_the_parser(command):
    argv = shlex.split(command)
    assert argv[0] == "specdecode"
    build_parser().parse_args(argv[1:])  # argparse exits (status 2) on what it does not accept


def test_a_command_the_parser_refuses_is_caught():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--no-such-option", "x"])
