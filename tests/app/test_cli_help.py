"""`--help` of `specdecode` and of every command is what tests/app/cli_help/ holds: a change to
the CLI's words is made on purpose (regenerate with `SPECDECODE_WRITE_HELP=1`), never as a side
effect of reshaping the parser's code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specdecode.app.cli import build_parser

HELP = Path(__file__).parent / "cli_help"


def helps(monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    return {"specdecode": parser.format_help(),
            **{name: p.format_help() for name, p in commands.items()}}


def test_every_help_text_is_the_recorded_one(monkeypatch):
    texts = helps(monkeypatch)
    if os.environ.get("SPECDECODE_WRITE_HELP"):
        for name, text in texts.items():
            (HELP / f"{name}.txt").write_text(text)
    assert sorted(p.stem for p in HELP.glob("*.txt")) == sorted(texts)
    for name, text in texts.items():
        assert text == (HELP / f"{name}.txt").read_text(), name


@pytest.mark.parametrize("name", ["generate", "serve"])
def test_a_changed_word_is_caught(monkeypatch, name):
    assert helps(monkeypatch)[name].replace("the", "teh") != (HELP / f"{name}.txt").read_text()
