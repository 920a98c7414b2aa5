"""The project's own modules import each other without cycles, and the layers point one way:
``uavsim`` imports neither ``agents`` nor ``benchmarks``, ``agents`` does not import ``benchmarks``.

Every ``import`` and ``from ... import`` in a file counts, wherever it is: at the top, under
``if TYPE_CHECKING:``, or inside a function (a lazy import still ties the two modules together).
``from a.b import c`` is an edge to the module ``a.b.c`` when there is one, otherwise to ``a.b``
(its ``__init__`` for a package); ``import a.b.c`` is an edge to ``a.b.c``. The parent packages that
Python runs first are not edges: a package's ``__init__`` re-exporting its submodules is no cycle,
unless a submodule imports the package itself back (``from agents.placement import X``).
The directories are walked, so modules that move between packages need no change here.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("uavsim", "agents", "benchmarks")
# a layer may not import the ones named against it
FORBIDDEN = {"uavsim": ("agents", "benchmarks"), "agents": ("benchmarks",)}


def module_name(relative: Path) -> tuple[str, bool]:
    """``uavsim/adapters/spaces.py`` -> ("uavsim.adapters.spaces", False); an ``__init__.py`` names its
    package (True: it is one)."""
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def project_sources(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, tuple[str, bool, str]]:
    """Module name -> (source, is a package, path shown in messages), for every .py file under the packages."""
    sources = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            name, is_package = module_name(relative)
            sources[name] = (path.read_text(encoding="utf-8"), is_package, relative.as_posix())
    return sources


def imported_names(module: str, is_package: bool, source: str, modules: set[str]) -> list[tuple[str, int]]:
    """(absolute module name, line) for every import in ``source``, relative ones resolved; a
    ``from x import y`` names ``x.y`` when that is one of ``modules``, else ``x``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule if submodule in modules else base, node.lineno))
    return found


