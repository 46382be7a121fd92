"""The setup wizards driven as an administrator would, against a real catalog, the local
host's agent and the loopback OpenSSH server."""

import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QLabel, QWizard

from app.transport import hostkeys
from ui.bridge import Bridge
from ui.wizards import WIZARDS, make_wizard
from ui.wizards import disk_pool, storage_server

pytestmark = pytest.mark.gui

WAIT_MS = 20000


@pytest.fixture
def bridge(empty_master):
    b = Bridge(empty_master)
    yield b
    b.shutdown()


@pytest.fixture
def open_wizard(qtbot, bridge):
    def open_(kind, **preset):
        w = make_wizard(kind, bridge, **preset)
        qtbot.addWidget(w)
        w.show()
        settle(qtbot, w)
        return w
    return open_


def settle(qtbot, w):
    qtbot.waitUntil(lambda: not w.busy, timeout=WAIT_MS)


def next_enabled(w):
    return w.button(QWizard.WizardButton.NextButton).isEnabled()


def go_next(qtbot, w):
    assert next_enabled(w), w.currentPage().status.plain_text()
    qtbot.mouseClick(w.button(QWizard.WizardButton.NextButton), Qt.MouseButton.LeftButton)
    settle(qtbot, w)


def finish(qtbot, w):
    button = w.button(QWizard.WizardButton.FinishButton)
    assert button.isEnabled() and button.isVisible(), w.currentPage().status.plain_text()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def retype(qtbot, field, text):
    field.clear()
    qtbot.keyClicks(field, text)


def storage(m, tmp_path, unit=True):
    host = m.config.local_host()["name"]
    vol = tmp_path / "vol1"
    vol.mkdir()
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)], check=False)
    if unit:
        m.config.add_storage_unit("stu1", pool="dp1")
    return host


def test_every_wizard_opens_at_its_first_page_with_its_data_loaded(open_wizard, empty_master,
                                                                   tmp_path):
    storage(empty_master, tmp_path)
    for kind, cls in WIZARDS.items():
        w = open_wizard(kind)
        assert isinstance(w, cls) and not w.busy
        assert w.currentId() == w.startId()
        assert w.minimumWidth() >= 760 and w.minimumHeight() >= 540
        w.close()
    with pytest.raises(KeyError, match="choose one of"):
        make_wizard("tape-library", None)


def test_storage_server_wizard(open_wizard, empty_master, qtbot):
    host = empty_master.config.local_host()["name"]
    empty_master.create_storage_server("taken", type="advanced-disk", host=host)
    w = open_wizard("storage-server")
    made = []
    w.created.connect(lambda kind, name: made.append((kind, name)))

    types = w.type_page.buttons
    assert types["advanced-disk"].isChecked()
    assert types["dedup"].isEnabled()
    notes = [lab.text() for lab in w.type_page.findChildren(QLabel)]
    assert any(t.startswith("Backup data cut into content-defined chunks") for t in notes)
    assert not [t for t in notes if "Not available" in t]
    assert types["cloud"].isEnabled()
    assert any(t.startswith("A deduplicating pool whose containers live in an S3 bucket")
               for t in notes)
    go_next(qtbot, w)
    assert w.host_page.picker.name() == host
    assert "This machine" in w.host_page.picker.detail.text()
    go_next(qtbot, w)

    page = w.name_page
    assert page.name.text() == f"{host}-disk"
    retype(qtbot, page.name, "taken")
    assert not next_enabled(w)
    assert "A storage server named 'taken' already exists" in page.status.plain_text()
    retype(qtbot, page.name, "bad name!")
    assert not next_enabled(w) and "not valid" in page.status.plain_text()
    retype(qtbot, page.name, "ss1")
    go_next(qtbot, w)

    assert ("Type:", "advanced-disk") in w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    assert "'ss1' was created" in w.result_page.headline.text()
    finish(qtbot, w)
    assert made == [("storage-server", "ss1")]
    srv = empty_master.config.storage_server("ss1")
    assert srv["type"] == "advanced-disk" and srv["host"] == host


def test_a_planned_storage_type_is_listed_disabled_with_its_reason(open_wizard, monkeypatch):
    from plugins.storage import registry
    assert registry.PLANNED == {}, "every type the CLI contract names is shipped"
    assert storage_server.storage_types() == [
        (name, t.description, None) for name, t in registry.TYPES.items()]
    monkeypatch.setattr(registry, "PLANNED", {"tape": "planned for a later version"})
    assert storage_server.storage_types()[-1] == ("tape", "", "planned for a later version")
    assert storage_server.needs_path("tape") and not storage_server.needs_path("advanced-disk")
    w = open_wizard("storage-server")
    tape = w.type_page.buttons["tape"]
    assert not tape.isEnabled() and w.type_page.buttons["advanced-disk"].isChecked()
    notes = [lab.text() for lab in w.type_page.findChildren(QLabel)]
    assert "Not available: planned for a later version." in notes


