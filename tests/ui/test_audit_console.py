"""The console's Audit page (real widgets over a real catalog) and what the console hides
from a user whose role may not do it."""

import sqlite3

from PySide6.QtCore import Qt

from app.master import Master


def _entries(home):
    m = Master(home)
    m.set_setting("backup_tries", 3)
    m.add_user("vic", "viewer")
    v = Master(home, user="vic", origin="192.0.2.15")
    v.audit_login(method="publickey")
    try:
        v.set_setting("backup_tries", 5)
    except Exception:   # refused: what the page shows
        pass
    v.close()
    m.close()


def _rows(view):
    m = view.model
    return [m.row_dict(i) for i in range(m.rowCount())]


def test_the_audit_page_shows_entries_filters_and_a_broken_chain(qtbot, make_console,
                                                                 empty_master, home):
    _entries(home)
    c = make_console(empty_master)
    w = c.window
    w.select_view("audit")
    view = w.views["audit"]
    qtbot.waitUntil(lambda: view.loaded, timeout=10000)
    rows = _rows(view)
    assert [r["action"] for r in rows][-3:] == ["add_user", "login", "set_setting"]
    refused = rows[-1]
    assert (refused["user"], refused["origin"], refused["outcome"]) == \
        ("vic", "192.0.2.15", "refused")
    assert "whole" in view.chain_label.text()
    col = [cl.key for cl in view.model.columns].index("details")
    assert "may not set setting" in view.model.cell(refused, col)
    # filter by user
    view.user.setText("vic")
    view.refresh_soon()
    qtbot.waitUntil(lambda: {r["user"] for r in _rows(view)} == {"vic"}, timeout=10000)
    # an edited entry: the chain is broken there, and the row marked
    con = sqlite3.connect(f"{home}/catalog.db")
    with con:
        con.execute("UPDATE audit_log SET origin='local' WHERE action='login'")
    con.close()
    view.refresh_soon()
    qtbot.waitUntil(lambda: "broken" in view.chain_label.text(), timeout=10000)
    login = next(r for r in _rows(view) if r["action"] == "login")
    assert login["chain_ok"] is False
    i = view.model.row_of(login["seq"])
    assert view.model.data(view.model.index(i, 1)) == "✗ broken"
    assert view.model.data(view.model.index(i, 0), Qt.ItemDataRole.ForegroundRole) is not None


def test_the_console_hides_what_a_viewer_may_not_do(qtbot, make_console, master, home):
    m = Master(home)
    m.add_user("vic", "viewer")
    m.close()
    viewer = Master(home, user="vic", origin="192.0.2.15")
    try:
        c = make_console(viewer)
        w = c.window
        qtbot.waitUntil(lambda: w.user is not None, timeout=10000)
        assert w.user["role"] == "viewer"
        assert "vic (viewer)" in w.windowTitle()
        assert not w.views["activity"].cancel_action.isVisible()
        assert not w.views["activity"].restart_action.isVisible()
        assert not w.views["policies"].object_actions.backup.isVisible()
        assert not w.views["policies"].object_actions.new.isVisible()
        assert not w.views["restore"].restore_button.isVisibleTo(w.views["restore"])
        w.select_view("audit")
        qtbot.waitUntil(lambda: w.views["audit"].loaded, timeout=10000)
    finally:
        c.window.close()
        viewer.close()


def test_for_the_embedded_admin_nothing_is_hidden(qtbot, console):
    w = console.window
    qtbot.waitUntil(lambda: w.user is not None, timeout=10000)
    assert w.user["role"] == "admin" and w.windowTitle() == "Cairn console"
    assert w.views["policies"].object_actions.backup.isVisible()
    assert w.views["activity"].cancel_action.isVisible()


def test_the_audit_page_says_where_a_recovered_catalogs_log_goes_on(qtbot, make_console,
                                                                    empty_master, home):
    """A catalog recovered from a catalog backup (app/audit.py: recovered) goes on in a new
    segment of the chain: the page says so beside the chain being whole."""
    from app.audit import AuditLog
    m = Master(home)
    try:
        AuditLog(m.db, f"{home}/audit.head").recovered("/pool/catalog-backups/cb-1.tar",
                                                       created="2026-11-20T03:00:00Z")
    finally:
        m.close()
    c = make_console(empty_master)
    c.window.select_view("audit")
    view = c.window.views["audit"]
    qtbot.waitUntil(lambda: view.loaded, timeout=10000)
    text = view.chain_label.text()
    assert "whole" in text and "A new segment starts at entry" in text
    assert "recovered from /pool/catalog-backups/cb-1.tar made 2026-11-20T03:00:00Z" in text
