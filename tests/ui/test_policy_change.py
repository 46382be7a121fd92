"""A policy changed from its Properties on the policy wizard's pages: a schedule's retention,
a selection removed and another added, an exclude; the catalog follows, the Properties show
it, and the next real backup on this host follows the edit."""

import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QWizard

from app import status as st
from app.timeutil import parse_iso
from ui.bridge import Bridge
from ui.properties import PropertiesDialog

pytestmark = pytest.mark.gui
WAIT_MS = 20000


@pytest.fixture
def bridge(empty_master):
    b = Bridge(empty_master)
    yield b
    b.shutdown()


def click(qtbot, widget):
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def settle(qtbot, w):
    qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)


def go_next(qtbot, w):
    button = w.button(QWizard.WizardButton.NextButton)
    assert button.isEnabled(), w.currentPage().status.plain_text()
    click(qtbot, button)
    settle(qtbot, w)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def tree(empty_master, tmp_path):
    """Directories a, b and c under data/, a pool, and policy p backing up a and b."""
    m = empty_master
    host = m.config.local_host()["name"]
    a, b, c = (str(tmp_path / "data" / x) for x in "abc")
    write(f"{a}/keep.txt", b"keep")
    write(f"{a}/scratch.tmp", b"scratch")
    write(f"{b}/old.txt", b"old")
    write(f"{c}/new.txt", b"new")
    (tmp_path / "pool").mkdir()
    m.create_storage_server("ss", type="advanced-disk", host=host)
    m.create_disk_pool("dp", server="ss", volumes=[str(tmp_path / "pool")])
    m.config.add_storage_unit("stu", pool="dp")
    m.create_policy("p", storage_unit="stu", clients=[host], selections=[a, b],
                    schedules=[{"name": "weekly", "type": "full", "retention": "2w"}])
    return host, a, b, c


def test_policy_lists_changed_in_properties_and_the_next_backup_follows(
        qtbot, bridge, empty_master, tmp_path, tree):
    m = empty_master
    host, a, b, c = tree
    dlg = PropertiesDialog(bridge, "policy", m.policy("p"))
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.read_only["excludes"].text() == "—"
    click(qtbot, dlg.change_button)
    w = dlg.change_wizard
    settle(qtbot, w)

    sp = w.schedules_page
    assert [s["name"] for s in sp.schedules] == ["weekly"] and sp.list.count() == 1
    sp.list.setCurrentRow(0)
    click(qtbot, sp.edit_button)
    sd = sp.dialog
    sd.retention.setValue(3)
    sd.retention_unit.setCurrentIndex(sd.retention_unit.findData("d"))
    click(qtbot, sd.buttons.button(QDialogButtonBox.StandardButton.Ok))
    go_next(qtbot, w)

    assert w.clients_page.clients() == [host]
    go_next(qtbot, w)

    sel = w.selections_page
    assert sel.selections == [a, b]
    assert sel.warnings.isHidden()
    # the pages warn about selections the backups leave out: a pseudo file system, a pool
    for path, said in (("/proc", "/proc is a pseudo file system"),
                       (str(tmp_path), f"{tmp_path} holds {tmp_path / 'pool'}/cairn-images "
                                       "(the images of disk pool 'dp'")):
        qtbot.keyClicks(sel.path, path)
        click(qtbot, sel.add_button)
        qtbot.waitUntil(lambda: not sel.warnings.isHidden(), timeout=WAIT_MS)
        assert said in sel.warnings.text()
        if os.environ.get("CAIRN_SHOT_DIR"):
            w.grab().save(os.path.join(os.environ["CAIRN_SHOT_DIR"], "selection-warning.png"))
        sel.list.setCurrentRow(2)
        click(qtbot, sel.remove_button)
        assert sel.warnings.isHidden()
    sel.list.setCurrentRow(1)
    click(qtbot, sel.remove_button)
    qtbot.keyClicks(sel.path, c)
    click(qtbot, sel.add_button)
    assert sel.selections == [a, c]
    go_next(qtbot, w)

    ex = w.excludes_page
    qtbot.keyClicks(ex.pattern, "a/b")
    assert "neither a file name pattern" in ex.status.plain_text()
    assert not w.button(QWizard.WizardButton.NextButton).isEnabled()
    ex.pattern.clear()
    qtbot.keyClicks(ex.pattern, "*.tmp")
    assert [ex.client.itemText(i) for i in range(ex.client.count())] == ["every client", host]
    click(qtbot, ex.add_button)
    assert ex.excludes == [{"pattern": "*.tmp", "client": None}]
    shot = os.environ.get("CAIRN_SHOT_DIR")      # screenshots to look at, when asked
    if shot:
        w.grab().save(os.path.join(shot, "policy-change-excludes.png"))
    go_next(qtbot, w)

    rows = dict(w.summary_page.rows())
    assert rows["Backup selections:"] == f"{a}\n{c}\n(was: {a}\n{b})"
    assert rows["Clients:"] == host
    assert rows["Excludes:"] == "*.tmp\n(was: none)"
    assert "kept 3 days" in rows["Schedules:"] and "(was:" in rows["Schedules:"]
    if shot:
        w.grab().save(os.path.join(shot, "policy-change-summary.png"))
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    assert "were saved" in w.result_page.headline.text()
    assert w.result_page.subTitle() == "The changes are in the catalog."
    click(qtbot, w.button(QWizard.WizardButton.FinishButton))

    pol = m.policy("p")
    assert pol["selections"] == [a, c] and pol["excludes"] == ["*.tmp"]
    assert pol["schedules"][0]["retention"] == "3d"
    qtbot.waitUntil(lambda: c in dlg.read_only["selections"].text(), timeout=WAIT_MS)
    assert b not in dlg.read_only["selections"].text()
    assert dlg.read_only["excludes"].text() == "*.tmp"
    assert "kept 3 days" in dlg.read_only["schedules"].text()
    if shot:
        dlg.grab().save(os.path.join(shot, "policy-properties.png"))

    # the next backup follows: c and not b, no *.tmp, kept 3 days
    [job] = m.wait_for(m.start_backup("p"))
    assert job["status"] == st.OK
    names = {x["name"] for x in m.browse(job["image_id"], a)["entries"]}
    assert names == {"keep.txt"}
    top = {x["name"] for x in m.browse(job["image_id"], str(tmp_path / "data"))["entries"]}
    assert top == {"a", "c"}
    img = m.image(job["image_id"])
    assert abs(parse_iso(img["expires"]) - parse_iso(img["created"]) - 3 * 86400) <= 2
