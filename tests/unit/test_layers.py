"""The layers of Cairn, held against its imports (docs/architecture.md): every import, at
the top of a module or inside a function, runs down the layers, and no modules import each
other in a circle. A change that crosses a layer the wrong way fails here, naming the import."""

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "ui", "plugins")


def _modules():
    """{module name: path} of every module of the product."""
    out = {}
    for top in PACKAGES:
        for path in (REPO / top).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name, path):
    """[(imported module, line, inside a function)] of one module; a `from X import Y` of a
    submodule Y counts as an import of X.Y."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for a in child.names:
                    found.append((a.name, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")
                    up = up[:len(up) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in child.names:
                    sub = f"{base}.{a.name}"
                    found.append((sub if sub in MODULES else base, child.lineno, in_function))
            visit(child, inner)
    visit(tree, False)
    return [(m, line, f) for m, line, f in found if m.split(".")[0] in PACKAGES]


def layer(mod):
    """The layer of a module (docs/architecture.md), from the top: entry, ui, cli, master,
    storage-master, agent, storage-agent, formats."""
    if mod in ("app", "plugins", "app.errors", "app.status") or mod.startswith("app.formats"):
        return "formats"
    if mod in ("app.entry", "app.__main__"):
        return "entry"
    if mod.startswith("app.agent"):
        return "agent"
    if mod.startswith("plugins.filesystems"):
        return "storage-agent"
    if mod.startswith("plugins.storage"):
        if mod in ("plugins.storage.base", "plugins.storage.registry") or \
                mod.rsplit(".", 1)[-1] in ("master", "keys"):
            return "storage-master"
        return "storage-agent"
    if mod.startswith("app.cli"):
        return "cli"
    if mod.startswith("ui"):
        return "ui"
    return "master"


# What each layer may import: itself and what stands below it, never what stands above,
# and the agent never the master (what it needs travels in each request).
MAY_IMPORT = {
    "entry": {"entry", "cli", "agent", "formats"},
    "ui": {"ui", "master", "storage-master", "storage-agent", "formats"},
    "cli": {"cli", "master", "storage-master", "storage-agent", "formats"},
    "master": {"master", "storage-master", "storage-agent", "formats"},
    "storage-master": {"storage-master", "storage-agent", "formats"},
    "agent": {"agent", "storage-agent", "formats"},
    "storage-agent": {"storage-agent", "formats"},
    "formats": {"formats"},
}
# The one arrow up: `cairn console` starts the console, lazily, so that the CLI runs
# without Qt.
ALLOWED_UP = {("app.cli.master", "ui.app")}


def test_every_import_runs_down_the_layers():
    wrong = []
    for name, path in sorted(MODULES.items()):
        for mod, line, in_function in _imports(name, path):
            if mod not in MODULES:
                continue  # a name the package does not have: an import error, not a layer
            if layer(mod) in MAY_IMPORT[layer(name)] or (name, mod) in ALLOWED_UP:
                continue
            wrong.append(f"{path.relative_to(REPO)}:{line} ({layer(name)}) imports {mod} "
                         f"({layer(mod)})")
    assert wrong == [], "\n".join(wrong)


def test_the_console_is_started_lazily():
    """The one arrow up (ALLOWED_UP) stays inside a function."""
    for name, mod in ALLOWED_UP:
        found = [f for m, _, f in _imports(name, MODULES[name]) if m == mod]
        assert found and all(found), f"{name} imports {mod} at its top"


def _graph():
    graph = {}
    for name, path in MODULES.items():
        graph[name] = {m for m, _, _ in _imports(name, path) if m in MODULES and m != name}
    return graph


def test_no_modules_import_each_other_in_a_circle():
    """Tarjan's strongly connected components over every import, top level and lazy: a
    component of more than one module is a circle. A package's __init__ that only hands on
    what its modules define is no circle of its own: the edge from a module to the package
    that holds it is left out."""
    graph = _graph()
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    index, low, stack, on, circles = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
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
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == [], circles
