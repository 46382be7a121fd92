"""File ▸ Alerts…: what the master alerts about and where it sends it (email through the site's
SMTP server, syslog, a webhook, a command), a test message, and the last messages with each
channel's result, as `cairn alerts show|set|password|test|history` do. The SMTP password goes
to the OS keyring on Save and is never shown again."""

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog,
                               QFormLayout, QGridLayout, QGroupBox, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QScrollArea, QTreeWidget,
                               QTreeWidgetItem, QVBoxLayout, QWidget)

from ui import fmt
from ui.resources import icon

ERROR_COLOUR, OK_COLOUR = "#c0392b", "#1e8449"
SECURITY = [("STARTTLS (port 587)", "starttls"), ("TLS from the start (port 465)", "ssl"),
            ("None (port 25)", "none")]
KIND_LABELS = {
    "failed": "Failed jobs", "missed": "Missed backups (start window closed)",
    "verify-damage": "Verify found damage", "high-water": "Pool at its high-water mark",
    "host-unreachable": "Host unreachable", "catalog-overdue": "Catalog backup overdue",
    "partial": "Partial jobs (files skipped)"}
# The text fields, in the settings' names.
TEXTS = ("interval", "host_down_after", "smtp_host", "smtp_port", "smtp_user", "smtp_ca_file",
         "sender", "recipients", "syslog_address", "webhook_url", "webhook_ca_file", "command")


def _load(m):
    return {"settings": m.alert_settings(), "history": m.alert_history(10)}


def _save(m, changes, password):
    doc = m.set_alert_settings(changes)
    if password:
        doc = m.set_alert_password(password)
    return doc


def _save_and_test(m, changes, password):
    _save(m, changes, password)
    return {"test": m.alerts_test(), **_load(m)}


