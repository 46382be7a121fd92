"""The Storage Scale page and the disk pool wizard's GPFS volumes, against a real catalog and
the local host's agent, which runs the test double of the mm commands (tests/scale_double):
the agent is a subprocess of the master and inherits CAIRN_MMFS_BIN and CAIRN_SCALE_DOUBLE."""

import json
import socket
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWizard

from ui import cluster_view
from ui.bridge import Bridge
from ui.wizards import disk_pool, make_wizard

pytestmark = pytest.mark.gui

WAIT_MS = 20000
DOUBLE_BIN = Path(__file__).resolve().parent.parent / "scale_double" / "bin"


def cluster_spec(mounts, **changes):
    """3 nodes (gpfs-2 is this host's, client-3 is down), fs1 mounted on this host's node and
    scratch (97% full) not."""
    spec = {
        "cluster": {"name": "hpc.example.com", "id": "16014213318453722105"},
        "version": "5.1.9.0 ",
        "local_node": "gpfs-2.example.com",
        "nodes": [
            {"number": 1, "name": "gpfs-1.example.com", "ip": "10.0.0.1",
             "designation": "quorumManager", "roles": "perfmon", "state": "active"},
            {"number": 2, "name": "gpfs-2.example.com", "ip": "10.0.0.2",
             "designation": "quorum", "state": "active"},
            {"number": 3, "name": "client-3.example.com", "ip": "10.0.0.3",
             "designation": "", "state": "down"},
        ],
        "filesystems": [
            {"device": "fs1", "mount_point": str(mounts / "fs1"), "block_size": 4194304,
             "size_kib": 10485760, "free_kib": 2621440, "mounted_on": ["gpfs-1", "gpfs-2"],
             "filesets": [{"name": "root", "id": 0, "path": str(mounts / "fs1")},
                          {"name": "projects", "id": 1, "path": str(mounts / "fs1/projects"),
                           "independent": True}],
             "snapshots": [{"name": "daily-1", "id": 1}]},
            {"device": "scratch", "mount_point": str(mounts / "scratch"),
             "block_size": 1048576, "size_kib": 1048576, "free_kib": 31457,
             "mounted_on": ["gpfs-1"], "filesets": [], "snapshots": []},
        ],
    }
    spec.update(changes)
    return spec


@pytest.fixture
def double(tmp_path, monkeypatch):
    """Points the agents started from now on at the double; returns a function that writes
    the cluster it serves (read again by every mm command)."""
    mounts = tmp_path / "gpfs"
    for d in ("fs1", "fs1/projects", "scratch"):
        (mounts / d).mkdir(parents=True)
    spec_file = tmp_path / "cluster.json"
    monkeypatch.setenv("CAIRN_MMFS_BIN", str(DOUBLE_BIN))
    monkeypatch.setenv("CAIRN_SCALE_DOUBLE", str(spec_file))
    monkeypatch.delenv("CAIRN_MMFS_SUDO", raising=False)

    def describe(**changes):
        spec = cluster_spec(mounts, **changes)
        spec_file.write_text(json.dumps(spec))
        return spec

    describe()
    describe.mounts = mounts
    return describe


@pytest.fixture
def scale_master(double, home):
    from app.master import Master
    m = Master(home)
    m.ensure_local_host()
    yield m
    m.close()


def open_page(make_console, m, qtbot):
    c = make_console(m)
    c.window.select_view("clusters")
    view = c.window.views["clusters"]
    qtbot.waitUntil(lambda: view.settled, timeout=WAIT_MS)
    return view


def column(model, key):
    return [c.key for c in model.columns].index(key)


def text(model, row_key, col_key, role=Qt.ItemDataRole.DisplayRole):
    return model.index(model.row_of(row_key), column(model, col_key)).data(role)


