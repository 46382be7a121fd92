"""The console on a master over SSH (real widgets, the loopback sshd): the title and the status
bar name the master, its data shows, a dropped connection is shown and made again without
losing the window's state; and the console's side imports nothing POSIX-only."""

import os
import subprocess
import sys

import pytest

from app.master import Master
from clihelp import ROOT


@pytest.fixture
def remote_master(sshd, tmp_path):
    from app.remote.client import RemoteMaster
    home = tmp_path / "master"
    m = Master(str(home))
    m.add_host("me", local=True)
    m.close()
    serve = (f"cd {ROOT} && exec {sys.executable} -m app master serve --stdio --home {home} "
             "--user admin")
    rm = RemoteMaster(f"{sshd.user}@{sshd.host}:{sshd.port}", identity=sshd.key_file,
                      trust_key=True, command=serve,
                      known_hosts=str(tmp_path / "desktop" / "known_hosts"))
    yield rm
    rm.close()


def test_the_console_on_a_remote_master_survives_a_dropped_connection(
        make_console, remote_master, qtbot, sshd):
    rm = remote_master
    c = make_console(rm)
    w = c.window
    assert rm.where in w.windowTitle()
    assert w.nav.topLevelItem(0).text(0) == f"Master {rm.where}"
    w.select_view("hosts")
    view = w.current_view
    qtbot.waitUntil(lambda: view.loaded and view.model.rowCount() == 1, timeout=10000)
    w.refresh_status()
    qtbot.waitUntil(lambda: w.master_label.text() == f"Master: {rm.where}", timeout=10000)
    assert "working as Cairn user" in w.master_label.toolTip()
    assert rm.batch([("images", ("me",)), ("host_list",)])[0] == []
    logins = sshd.accepted_logins()
    # the connection drops, and the master cannot be started again for a while
    command, rm.command = rm.command, "exit 3"
    rm._ssh._t.close()
    qtbot.waitUntil(lambda: "retrying" in w.master_label.text(), timeout=10000)
    assert "was lost" in w.master_label.text()
    # it can again: the next try connects, and the window is as it was
    rm.command = command
    qtbot.waitUntil(lambda: w.master_label.text() == f"Master: {rm.where}", timeout=15000)
    assert sshd.accepted_logins() > logins
    assert w.current_view is view and view.model.rowCount() == 1
    assert not c.dispatcher_thread   # a remote master's jobs run on its machine


def test_an_unknown_master_key_is_trusted_when_the_user_confirms_it(
        sshd, tmp_path, monkeypatch, qapp):
    from app.errors import HostKeyUnknown
    from ui import remote
    home = tmp_path / "desktop"
    serve = (f"cd {ROOT} && exec {sys.executable} -m app master serve --stdio --home "
             f"{tmp_path / 'master'} --user admin")
    shown = []
    where = f"{sshd.user}@{sshd.host}:{sshd.port}"

    def answer(yes):
        def confirm(_where, e):
            shown.append(e.fingerprint)
            return yes
        return confirm
    monkeypatch.setattr(remote, "confirm_key", answer(False))
    with pytest.raises(HostKeyUnknown):
        remote.open_master(str(home), where, identity=sshd.key_file, command=serve)
    assert shown == [sshd.host_key_fingerprint]
    assert not (home / "known_hosts").exists()
    monkeypatch.setattr(remote, "confirm_key", answer(True))
    m = remote.open_master(str(home), where, identity=sshd.key_file, command=serve)
    try:
        assert m.host_list() == [] and m.cairn_user == ("admin", "admin")
        assert sshd.host_public_key_line in (home / "known_hosts").read_text()
        assert remote.recent()[0] == m.where
        # remembered with how it was reached, for File ▸ Open a master…
        assert remote.options(m.where) == (os.path.abspath(sshd.key_file), serve)
    finally:
        m.close()


