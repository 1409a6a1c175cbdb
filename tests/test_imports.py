"""No import cycle among bert_exp's modules, read from the source with ``ast`` (nothing is imported).

The graph: a node per module (a package is its ``__init__``); an edge for every import of a bert_exp
module, wherever it stands:

- ``import a.b`` and ``from a.b import c``, absolute or relative (``from ..data import x``);
- imports inside functions and methods too: a lazy import only moves the cycle to the first call, where
  it meets a module still half-initialised (``data/tables.py`` and ``data/text.py`` imported each other
  that way before ``data/corpus/files.py`` took what both need);
- ``from pkg import name``: an edge to ``pkg.name`` when that is a module, else to ``pkg``'s ``__init__``.

Not edges:

- the parent packages Python runs before a module (``import a.b.c`` runs ``a`` and ``a.b`` first):
  counting them would make every package that names one of its own modules a cycle; a package
  ``__init__`` that imports its modules is counted through its own import statements;
- the lazy re-exports of a package ``__init__`` (``_WHERE`` tables read by ``__getattr__`` through
  ``import_module``): they run on the first attribute access, once the package has finished importing,
  and are strings, not import statements. :func:`test_lazy_exports_resolve` checks each names a module
  that defines the name instead.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "bert_exp"


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``root`` (the ``package`` directory)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, name: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The bert_exp modules one import statement imports (see the module docstring)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        here = name.split(".") if is_package else name.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base not in known:
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    known = modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        graph[name] = {target for node in ast.walk(tree)  # ast.walk: function bodies too
                       for target in _imported(node, name, is_package, known) if target != name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) for each strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph has ~150 nodes, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_through(graph, component) for component in components]


def _cycle_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """The shortest path from the component's first module back to itself, inside the component."""
    start, members = component[0], set(component)
    paths = {nxt: [start, nxt] for nxt in sorted(graph[start]) if nxt in members}
    queue = list(paths)
    while queue:
        node = queue.pop(0)
        if node == start:
            return paths[node]
        for nxt in sorted(graph[node]):
            if nxt in members and nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return component  # unreachable for a strongly connected component


def test_no_import_cycle():
    cycles = find_cycles(import_graph(REPO / PACKAGE))
    assert not cycles, "import cycles among bert_exp modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_check_sees_a_circle_through_lazy_imports(tmp_path):
    # the old data/tables.py <-> data/text.py circle: one side imports inside functions
    package = tmp_path / "pkg"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "__init__.py").write_text("from importlib import import_module\n_WHERE = {'x': '.text'}\n")
    (package / "data" / "text.py").write_text("from .tables import table_format\nclass CorpusError(Exception): ...\n")
    (package / "data" / "tables.py").write_text("def table_format():\n    from .text import CorpusError\n")
    (package / "data" / "other.py").write_text("import pkg.data.text\nfrom pkg.data import text\nfrom . import tables\n")
    graph = import_graph(package, "pkg")
    assert graph["pkg.data.other"] == {"pkg.data.text", "pkg.data.tables"}
    assert graph["pkg.data"] == set()  # a _WHERE string is not an import
    assert find_cycles(graph) == [["pkg.data.tables", "pkg.data.text", "pkg.data.tables"]]


def _defined(path: Path) -> set[str]:
    """The names a module binds at its top level: definitions, assignments and imports."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _lazy_exports(path: Path) -> dict[str, str] | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_WHERE" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def test_lazy_exports_resolve():
    """Every name a package's ``_WHERE`` table promises is defined by the module it names."""
    known = modules(REPO / PACKAGE, PACKAGE)
    checked = 0
    for package, path in known.items():
        if path.name != "__init__.py" or (table := _lazy_exports(path)) is None:
            continue
        for name, relative in table.items():
            target = package + relative if relative.startswith(".") else relative
            assert target in known, f"{package}._WHERE[{name!r}]: no module {target}"
            assert name in _defined(known[target]), f"{package}._WHERE[{name!r}]: {target} does not define it"
            checked += 1
    assert checked > 20


def test_a_preparation_worker_does_not_import_lightning():
    """What a spawned preparation worker imports (its functions are pickled by module name) stays free of
    Lightning and the DataModules: the reason the packages' faces export lazily."""
    code = ("import sys\nimport bert_exp.data.corpus.preparation\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("package", ["bert_exp.data", "bert_exp.data.corpus", "bert_exp.data.tasks"])
def test_faces_import_light(package):
    """Importing a data package's face imports none of its modules."""
    code = f"import sys\nimport {package}\nprint(sorted(m for m in sys.modules if m.startswith('{package}.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]", out.stdout


def test_the_data_flows_stay_apart():
    """``bert_exp.data.corpus`` (pre-training) and ``bert_exp.data.tasks`` (fine-tuning) use the shared
    modules at ``bert_exp.data``'s top, never each other; the shared modules use neither."""
    flows = ("bert_exp.data.corpus", "bert_exp.data.tasks")

    def flow(name: str) -> str | None:
        return next((f for f in flows if name == f or name.startswith(f + ".")), None)

    graph = import_graph(REPO / PACKAGE)
    crossing = [f"{a} -> {b}" for a, targets in graph.items() if a.startswith("bert_exp.data.")
                for b in targets if flow(b) and flow(a) != flow(b)]
    assert not crossing, "\n".join(sorted(crossing))


def test_the_runner_knows_no_tasks_metrics():
    """``bert_exp.runner`` records and prints what a task hands it (``closing_lines``); it imports no
    task's metrics (SQuAD 2.0's breakdown is the QA task's to say)."""
    graph = import_graph(REPO / PACKAGE)
    reaching = [f"{a} -> {b}" for a, targets in graph.items() if a.startswith("bert_exp.runner")
                for b in targets if b.startswith("bert_exp.metrics")]
    assert not reaching, "\n".join(sorted(reaching))