def test_dedup_storage_server_with_encryption(open_wizard, empty_master, qtbot, tmp_path):
    host = empty_master.config.local_host()["name"]
    store = tmp_path / "gpfs" / "cairn-dedup"
    w = open_wizard("storage-server")
    w.type_page.buttons["dedup"].setChecked(True)
    go_next(qtbot, w)
    go_next(qtbot, w)

    pp = w.path_page
    assert w.currentPage() is pp and pp.title() == "Storage path and deduplication"
    assert pp.encrypted.isVisible() and pp.chunk_size.isVisible()
    assert not next_enabled(w) and "Storage path is empty" in pp.status.plain_text()
    assert pp.chunk_size.currentText() == "512 KiB (default)"
    assert [pp.chunk_size.itemData(i) for i in range(pp.chunk_size.count())] == [
        128 << 10, 256 << 10, 512 << 10, 1 << 20]
    qtbot.keyClicks(pp.path, str(store))
    pp.encrypted.setChecked(True)
    pp.chunk_size.setCurrentIndex(pp.chunk_size.findData(256 << 10))
    go_next(qtbot, w)
    assert w.name_page.name.text() == f"{host}-dedup"
    retype(qtbot, w.name_page.name, "dd1")
    go_next(qtbot, w)

    rows = dict(w.summary_page.rows())
    assert rows["Type:"] == "dedup" and rows["Storage path:"] == str(store)
    assert rows["Encryption at rest:"].startswith("yes, AES-256-GCM")
    assert rows["Chunk size:"] == "256 KiB on average (64 KiB to 1 MiB)"
    go_next(qtbot, w)
    rp = w.result_page
    assert rp.result is not None, rp.status.plain_text()
    key = empty_master.home.key_path("dd1")
    assert os.path.isfile(key) and store.is_dir(), "the master made the key and the store"
    assert "the storage path " + str(store) + " is the pool's one volume" in \
        rp.status.plain_text()
    assert [kind for kind, _ in rp.notes] == ["key"]
    assert f"Back up the encryption key {key}" in rp.notes_text()
    assert rp.note_lines[0].isVisible()
    finish(qtbot, w)
    srv = empty_master.config.storage_server("dd1")
    assert srv["type"] == "dedup" and srv["path"] == str(store)
    assert srv["options"]["encrypted"] is True
    assert (srv["options"]["min_size"], srv["options"]["avg_size"],
            srv["options"]["max_size"]) == (64 << 10, 256 << 10, 1 << 20)


def test_cloud_storage_server_with_its_bucket_and_credentials(open_wizard, empty_master,
                                                              qtbot, tmp_path, s3_server,
                                                              s3_bucket):
    host = empty_master.config.local_host()["name"]
    w = open_wizard("storage-server")
    w.type_page.buttons["cloud"].setChecked(True)
    go_next(qtbot, w)
    go_next(qtbot, w)
    pp = w.path_page
    assert pp.title() == "Cache and deduplication"
    assert pp.form.labelForField(pp.path).text() == "&Cache directory:"
    assert "Empty: /var/cache/cairn/cloud/NAME" in pp.path_note.text()
    assert next_enabled(w), "an empty cache directory takes the default"
    qtbot.keyClicks(pp.path, str(tmp_path / "cache"))
    go_next(qtbot, w)

    bp = w.bucket_page
    assert w.currentPage() is bp and not next_enabled(w)
    assert "needs an endpoint" in bp.status.plain_text()
    qtbot.keyClicks(bp.endpoint, s3_server.endpoint)
    qtbot.keyClicks(bp.bucket, s3_bucket)
    assert "Give the access key and the secret key" in bp.status.plain_text()
    loose = tmp_path / "loose.creds"
    loose.write_text(f"access_key={s3_server.access_key}\nsecret_key={s3_server.secret_key}\n")
    loose.chmod(0o644)
    bp.read_file(str(loose))
    assert "may be read by others" in bp.status.plain_text() and not next_enabled(w)
    assert bp.secret_key.text() == ""
    loose.chmod(0o600)
    bp.read_file(str(loose))
    assert bp.access_key.text() == s3_server.access_key and next_enabled(w)
    bp.cache_limit.setValue(2)
    bp.commit_in_cache.setChecked(True)
    go_next(qtbot, w)
    assert w.name_page.name.text() == f"{host}-cloud"
    retype(qtbot, w.name_page.name, "cs1")
    go_next(qtbot, w)

    rows = dict(w.summary_page.rows())
    assert rows["Type:"] == "cloud" and rows["Cache directory:"] == str(tmp_path / "cache")
    assert rows["Bucket:"] == f"{s3_bucket} at {s3_server.endpoint}"
    assert rows["Cache limit:"] == "2 GiB"
    assert rows["A backup ends:"] == "once the cache holds it, its upload queued"
    assert s3_server.secret_key not in str(w.summary_page.rows())
    go_next(qtbot, w)
    rp = w.result_page
    assert rp.result is not None, rp.status.plain_text()
    finish(qtbot, w)
    srv = empty_master.config.storage_server("cs1")
    assert srv["type"] == "cloud" and srv["options"]["bucket"] == s3_bucket
    assert srv["options"]["cache_limit"] == 2 << 30
    assert srv["options"]["commit_at"] == "cache"
    assert s3_server.secret_key not in str(srv)


