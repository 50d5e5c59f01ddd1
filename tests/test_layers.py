"""The package's floors, read from the source (AST, nothing imported): ``rezolus_ue.linux``
(kernel ABIs) and ``tracefs_tools`` (a reusable library) depend on nothing above them, and
no module imports itself back, at module level or inside a function.

Imports under ``if TYPE_CHECKING:`` never run and are left out. Importing ``a.b.c`` also
runs ``a`` and ``a.b`` (their ``__init__``), so those count as imported too.
"""

from __future__ import annotations

import ast
import importlib.metadata
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rezolus_ue", "tracefs_tools")

#: What the kernel-ABI floor must never reach: samplers, consumers, the agent and the
#: commands built on them.
ABOVE_LINUX = ("rezolus_ue.samplers", "rezolus_ue.consume", "rezolus_ue.agent",
               "rezolus_ue.publisher", "rezolus_ue.cli", "rezolus_ue.check",
               "rezolus_ue.events_cmd", "rezolus_ue.config_cmd", "rezolus_ue.service_cmd",
               "rezolus_ue.docs")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield the import statements of ``tree``, skipping ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for s in node.orelse for n in _imports_of_stmt(s))
            continue
        yield from _imports_of_stmt(node)


def _imports_of_stmt(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """Return the modules of ours that ``node`` in ``module`` runs."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            if MODULES[module].name != "__init__.py":
                base.pop()
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix
                 for a in node.names]
    parts = module.split(".")
    own = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    out = set()
    for name in names:
        p = name.split(".")
        out |= {m for i in range(1, len(p) + 1)
                if (m := ".".join(p[:i])) in MODULES and m not in own}
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = set().union(*(_targets(module, n) for n in _imports(tree)))
    return graph


GRAPH = _graph()


def _reach(start: str) -> dict[str, str]:
    """Return {module: the module that imports it} for everything ``start`` runs."""
    seen = {start: ""}
    todo = [start]
    while todo:
        m = todo.pop()
        for t in sorted(GRAPH[m]):
            if t not in seen:
                seen[t] = m
                todo.append(t)
    return seen


def _chain(seen: dict[str, str], end: str) -> str:
    out = [end]
    while seen[out[-1]]:
        out.append(seen[out[-1]])
    return " -> ".join(reversed(out))


def _is_under(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def test_the_graph_sees_the_floors() -> None:
    assert "rezolus_ue.linux.user_events" in MODULES
    assert "rezolus_ue.linux.user_events" in GRAPH["rezolus_ue.publisher"]
    assert "rezolus_ue.errors" in GRAPH["rezolus_ue.linux.perf_event"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("rezolus_ue.linux")))
def test_linux_reaches_no_sampler_consumer_or_agent(module: str) -> None:
    seen = _reach(module)
    bad = sorted(m for m in seen if _is_under(m, ABOVE_LINUX))
    assert not bad, "rezolus_ue.linux is the kernel-ABI floor, yet " + "; ".join(
        _chain(seen, m) for m in bad)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("tracefs_tools")))
def test_tracefs_tools_stands_alone(module: str) -> None:
    seen = _reach(module)
    bad = sorted(m for m in seen if m.startswith("rezolus_ue"))
    assert not bad, "tracefs_tools is a reusable library, yet " + "; ".join(
        _chain(seen, m) for m in bad)


def test_no_import_cycles() -> None:
    cycles = []
    for module in MODULES:
        seen = _reach(module)
        back = [m for m in GRAPH if module in GRAPH[m] and m in seen]
        if back:
            cycles.append(f"{_chain(seen, back[0])} -> {module}")
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def _third_party_imports() -> dict[str, set[str]]:
    """Return {top-level module not ours and not stdlib: the modules importing it}."""
    import sys

    out: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names):
                if top not in PACKAGES:
                    out.setdefault(top, set()).add(module)
    return out


def _requirement_names(reqs: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("-", "_") for r in reqs}


def test_runtime_dependencies_are_what_the_product_imports() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    optional = _requirement_names(extras["parquet"] + extras["otel"])
    imported = _third_party_imports()
    unused = sorted(runtime - imported.keys())
    assert not unused, f"runtime dependencies nothing in the product imports: {unused}"
    # An import name may differ from its distributions' (opentelemetry, google: protobuf).
    dists = importlib.metadata.packages_distributions()
    undeclared = {m: sorted(by) for m, by in imported.items()
                  if not _requirement_names(dists.get(m, [m])) & (runtime | optional)}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
