"""The layers of Cairn, held against its imports (docs/architecture.md): every import, at
the top of a module or inside a function, runs down the layers, and no modules import each
other in a circle. A change that crosses a layer the wrong way fails here, naming the import."""

import ast
import io
import sys
import tokenize
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


def _import_nodes(name, path, tree=None):
    """[(import statement, imported module, the function it is in or None)] of one module,
    for the modules of the product; a `from X import Y` of a submodule Y counts as an import
    of X.Y."""
    tree = tree or ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else function
            if isinstance(child, ast.Import):
                for a in child.names:
                    found.append((child, a.name, function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")
                    up = up[:len(up) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in child.names:
                    sub = f"{base}.{a.name}"
                    found.append((child, sub if sub in MODULES else base, function))
            visit(child, inner)
    visit(tree, None)
    return [(n, m, f) for n, m, f in found if m.split(".")[0] in PACKAGES]


def _imports(name, path):
    """[(imported module, line, inside a function)] of one module."""
    return [(m, n.lineno, f is not None) for n, m, f in _import_nodes(name, path)]


def layer(mod):
    """The layer of a module (docs/architecture.md), from the top: entry, ui, cli, master,
    storage-master, agent, storage-agent, formats."""
    if mod in ("app", "plugins", "app.errors", "app.status", "app.liveness") or \
            mod.startswith("app.formats"):
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
    # entry: the master's local transport too, to start the local agent before the CLI loads
    "entry": {"entry", "cli", "master", "agent", "formats"},
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


# ---- imports inside functions ---------------------------------------------------------------

def _comment_lines(source):
    """(lines that hold a comment, lines that hold only a comment) of a module's source."""
    anywhere, alone = set(), set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            anywhere.add(tok.start[0])
            if not tok.line[:tok.start[1]].strip():
                alone.add(tok.start[0])
    return anywhere, alone


def _says_why(node, function, comments, alone, import_lines):
    """An import inside a function says why it is there when a comment stands on its own
    line(s), or right above it in that function (other imports of the group between)."""
    if any(line in comments for line in range(node.lineno, node.end_lineno + 1)):
        return True
    line = node.lineno - 1
    while line in import_lines:
        line -= 1
    return line > function.lineno and line in alone


def test_every_import_inside_a_function_says_why():
    """An import of Cairn's own modules belongs at the top of its module, where it shows what
    the module depends on. One inside a function (to keep a process's start light, to load an
    optional or heavy library only where it is needed, to break a circle) says why: a comment
    on its line or right above it, or, for a module whose handlers import lazily as a rule,
    the module's docstring, which then says "lazily" and why."""
    unexplained = []
    for name, path in sorted(MODULES.items()):
        source = path.read_text()
        tree = ast.parse(source)
        found = [(n, m, f) for n, m, f in _import_nodes(name, path, tree) if f is not None]
        if not found or "lazily" in (ast.get_docstring(tree) or ""):
            continue
        comments, alone = _comment_lines(source)
        import_lines = {line for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                        for line in range(n.lineno, n.end_lineno + 1)}
        for node, mod, function in found:
            if not _says_why(node, function, comments, alone, import_lines):
                unexplained.append(f"{path.relative_to(REPO)}:{node.lineno} imports {mod} "
                                   f"inside {function.name}() without a comment saying why "
                                   f"it is not at the top")
    assert unexplained == [], "\n".join(sorted(set(unexplained)))


# ---- the console and the CLI use the master's API --------------------------------------------

# The master's configuration (Config) and job store (JobStore) are its own: the console and
# the CLI read and change them through Master's methods (app/master/), never as
# `m.config.X` or `m.jobs.X`. What else is named `config` or `jobs` there is no master: a
# widget's own attribute (`self.jobs`, the overview's jobs label and the storage unit
# wizard's spin box: no class of ui/ or app/cli/ is the master, which they reach as `m`,
# `master` or `self.master`) and the spin box read through its page, `sp.jobs`.
NOT_THE_MASTER = {("ui/wizards/storage_unit.py", "sp.jobs")}


def test_the_console_and_the_cli_go_through_the_master_api():
    reached = []
    for name, path in sorted(MODULES.items()):
        if not (name == "ui" or name.startswith(("ui.", "app.cli"))):
            continue
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and node.attr in ("config", "jobs")):
                continue
            held = ast.unparse(node.value)
            if held == "self" or (rel, f"{held}.{node.attr}") in NOT_THE_MASTER:
                continue
            reached.append(f"{rel}:{node.lineno} reaches {held}.{node.attr}: use a method "
                           f"of the master (app/master/)")
    assert reached == [], "\n".join(reached)


# The names of the storage types. Outside a type's own package, code asks the type's
# interface and capabilities (plugins/storage/base.py), never which type it is.
TYPE_NAMES = {"dedup", "advanced-disk", "advanced_disk"}
TYPE_PACKAGES = ("plugins/storage/dedup/", "plugins/storage/advanced_disk/")


def type_tests(source):
    """[(line, text)] of the places in a module's source that test a storage type by name: a
    comparison of a type's name with something that says type or kind, and an `if` on a
    name such as `dedup` or `is_dedup`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = set()
            for side in sides:
                elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                names |= {e.value for e in elts if isinstance(e, ast.Constant)
                          and isinstance(e.value, str)}
            others = " ".join(ast.unparse(s) for s in sides if not isinstance(s, ast.Constant))
            if names & TYPE_NAMES and ("type" in others or "kind" in others):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
            if isinstance(test, ast.Name) and "dedup" in test.id:
                found.append((node.lineno, f"if {ast.unparse(node.test)}"))
    return found


def test_no_code_outside_a_storage_type_asks_which_type_it_is():
    asked = []
    for name, path in sorted(MODULES.items()):
        rel = str(path.relative_to(REPO))
        if rel.startswith(TYPE_PACKAGES):
            continue
        asked += [f"{rel}:{line} {text}: ask the type's interface or capabilities "
                  f"(plugins/storage/base.py)" for line, text in type_tests(path.read_text())]
    assert asked == [], "\n".join(asked)


def test_the_type_check_finds_a_test_of_a_type_by_name():
    assert [t for _, t in type_tests("if pool['type'] == 'dedup':\n    pass\n")] == \
        ["pool['type'] == 'dedup'"]
    assert [t for _, t in type_tests("if not dedup:\n    pass\n")] == ["if not dedup"]
    assert type_tests("x = storage_type in ('advanced-disk', 'tape')\n")
    # the dedup setting of a host or policy (where data is deduplicated) is no type test
    assert type_tests("if 'dedup' in changes:\n    pass\n") == []