def test_cluster_page_shows_nodes_capacity_and_mount_map(make_console, scale_master, qtbot):
    view = open_page(make_console, scale_master, qtbot)
    assert view.stack.currentWidget() is view.splitter, view.message_text()
    summary = view.summary.text()
    assert "hpc.example.com" in summary and "16014213318453722105" in summary
    assert "5.1.9.0" in summary and "seen from node <b>gpfs-2</b>" in summary

    nodes = view.nodes
    assert nodes.rowCount() == 3
    assert text(nodes, "gpfs-2.example.com", "name") == "gpfs-2  (this host)"
    assert text(nodes, "client-3.example.com", "state") == "down"
    down = text(nodes, "client-3.example.com", "state", Qt.ItemDataRole.ForegroundRole)
    up = text(nodes, "gpfs-1.example.com", "state", Qt.ItemDataRole.ForegroundRole)
    assert down.color() == QColor(cluster_view.COLOURS["red"])
    assert up.color() == QColor(cluster_view.COLOURS["green"])
    assert text(nodes, "gpfs-1.example.com", "designation") == "quorum, manager"
    assert text(nodes, "gpfs-1.example.com", "roles") == "perfmon"
    assert text(nodes, "gpfs-1.example.com", "ip") == "10.0.0.1"
    assert "3 nodes: 2 active, 1 down" in view.nodes_heading.text()

    fss = view.filesystems
    assert fss.rowCount() == 2
    assert text(fss, "fs1", "size") == "10.0 GiB"
    assert text(fss, "fs1", "block_size") == "4.0 MiB"
    assert text(fss, "fs1", "inodes") == "4,038 of 1,000,000"
    assert text(fss, "fs1", "filesets") == "2" and text(fss, "fs1", "snapshots") == "1"
    assert "7.5 GiB used of 10.0 GiB (75.0%), 2.5 GiB free" == text(
        fss, "fs1", "capacity", Qt.ItemDataRole.ToolTipRole)
    assert text(fss, "fs1", "notes") == ""
    assert text(fss, "scratch", "notes") == "not mounted on gpfs-2 (this host)"
    assert "97% full" in text(fss, "scratch", "device", Qt.ItemDataRole.ToolTipRole)

    # The capacity is painted: the nearly full file system's bar is red.
    table = view.fs_table
    row = view.fs_proxy.mapFromSource(fss.index(fss.row_of("scratch"), 0)).row()
    cell = table.visualRect(view.fs_proxy.index(row, cluster_view.CAPACITY_COLUMN))
    img = table.viewport().grab(cell).toImage()
    red = QColor(cluster_view.COLOURS["red"]).rgb()
    assert any(img.pixel(x, img.height() // 2) == red for x in range(img.width()))

    # The mount map: file systems by nodes, this host's column marked, scratch flagged.
    mm = view.mounts
    heads = [mm.horizontalHeaderItem(c).text() for c in range(mm.columnCount())]
    assert heads == ["gpfs-1", "gpfs-2", "client-3"]
    assert mm.horizontalHeaderItem(1).font().bold()
    assert not mm.horizontalHeaderItem(0).font().bold()
    rows = [mm.verticalHeaderItem(r).text() for r in range(mm.rowCount())]
    assert rows == ["fs1", "scratch"]
    assert [mm.item(0, c).text() for c in range(3)] == ["RW", "RW", ""]
    assert [mm.item(1, c).text() for c in range(3)] == ["RW", "", ""]
    assert "not mounted on gpfs-2 (this host)" in mm.verticalHeaderItem(1).toolTip()
    assert not mm.verticalHeaderItem(1).icon().isNull()
    assert mm.verticalHeaderItem(0).icon().isNull()

    # The file system selected shows its filesets and snapshots.
    assert view.select_filesystem("fs1")
    assert [view.filesets.row_dict(r)["name"] for r in range(view.filesets.rowCount())] \
        == ["root", "projects"]
    assert view.snapshots.rowCount() == 1 and "fs1" in view.snapshots_heading.text()
    assert view.select_filesystem("scratch")
    assert view.filesets.rowCount() == 0 and view.snapshots.rowCount() == 0


def test_the_cluster_is_read_again_on_refresh_only(make_console, scale_master, double, qtbot):
    view = open_page(make_console, scale_master, qtbot)
    assert view.due() is False, "the main window's timer never re-reads the cluster"
    double(cluster={"name": "renamed.example.com", "id": "1"})
    # Showing the page again lists the hosts but keeps the cluster already read.
    assert view.refresh()
    qtbot.waitUntil(lambda: view.settled, timeout=WAIT_MS)
    assert "hpc.example.com" in view.summary.text()
    qtbot.mouseClick(view.refresh_button, Qt.MouseButton.LeftButton)
    assert not view.refresh_button.isEnabled() and view.busy_bar.isVisible()
    assert "Reading the cluster" in view.summary.text()
    qtbot.waitUntil(lambda: view.settled, timeout=WAIT_MS)
    assert "renamed.example.com" in view.summary.text()
    assert view.refresh_button.isEnabled()


@pytest.mark.parametrize("failure, title, hint", [
    ("daemon_down", "The Storage Scale daemon is not running on host", "mmstartup"),
    ("permission_denied", "may not read the Storage Scale cluster", "NOPASSWD"),
    ("not_in_cluster", "is not a node of a Storage Scale cluster", "mmaddnode"),
])
def test_a_cluster_that_cannot_be_read_shows_why_and_what_to_do(
        make_console, scale_master, double, qtbot, failure, title, hint):
    double(failure=failure)
    view = open_page(make_console, scale_master, qtbot)
    assert view.stack.currentWidget() is view.message
    shown = view.message_text()
    assert title in shown and hint in shown, shown
    assert "What to do:" in shown
    assert view.nodes.rowCount() == 0


def test_a_host_without_storage_scale_and_an_unreachable_one(
        make_console, scale_master, monkeypatch, tmp_path, qtbot):
    empty = tmp_path / "no-mm"
    empty.mkdir()
    monkeypatch.setenv("CAIRN_MMFS_BIN", str(empty))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scale_master.config.add_host("offline", address="127.0.0.1", port=port)
    local = scale_master.config.local_host()["name"]
    view = open_page(make_console, scale_master, qtbot)
    view.select_host(local)
    qtbot.waitUntil(lambda: view.settled and view.result is not None, timeout=WAIT_MS)
    assert f"No Storage Scale on host {local}" in view.message_text()
    assert "CAIRN_MMFS_BIN" in view.message_text()

    view.select_host("offline")
    qtbot.waitUntil(lambda: view.settled and view.error is not None, timeout=WAIT_MS)
    assert "Host offline could not be probed" in view.message_text()

    # Another host chosen while one is read: its answer is not shown, the new host is read.
    qtbot.mouseClick(view.refresh_button, Qt.MouseButton.LeftButton)
    view.select_host(local)
    assert view._probing == "offline"
    qtbot.waitUntil(lambda: view.settled, timeout=WAIT_MS)
    assert view.result["host"] == local and view.error is None
    assert f"No Storage Scale on host {local}" in view.message_text()
    view.select_host("offline")
    qtbot.waitUntil(lambda: view.settled and view.error is not None, timeout=WAIT_MS)

    # The choice of host is remembered with the page's layout.
    settings = QSettings("Cairn", "console-test")
    view.save_state(settings)
    assert settings.value("views/clusters/host") == "offline"
    settings.setValue("views/clusters/host", local)
    fresh = cluster_view.ClusterView(view.bridge)
    qtbot.addWidget(fresh)
    fresh.restore_state(settings)
    fresh.refresh()
    qtbot.waitUntil(lambda: fresh.settled, timeout=WAIT_MS)
    assert fresh.host() == local and fresh.result["host"] == local


def test_mount_map_warns_where_a_storage_servers_node_lacks_its_pools_file_system(
        make_console, scale_master, double, qtbot):
    """Storage servers on several hosts write to the cluster's file systems: a host's node
    that has not mounted the file system its pool is on is flagged, in the mount map (its
    cell, the row's header) and in the file systems' notes."""
    m, mounts = scale_master, double.mounts
    local = m.config.local_host()["name"]
    m.config.add_host("media-1", address="gpfs-1.example.com")
    m.config.add_host("media-3", address="10.0.0.3")
    m.config.add_host("media-9", address="media-9.example.com")
    for server, host, volume in (("ss-local", local, "fs1/cairn/local"),
                                 ("ss1", "media-1", "scratch/cairn/media-1"),
                                 ("ss3", "media-3", "fs1/cairn/media-3"),
                                 ("ss9", "media-9", "fs1/cairn/media-9")):
        m.config.add_storage_server(server, type="advanced-disk", host=host)
        m.config.add_disk_pool(f"dp-{host}", server=server, volumes=[str(mounts / volume)])
    view = open_page(make_console, m, qtbot)
    view.select_host(local)   # the others are not reachable: only named
    qtbot.waitUntil(lambda: view.settled and (view.result or {}).get("host") == local,
                    timeout=WAIT_MS)
    assert view.stack.currentWidget() is view.splitter, view.message_text()

    mm = view.mounts
    assert [mm.item(0, c).text() for c in range(3)] == ["RW", "RW", "missing"]
    assert [mm.item(1, c).text() for c in range(3)] == ["RW", "", ""]
    missing = mm.item(0, 2)
    assert not missing.icon().isNull()
    assert missing.background().color().rgb() == QColor(cluster_view.COLOURS["amber"]).rgb()
    assert ("fs1 is not mounted on client-3, although a disk pool there is on it: mount it "
            "(mmmount fs1 -N client-3) before backups run") in missing.toolTip()
    assert f"host media-3: storage server ss3, disk pool dp-media-3 ({mounts}/fs1/cairn/" \
           "media-3)" in missing.toolTip()
    assert "host media-1: storage server ss1" in mm.item(1, 0).toolTip()
    assert "disk pool dp-" + local in mm.item(0, 1).toolTip()
    flag = ("not mounted on client-3, the node of host media-3, where storage server ss3 "
            "writes disk pool dp-media-3")
    head = mm.verticalHeaderItem(0).toolTip()
    assert flag in head and not mm.verticalHeaderItem(0).icon().isNull()
    assert ("host media-9 has a disk pool on fs1 but is not matched to a node of the "
            "cluster") in head
    assert text(view.filesystems, "fs1", "notes") == flag
    # scratch: its only storage server's node (gpfs-1) has it; this host does not
    assert text(view.filesystems, "scratch", "notes") == "not mounted on gpfs-2 (this host)"

    # mounted on client-3 now: nothing to flag
    fss = cluster_spec(mounts)["filesystems"]
    fss[0]["mounted_on"].append("client-3")
    double(filesystems=fss)
    view.probe()
    qtbot.waitUntil(lambda: view.settled, timeout=WAIT_MS)
    assert [mm.item(0, c).text() for c in range(3)] == ["RW", "RW", "RW"]
    assert text(view.filesystems, "fs1", "notes") == ""


# ---- the disk pool wizard ----------------------------------------------------------------------

@pytest.fixture
def volumes_page(scale_master, qtbot):
    host = scale_master.config.local_host()["name"]
    scale_master.create_storage_server("ss1", type="advanced-disk", host=host)
    bridge = Bridge(scale_master)
    w = make_wizard("disk-pool", bridge, server="ss1")
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)
    w.next()
    qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)
    yield w, w.volumes_page
    w.close()
    bridge.shutdown()


