"""A fill-in-the-middle set from real code: functions of Python's own library (shipped with the
interpreter the package runs on, so every machine can build it, and nothing Spec-Bench holds)
with a middle of one to four statements (at most 8 lines) removed, the editor's view around it as
the prefix and suffix. The set depends only on the Python version (the report names it) and the seed."""

from __future__ import annotations

import ast
import importlib.util
import random
from pathlib import Path

# modules of plain, typical Python: string handling, parsing, numbers, data structures
MODULES = ("argparse", "bisect", "calendar", "configparser", "csv", "dataclasses", "difflib",
           "fractions", "heapq", "ipaddress", "json.decoder", "json.encoder", "pprint", "shlex",
           "statistics", "string", "textwrap", "tokenize", "urllib.parse", "zipfile")
PREFIX_LINES, SUFFIX_LINES = 60, 30  # the editor's view: lines before and after the middle
MIDDLE_LINES = 8  # the most lines a middle takes: what an editor completes at once
CATEGORY = "fim"
FIRST_ID = 10_000  # question ids, apart from Spec-Bench's


def fim_questions(count: int, seed: int = 0) -> list[dict]:
    """`count` questions {question_id, category "fim", turns [prefix], prefix, suffix, middle,
    source}; the prefix ends and the suffix starts at a line boundary."""
    candidates = [(name, node, lines) for name in MODULES
                  for node, lines in _functions(name)]
    rng = random.Random(seed)
    out = []
    for i, (name, node, lines) in enumerate(rng.sample(candidates, min(count, len(candidates)))):
        body = node.body[1:] if ast.get_docstring(node) else node.body
        starts = [j for j, st in enumerate(body) if _lines(st) <= MIDDLE_LINES]
        start = starts[rng.randrange(len(starts))]
        stop = start + 1
        for _ in range(rng.randint(0, 3)):  # up to 4 statements of at most MIDDLE_LINES lines
            if stop < len(body) and body[stop].end_lineno - body[start].lineno < MIDDLE_LINES:
                stop += 1
        first, last = body[start].lineno - 1, body[stop - 1].end_lineno  # 0-based, exclusive
        prefix = "".join(lines[max(first - PREFIX_LINES, 0) : first])
        out.append({"question_id": FIRST_ID + i, "category": CATEGORY, "turns": [prefix],
                    "prefix": prefix, "suffix": "".join(lines[last : last + SUFFIX_LINES]),
                    "middle": "".join(lines[first:last]),
                    "source": f"{name}:{node.name}:{first + 1}"})
    return out


def _functions(module: str) -> list[tuple[ast.FunctionDef, list[str]]]:
    """The module's functions and methods of 8 to 60 lines with at least 3 statements, one of
    them short enough to be a middle."""
    path = Path(importlib.util.find_spec(module).origin)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    return [(node, lines) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef) and 8 <= node.end_lineno - node.lineno <= 60
            and len(node.body) >= 3 and any(_lines(st) <= MIDDLE_LINES for st in node.body[1:])]


def _lines(statement: ast.stmt) -> int:
    return statement.end_lineno - statement.lineno + 1