def test_the_restore_browser_over_ssh_shows_a_first_page_then_the_rest(
        remote_master, qtbot, monkeypatch, tmp_path):
    """A directory comes in two parts from a remote master (the first rows at once): the
    tree ends up with every entry, in its order, directories first."""
    import json
    import time
    from app.catalog_index import IndexWriter
    from ui import file_tree
    from ui.bridge import Bridge
    monkeypatch.setattr(file_tree, "FIRST_PAGE", 2)
    monkeypatch.setattr(file_tree.ImageFilesModel, "BATCH", 2)
    m = Master(remote_master.hello["home"])
    names = ["B.txt", "a.txt", "c.txt", "sub"]
    rows = [["/d", "d", 0o755, 0, 0, 0, 0, 0, 512, "", ""]]
    rows += [[f"/d/{n}", "d" if n == "sub" else "f", 0o644, 0, 0, 1, 0, 0, 512, "", ""]
             for n in sorted(names)]
    w = IndexWriter(m.home.index_path("img1"))
    w.add_rows(rows)
    w.close()
    with m.db.tx() as c:
        c.execute("INSERT INTO images(id, client, policy, schedule, schedule_type, created, "
                  "bytes, files, storage_unit, pool, storage_host, path, image_bytes, "
                  "selections, warnings) VALUES ('img1','me','p','s','full',?,0,4,'u','p',"
                  "'me','/x',0,?,0)", (time.strftime("%Y-%m-%dT%H:%M:%SZ"), json.dumps(["/d"])))
    m.close()
    bridge = Bridge(remote_master)
    try:
        model = file_tree.ImageFilesModel(bridge)
        model.set_image("img1")
        model.fetchMore(file_tree.QModelIndex())
        qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=10000)
        d = model.index(0, 0)
        model.fetchMore(d)
        qtbot.waitUntil(lambda: model.rowCount(d) == 2, timeout=10000)

        def all_there():
            model.fetchMore(d)
            return model.rowCount(d) == 4
        qtbot.waitUntil(all_there, timeout=10000)
        assert [model.index(i, 0, d).data() for i in range(4)] == \
            ["sub", "a.txt", "B.txt", "c.txt"]
    finally:
        bridge.shutdown()


def test_file_open_a_master_starts_a_console_on_it(console, monkeypatch, tmp_path):
    """With the SSH key and the command given, remembered with the master and filled in
    again when it is chosen among the recent ones; a bad name or a missing key file is said
    in the dialog, which stays open."""
    from ui import remote
    started = []
    monkeypatch.setattr(remote.QProcess, "startDetached",
                        lambda prog, args: started.append([prog, *args]))
    key = tmp_path / "id_backup1"
    key.write_text("a key\n")
    w = console.window
    dlg = w.open_other_master()
    assert dlg.isVisible() and dlg.master.currentText() == ""
    dlg.master.setEditText("admin@")          # no master name: said, nothing started
    dlg.open_button.click()
    assert dlg.isVisible() and "is not [USER@]HOST[:PORT]" in dlg.error.text()
    dlg.master.setEditText("admin@backup1:2222")
    dlg.identity.setText(str(tmp_path / "nokey"))
    dlg.open_button.click()
    assert dlg.isVisible() and "There is no key file" in dlg.error.text() and not started
    dlg.identity.setText(str(key))
    dlg.command.setText("/opt/cairn/cairn master serve --stdio")
    dlg.open_button.click()
    assert not dlg.isVisible()
    assert started == [remote.console_command("admin@backup1:2222", str(key),
                                              "/opt/cairn/cairn master serve --stdio")]
    assert started[0][-7:] == ["console", "--master", "admin@backup1:2222", "--identity",
                               str(key), "--master-command",
                               "/opt/cairn/cairn master serve --stdio"]
    # the console opened remembers them with the master (open_master, once connected)
    remote.remember("admin@backup1:2222", identity=str(key),
                    command="/opt/cairn/cairn master serve --stdio")
    remote.remember("ops@backup2")
    dlg = w.open_other_master()
    assert [dlg.master.itemText(i) for i in range(dlg.master.count())] == \
        ["ops@backup2", "admin@backup1:2222"]
    assert dlg.identity.text() == "" and dlg.command.text() == ""
    dlg.master.setCurrentIndex(1)
    assert dlg.identity.text() == str(key)
    assert dlg.command.text() == "/opt/cairn/cairn master serve --stdio"
    dlg.reject()                              # canceled: nothing started
    assert len(started) == 1
    # the command line of the console opened takes them
    from app.cli import build_parser
    args = build_parser("console").parse_args(started[0][started[0].index("console"):])
    assert (args.master, args.identity, args.master_command) == \
        ("admin@backup1:2222", str(key), "/opt/cairn/cairn master serve --stdio")


