"""The package's import graph and file sizes: one-way data flow, public seams, small files.

Read with ``ast`` from the source (nothing is imported), counting every import of a project module: at
module level AND inside functions (a function-local import hides a circle from Python's import system,
not from the design). ``from bcg_deploy.x import y`` is an edge to ``bcg_deploy.x.y`` when that is a
module, else to ``bcg_deploy.x``; importing a submodule is not counted as importing its package's
``__init__`` (a package re-exporting its own submodules is not a circle).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bcg_deploy"
ROOT = PACKAGE.name

MAX_LINES = 600
CLI_MAX_LINES = 800
KERNEL_MODULES = frozenset({"diffsim/contact.py", "diffsim/integrator.py"})
"""Warp kernel modules (``@wp.kernel`` forward/adjoint pairs and their launchers), exempt from MAX_LINES."""


@dataclass
class Module:
    name: str  # dotted
    path: Path
    tree: ast.Module
    imports: list[tuple[str, int, bool]] = field(default_factory=list)  # (module, line, function-local)
    private: list[str] = field(default_factory=list)  # "line: what" for every private name taken from another module


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _local_lines(tree: ast.Module) -> set[int]:
    """Line numbers of the import statements inside a function (at any depth)."""
    out: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out.update(n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return out


def _resolve(mod: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.name.split(".")
    if mod.path.name != "__init__.py":
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def load_modules(package: Path = PACKAGE) -> dict[str, Module]:
    """Every module of the package with the project modules it imports and the private names it takes."""
    mods = {}
    for path in sorted(package.rglob("*.py")):
        m = Module(_module_name(path, package), path, ast.parse(path.read_text(), str(path)))
        mods[m.name] = m
    for m in mods.values():
        local = _local_lines(m.tree)
        aliases: dict[str, str] = {}  # local name -> project module it is bound to
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == ROOT or a.name.startswith(ROOT + "."):
                        m.imports.append((a.name, node.lineno, node.lineno in local))
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(m, node)
                if src != ROOT and not src.startswith(ROOT + "."):
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in mods:
                        m.imports.append((sub, node.lineno, node.lineno in local))
                        aliases[a.asname or a.name] = sub
                    else:
                        m.imports.append((src, node.lineno, node.lineno in local))
                        if _is_private(a.name) and src != m.name:
                            m.private.append(f"{node.lineno}: from {src} import {a.name}")
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                target = _dotted(node.value)
                if target is not None:
                    head, _, rest = target.partition(".")
                    bound = aliases.get(head)
                    full = bound + ("." + rest if rest else "") if bound else None
                    if full in mods and full != m.name:
                        m.private.append(f"{node.lineno}: {target}.{node.attr}")
    return mods


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def import_cycles(mods: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    graph = {n: sorted({t for t, _, _ in m.imports if t in mods and t != n}) for n, m in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(out)


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return load_modules()


def test_no_import_cycles(modules):
    """Counting function-local imports too: a circle hidden inside a function is still a circle."""
    assert import_cycles(modules) == []


def test_no_private_name_crosses_a_module(modules):
    found = {n: m.private for n, m in modules.items() if m.private}
    assert found == {}


def _explained(lines: list[str], line: int) -> bool:
    """A comment on the import's line, on another line of its block of imports, or on the line above it."""
    i = line - 1
    while i > 0 and lines[i - 1].lstrip().startswith(("from ", "import ")):
        i -= 1
    block = [lines[j] for j in range(i, line)]
    while line < len(lines) and lines[line].lstrip().startswith(("from ", "import ")):
        block.append(lines[line])
        line += 1
    return any("#" in ln for ln in block) or (i > 0 and lines[i - 1].lstrip().startswith("#"))


def test_function_local_imports_say_why(modules):
    """A project module imported inside a function is there to keep another import off start-up (or off a
    path that does not need it): a comment at the import (its line, its block, or the line above) says so."""
    silent = set()
    for n, m in modules.items():
        lines = m.path.read_text().splitlines()
        for target, line, local in m.imports:
            if local and not _explained(lines, line):
                silent.add(f"{n}:{line} imports {target}")
    assert sorted(silent) == []


STAGES = ("errors fileio rundir integrity robots profiles rotations", "motions", "diffsim", "observations",
          "training", "export", "sim2sim stacks", "cli")  # fmt: skip
"""The data flow (ARCHITECTURE.md), first to last: a stage imports only from itself and the stages before it."""


def test_stages_import_only_from_earlier_stages(modules):
    rank = {pkg: i for i, names in enumerate(STAGES) for pkg in names.split()}
    assert {n.split(".")[1] for n in modules if "." in n} <= set(rank), "a package with no place in STAGES"
    stage = lambda name: rank.get(name.split(".")[1], -1) if "." in name else -1  # noqa: E731
    upward = sorted(
        f"{n}:{line} imports {t}" for n, m in modules.items() for t, line, _ in m.imports if stage(t) > stage(n) >= 0
    )
    assert upward == []


def test_the_cli_is_thin():
    total = sum(line_count(p) for p in (PACKAGE / "cli").rglob("*.py"))
    assert total < CLI_MAX_LINES, f"cli/ is {total} lines"


def test_no_file_over_the_limit():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := line_count(p)) > MAX_LINES and str(p.relative_to(PACKAGE)) not in KERNEL_MODULES
    }
    assert long == {}


def test_the_checks_see_what_they_look_for(tmp_path):
    """The analysis itself: a circle through a function-local import, a private name taken by ``from``
    and by attribute, and an import inside a function, on a throw-away package."""
    pkg = tmp_path / ROOT
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from bcg_deploy.sub import b\n\n\ndef f():\n    from bcg_deploy.sub.b import _x\n")
    (pkg / "sub" / "b.py").write_text("_x = 1\n\n\ndef g():\n    from bcg_deploy import a\n\n    return a._y\n")
    mods = load_modules(pkg)
    assert import_cycles(mods) == [["bcg_deploy.a", "bcg_deploy.sub.b"]]
    assert mods["bcg_deploy.a"].private == ["5: from bcg_deploy.sub.b import _x"]
    assert mods["bcg_deploy.sub.b"].private == ["7: a._y"]
    assert [(t, local) for t, _, local in mods["bcg_deploy.sub.b"].imports] == [("bcg_deploy.a", True)]
