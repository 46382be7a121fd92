"""File names a client chose to deceive: in the restore browser and the job log view a
newline, a carriage return, ESC sequences and bytes that are not UTF-8 show as escapes
(\\n, \\r, \\033, \\351), never as a second line or as nothing; the tree still finds and
restores the exact file."""

import os
import socket

import pytest
from PySide6.QtCore import Qt

from app import status as st
from app.master import Master
from app.terminal_text import escape
from ui.bridge import Bridge
from ui.job_dialog import JobDetailsDialog
from ui.models import ROW_ROLE

pytestmark = pytest.mark.gui

HOSTILE = [b"fake\nf 0644 0 0 1 2026-01-01T00:00:00Z evil", b"cr\rX", b"clear\x1b[2J",
           b"title\x1b]0;pwned\x07", b"back\\slash", b"bad\xe9\xff"]


def shown_cleanly(text):
    return all(ch.isprintable() for ch in text)


@pytest.fixture
def hostile(tmp_path):
    src, vol = tmp_path / "src", tmp_path / "vol"
    src.mkdir()
    vol.mkdir()
    for name in HOSTILE:
        with open(os.path.join(os.fsencode(src), name), "wb") as f:
            f.write(name)
    # a socket is skipped with a log line that names it
    s = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(src)
    try:
        s.bind(b"sock\x1b[2J\n")
    finally:
        os.chdir(here)
        s.close()
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", str(src))
    [job] = m.wait_for(m.start_backup("p1"))
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    yield m, str(src), job
    m.close()


def test_restore_browser_shows_hostile_names_escaped(make_console, hostile, qtbot, tmp_path):
    m, src, _ = hostile
    c = make_console(m)
    c.window.select_view("restore")
    v = c.window.views["restore"]
    qtbot.waitUntil(lambda: v.loaded and v.files.image_id is not None, timeout=5000)
    v.files.reveal(src)
    qtbot.waitUntil(lambda: v.files.index_of_path(src).isValid(), timeout=5000)
    parent = v.files.index_of_path(src)
    v.tree.expand(parent)
    qtbot.waitUntil(lambda: v.files.rowCount(parent) == len(HOSTILE), timeout=5000)
    shown = {}
    for row in range(v.files.rowCount(parent)):
        idx = v.files.index(row, 0, parent)
        text = idx.data(Qt.ItemDataRole.DisplayRole)
        assert shown_cleanly(text), repr(text)
        assert shown_cleanly(idx.data(Qt.ItemDataRole.ToolTipRole))
        shown[text] = os.fsencode(idx.data(ROW_ROLE).name)
    # every name readable as an escape, and the entry behind it is the exact name
    assert shown == {escape(os.fsdecode(n)): n for n in HOSTILE}
    assert "bad\\351\\377" in shown and "fake\\nf 0644 0 0 1 2026-01-01T00:00:00Z evil" in shown
    if os.environ.get("CAIRN_SCREENSHOTS"):
        v.tree.scrollTo(parent)
        c.window.grab().save(os.path.join(os.environ["CAIRN_SCREENSHOTS"],
                                          "restore-browser-hostile-names.png"))


def test_job_log_view_shows_hostile_names_escaped(hostile, qtbot):
    m, src, job = hostile
    bridge = Bridge(m)
    try:
        dlg = JobDetailsDialog(bridge, m.jobs.get(job["id"]))
        qtbot.addWidget(dlg)
        qtbot.waitUntil(lambda: "ended with status" in dlg.log_text, timeout=5000)
        text = dlg.log_text
        lines = text.splitlines()
        assert all(shown_cleanly(line) for line in lines), text
        # one line per log entry: the socket's name did not start a line of its own
        assert len(lines) == len(m.jobs.logs(job["id"]))
        assert "sock\\033[2J\\n" in text
        if os.environ.get("CAIRN_SCREENSHOTS"):
            dlg.resize(1000, 600)
            dlg.tabs.setCurrentWidget(dlg.log_view)
            dlg.show()
            qtbot.wait(300)
            dlg.grab().save(os.path.join(os.environ["CAIRN_SCREENSHOTS"],
                                         "job-log-hostile-names.png"))
    finally:
        bridge.shutdown()