def test_each_wizard_step_that_reads_several_lists_is_one_round_trip(remote_master,
                                                                     tmp_path):
    from ui.wizards import disk_pool, lifecycle, policy, storage_unit, stugroup
    rm = remote_master
    vol = tmp_path / "vol"
    vol.mkdir()
    m = Master(rm.hello["home"])
    try:
        m.create_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)], check=False)
        m.config.add_storage_unit("stu1", pool="dp1")
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", str(tmp_path / "data"))
    finally:
        m.close()
    trips, request = [], rm._request
    rm._request = lambda msg, cancel=None: (trips.append(msg), request(msg, cancel))[1]
    for step, check in (
            (lambda m: disk_pool._load_volumes(m, "ss1", "me"),
             lambda r: r["host"] == "me" and r["used"] == {str(vol): "dp1"}
             and r["protected"] == [("p1", str(tmp_path / "data"))] and r["filesystems"]),
            (storage_unit._load_lists,
             lambda r: [p["name"] for p in r[0]] == ["dp1"] and r[1] == ["stu1"]),
            (policy._load_lists, lambda r: [u["name"] for u in r[0]] == ["stu1"]
             and r[1] == ["p1"] and r[2] == set()),
            (lifecycle._load_lists, lambda r: [u["name"] for u in r[0]] == ["stu1"]),
            (stugroup._load_lists, lambda r: r[1] == [])):
        trips.clear()
        result = step(rm)
        assert len(trips) == 1, [t.get("method") or t.get("batch") for t in trips]
        assert check(result), result
    # the server's host as the server page knew it is no longer its host: probed again
    trips.clear()
    assert disk_pool._load_volumes(rm, "ss1", "elsewhere")["host"] == "me"
    assert [t.get("method") for t in trips] == [None, "probe_host"]


def test_the_console_side_imports_nothing_posix_only():
    code = ("import sys\n"
            "for n in ('fcntl', 'pwd', 'grp', 'termios'):\n"
            "    sys.modules[n] = None\n"
            "import app.remote.client, ui.remote, ui.app, ui.main_window\n"
            "from app.transport import hostkeys\n"
            "print('imported')\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"), timeout=120)
    assert p.stdout.strip() == "imported", p.stderr


def requests_of(rm):
    """The requests a RemoteMaster sends from now on (each one round trip, a stream's
    opening included), as the methods they name."""
    sent, request, subscribe = [], rm._request, type(rm).subscribe

    def counted(msg, cancel=None):
        sent.extend([c["method"] for c in msg["batch"]] if "batch" in msg else [msg["method"]])
        return request(msg, cancel)
    rm._request = counted
    rm.subscribe = lambda kind, **kw: (sent.append("subscribe:" + kind),
                                       subscribe(rm, kind, **kw))[1]
    return sent


