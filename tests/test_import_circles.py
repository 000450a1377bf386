"""The package's modules import each other in one direction: no circle (STYLE, "No circle").

A circle of imports -- even one closed only by an annotation import under
``if TYPE_CHECKING:``, or by an import moved into a function -- means two
modules each need the other: neither can be read, tested or moved alone.
The graph is built from the source with :mod:`ast`; nothing is imported.

How the graph is built:

* a node is a module under ``django_leasejobs/``; a package is its
  ``__init__.py``;
* each ``import`` statement of a module adds an edge to every module of the
  package it names. ``import django_leasejobs.a.b`` and ``from
  django_leasejobs.a import b`` (``b`` a submodule) name ``a.b``; ``from
  django_leasejobs.a import name`` (``name`` not a submodule) names ``a``,
  the package's ``__init__``. Relative imports are resolved against the
  importing module's package;
* Python also runs every parent package's ``__init__`` before a submodule;
  that is not an edge here. An ``__init__`` that re-exports its submodules
  imports each of them (an ordinary edge), so counting the parent run would
  put every such package in a circle with its own submodules -- the normal
  shape of a package's face, not a circle of the code. A circle through an
  ``__init__`` is reported when a module the ``__init__`` imports imports
  that package back;
* the **run-time** graph has every import outside ``if TYPE_CHECKING:``, at
  a module's top and inside its functions alike: a function-local import runs
  when its function does, and one placed there to dodge a circle is still a
  circle. Imports at a module's top alone -- what runs when it is imported --
  must form no circle at all;
* the **full** graph adds the annotation-only imports.

Both graphs are free of circles, with no exception: the last two (the
models and their queryset; the task framework's modules) were opened by
making the queryset generic in its model and by layering ``tasks/`` around
its backend.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "django_leasejobs"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    #: Under ``if TYPE_CHECKING:``: for annotations only.
    annotation: bool
    #: Inside a function: run when the function is called, not at import.
    local: bool


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of *package* under *root*, by dotted name (a package: its ``__init__``)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _named(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names *node* imports, as candidates: ``a.b`` for ``from a import b``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    return [f"{source}.{alias.name}" for alias in node.names]


def imports(known: dict[str, Path]) -> list[Import]:
    """Every import of a module of *known* by another, with where and how it is made."""
    return [edge for module in known for edge in _imports_of(module, known)]


def _imports_of(module: str, known: dict[str, Path]) -> list[Import]:
    path = known[module]
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(nodes: list[ast.AST], annotation: bool, local: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(list(node.body), True, local)
                visit(list(node.orelse), annotation, local)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for name in _named(module, is_package, node):
                    target = resolve(name)
                    if target and target != module:
                        found.append(Import(module, target, node.lineno, annotation, local))
            else:
                # Into every block: a class body, a try's handlers, a with, a loop.
                inner = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(list(ast.iter_child_nodes(node)), annotation, local or inner)

    visit([ast.parse(path.read_text(encoding="utf-8"))], False, False)
    return found


def graph(edges: list[Import]) -> dict[str, dict[str, Import]]:
    """Importer -> imported -> the first import that makes the edge."""
    adjacent: dict[str, dict[str, Import]] = {}
    for edge in edges:
        adjacent.setdefault(edge.importer, {}).setdefault(edge.imported, edge)
    return adjacent


def find_circle(adjacent: dict[str, dict[str, Import]]) -> list[Import] | None:
    """One circle of *adjacent*, as its imports in order, or None when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[Import] = []

    def walk(node: str) -> list[Import] | None:
        state[node] = 1
        for target, edge in sorted(adjacent.get(node, {}).items()):
            if state.get(target) == 1:  # back on the path: the circle is the path from there
                start = next(i for i, e in enumerate(path) if e.importer == target)
                return [*path[start:], edge]
            if target not in state:
                path.append(edge)
                if found := walk(target):
                    return found
                path.pop()
        state[node] = 2
        return None

    for node in sorted(adjacent):
        if node not in state and (found := walk(node)):
            return found
    return None


def _describe(circle: list[Import]) -> str:
    def short(name: str) -> str:
        return name.removeprefix(f"{PACKAGE}.")

    steps = [
        f"{short(e.importer)} -> {short(e.imported)} (line {e.line}"
        + (", TYPE_CHECKING" if e.annotation else "")
        + (", in a function" if e.local else "")
        + ")"
        for e in circle
    ]
    return "import circle: " + "; ".join(steps)


def _package_imports() -> list[Import]:
    return imports(modules(ROOT, PACKAGE))


def test_no_import_circle_at_run_time():
    """No circle of run-time imports; none at all among the imports made at a module's top."""
    run_time = [e for e in _package_imports() if not e.annotation]
    at_import = graph([e for e in run_time if not e.local])
    circle = find_circle(at_import)
    assert circle is None, _describe(circle)
    circle = find_circle(graph(run_time))
    assert circle is None, _describe(circle)


def test_no_import_circle_through_annotations():
    """Annotation-only imports (``if TYPE_CHECKING:``) close no circle either."""
    circle = find_circle(graph(_package_imports()))
    assert circle is None, _describe(circle)


def test_a_circle_through_a_local_or_an_annotation_import_is_found(tmp_path):
    """The finder itself: a package whose modules import each other back -- one inside a
    function, one under ``TYPE_CHECKING`` -- is reported, each circle with its edges."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import H\n"
    )
    (package / "high.py").write_text("from . import low\n\ndef f():\n    from . import mid\n")
    (package / "mid.py").write_text("from .high import f\n")
    found = imports(modules(tmp_path, "pkg"))
    run_time = [e for e in found if not e.annotation]
    local = find_circle(graph(run_time))
    assert local is not None
    assert {(e.importer, e.imported) for e in local} == {
        ("pkg.high", "pkg.mid"),
        ("pkg.mid", "pkg.high"),
    }
    assert find_circle(graph([e for e in run_time if not e.local])) is None
    annotated = find_circle(graph([e for e in found if e.importer != "pkg.mid"]))
    assert annotated is not None
    assert {(e.importer, e.imported) for e in annotated} == {
        ("pkg.high", "pkg.low"),
        ("pkg.low", "pkg.high"),
    }