def test_wizard_refuses_another_pools_directory_on_the_host_or_the_shared_file_system(
        scale_master, double, tmp_path, qtbot):
    m = scale_master
    local = m.config.local_host()["name"]
    m.config.add_host("media-1", address="gpfs-1.example.com")
    for server, host, volume in (("ss-m1", "media-1", double.mounts / "fs1/cairn/media-1"),
                                 ("ss-m1b", "media-1", tmp_path / "m1-own"),
                                 ("ss-other", local, tmp_path / "local-pool")):
        m.config.add_storage_server(server, type="advanced-disk", host=host)
        m.config.add_disk_pool(f"dp-{server[3:]}", server=server, volumes=[str(volume)])
    m.create_storage_server("ss1", type="advanced-disk", host=local)
    bridge = Bridge(m)
    w = make_wizard("disk-pool", bridge, server="ss1")
    qtbot.addWidget(w)
    try:
        w.show()
        qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)
        w.next()
        qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)
        vp = w.volumes_page
        inside = double.mounts / "fs1/cairn/media-1/x"
        vp.path.setText(str(inside))
        vp.add_typed()
        assert vp.problem() == (
            f"Volume {inside} is inside volume {double.mounts}/fs1/cairn/media-1 of disk pool "
            "'dp-m1' on host media-1, on the same shared file system: give each pool its own "
            "directory beside the others'.")
        assert not w.button(QWizard.WizardButton.NextButton).isEnabled()
        vp.set_checked(str(inside), False)
        vp.path.setText(str(tmp_path / "local-pool"))
        vp.add_typed()
        assert vp.problem().startswith(f"Volume {tmp_path}/local-pool is the same directory as "
                                       f"volume {tmp_path}/local-pool of disk pool 'dp-other':")
        # another host's directory on its own disk is another directory
        assert vp.overlap(str(tmp_path / "m1-own")) is None
        assert vp.overlap(str(double.mounts / "fs1/cairn/media-2")) is None
    finally:
        w.close()
        bridge.shutdown()