def test_the_activity_monitor_on_a_remote_master_follows_the_pushed_job_changes(
        make_console, remote_master, qtbot):
    """No read on the clock: the master pushes each job as it changes, the table shows it,
    and the bridge asks for nothing but the status bar's reads meanwhile."""
    from app import status as st
    rm = remote_master
    sent = requests_of(rm)
    c = make_console(rm)
    w = c.window
    w.select_view("activity")
    view = w.current_view
    qtbot.waitUntil(lambda: view.loaded, timeout=10000)
    assert view.stream is not None and view.stream.opened == 1
    m = Master(rm.hello["home"])
    try:
        with m.db.tx() as tx:   # claimed at once: no dispatcher of the master's runs it
            jid = m.jobs.create("backup", client="me", policy="p", schedule="s", c=tx)
            m.jobs.claim(jid, "test", c=tx)
        qtbot.waitUntil(lambda: view.model.row_of(jid) is not None, timeout=10000)
        assert view.model.counts["active"] == 1
        m.jobs.progress(jid, bytes=5 << 20, files=3, rate=1 << 20)
        m.jobs.finish(jid, st.OK)
        qtbot.waitUntil(lambda: view.model.counts["done"] == 1, timeout=10000)
    finally:
        m.close()
    qtbot.wait(2500)        # the window's clock ticks on: the page is never due
    assert not view.due() and view.stream.opened == 1 and view.stream.events >= 3
    assert "job_changes" not in sent and "throughput" not in sent
    assert sent.count("subscribe:job_changes") == 1
    # the connection drops: the stream is opened again once it is back, from where the
    # table was, and what changed meanwhile shows
    rm._ssh._t.close()
    m = Master(rm.hello["home"])
    try:
        with m.db.tx() as tx:
            second = m.jobs.create("verify", c=tx)
            m.jobs.claim(second, "test", c=tx)
        m.jobs.finish(second, st.CANCELED)
    finally:
        m.close()
    qtbot.waitUntil(lambda: view.model.row_of(second) is not None, timeout=15000)
    assert view.stream.opened == 2 and sent.count("subscribe:job_changes") == 2
    # hidden, the page lets the stream go; shown again, it follows it from where it was
    w.select_view("hosts")
    assert view.stream is None
    w.select_view("activity")
    assert view.stream is not None and sent.count("subscribe:job_changes") == 3
    assert view.model.row_of(jid) is not None


def set_up_storage(w, qtbot, vol):
    """Where backups go, through the wizards: storage server, disk pool, storage unit (the
    pool wizard's follow-up)."""
    from test_wizards import finish, go_next, retype, settle
    wiz = w.open_wizard("storage-server")
    settle(qtbot, wiz)
    go_next(qtbot, wiz)
    assert wiz.host_page.picker.name() == "me"
    go_next(qtbot, wiz)
    retype(qtbot, wiz.name_page.name, "ss1")
    go_next(qtbot, wiz)
    go_next(qtbot, wiz)
    assert wiz.result_page.result is not None, wiz.result_page.status.plain_text()
    finish(qtbot, wiz)
    wiz = w.open_wizard("disk-pool", server="ss1")
    settle(qtbot, wiz)
    go_next(qtbot, wiz)
    vp = wiz.volumes_page
    qtbot.keyClicks(vp.path, str(vol))
    qtbot.keyClicks(vp.path, "\r")
    qtbot.waitUntil(lambda: str(vol) in vp.checks and not wiz.busy, timeout=20000)
    assert vp.volumes() == [str(vol)]
    go_next(qtbot, wiz)
    retype(qtbot, wiz.settings_page.name, "dp1")
    go_next(qtbot, wiz)
    assert wiz.summary_page.make_unit.isChecked()
    go_next(qtbot, wiz)
    assert wiz.result_page.result is not None, wiz.result_page.status.plain_text()
    finish(qtbot, wiz)
    unit = wiz.follow_up
    settle(qtbot, unit)
    assert unit.settings_page.pool.currentText() == "dp1"
    go_next(qtbot, unit)
    go_next(qtbot, unit)
    finish(qtbot, unit)


def set_up_policy(w, qtbot, src):
    """What is backed up, through the policy wizard: src of the host me, by hand."""
    from PySide6.QtCore import Qt
    from test_wizards import finish, go_next, settle
    qtbot.waitUntil(lambda: w.wizard is None or not w.wizard.isVisible(), timeout=10000)
    wiz = w.open_wizard("policy")
    settle(qtbot, wiz)
    qtbot.keyClicks(wiz.attributes_page.name, "p1")
    assert wiz.attributes_page.unit.currentText() == "dp1-stu"
    go_next(qtbot, wiz)
    go_next(qtbot, wiz)                      # no schedule: backed up by hand
    wiz.clients_page.set_checked("me")
    go_next(qtbot, wiz)
    qtbot.keyClicks(wiz.selections_page.path, str(src))
    qtbot.mouseClick(wiz.selections_page.add_button, Qt.MouseButton.LeftButton)
    assert wiz.selections_page.selections == [str(src)]
    go_next(qtbot, wiz)
    go_next(qtbot, wiz)
    assert wiz.result_page.result is not None, wiz.result_page.status.plain_text()
    finish(qtbot, wiz)