def test_a_cloud_server_whose_keys_the_service_refuses_is_not_created(
        open_wizard, empty_master, qtbot, tmp_path, s3_server, s3_bucket):
    w = open_wizard("storage-server")
    w.type_page.buttons["cloud"].setChecked(True)
    go_next(qtbot, w)
    go_next(qtbot, w)
    qtbot.keyClicks(w.path_page.path, str(tmp_path / "cache"))
    go_next(qtbot, w)
    bp = w.bucket_page
    for field, text in ((bp.endpoint, s3_server.endpoint), (bp.bucket, s3_bucket),
                        (bp.access_key, s3_server.access_key), (bp.secret_key, "wrong")):
        qtbot.keyClicks(field, text)
    go_next(qtbot, w)
    go_next(qtbot, w)
    go_next(qtbot, w)
    rp = w.result_page
    qtbot.waitUntil(lambda: rp.result is not None or rp.status.kind == "error", timeout=60000)
    assert rp.result is None
    assert "refused the credentials" in rp.status.plain_text()
    assert empty_master.storage_servers() == []


def test_dedup_server_result_shows_a_path_warning_without_failing(open_wizard, empty_master,
                                                                  qtbot, tmp_path):
    from plugins.storage.dedup import master as dedup
    w = open_wizard("storage-server")
    w.type_page.buttons["dedup"].setChecked(True)
    go_next(qtbot, w)
    go_next(qtbot, w)
    qtbot.keyClicks(w.path_page.path, str(tmp_path / "store"))
    go_next(qtbot, w)
    go_next(qtbot, w)
    assert ("Encryption at rest:", "no") in w.summary_page.rows()
    assert ("Chunk size:", "512 KiB on average (128 KiB to 2 MiB)") in w.summary_page.rows()
    go_next(qtbot, w)
    rp = w.result_page
    assert rp.result is not None and rp.result["warnings"] == []
    assert rp.notes == [] and not rp.note_lines, "a local path and no key: nothing to heed"
    assert not os.path.exists(empty_master.home.key_path(rp.result["name"]))

    # The master's warning for a store on NFS, as create_storage_server returns it.
    warning = dedup.path_warning({"type": "nfs4", "class": "network",
                                  "device": "nas1:/export/backup"})
    notes = storage_server.result_notes(dict(rp.result, warnings=[warning]))
    assert notes == [("warning", f"Warning: {warning}")]
    rp.show_notes(notes)
    (line,) = rp.note_lines
    assert line.isVisible() and line.kind == "warning"
    assert "Warning: the storage path is on nfs4" in rp.notes_text()
    assert "nas1:/export/backup" in rp.notes_text()
    assert rp.status.kind == "ok", "the server was created: a warning, not an error"
    finish(qtbot, w)