class AlertsDialog(QDialog):
    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.loaded = None
        self.setWindowTitle("Alerts")
        self.setWindowIcon(icon("cairn"))
        self.fields = {k: QLineEdit() for k in TEXTS}
        f = self.fields
        f["smtp_port"].setMaximumWidth(90)
        f["interval"].setMaximumWidth(90)
        f["host_down_after"].setMaximumWidth(90)
        f["recipients"].setPlaceholderText("ops@example.org, oncall@example.org")
        f["smtp_host"].setPlaceholderText("mail.example.org (empty: no mail)")
        f["webhook_url"].setPlaceholderText("https://hooks.example.org/cairn (empty: none)")
        f["command"].setPlaceholderText("/usr/local/bin/page-oncall --json (empty: none)")
        f["sender"].setPlaceholderText("empty: cairn@ the master's host name")
        self.security = QComboBox()
        for label, value in SECURITY:
            self.security.addItem(label, value)
        self.security.currentIndexChanged.connect(self._port_hint)
        self.password = QLineEdit()
        self.password.setEchoMode(QLineEdit.EchoMode.Password)
        self.syslog = QCheckBox("Send each alert to syslog (journald reads it)")
        self.kinds = {k: QCheckBox(text) for k, text in KIND_LABELS.items()}

        what = QGroupBox("What to alert")
        wl = QVBoxLayout(what)
        for box in self.kinds.values():
            wl.addWidget(box)
        timing = QFormLayout()
        timing.addRow("At most one message every", f["interval"])
        timing.addRow("A host counts as down after", f["host_down_after"])
        wl.addLayout(timing)

        mail = QGroupBox("Email")
        ml = QFormLayout(mail)
        ml.addRow("SMTP server", f["smtp_host"])
        port_row = QHBoxLayout()
        port_row.addWidget(f["smtp_port"])
        port_row.addWidget(QLabel("Security"))
        port_row.addWidget(self.security, 1)
        ml.addRow("Port", port_row)
        ml.addRow("Login", f["smtp_user"])
        ml.addRow("Password", self.password)
        ml.addRow("CA file", self._with_browse(f["smtp_ca_file"]))
        ml.addRow("From", f["sender"])
        ml.addRow("To", f["recipients"])

        others = QGroupBox("Syslog, webhook, command")
        ol = QFormLayout(others)
        ol.addRow(self.syslog)
        ol.addRow("Syslog address", f["syslog_address"])
        ol.addRow("Webhook URL", f["webhook_url"])
        ol.addRow("Webhook CA file", self._with_browse(f["webhook_ca_file"]))
        ol.addRow("Command", f["command"])

        self.history = QTreeWidget()
        self.history.setObjectName("alerts-history")
        self.history.setHeaderLabels(["Time", "Message", "Result"])
        self.history.setRootIsDecorated(False)
        self.history.setMinimumHeight(110)
        recent = QGroupBox("Last messages")
        QVBoxLayout(recent).addWidget(self.history)

        grid = QGridLayout()
        grid.addWidget(what, 0, 0)
        grid.addWidget(mail, 0, 1)
        grid.addWidget(others, 1, 0, 1, 2)
        grid.addWidget(recent, 2, 0, 1, 2)
        grid.setColumnStretch(1, 1)
        inner = QWidget()
        inner.setLayout(grid)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(inner)

        self.state = QLabel("Loading…")
        self.state.setObjectName("alerts-state")
        self.state.setWordWrap(True)
        self.state.setTextFormat(Qt.TextFormat.RichText)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.test_button = self.buttons.addButton("Send test message",
                                                  QDialogButtonBox.ButtonRole.ActionRole)
        self.save_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Save)
        self.buttons.rejected.connect(self.reject)
        self.save_button.clicked.connect(self.save)
        self.test_button.clicked.connect(self.test)
        self._busy(True)
        lay = QVBoxLayout(self)
        lay.addWidget(scroll, 1)
        lay.addWidget(self.state)
        lay.addWidget(self.buttons)
        screen = self.screen().availableGeometry() if self.screen() else None
        width, height = 900, 700
        if screen is not None:
            width, height = min(width, screen.width() - 40), min(height, screen.height() - 40)
        self.resize(width, height)
        bridge.call(_load, done=self._filled, failed=self._failed, context=self)

    def _with_browse(self, edit):
        row = QWidget()
        lay = QHBoxLayout(row)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(edit, 1)
        b = QPushButton("Browse…")
        b.clicked.connect(lambda: self._browse(edit))
        lay.addWidget(b)
        return row

    def _browse(self, edit):
        path, _ = QFileDialog.getOpenFileName(self, "A CA certificate file", edit.text(),
                                              "Certificates (*.pem *.crt);;All files (*)")
        if path:
            edit.setText(path)

    def _port_hint(self, *_):
        ports = {"starttls": "587", "ssl": "465", "none": "25"}
        self.fields["smtp_port"].setPlaceholderText(ports.get(self.security.currentData(), ""))

    def _busy(self, on):
        self.save_button.setEnabled(not on)
        self.test_button.setEnabled(not on)

    # ---- the settings in the form -----------------------------------------------------------
    def _filled(self, got):
        self._fill_settings(got["settings"])
        self._show_history(got["history"])
        self._busy(False)

    def _fill_settings(self, doc):
        self.loaded = {k: s["value"] for k, s in doc["settings"].items()}
        for k, edit in self.fields.items():
            edit.setText(self.loaded[k])
            default = doc["settings"][k]["default"]
            if default and not edit.placeholderText():
                edit.setPlaceholderText(default)
            edit.setToolTip(doc["settings"][k]["about"])
        self.security.setCurrentIndex(
            max(0, self.security.findData(self.loaded["smtp_tls"])))
        self._port_hint()
        self.syslog.setChecked(self.loaded["syslog"] == "on")
        chosen = {k.strip() for k in self.loaded["kinds"].split(",")}
        for k, box in self.kinds.items():
            box.setChecked(k in chosen)
        self.password.setPlaceholderText(
            "kept in the OS keyring" if doc["password_stored"] else
            "not stored yet" if doc["password_stored"] is False else "only with a login")
        self._show_state(doc)

    def changes(self):
        """{setting: value} of what the form holds (every setting; the master keeps them)."""
        out = {k: edit.text().strip() for k, edit in self.fields.items()}
        out["smtp_tls"] = self.security.currentData()
        out["syslog"] = "on" if self.syslog.isChecked() else "off"
        out["kinds"] = ",".join(k for k, box in self.kinds.items() if box.isChecked())
        return out

    def _show_state(self, doc, extra=""):
        on = doc["channels"]
        text = ("Alerts go by " + ", ".join(on) + "." if on else
                "No channel is set up: nothing is sent.")
        for p in doc["problems"]:
            text += f"<br><span style='color:{ERROR_COLOUR}'>{fmt_html(p)}.</span>"
        self.state.setText(text + extra)

    def _show_history(self, rows):
        self.history.clear()
        for h in rows:
            what = "Test message" if h["test"] else f"Digest of {h['events']} event(s)"
            result = "; ".join(f"{k}: {'ok' if r['ok'] else r['text']}"
                               for k, r in h["results"].items()) or "sending…"
            item = QTreeWidgetItem([fmt.local_time(h["time"]), what, result])
            item.setToolTip(2, result)
            self.history.addTopLevelItem(item)
        for col in (0, 1):
            self.history.resizeColumnToContents(col)

    # ---- actions -------------------------------------------------------------------------------
    def save(self):
        self._busy(True)
        self.bridge.call(_save, self.changes(), self.password.text(), done=self._saved,
                         failed=self._failed, context=self)

    def _saved(self, doc):
        self.password.clear()
        self._busy(False)
        self._fill_settings(doc)
        self._show_state(doc, f"<br><span style='color:{OK_COLOUR}'>Saved.</span>")

    def test(self):
        self._busy(True)
        self.state.setText("Saving and sending a test message…")
        self.bridge.call(_save_and_test, self.changes(), self.password.text(),
                         done=self._tested, failed=self._failed, context=self)

    def _tested(self, got):
        self.password.clear()
        self._filled(got)
        results = got["test"]["results"]
        lines = "".join(
            f"<br><span style='color:{OK_COLOUR if r['ok'] else ERROR_COLOUR}'>"
            f"{fmt_html(k)}: {fmt_html(r['text'] if not r['ok'] else 'sent')}</span>"
            for k, r in results.items())
        self._show_state(got["settings"], "<br>Test message:" + lines)

    def _failed(self, err):
        self._busy(False)
        self.state.setText(f"<span style='color:{ERROR_COLOUR}'>{fmt_html(str(err))}</span>")


def fmt_html(text):
    return html.escape(text)
