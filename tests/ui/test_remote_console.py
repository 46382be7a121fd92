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


def test_file_open_a_master_starts_a_console_on_it(console, monkeypatch):
    from ui import remote
    started, answers = [], iter([("admin@backup1:2222", True), ("admin@", True),
                                 ("", False)])
    monkeypatch.setattr(remote.QInputDialog, "getItem", lambda *a, **k: next(answers))
    monkeypatch.setattr(remote.QProcess, "startDetached",
                        lambda prog, args: started.append([prog, *args]))
    w = console.window
    w.open_other_master()
    assert started == [remote.console_command("admin@backup1:2222")]
    assert started[0][-3:] == ["console", "--master", "admin@backup1:2222"]
    w.open_other_master()            # no master name: said, nothing started
    assert "is not [USER@]HOST[:PORT]" in w.open_master_error.text() and len(started) == 1
    w.open_master_error.close()
    w.open_other_master()            # canceled
    assert len(started) == 1


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
    # hidden, the page lets the stream go; shown again, it follows it from where it was
    w.select_view("hosts")
    assert view.stream is None
    w.select_view("activity")
    assert view.stream is not None and sent.count("subscribe:job_changes") == 2
    assert view.model.row_of(jid) is not None
