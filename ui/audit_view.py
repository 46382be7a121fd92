"""The Audit page: the master's audit log (Master.audit_entries, as `cairn audit` shows it),
newest first: time, user, origin, action, object, outcome and details, filtered by user and
by how far back. Whether the log's hash chain is whole is said above the table; an entry
where it is broken (edited, or entries before it deleted) is marked in red."""

import json

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QVBoxLayout)

from app.audit import segment_text
from ui.models import Column, ObjectTableModel, number_column, text_column, time_column
from ui.polled import PolledPage
from ui.tables import HandWidths, data_table, sorting_proxy

BROKEN_COLOUR, OK_COLOUR = "#c0392b", "#1e8449"
#: (label, --since) of the "since" filter
SINCE = (("Last hour", "1h"), ("Last 24 hours", "24h"), ("Last 7 days", "7d"),
         ("Last 30 days", "30d"), ("All", None))
#: the newest entries a refresh reads
LIMIT = 5000


def details_text(row):
    d = row.get("details")
    if not d:
        return ""
    if isinstance(d, dict):
        parts = []
        if d.get("reason"):
            parts.append(d["reason"])
        if "before" in d or "after" in d:
            parts.append(_change_text(d.get("before"), d.get("after")))
        args = d.get("args") or {}
        if args and not parts:
            parts.append(", ".join(f"{k}={_short(v)}" for k, v in args.items()))
        for k in ("method", "key"):
            if d.get(k):
                parts.append(f"{k} {d[k]}")
        return "; ".join(p for p in parts if p)
    return str(d)


def _short(v):
    text = v if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= 60 else text[:57] + "…"


def _change_text(before, after):
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "created" if before is None and after is not None else \
            "removed" if after is None and before is not None else ""
    changed = [f"{k}: {_short(before.get(k))} → {_short(after.get(k))}"
               for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
    return ", ".join(changed) or "no change"


COLUMNS = [
    number_column("seq", "#", help="the entry's number in the log"),
    Column("chain", "Chain", lambda r: "" if r.get("chain_ok", True) else "✗ broken",
           help="✗: the hash chain is broken at this entry (edited, or entries before it "
                "were deleted)"),
    time_column("time", "Time"),
    text_column("user", "User"),
    text_column("role", "Role"),
    text_column("origin", "Origin", help="where the request came from: local, or the "
                                          "address of a remote console or CLI"),
    text_column("action", "Action"),
    text_column("object", "Object"),
    text_column("outcome", "Outcome"),
    Column("details", "Details", details_text, sort=details_text,
           tooltip=lambda r: json.dumps(r.get("details"), indent=1, default=str)),
]


class AuditModel(ObjectTableModel):
    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.ForegroundRole and index.isValid():
            row = self.row_dict(index.row())
            if row is not None and not row.get("chain_ok", True):
                return QBrush(QColor(BROKEN_COLOUR))
            return None
        return super().data(index, role)


class AuditView(PolledPage):
    name = "audit"
    refresh_s = 5.0
    refresh_again = True

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.loaded = False
        self.error = None
        self.chain = None
        self.model = AuditModel(COLUMNS, key="seq", parent=self)
        self.proxy = sorting_proxy(self.model, self)
        self.table = data_table(self.proxy, "audit-table")
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.widths = HandWidths(self.table.horizontalHeader())
        self.table.horizontalHeader().setStretchLastSection(True)

        self.user = QLineEdit()
        self.user.setObjectName("audit-user")
        self.user.setPlaceholderText("every user")
        self.user.setClearButtonEnabled(True)
        self.user.editingFinished.connect(self.refresh_soon)
        self.since = QComboBox()
        self.since.setObjectName("audit-since")
        for label, value in SINCE:
            self.since.addItem(label, value)
        self.since.setCurrentIndex(2)
        self.since.currentIndexChanged.connect(lambda _i: self.refresh_soon())
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh_soon)
        self.chain_label = QLabel("Checking the audit log…")
        self.chain_label.setObjectName("audit-chain")
        self.chain_label.setTextFormat(Qt.TextFormat.PlainText)
        self.chain_label.setWordWrap(True)

        bar = QHBoxLayout()
        bar.addWidget(QLabel("User:"))
        bar.addWidget(self.user)
        bar.addWidget(QLabel("Since:"))
        bar.addWidget(self.since)
        bar.addWidget(refresh)
        bar.addStretch(1)
        title = QLabel("<b>Audit log</b> — who did what, when and from where")
        lay = QVBoxLayout(self)
        lay.addWidget(title)
        lay.addLayout(bar)
        lay.addWidget(self.chain_label)
        lay.addWidget(self.table, 1)

    # ---- polling ------------------------------------------------------------------------------
    def poll_call(self):
        return (_read, self.since.currentData(), self.user.text().strip() or None)

    def polled(self, doc):
        self.error = None
        self.model.set_rows(doc["entries"])
        if not self.widths.by_hand:
            with self.widths.fitting():
                self.table.resizeColumnsToContents()
        self.show_chain(doc["chain"])
        self.loaded = True
        self.refreshed.emit()

    def poll_failed(self, err):
        self.error = err
        self.chain_label.setText(f"The audit log could not be read: {err}")
        self.chain_label.setStyleSheet(f"color: {BROKEN_COLOUR};")
        self.loaded = True
        self.refreshed.emit()

    def show_chain(self, chain):
        self.chain = chain
        if chain["ok"]:
            # a recovered catalog's log goes on in a new segment: said, not hidden
            segments = "".join(f" {t[:1].upper()}{t[1:]}." for t in map(
                segment_text, chain.get("segments") or ()))
            self.chain_label.setText(f"✓ The hash chain is whole: {chain['entries']} entries, "
                                     "none changed or deleted." + segments)
            self.chain_label.setStyleSheet(f"color: {OK_COLOUR};")
            return
        first = chain["broken"][0]
        more = len(chain["broken"]) - 1
        self.chain_label.setText(
            f"✗ The hash chain is broken at entry {first['seq']}: {first['problem']}"
            + (f" (and {more} more)" if more else "")
            + ". The log was edited: compare with its copy in syslog or a catalog backup.")
        self.chain_label.setStyleSheet(f"color: {BROKEN_COLOUR}; font-weight: bold;")

    # ---- layout ---------------------------------------------------------------------------------
    def save_state(self, settings):
        settings.setValue("views/audit/header", self.table.horizontalHeader().saveState())
        settings.setValue("views/audit/widths-by-hand", self.widths.by_hand)

    def restore_state(self, settings):
        h = settings.value("views/audit/header")
        if h is not None:
            self.widths.restore(h, settings.value("views/audit/widths-by-hand"))


def _read(m, since, user):
    """One refresh, on a bridge thread: the entries and the whole chain's state."""
    chain = m.audit_verify()
    broken = {b["seq"] for b in chain["broken"]}
    entries = m.audit_entries(since=since, user=user, limit=LIMIT, verify=False)
    for e in entries:
        e["chain_ok"] = e["seq"] not in broken
    return {"entries": entries, "chain": chain}
