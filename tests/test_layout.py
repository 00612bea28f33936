"""The package's shape, read from its sources: no import circle (function-level imports
included), the library never imports the application layer, and drafters and training reach
targets only through `models.target` (no concrete model class, no other module's private names).
"""

from __future__ import annotations

import ast
from pathlib import Path

import specdecode

ROOT = Path(specdecode.__file__).parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in ROOT.rglob("*.py")}


def imports(module: str) -> list[tuple[str, str]]:
    """(imported module, name) for every import in `module`, wherever it is in the file; name is
    "" for a plain `import x`."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level \
                else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                as_module = f"{target}.{alias.name}"
                found.append((as_module, "") if as_module in MODULES else (target, alias.name))
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def graph() -> dict[str, set[str]]:
    return {m: {t for t, _ in imports(m) if t in MODULES and t != m} for m in MODULES}


def test_no_module_of_the_package_is_part_of_an_import_circle():
    edges, state, circles = graph(), {}, []

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                circles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not circles, circles


def test_the_library_never_imports_the_application_layer():
    library = [m for m in MODULES if not m.startswith("specdecode.app")]
    offending = {m: sorted(t for t in graph()[m] if t.startswith("specdecode.app"))
                 for m in library}
    assert not {m: t for m, t in offending.items() if t}


def test_drafters_and_training_reach_targets_only_through_the_protocol():
    for module in MODULES:
        if not module.startswith(("specdecode.drafters", "specdecode.app.train")):
            continue
        for target, name in imports(module):
            assert target != "specdecode.models.llama", (module, "imports the native model")
            assert not (name.startswith("_") and target.startswith("specdecode")), (module, name)


def test_the_layout_check_sees_function_level_imports():
    assert ("specdecode.models", "load_model") in imports("specdecode.drafters.draft_model")