def test_the_first_day_story_in_a_console_on_a_headless_master(
        make_console, remote_master, qtbot, tmp_path):
    """An admin's first day in a console on a master over SSH: the four wizards, Back up
    now, the job followed to its end in the activity monitor, a restore to a new directory
    from the restore browser, and the restored bytes as they were. The jobs run on the
    master's machine (this console runs no dispatcher)."""
    from PySide6.QtCore import Qt
    from app import status as st
    from test_restore_browser import expand_to, tick
    from treegen import assert_trees_equal, make_tree
    rm = remote_master
    src, vol, dst = tmp_path / "src", tmp_path / "vol", tmp_path / "restored"
    vol.mkdir()
    make_tree(str(src))
    c = make_console(rm)
    w = c.window
    w.confirm_close_with_running_jobs = False
    set_up_storage(w, qtbot, vol)
    set_up_policy(w, qtbot, src)
    assert rm.policy("p1")["selections"] == [str(src)]
    # Back up now, followed in the activity monitor to its end
    w.select_view("policies")
    view = w.current_view
    qtbot.waitUntil(lambda: view.loaded and view.model.row_of("p1") is not None,
                    timeout=10000)
    assert view.select_key("p1")
    dlg = view.object_actions._backup_now()
    dlg.ok.click()
    activity = w.views["activity"]
    qtbot.waitUntil(lambda: w.current_view is activity and activity.model.rowCount() == 1,
                    timeout=10000)
    assert activity.stream is not None
    job = activity.model.row_dict(0)
    qtbot.waitUntil(lambda: activity.model.counts["done"] == 1, timeout=30000)
    job = activity.model.row_dict(activity.model.row_of(job["id"]))
    assert (job["type"], job["state"], job["status"]) == ("backup", "done", st.OK), \
        rm.job_logs(job["id"])
    # restore to a new location: the restore browser, the restore dialog
    w.select_view("restore")
    v = w.views["restore"]
    qtbot.waitUntil(lambda: v.loaded and v.files.image_id is not None, timeout=10000)
    expand_to(v, qtbot, str(src / "dir"))
    tick(v, qtbot, str(src / "dir"))
    tick(v, qtbot, str(src / "small.txt"))
    opened = []
    v.job_opened.connect(opened.append)
    dlg = v.open_restore_dialog()
    qtbot.keyClicks(dlg.directory, str(dst))
    qtbot.waitUntil(lambda: dlg.start_button.isEnabled(), timeout=10000)
    assert "entries will be restored to me:" + str(dst) in dlg.status.text()
    qtbot.mouseClick(dlg.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(opened), timeout=10000)
    rid = opened[0]["id"]
    w.select_view("activity")
    qtbot.waitUntil(lambda: activity.model.row_of(rid) is not None and activity.model.row_dict(
        activity.model.row_of(rid))["state"] == "done", timeout=30000)
    assert activity.model.row_dict(activity.model.row_of(rid))["status"] == st.OK, \
        rm.job_logs(rid)
    w.refresh_status()
    qtbot.waitUntil(lambda: w.jobs_label.text() == "Jobs: 0 running, 0 queued", timeout=10000)
    # what the README shows (docs/screenshots/remote-master.png)
    assert w.grab().save(str(tmp_path / "remote-master.png"))
    assert_trees_equal(str(src / "dir"), str(dst) + str(src / "dir"), check_owner=False)
    assert (src / "small.txt").read_bytes() == (dst / str(src).lstrip("/") /
                                                "small.txt").read_bytes()
    assert sorted(os.listdir(str(dst) + str(src))) == ["dir", "small.txt"]
    assert not c.dispatcher_thread
