"""The Hosts and Storage servers lists' State column and the disk pools' capacity, against
a real catalog: a host nobody listens for, a pool on a small tmpfs filled near full. The
hosts are asked in the background: the lists show "checking…" first, never wait."""

import os

import pytest

from app.master import Master
from sshd import free_port

pytestmark = pytest.mark.gui


def show(console, qtbot, name):
    w = console.window
    w.select_view(name)
    view = w.views[name]
    qtbot.waitUntil(lambda: view.loaded, timeout=5000)
    return view


def cell(view, key, column):
    m = view.model
    row = m.row_of(key)
    assert row is not None, f"{key!r} is not listed in {view.name}"
    col = [c.key for c in m.columns].index(column)
    return m.index(row, col).data()


def eventually(view, qtbot, check):
    """Refreshes the list until check() holds (the states come from a background ask)."""
    def ok():
        view.refresh()
        return check()
    qtbot.waitUntil(ok, timeout=20000)


@pytest.fixture
def site(tmp_path, small_tmpfs):
    tiny = small_tmpfs("4m")
    with open(tiny / "fill", "wb") as f:
        f.write(os.urandom(int(3.8 * (1 << 20))))
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.add_host("down", address="127.0.0.1", port=free_port(), user="nobody", check=False)
    m.create_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("tiny", server="ss1", volumes=[str(tiny)], high_water=90)
    m.create_storage_server("ss2", type="advanced-disk", host="down", check=False)
    m.create_disk_pool("far", server="ss2", volumes=["/srv/far"], check=False)
    yield m, tiny
    m.close()


def test_hosts_and_storage_servers_show_their_state(make_console, site, qtbot):
    m, _ = site
    c = make_console(m)
    v = show(c, qtbot, "hosts")
    eventually(v, qtbot, lambda: cell(v, "down", "state").startswith("not reachable ("))
    assert cell(v, "me", "state") == "reachable"
    assert cell(v, "me", "last_contact") != ""
    assert cell(v, "down", "last_contact") == ""
    s = show(c, qtbot, "storage-servers")
    eventually(s, qtbot, lambda: cell(s, "ss2", "state").startswith("not reachable ("))
    assert cell(s, "ss1", "state") == "reachable"


def test_disk_pools_show_their_capacity(make_console, site, qtbot):
    m, tiny = site
    c = make_console(m)
    v = show(c, qtbot, "disk-pools")
    eventually(v, qtbot, lambda: cell(v, "tiny", "size_bytes") != "")
    fs = os.statvfs(tiny)
    used = 100.0 * (fs.f_blocks - fs.f_bavail) / fs.f_blocks
    assert cell(v, "tiny", "used_percent") == f"{used:.0f}%" and used >= 90
    assert cell(v, "tiny", "size_bytes") == "4.0 MiB"
    assert cell(v, "far", "size_bytes") == ""
    row = v.model.row_of("far")
    col = [k.key for k in v.model.columns].index("used_percent")
    from PySide6.QtCore import Qt
    assert "not reachable" in v.model.index(row, col).data(Qt.ItemDataRole.ToolTipRole)


def test_disk_pool_properties_show_the_capacity_asked_now(make_console, site, qtbot):
    m, tiny = site
    c = make_console(m)
    v = show(c, qtbot, "disk-pools")
    qtbot.waitUntil(lambda: v.model.row_of("tiny") is not None, timeout=5000)
    assert v.select_key("tiny")
    dlg = v.object_actions._properties()
    qtbot.waitUntil(lambda: dlg.capacity_label.text() != "Looking…", timeout=10000)
    text = dlg.capacity_label.text()
    assert " used of 4.0 MiB (" in text and "free" in text
    assert "at or above the high-water mark (90%)" in text
    dlg.reject()
    assert v.select_key("far")
    dlg = v.object_actions._properties()
    qtbot.waitUntil(lambda: dlg.capacity_label.text() != "Looking…", timeout=20000)
    assert dlg.capacity_label.text().startswith("Cannot tell: ")
    dlg.reject()


def test_dashboard_shows_a_full_pool_a_host_down_and_a_failed_job_one_click_away(
        make_console, site, qtbot, tmp_path):
    m, _ = site
    m.create_storage_unit("stu1", pool="tiny")
    m.create_policy("bad", storage_unit="stu1")
    m.add_policy_client("bad", "me")
    m.add_policy_selection("bad", str(tmp_path / "no-such-dir"))
    [jid] = m.start_backup("bad")
    [job] = m.wait_for([jid], timeout=60)
    assert job["status"] not in (0, 1)
    from ui.app import first_view
    assert first_view(m) == "dashboard"
    c = make_console(m)
    v = show(c, qtbot, "dashboard")
    eventually(v, qtbot, lambda: "not reachable (" in v.sections["hosts"].text())
    warnings = v.sections["warnings"].text()
    assert "Host down is not reachable" in warnings
    eventually(v, qtbot, lambda: "Disk pool tiny is" in v.sections["warnings"].text())
    assert "1 job failed in the last 24 hours" in v.sections["warnings"].text()
    jobs = v.sections["jobs"].text()
    assert "href='jobs:failed'" in jobs and f"href='job:{jid}'" in jobs
    assert "tiny" in v.sections["pools"].text()
    # one click to the failed jobs: the activity monitor, filtered to them
    v.sections["jobs"].linkActivated.emit("jobs:failed")
    w = c.window
    assert w.current_view is w.views["activity"]
    assert w.views["activity"].state_box.currentData() == "failed"
    # and one to a job's details
    w.select_view("dashboard")
    from ui.job_dialog import JobDetailsDialog
    v.sections["jobs"].linkActivated.emit(f"job:{jid}")
    dlgs = [d for d in w.findChildren(JobDetailsDialog) if d.job_id == jid]
    assert dlgs and dlgs[0].isVisible()
    dlgs[0].close()