def cell_text(vp, path, col):
    return vp.table.item(vp._row_of(path), col).text()


def wait_checked(qtbot, w, vp, path):
    qtbot.waitUntil(lambda: path in vp.checks and not w.busy and not vp.timer.isActive(),
                    timeout=WAIT_MS)


def test_wizard_marks_gpfs_volumes_and_warns_about_the_unmounted_one(volumes_page, double,
                                                                     qtbot):
    w, vp = volumes_page
    fs1, scratch = str(double.mounts / "fs1"), str(double.mounts / "scratch")
    assert vp._row_of(fs1) is not None and vp._row_of(scratch) is not None, \
        "the cluster's file systems are listed although not in the host's mount table"
    assert cell_text(vp, fs1, disk_pool.COL_TYPE) == "GPFS fs1 — Storage Scale"
    assert cell_text(vp, scratch, disk_pool.COL_TYPE) == "GPFS scratch — Storage Scale"
    assert cell_text(vp, scratch, disk_pool.COL_MOUNTED) == "no — not mounted on node gpfs-2"
    assert cell_text(vp, "/", disk_pool.COL_TYPE) != "" and \
        "GPFS" not in cell_text(vp, "/", disk_pool.COL_TYPE)
    assert "node gpfs-2 of the Storage Scale cluster hpc.example.com" in \
        vp.cluster_note.text()

    # fs1 is mounted on the storage server's node: no warning.
    vp.set_checked(fs1)
    wait_checked(qtbot, w, vp, fs1)
    assert vp.status.kind is None, vp.status.plain_text()
    assert w.button(QWizard.WizardButton.NextButton).isEnabled()

    # scratch is not: a warning with the command to mount it; Next stays enabled.
    vp.set_checked(scratch)
    wait_checked(qtbot, w, vp, scratch)
    assert vp.status.kind == "warning"
    assert ("scratch is not mounted on gpfs-2 (the storage server's node): mount it there "
            "(mmmount scratch -N gpfs-2) before using it for backups") \
        in vp.status.plain_text()
    assert "fs1" not in vp.status.plain_text()
    assert w.button(QWizard.WizardButton.NextButton).isEnabled()

    # A directory typed below scratch's mount point warns the same way.
    vp.set_checked(scratch, False)
    assert vp.status.kind is None
    below = double.mounts / "scratch" / "backup"
    below.mkdir()
    vp.path.setText(str(below))
    vp.add_typed()
    assert cell_text(vp, str(below), disk_pool.COL_TYPE) == "GPFS scratch — Storage Scale"
    wait_checked(qtbot, w, vp, str(below))
    assert vp.status.kind == "warning" and "mmmount scratch -N gpfs-2" in \
        vp.status.plain_text()


def test_wizard_volumes_without_a_readable_cluster(volumes_page, double, qtbot):
    w, vp = volumes_page
    double(failure="daemon_down")
    vp.reload()
    qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)
    assert vp._row_of(str(double.mounts / "fs1")) is None
    assert not vp.cluster_note.isVisible()
    assert all("GPFS" not in vp.table.item(r, disk_pool.COL_TYPE).text()
               for r in range(vp.table.rowCount()))
    assert vp.table.item(0, disk_pool.COL_VOLUME).data(disk_pool.FS_ROLE) is not None
