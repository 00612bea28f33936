"""The package's shape, read from its sources: no import circle between modules (function-level
imports included) nor between packages (`core` and `models` may not import each other through
any modules); `core` is the bottom layer and imports neither drafters, models nor the application;
the library never imports the application layer; and drafters and training reach targets only
through the protocol (no concrete model class, no other module's private names).
"""

from __future__ import annotations

import ast
from pathlib import Path

import specdecode

ROOT = Path(specdecode.__file__).parent


def modules_under(root: Path) -> dict[str, Path]:
    """module name -> source file, for the package at `root`."""
    def name(path: Path) -> str:
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return {name(p): p for p in root.rglob("*.py")}


MODULES = modules_under(ROOT)


def imports(module: str, modules: dict[str, Path] = MODULES) -> list[tuple[str, str]]:
    """(imported module, name) for every import in `module`, wherever it is in the file; name is
    "" for a plain `import x`."""
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level \
                else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                as_module = f"{target}.{alias.name}"
                found.append((as_module, "") if as_module in modules else (target, alias.name))
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def graph(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    return {m: {t for t, _ in imports(m, modules) if t in modules and t != m} for m in modules}


def package_graph(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    """The same imports between the top package's direct parts ('specdecode.core', ...;
    a top-level module is its own part)."""
    top = min(modules, key=len)

    def part(m: str) -> str:
        return ".".join(m.split(".")[:2]) if m != top else m

    edges: dict[str, set[str]] = {part(m): set() for m in modules}
    for m, targets in graph(modules).items():
        edges[part(m)] |= {part(t) for t in targets if part(t) not in (part(m), top)}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, str] = {}
    found: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return found


def test_no_module_of_the_package_is_part_of_an_import_circle():
    assert not circles(graph())


def test_no_package_is_part_of_an_import_circle_between_packages():
    assert not circles(package_graph())


def test_a_circle_between_packages_is_found_where_no_module_circle_is(tmp_path):
    """a.one imports b.two and b.three imports a.four: no module imports itself back, but the
    packages a and b depend on each other."""
    files = {"__init__.py": "", "a/__init__.py": "", "b/__init__.py": "", "a/four.py": "",
             "a/one.py": "from ..b import two\n", "b/two.py": "", "b/three.py": "from ..a import four\n"}
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    modules = modules_under(tmp_path / "pkg")
    assert not circles(graph(modules))
    assert circles(package_graph(modules)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_core_is_the_bottom_layer_below_drafters_models_and_the_application():
    above = ("specdecode.drafters", "specdecode.models", "specdecode.app", "specdecode.pipeline",
             "specdecode.spec", "specdecode.profiles")
    assert not package_graph()["specdecode.core"] & set(above)


def test_the_library_never_imports_the_application_layer():
    edges = graph()
    library = [m for m in MODULES if not m.startswith("specdecode.app")]
    offending = {m: sorted(t for t in edges[m] if t.startswith("specdecode.app")) for m in library}
    assert not {m: t for m, t in offending.items() if t}


def test_drafters_and_training_reach_targets_only_through_the_protocol():
    for module in MODULES:
        if not module.startswith(("specdecode.drafters", "specdecode.app.train")):
            continue
        for target, name in imports(module):
            assert target != "specdecode.models.decoder", (module, "imports the native model")
            assert not (name.startswith("_") and target.startswith("specdecode")), (module, name)


def test_the_layout_check_sees_function_level_imports():
    assert ("specdecode.models", "load_model") in imports("specdecode.drafters.draft_model")
