"""File ▸ Alerts… and the dashboard's Alerts section, through the real widgets: settings typed
into the form and saved, the SMTP password kept in the keyring, a test message and then a
failed backup's alert arriving at a real SMTP server on loopback."""

import pytest
from PySide6.QtCore import Qt

from smtpserver import SMTPServer

pytestmark = pytest.mark.gui


def open_alerts(console, qtbot):
    w = console.window
    [action] = [a for a in w.menuBar().actions()[0].menu().actions()
                if a.text() == "&Alerts…"]
    action.trigger()
    from ui.alerts_dialog import AlertsDialog
    [dlg] = [d for d in w.findChildren(AlertsDialog) if d.isVisible()]
    qtbot.waitUntil(lambda: dlg.loaded is not None, timeout=10000)
    return dlg


def type_into(qtbot, edit, text):
    edit.clear()
    qtbot.keyClicks(edit, text)


def test_settings_typed_in_are_saved_and_the_test_mail_arrives_with_the_keyring_password(
        make_console, empty_master, qtbot, tmp_path, memory_keyring):
    m = empty_master
    server = SMTPServer(tmp_path, users={"alerts": "pa55 word"}).start()
    try:
        dlg = open_alerts(make_console(m), qtbot)
        assert "No channel is set up" in dlg.state.text()
        assert all(box.isChecked() for k, box in dlg.kinds.items() if k != "partial")
        assert not dlg.kinds["partial"].isChecked()
        f = dlg.fields
        type_into(qtbot, f["smtp_host"], server.host)
        type_into(qtbot, f["smtp_port"], str(server.port))
        dlg.security.setCurrentIndex(dlg.security.findData("starttls"))
        type_into(qtbot, f["smtp_user"], "alerts")
        type_into(qtbot, dlg.password, "pa55 word")
        type_into(qtbot, f["smtp_ca_file"], str(server.ca_file))
        type_into(qtbot, f["recipients"], "ops@example.org")
        type_into(qtbot, f["interval"], "5m")
        dlg.kinds["partial"].setChecked(True)
        qtbot.mouseClick(dlg.test_button, Qt.MouseButton.LeftButton)
        [mail] = server.wait_for(1)
        qtbot.waitUntil(lambda: "Test message:" in dlg.state.text(), timeout=10000)
    finally:
        server.stop()
    assert mail["tls"] and mail["to"] == ["ops@example.org"]
    assert mail["message"]["Subject"].endswith(": test message")
    assert "email: sent" in dlg.state.text()
    assert dlg.password.text() == "" and dlg.password.placeholderText() == \
        "kept in the OS keyring"
    assert dlg.history.topLevelItemCount() == 1
    assert "email: ok" in dlg.history.topLevelItem(0).text(2)
    s = {k: v["value"] for k, v in m.alert_settings()["settings"].items()}
    assert s["smtp_host"] == server.host and s["smtp_port"] == str(server.port)
    assert s["smtp_user"] == "alerts" and s["interval"] == "5m"
    assert "partial" in s["kinds"].split(",")
    assert list(memory_keyring.items.values()) == ["pa55 word"]
    assert b"pa55 word" not in (tmp_path / "home" / "catalog.db").read_bytes()


def test_a_wrong_value_is_said_and_nothing_is_saved(make_console, empty_master, qtbot):
    dlg = open_alerts(make_console(empty_master), qtbot)
    type_into(qtbot, dlg.fields["smtp_host"], "mail.example.org")
    type_into(qtbot, dlg.fields["recipients"], "ops at example")
    qtbot.mouseClick(dlg.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "is not a mail address" in dlg.state.text(), timeout=10000)
    assert dlg.save_button.isEnabled()
    assert empty_master.alert_settings()["settings"]["smtp_host"]["value"] == ""


def test_the_dashboard_says_where_alerts_go_and_a_failed_backup_is_mailed(
        make_console, empty_master, qtbot, tmp_path):
    m = empty_master
    pool = tmp_path / "pool"
    pool.mkdir()
    m.create_storage_server("ss1", type="advanced-disk", host=m.config.hosts()[0]["name"])
    m.create_disk_pool("dp1", server="ss1", volumes=[str(pool)])
    m.create_storage_unit("stu1", pool="dp1")
    m.create_policy("p1", storage_unit="stu1")
    m.add_policy_client("p1", m.config.hosts()[0]["name"])
    m.add_policy_selection("p1", str(tmp_path / "gone"))
    server = SMTPServer(tmp_path).start()
    try:
        c = make_console(m, run_dispatcher=True)
        w = c.window
        w.select_view("dashboard")
        v = w.views["dashboard"]
        qtbot.waitUntil(lambda: v.loaded, timeout=10000)
        assert "No alerts are sent" in v.sections["alerts"].text()
        v.sections["alerts"].linkActivated.emit("alerts:")
        from ui.alerts_dialog import AlertsDialog
        [dlg] = [d for d in w.findChildren(AlertsDialog) if d.isVisible()]
        qtbot.waitUntil(lambda: dlg.loaded is not None, timeout=10000)
        type_into(qtbot, dlg.fields["smtp_host"], server.host)
        type_into(qtbot, dlg.fields["smtp_port"], str(server.port))
        type_into(qtbot, dlg.fields["smtp_ca_file"], str(server.ca_file))
        type_into(qtbot, dlg.fields["recipients"], "ops@example.org")
        qtbot.mouseClick(dlg.save_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "Saved." in dlg.state.text(), timeout=10000)
        dlg.close()
        m.alerts_round(ask_hosts=False)   # alerting begins here
        [jid] = m.start_backup("p1")
        [mail] = server.wait_for(1, timeout=45)
        assert f"Job {jid}, backup of client" in mail["message"].get_body(
            ("plain",)).get_content()
        v.refresh()
        qtbot.waitUntil(lambda: "email to ops@example.org" in v.sections["alerts"].text(),
                        timeout=15000)
    finally:
        server.stop()