def test_disk_pool_wizard_on_a_dedup_server(open_wizard, empty_master, qtbot, tmp_path):
    host = empty_master.config.local_host()["name"]
    store = tmp_path / "dedup-store"
    empty_master.create_storage_server("dd1", type="dedup", host=host, path=str(store))
    w = open_wizard("disk-pool", server="dd1")
    sp = w.server_page
    assert "a deduplicating pool in " + str(store) in sp.detail.text()
    go_next(qtbot, w)

    dp = w.dedup_page
    assert w.currentPage() is dp
    assert dp.path.text() == str(store) and dp.path.isReadOnly()
    assert "one chunk store" in dp.why.text() and "another dedup storage server" in \
        dp.why.text()
    assert dp.check_label.text().startswith("ok, writable")
    go_next(qtbot, w)
    assert w.currentPage() is w.settings_page
    retype(qtbot, w.settings_page.name, "ddp")
    go_next(qtbot, w)
    rows = dict(w.summary_page.rows())
    assert rows["Volumes:"].startswith(str(store) + "\n")
    assert "the storage path of the dedup storage server" in rows["Volumes:"]
    w.summary_page.make_unit.setChecked(False)
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    finish(qtbot, w)
    assert empty_master.config.disk_pool("ddp")["volumes"] == [str(store)]

    # A second pool on the same dedup server is refused before anything is typed.
    again = open_wizard("disk-pool", server="dd1")
    assert not next_enabled(again)
    assert "already has its disk pool 'ddp'" in again.server_page.status.plain_text()


