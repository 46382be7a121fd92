import os
import sys

import pytest

pytest.importorskip("PySide6")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

from catalog import populate  # noqa: E402



@pytest.fixture(autouse=True)
def settings_dir(tmp_path, monkeypatch):
    """Window layout goes to a temporary directory, never to the user's settings."""
    d = tmp_path / "settings"
    d.mkdir()
    for f in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(f, QSettings.Scope.UserScope, str(d))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(d))
    yield d


@pytest.fixture(autouse=True)
def bridges_shut_down():
    """Each test shuts down the bridges it starts: one left running keeps Python's automatic
    garbage collection off (ui/collector.py) for every test after it."""
    from ui import collector
    before = collector.holders()
    yield
    assert collector.holders() == before, "a Bridge was left running: call its shutdown()"


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def master(home, tmp_path):
    from app.master import Master
    m = Master(home)
    m.test_host, m.test_jobs = populate(m, tmp_path)
    yield m
    m.close()


@pytest.fixture
def empty_master(home):
    from app.master import Master
    m = Master(home)
    m.ensure_local_host()
    yield m
    m.close()


def _console(qtbot, m, **kw):
    from ui.app import Console
    c = Console(m, run_dispatcher=kw.pop("run_dispatcher", False), **kw)
    qtbot.addWidget(c.window)
    c.window.resize(1280, 800)
    c.window.show()
    return c


@pytest.fixture
def make_console(qtbot):
    made = []

    def make(m, **kw):
        c = _console(qtbot, m, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.window.close()


@pytest.fixture
def console(make_console, master):
    return make_console(master)