def owning_module(name: str, modules: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a project module (``uavsim.env.UAVSwarmEnv`` -> ``uavsim.env``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def import_graph(sources: dict[str, tuple[str, bool, str]]) -> dict[str, dict[str, int]]:
    """Module -> {imported project module: first line importing it}; a module importing itself is left out."""
    modules = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for module, (source, is_package, _) in sources.items():
        edges = graph.setdefault(module, {})
        for name, line in imported_names(module, is_package, source, modules):
            target = owning_module(name, modules)
            if target is not None and target != module:
                edges.setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative),
    each sorted, in sorted order: every cycle of imports lies within one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def describe(component: list[str], graph: dict[str, dict[str, int]], sources) -> str:
    """The imports among one component's modules, as ``path:line  a -> b``."""
    members = set(component)
    lines = [
        f"  {sources[a][2]}:{line}  {a} -> {b}"
        for a in component
        for b, line in sorted(graph[a].items())
        if b in members
    ]
    return "cycle among " + ", ".join(component) + ":\n" + "\n".join(lines)


def layer_violations(sources: dict[str, tuple[str, bool, str]]) -> list[str]:
    """``path:line  module imports name`` for each import across a forbidden layer boundary."""
    modules = set(sources)
    found = []
    for module, (source, is_package, path) in sorted(sources.items()):
        banned = FORBIDDEN.get(module.split(".")[0], ())
        for name, line in imported_names(module, is_package, source, modules):
            if name.split(".")[0] in banned:
                found.append(f"{path}:{line}  {module} imports {name}")
    return found


# ------------------------------------------------------------------ the project itself


@pytest.fixture(scope="module")
def sources():
    found = project_sources()
    assert {"uavsim", "uavsim.env", "agents", "benchmarks"} <= set(found), "the walk found the packages"
    return found


def test_the_project_has_no_import_cycle(sources):
    graph = import_graph(sources)
    found = cycles(graph)
    assert not found, "import cycles (every import counts, TYPE_CHECKING and lazy ones too):\n" + "\n".join(
        describe(component, graph, sources) for component in found
    )


def test_uavsim_imports_neither_agents_nor_benchmarks_and_agents_not_benchmarks(sources):
    found = layer_violations(sources)
    assert not found, "imports against the layering (uavsim < agents < benchmarks):\n" + "\n".join(found)


# ------------------------------------------------------------------ the checker, on planted sources


def planted(**files: str) -> dict[str, tuple[str, bool, str]]:
    """``pkg__init__`` names ``pkg/__init__.py``; ``pkg__mod`` names ``pkg/mod.py``."""
    sources = {}
    for key, source in files.items():
        parts = key.split("__")
        if parts[-1] == "init":
            sources[".".join(parts[:-1])] = (textwrap.dedent(source), True, "/".join(parts[:-1]) + "/__init__.py")
        else:
            sources[".".join(parts)] = (textwrap.dedent(source), False, "/".join(parts) + ".py")
    return sources


@pytest.mark.parametrize(
    "b_source",
    [
        "from pkg.a import thing",
        "import pkg.a",
        "from . import a",
        "from .a import thing",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import Thing",
        "def later():\n    from pkg.a import thing\n    return thing",
        "class C:\n    def m(self):\n        import pkg.a as a\n        return a",
    ],
    ids=["from", "import", "relative-module", "relative-name", "type-checking", "lazy", "lazy-method"],
)
def test_a_planted_cycle_is_found_however_it_imports(b_source):
    sources = planted(pkg__init="", pkg__a="from pkg.b import other\n", pkg__b=b_source)
    graph = import_graph(sources)
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    message = describe(["pkg.a", "pkg.b"], graph, sources)
    assert "pkg/a.py:1  pkg.a -> pkg.b" in message and "pkg.b -> pkg.a" in message


def test_a_longer_cycle_is_one_component_and_a_chain_is_none():
    ring = planted(pkg__init="", pkg__a="import pkg.b", pkg__b="import pkg.c", pkg__c="from pkg import a")
    assert cycles(import_graph(ring)) == [["pkg.a", "pkg.b", "pkg.c"]]
    chain = planted(pkg__init="", pkg__a="import pkg.b", pkg__b="import pkg.c", pkg__c="import os")
    assert cycles(import_graph(chain)) == []


def test_a_package_reexporting_its_submodules_is_no_cycle_unless_one_imports_the_package():
    fine = planted(
        pkg__init="from .a import A\nfrom pkg.b import B\n",
        pkg__a="class A: ...\n",
        pkg__b="from pkg import a\nfrom pkg.a import A\nclass B(A): ...\n",  # siblings, not the package
    )
    assert cycles(import_graph(fine)) == []
    back = planted(pkg__init="from .a import A\n", pkg__a="from pkg import helper\nclass A: ...\n")
    assert cycles(import_graph(back)) == [["pkg", "pkg.a"]]


def test_relative_imports_resolve_against_the_package_and_parents():
    sources = planted(
        top__init="",
        top__util="",
        top__sub__init="from .. import util\nfrom ..util import x\n",
        top__sub__mod="from . import helper\nfrom ...top import util\n",
    )
    graph = import_graph(sources)
    assert graph["top.sub"] == {"top.util": 1}
    assert graph["top.sub.mod"] == {"top.sub": 1, "top.util": 2}


def test_layer_violations_are_found_anywhere_in_a_file():
    sources = planted(
        uavsim__init="",
        uavsim__env="def f():\n    import agents.ppo\n",
        agents__init="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from benchmarks import common\n",
        benchmarks__init="import agents\nimport uavsim\n",
    )
    assert layer_violations(sources) == [
        "agents/__init__.py:3  agents imports benchmarks",
        "uavsim/env.py:2  uavsim.env imports agents.ppo",
    ]


# Inside agents: the algorithm knows nothing of the run around it, and placement (used by the
# team's diffusion and VLM jobs too) nothing of MAPPO (docs/architecture.md).
ENTRY_POINTS = ("agents.train_mappo", "agents.evaluate", "agents.export", "agents.average")
AGENTS_FORBIDDEN = {
    "agents.config": ("agents.algo", "agents.run", "agents.placement", *ENTRY_POINTS),
    "agents.algo": ("agents.run", "agents.placement", *ENTRY_POINTS),
    "agents.placement": ("agents.algo", "agents.run", "agents.config", *ENTRY_POINTS),
    "agents.run": ENTRY_POINTS,
}


def agents_layer_violations(sources: dict[str, tuple[str, bool, str]]) -> list[str]:
    modules = set(sources)
    found = []
    for module, (source, is_package, path) in sorted(sources.items()):
        layer = next((k for k in AGENTS_FORBIDDEN if module == k or module.startswith(k + ".")), None)
        for name, line in imported_names(module, is_package, source, modules) if layer else ():
            if any(name == b or name.startswith(b + ".") for b in AGENTS_FORBIDDEN[layer]):
                found.append(f"{path}:{line}  {module} imports {name}")
    return found


def test_agents_layers_algo_below_run_and_placement_on_its_own(sources):
    found = agents_layer_violations(sources)
    assert not found, "imports against agents' layering (config < algo < run < entry points):\n" + "\n".join(found)


def test_an_algorithm_module_importing_the_run_is_a_violation():
    found = agents_layer_violations(
        planted(
            agents__algo__x="def f():\n    from agents.run import logger\n",
            agents__run__logger="",
            agents__run__init="",
        )
    )
    assert found and "agents.algo.x imports agents.run" in found[0], found
