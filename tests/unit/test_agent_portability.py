"""The agent runs on bare python3 >= 3.9: what travels to the hosts uses only the standard library
and Python 3.9 syntax, and works under the oldest Python found here."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# the agent runs on bare python3 >= 3.9


def test_agent_modules_use_only_the_standard_library_and_python39_syntax():
    from app.transport import bundle
    stdlib = set(sys.stdlib_module_names)
    # what travels to the hosts (app/transport/bundle.py): the agent, the formats it shares
    # with the master, the errors and statuses, and the agent halves of the plugins
    shipped = {n for n in bundle.agent_files() if n.endswith(".py") and n != "__main__.py"}
    modules = {n[:-len("/__init__.py")].replace("/", ".") if n.endswith("/__init__.py")
               else n[:-3].replace("/", ".") for n in shipped}
    assert {"app.agent.ops", "app.formats.tarfmt", "plugins.storage.agents",
            "plugins.storage.dedup.store", "plugins.storage.advanced_disk.agent"} <= modules
    assert not {"plugins.storage.registry", "plugins.storage.base",
                "plugins.storage.dedup.master", "plugins.storage.dedup.keys",
                "plugins.storage.advanced_disk.master"} & modules, "a master half travels"
    for name in sorted(shipped):
        path = REPO / name
        tree = ast.parse(path.read_text(), feature_version=(3, 9))
        # An optional accelerator may be imported inside a try that falls back when it is
        # missing; nothing else outside the standard library.
        optional = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                                    "ModuleNotFoundError")
                    for h in node.handlers):
                optional.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
                # `from package import module`: the module must travel too
                mods += [f"{node.module}.{a.name}" for a in node.names
                         if f"{node.module}.{a.name}" in modules]
            for m in mods:
                ok = m.split(".")[0] in stdlib or m in modules
                assert ok, "%s imports %s, which does not travel to the hosts" % (name, m)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
                for side in (node.left, node.right):
                    assert not (isinstance(side, ast.Name) and side.id in
                                ("int", "str", "bytes", "None", "dict", "list")), \
                        "%s: type union at line %d" % (name, node.lineno)


def _python39():
    import glob
    for cand in [shutil.which("python3.9")] + sorted(
            glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9"))):
        if cand and subprocess.run([cand, "-c", "pass"], capture_output=True).returncode == 0:
            return cand
    return None


def test_agent_modules_work_under_the_oldest_python(tmp_path):
    py39 = _python39()
    if py39 is None:
        pytest.skip("no python3.9 interpreter here")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"data" * 1000)
    script = (
        "import sys, io\n"
        "from app.agent.archiver import backup_to\n"
        "from app.agent.extract import restore_from\n"
        "from app.agent.extents import ExtentReader\n"
        "rows = []\n"
        "def emit(e, p):\n"
        "    if e == 'rows': rows.extend(p['rows'])\n"
        "with open(sys.argv[1] + '/i.tar', 'wb') as f:\n"
        "    backup_to(f, [sys.argv[1] + '/d'], emit=emit, is_cancelled=lambda: False,\n"
        "              image_meta={})\n"
        "plan = [dict(path=r[0], kind=r[1], checksum=r[9], link=r[10], member=r[0][1:])\n"
        "        for r in rows]\n"
        "with ExtentReader(sys.argv[1] + '/i.tar', [r[7:9] for r in rows]) as src:\n"
        "    res = restore_from(src, sys.argv[1] + '/t', plan, overwrite='skip', emit=emit,\n"
        "                       is_cancelled=lambda: False)\n"
        "assert res['errors'] == 0 and res['files'] == 1, res\n")
    out = subprocess.run([py39, "-c", script, str(tmp_path)], cwd=str(REPO),
                         capture_output=True)
    assert out.returncode == 0, out.stderr
    with open(str(tmp_path / "t") + str(tmp_path / "d" / "f"), "rb") as f:
        assert f.read() == b"data" * 1000
