"""The console owns the dispatcher thread and the master: both stop when it closes."""

import pytest
from PySide6.QtCore import QSettings

from app.jobs.dispatcher import Dispatcher
from app.master import Master

pytestmark = pytest.mark.gui


def test_dispatcher_runs_while_open_and_stops_on_close(make_console, empty_master, qtbot):
    c = make_console(empty_master, run_dispatcher=True)
    t = c.dispatcher_thread
    assert t is not None and t.is_alive()
    qtbot.waitUntil(lambda: Dispatcher.lease_holder(empty_master.db) == empty_master.dispatcher.id,
                    timeout=5000)
    c.window.close()
    assert c.closed
    assert not t.is_alive()
    m2 = Master(empty_master.home.root)
    try:
        assert Dispatcher.lease_holder(m2.db) is None
    finally:
        m2.close()
    assert c.bridge.call(lambda m: 1) is None


def test_screenshot_mode_does_not_dispatch_or_remember_layout(master, tmp_path, settings_dir):
    from ui.app import main
    assert main(home=master.home.root, screenshot=str(tmp_path / "s.png"), view="hosts") == 0
    assert QSettings("Cairn", "console").value("window/geometry") is None
    assert Dispatcher.lease_holder(master.db) is None


def test_a_new_catalog_gets_this_machine_as_a_host(tmp_path):
    from ui.app import main
    home = tmp_path / "fresh"
    assert main(home=str(home), screenshot=str(tmp_path / "s.png"), view="hosts") == 0
    m = Master(str(home))
    try:
        hosts = m.config.hosts()
        assert len(hosts) == 1 and hosts[0]["kind"] == "local"
    finally:
        m.close()


def test_dark_palette_when_asked(qapp, monkeypatch):
    from ui import theme
    monkeypatch.setenv("CAIRN_CONSOLE_THEME", "dark")
    theme.apply(qapp)
    try:
        assert qapp.palette().color(qapp.palette().ColorRole.Window).lightness() < 128
        assert qapp.palette().color(qapp.palette().ColorRole.Text).lightness() > 128
    finally:
        monkeypatch.setenv("CAIRN_CONSOLE_THEME", "light")
        theme.apply(qapp)
    assert qapp.palette().color(qapp.palette().ColorRole.Window).lightness() >= 128


def test_jobs_queued_while_the_console_is_open_are_run(make_console, empty_master, qtbot,
                                                      tmp_path):
    from catalog import populate
    populate(empty_master, tmp_path, jobs=False, images=False)
    c = make_console(empty_master, run_dispatcher=True)
    c.window.confirm_close_with_running_jobs = False
    c.window.select_view("activity")
    view = c.window.views["activity"]
    (job_id,) = empty_master.start_backup("p1")
    qtbot.waitUntil(lambda: view.model.row_of(job_id) is not None, timeout=5000)
    # Whatever the backup's outcome, the console's dispatcher took the job and ended it.
    qtbot.waitUntil(lambda: view.model.row_dict(view.model.row_of(job_id))["state"] == "done",
                    timeout=30000)
    assert empty_master.jobs.get(job_id)["runner"] == empty_master.dispatcher.id


def test_closing_with_running_jobs_asks_first(make_console, empty_master, qtbot, monkeypatch):
    from PySide6.QtWidgets import QMessageBox
    c = make_console(empty_master)
    qtbot.waitUntil(lambda: c.window.summary is not None, timeout=5000)
    c.window.timer.stop()
    c.window.summary = dict(c.window.summary, mine=2)
    asked = []

    def answer(choice):
        def question(parent, title, text, *a, **kw):
            asked.append(text)
            return choice
        return question

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Cancel))
    assert not c.window.close()
    assert c.window.isVisible() and not c.closed
    assert "2 jobs are running" in asked[0]
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Close))
    assert c.window.close()
    assert c.closed and len(asked) == 2