def test_a_failed_creation_stays_open_to_go_back_and_fix(open_wizard, empty_master, qtbot,
                                                         tmp_path):
    storage(empty_master, tmp_path)
    w = open_wizard("storage-unit", pool="dp1")
    page = w.settings_page
    assert page.name.text() == "dp1-stu"
    retype(qtbot, page.name, "stu2")
    go_next(qtbot, w)
    # Someone else takes the name between the check and the creation.
    empty_master.config.add_storage_unit("stu2", pool="dp1")
    go_next(qtbot, w)
    assert w.currentPage() is w.result_page and w.result_page.result is None
    assert "already exists" in w.result_page.status.plain_text()
    assert not w.button(QWizard.WizardButton.FinishButton).isEnabled()
    assert w.button(QWizard.WizardButton.CancelButton).isVisible()
    assert w.result_page.subTitle() == "The storage unit was not created."
    back = w.button(QWizard.WizardButton.BackButton)
    assert back.isVisible() and back.isEnabled()
    qtbot.mouseClick(back, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(w.button(QWizard.WizardButton.BackButton), Qt.MouseButton.LeftButton)
    assert w.currentPage() is page
    retype(qtbot, page.name, "stu3")
    page.jobs.setValue(4)
    go_next(qtbot, w)
    go_next(qtbot, w)
    assert w.result_page.result is not None
    assert not w.button(QWizard.WizardButton.BackButton).isVisible()
    # a success has nothing left to cancel, and no longer says it is creating
    assert not w.button(QWizard.WizardButton.CancelButton).isVisible()
    assert "Creating" not in w.result_page.subTitle()
    finish(qtbot, w)
    assert empty_master.config.storage_unit("stu3")["max_concurrent_jobs"] == 4


def test_adding_a_host_over_ssh_accepts_its_key_after_showing_it(open_wizard, empty_master,
                                                                   qtbot, sshd):
    w = open_wizard("storage-server")
    go_next(qtbot, w)
    page = w.host_page
    qtbot.mouseClick(page.picker.add_button, Qt.MouseButton.LeftButton)
    dlg = page.host_dialog
    qtbot.waitUntil(lambda: not dlg._loading, timeout=WAIT_MS)
    assert not dlg.add_button.isEnabled()
    qtbot.keyClicks(dlg.name, "gpfs1")
    qtbot.keyClicks(dlg.address, sshd.host)
    dlg.port.setValue(int(sshd.port))
    qtbot.keyClicks(dlg.user, sshd.user)
    qtbot.keyClicks(dlg.key_file, str(sshd.key_file) + ".missing")
    assert not dlg.add_button.isEnabled() and "does not exist" in dlg.status.plain_text()
    retype(qtbot, dlg.key_file, str(sshd.key_file))
    assert dlg.add_button.isEnabled()

    qtbot.mouseClick(dlg.add_button, Qt.MouseButton.LeftButton)
    settle(qtbot, w)
    assert dlg.unknown_key is not None, dlg.status.plain_text()
    shown = dlg.key_text.text()
    assert sshd.host_key_fingerprint in shown and "ssh-ed25519" in shown
    assert dlg.trust_button.isVisible()
    kh = empty_master.home.known_hosts
    assert not hostkeys.find(kh, sshd.host, int(sshd.port)), "nothing trusted before accepting"
    assert "gpfs1" not in [h["name"] for h in empty_master.config.hosts()]

    qtbot.mouseClick(dlg.trust_button, Qt.MouseButton.LeftButton)
    settle(qtbot, w)
    assert dlg.result() == dlg.DialogCode.Accepted, dlg.status.plain_text()
    assert hostkeys.find(kh, sshd.host, int(sshd.port))
    assert empty_master.config.host("gpfs1")["address"] == sshd.host
    settle(qtbot, w)
    assert page.picker.name() == "gpfs1"
    assert next_enabled(w)


def test_a_host_that_cannot_be_reached_is_reported_in_the_dialog(open_wizard, qtbot,
                                                                  empty_master):
    from sshd import free_port
    w = open_wizard("policy")
    dlg = w.clients_page.add_host()
    qtbot.waitUntil(lambda: not dlg._loading, timeout=WAIT_MS)
    qtbot.keyClicks(dlg.name, "nowhere")
    qtbot.keyClicks(dlg.address, "127.0.0.1")
    dlg.port.setValue(free_port())
    qtbot.mouseClick(dlg.add_button, Qt.MouseButton.LeftButton)
    settle(qtbot, w)
    assert dlg.status.kind == "error"
    assert "The host was not added" in dlg.status.plain_text()
    assert dlg.isVisible() and dlg.add_button.isEnabled()
    assert "nowhere" not in [h["name"] for h in empty_master.config.hosts()]
    dlg.reject()


def test_disk_pool_wizard_then_its_storage_unit(open_wizard, empty_master, qtbot, tmp_path):
    storage(empty_master, tmp_path, unit=False)
    w = open_wizard("disk-pool", server="ss1")
    made = []
    w.created.connect(lambda kind, name: made.append((kind, name)))
    assert w.server_page.combo.currentText() == "ss1"
    go_next(qtbot, w)

    vp = w.volumes_page
    mounts = [vp.table.item(r, disk_pool.COL_MOUNT).text() for r in range(vp.table.rowCount())]
    assert "/" in mounts, "the host's own file systems are listed"
    assert not next_enabled(w) and "Check at least one" in vp.status.plain_text()

    missing = str(tmp_path / "nothing-here")
    qtbot.keyClicks(vp.path, missing)
    qtbot.mouseClick(vp.add_button, Qt.MouseButton.LeftButton)
    assert vp.checking or vp.timer.isActive()
    assert not next_enabled(w)
    qtbot.waitUntil(lambda: missing in vp.checks and not w.busy, timeout=WAIT_MS)
    assert not next_enabled(w)
    assert f"Volume {missing} on host" in vp.status.plain_text()
    assert "does not exist" in vp.status.plain_text()

    good = tmp_path / "gpfs-like" / "backup"
    good.mkdir(parents=True)
    vp.set_checked(missing, False)
    qtbot.keyClicks(vp.path, str(good))
    qtbot.keyClicks(vp.path, "\r")
    qtbot.waitUntil(lambda: str(good) in vp.checks and not w.busy, timeout=WAIT_MS)
    row = vp._row_of(str(good))
    assert vp.table.item(row, disk_pool.COL_CHECK).text().startswith("ok, writable")
    assert vp.table.item(row, disk_pool.COL_MOUNT).text() != "", "typed paths show their mount"
    assert vp.volumes() == [str(good)]
    go_next(qtbot, w)

    sp = w.settings_page
    assert sp.high.value() == 98 and sp.low.value() == 80
    retype(qtbot, sp.name, "dp1")
    assert "A disk pool named 'dp1' already exists" in sp.status.plain_text()
    retype(qtbot, sp.name, "p1")
    sp.low.setValue(98)
    assert not next_enabled(w) and "must be below the high-water mark" in sp.status.plain_text()
    sp.low.setValue(70)
    sp.no_limit.setChecked(False)
    sp.streams.setValue(3)
    qtbot.keyClicks(sp.comment, "GPFS scratch")
    go_next(qtbot, w)

    assert w.summary_page.make_unit.isChecked()
    assert ("Volumes:", str(good)) in w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    followed = []
    w.continued.connect(followed.append)
    finish(qtbot, w)
    assert made == [("disk-pool", "p1")]
    pool = empty_master.config.disk_pool("p1")
    assert pool["volumes"] == [str(good)] and pool["low_water"] == 70
    assert pool["max_io_streams"] == 3 and pool["comment"] == "GPFS scratch"

    unit = w.follow_up
    assert followed == [unit]
    qtbot.addWidget(unit)
    settle(qtbot, unit)
    assert unit.isVisible()
    assert unit.settings_page.pool.currentText() == "p1"
    assert unit.settings_page.name.text() == "p1-stu"
    go_next(qtbot, unit)
    go_next(qtbot, unit)
    finish(qtbot, unit)
    assert empty_master.config.storage_unit("p1-stu")["pool"] == "p1"


def test_parallel_file_systems_are_marked(open_wizard, empty_master, qtbot, tmp_path):
    storage(empty_master, tmp_path, unit=False)
    w = open_wizard("disk-pool", server="ss1")
    go_next(qtbot, w)
    vp = w.volumes_page
    gpfs = {"mount_point": "/gpfs/fs1", "type": "gpfs", "class": "parallel", "device": "fs1",
            "size": 1 << 44, "free": 1 << 43, "read_only": False, "mounted": True}
    ext4 = {"mount_point": "/", "type": "ext4", "class": "local", "device": "/dev/sda1",
            "size": 1 << 36, "free": 1 << 35, "read_only": False, "mounted": True}
    vp._loaded({"host": "h", "filesystems": [ext4, gpfs], "used": {}}, [])
    assert vp.table.item(1, disk_pool.COL_TYPE).text() == "gpfs — parallel file system"
    assert not vp.table.item(1, disk_pool.COL_TYPE).icon().isNull()
    assert "parallel" not in vp.table.item(0, disk_pool.COL_TYPE).text()
    vp.timer.stop()
    vp.path.setText("/gpfs/fs1/backup")
    vp.timer.blockSignals(True)
    vp.add_typed()
    r = vp._row_of("/gpfs/fs1/backup")
    assert vp.table.item(r, disk_pool.COL_MOUNT).text() == "/gpfs/fs1"
    assert "parallel" in vp.table.item(r, disk_pool.COL_TYPE).text()
    # Editing the directory of a mount's row keeps it on that file system.
    vp.table.item(0, disk_pool.COL_VOLUME).setText("/gpfs/fs1/other")
    assert vp.table.item(0, disk_pool.COL_MOUNT).text() == "/gpfs/fs1"
    vp.timer.blockSignals(False)
    settle(qtbot, w)


def drag(qtbot, grid, start, end):
    a = grid.cell_rect(*start).center()
    b = grid.cell_rect(*end).center()
    qtbot.mousePress(grid, Qt.MouseButton.LeftButton, pos=a)
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtWidgets import QApplication
    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(b), QPointF(grid.mapToGlobal(b)),
                       Qt.MouseButton.NoButton, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(grid, move)
    qtbot.mouseRelease(grid, Qt.MouseButton.LeftButton, pos=b)


def test_policy_wizard_with_schedule_client_and_browsed_selection(open_wizard, empty_master,
                                                                  qtbot, tmp_path):
    host = storage(empty_master, tmp_path)
    data = tmp_path / "data"
    (data / "projects").mkdir(parents=True)
    (data / "projects" / "notes.txt").write_text("x")
    w = open_wizard("policy")
    made = []
    w.created.connect(lambda kind, name: made.append((kind, name)))

    ap = w.attributes_page
    assert not next_enabled(w) and "Give the policy a name" in ap.status.plain_text()
    # stu1 is advanced-disk: its images stay plain tar files unless compression is chosen
    assert ap.compression.isEnabled() and ap.compression.currentData() == "off"
    assert not ap.compression_level.isEnabled()
    assert "Advanced-disk images stay plain tar files" in ap.compression_note.text()
    ap.compression.setCurrentIndex(ap.compression.findData("server"))
    assert ap.compression_level.isEnabled()
    assert "zstd-compressed tar files" in ap.compression_note.text()
    ap.compression.setCurrentIndex(ap.compression.findData("off"))
    assert not ap.encryption.isEnabled()
    qtbot.keyClicks(ap.name, "pol1")
    assert ap.unit.currentText() == "stu1"
    ap.priority.setValue(10)
    ap.multiple_streams.setChecked(True)
    go_next(qtbot, w)

    sp = w.schedules_page
    assert "started by hand" in sp.hint.text()
    qtbot.mouseClick(sp.add_button, Qt.MouseButton.LeftButton)
    dlg = sp.dialog
    assert list(dlg.type_buttons) == ["full", "differential", "cumulative", "catalog"]
    assert all(b.isEnabled() for b in dlg.type_buttons.values())
    assert dlg.type_buttons["full"].isChecked()
    assert "manual backups only" in dlg.windows_text.text()
    drag(qtbot, dlg.grid, (0, 22), (0, 23))      # Monday 22:00-24:00
    drag(qtbot, dlg.grid, (1, 0), (1, 3))        # Tuesday 00:00-04:00
    assert dlg.grid.windows() == [{"day": 0, "start": "22:00", "hours": 6}]
    assert "Mon 22:00 for 6 hours" in dlg.windows_text.text()
    retype(qtbot, dlg.name, "nightly")
    dlg.retention.setValue(3)
    dlg.retention_unit.setCurrentIndex(dlg.retention_unit.findData("w"))
    qtbot.mouseClick(dlg.buttons.button(QDialogButtonBox.StandardButton.Ok),
                     Qt.MouseButton.LeftButton)
    assert [s["name"] for s in sp.schedules] == ["nightly"]
    # A second schedule cannot take the same name.
    dlg2 = sp.add()
    retype(qtbot, dlg2.name, "nightly")
    assert not dlg2.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()
    assert "already has a schedule named 'nightly'" in dlg2.status.plain_text()
    dlg2.reject()
    go_next(qtbot, w)

    cp = w.clients_page
    assert not next_enabled(w) and "at least one client" in cp.status.plain_text()
    cp.set_checked(host)
    go_next(qtbot, w)

    sel = w.selections_page
    assert not next_enabled(w)
    qtbot.keyClicks(sel.path, "relative/path")
    assert "not an absolute path" in sel.status.plain_text()
    sel.path.clear()
    assert sel.client.currentText() == host
    qtbot.mouseClick(sel.browse_button, Qt.MouseButton.LeftButton)
    browser = sel.browser
    settle(qtbot, w)
    path = "/"
    for part in str(data).strip("/").split("/"):
        path = os.path.join(path, part)
        item = browser.item_for(path)
        assert item is not None, f"{path} is not listed"
        item.setExpanded(True)
        settle(qtbot, w)
    assert browser.item_for(str(data / "projects" / "notes.txt")) is None, "not opened yet"
    browser.item_for(str(data / "projects")).setSelected(True)
    qtbot.mouseClick(browser.add_button, Qt.MouseButton.LeftButton)
    assert sel.selections == [str(data / "projects")]
    go_next(qtbot, w)

    rows = dict(w.summary_page.rows())
    assert rows["Clients:"] == host and "Mon 22:00 for 6 hours" in rows["Schedules:"]
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    finish(qtbot, w)
    assert made == [("policy", "pol1")]
    pol = empty_master.config.policy("pol1")
    assert pol["clients"] == [host] and pol["selections"] == [str(data / "projects")]
    assert pol["priority"] == 10 and pol["multiple_streams"]
    (sched,) = pol["schedules"]
    assert sched["name"] == "nightly" and sched["retention"] == "3w"
    assert sched["frequency_s"] == 86400
    assert sched["windows"] == [{"day": 0, "start": "22:00", "hours": 6}]


def test_policy_wizard_stores_the_deduplication_mode(open_wizard, empty_master, qtbot,
                                                    tmp_path):
    host = storage(empty_master, tmp_path)
    empty_master.create_storage_server("dd1", type="dedup", host=host,
                                       path=str(tmp_path / "store"))
    empty_master.create_disk_pool("ddp", server="dd1", volumes=[])
    empty_master.config.add_storage_unit("dd-stu", pool="ddp")
    w = open_wizard("policy", clients=[host], storage_unit="stu1")
    ap = w.attributes_page
    assert [ap.dedup.itemText(i) for i in range(ap.dedup.count())] == [
        "On the storage server (client sends a plain stream)",
        "On the client (only new chunks cross the network)"]
    assert ap.dedup.currentData() == "server"
    assert "Matters only for storage units on deduplicating pools" in ap.dedup_note.text()
    ap.unit.setCurrentIndex(ap.unit.findText("dd-stu"))
    assert "dd-stu is on a deduplicating pool" in ap.dedup_note.text()
    assert "dedup storage server" in ap.encryption.text()
    assert ap.compression.isEnabled() and ap.compression.currentData() == "server"
    assert [ap.compression.itemData(i) for i in range(ap.compression.count())] == [
        "server", "client", "off"]
    ap.compression.setCurrentIndex(ap.compression.findData("client"))
    assert "compresses its stream in transit" in ap.compression_note.text()
    ap.dedup.setCurrentIndex(ap.dedup.findData("client"))
    assert ap.compression_note.text() == ""
    ap.compression_level.setValue(6)
    assert not ap.skip_nodump.isChecked()
    ap.skip_nodump.setChecked(True)
    qtbot.keyClicks(ap.name, "pol-dd")
    go_next(qtbot, w)
    go_next(qtbot, w)
    go_next(qtbot, w)
    sel = w.selections_page
    qtbot.keyClicks(sel.path, "/data/projects")
    qtbot.mouseClick(sel.add_button, Qt.MouseButton.LeftButton)
    go_next(qtbot, w)
    assert ("Deduplication:", "On the client (only new chunks cross the network)") in \
        w.summary_page.rows()
    assert ("Files marked nodump:", "left out") in w.summary_page.rows()
    assert ("Compression:", "On the client (before the data crosses the network), level 6") in \
        w.summary_page.rows()
    go_next(qtbot, w)
    assert w.result_page.result is not None, w.result_page.status.plain_text()
    assert w.result_page.result["dedup"] == "client"
    assert w.result_page.result["compression"] == "client"
    assert w.result_page.result["compression_level"] == 6
    finish(qtbot, w)
    pol = empty_master.config.policy("pol-dd")
    assert pol["dedup"] == "client" and pol["storage_unit"] == "dd-stu"
    assert pol["skip_nodump"] is True
    assert pol["clients"] == [host] and pol["selections"] == ["/data/projects"]


def test_browsing_a_directory_that_cannot_be_read_says_so(open_wizard, empty_master, qtbot,
                                                          tmp_path):
    host = storage(empty_master, tmp_path)
    w = open_wizard("policy", clients=[host])
    qtbot.keyClicks(w.attributes_page.name, "pol1")
    go_next(qtbot, w)
    go_next(qtbot, w)
    go_next(qtbot, w)
    browser = w.selections_page.browse()
    settle(qtbot, w)
    # A directory listed earlier that is gone by the time it is opened.
    gone = browser._make_item(browser.tree.topLevelItem(0), "gone", str(tmp_path / "gone"), "d")
    gone.setExpanded(True)
    settle(qtbot, w)
    assert browser.status.kind == "error" and "cannot list" in browser.status.plain_text()
    browser.reject()


def test_a_volume_on_the_root_file_system_or_beside_the_data_it_protects_warns(
        open_wizard, empty_master, qtbot, tmp_path, small_tmpfs):
    storage(empty_master, tmp_path, unit=False)
    host = empty_master.config.local_host()["name"]
    w = open_wizard("disk-pool", server="ss1")
    go_next(qtbot, w)
    vp = w.volumes_page
    on_root = tmp_path / "on-root"
    on_root.mkdir()
    qtbot.keyClicks(vp.path, str(on_root) + "\r")
    qtbot.waitUntil(lambda: str(on_root) in vp.checks and not w.busy, timeout=WAIT_MS)
    assert f"is on host {host}'s root file system" in vp.status.plain_text()
    assert next_enabled(w), "a warning, not a refusal"

    # a policy of this host backs up a directory of the same (non-root) file system
    disk = small_tmpfs("4m")
    (disk / "projects").mkdir()
    (disk / "pool").mkdir()
    empty_master.create_storage_unit("stu-x", pool="dp1")
    empty_master.create_policy("projects", storage_unit="stu-x", clients=[host],
                               selections=[str(disk / "projects")])
    w2 = open_wizard("disk-pool", server="ss1")
    go_next(qtbot, w2)
    vp2 = w2.volumes_page
    qtbot.keyClicks(vp2.path, str(disk / "pool") + "\r")
    qtbot.waitUntil(lambda: str(disk / "pool") in vp2.checks and not w2.busy,
                    timeout=WAIT_MS)
    text = vp2.status.plain_text()
    assert f"is on the same file system ({disk}) as data it backs up" in text, text
    assert f"{disk / 'projects'} (policy projects)" in text
    assert "root file system" not in text


def test_the_storage_server_wizard_asks_the_host_before_going_on(open_wizard, empty_master,
                                                                 qtbot):
    empty_master.config.add_host("gone", address="127.0.0.1", port=1)
    w = open_wizard("storage-server")
    go_next(qtbot, w)
    hp = w.host_page
    host = empty_master.config.local_host()["name"]
    hp.picker.combo.setCurrentIndex(hp.picker.combo.findText(host))
    settle(qtbot, w)
    assert "The host answered:" in hp.reached.text() and "Python" in hp.reached.text()
    assert next_enabled(w)
    hp.picker.combo.setCurrentIndex(hp.picker.combo.findText("gone"))
    settle(qtbot, w)
    assert not next_enabled(w)
    assert "Host gone cannot be reached" in hp.status.plain_text()
    hp.picker.combo.setCurrentIndex(hp.picker.combo.findText(host))
    assert next_enabled(w), "the answer of a host asked before is kept"


def test_the_disk_pool_wizard_opens_no_wider_than_the_screen(open_wizard, empty_master,
                                                              tmp_path):
    from PySide6.QtGui import QGuiApplication
    storage(empty_master, tmp_path, unit=False)
    w = open_wizard("disk-pool", server="ss1")
    room = QGuiApplication.primaryScreen().availableGeometry().width()
    assert w.width() <= max(room, w.minimumWidth())
    assert w.width() <= disk_pool.VOLUMES_WIDTH
