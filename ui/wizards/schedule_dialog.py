"""One schedule of a policy: type, retention, frequency and start windows."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout, \
    QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox, QVBoxLayout

from app import timeutil
from app.config import check_name
from app.errors import ValidationError
from ui.wizards.common import StatusLine, note
from ui.wizards.week_grid import WeekGrid, describe

# (type, label, unavailable reason or None); config.add_schedule refuses the incrementals.
TYPES = (
    ("full", "Full backup", None),
    ("differential", "Differential incremental — not available in this version",
     "not available in this version"),
    ("cumulative", "Cumulative incremental — not available in this version",
     "not available in this version"),
)
RETENTION_UNITS = (("d", "days"), ("w", "weeks"), ("y", "years"), ("h", "hours"))
FREQUENCY_UNITS = (("h", "hours"), ("d", "days"), ("w", "weeks"))
_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def split_duration(seconds, units):
    """(number, unit) of a duration in the largest of `units` that divides it."""
    for u, _ in sorted(units, key=lambda x: -_UNIT_SECONDS[x[0]]):
        if seconds % _UNIT_SECONDS[u] == 0:
            return seconds // _UNIT_SECONDS[u], u
    return max(1, seconds // 3600), "h"


class ScheduleDialog(QDialog):
    """Edits a schedule dict {"name", "type", "retention", "frequency", "windows"}; `taken`
    holds the names of the policy's other schedules."""

    def __init__(self, schedule=None, taken=(), parent=None):
        super().__init__(parent)
        self.setWindowTitle("Schedule")
        self.taken = set(taken)

        self.name = QLineEdit()
        self.type = QComboBox()
        model = QStandardItemModel(self.type)
        self.type.setModel(model)
        for key, label, unavailable in TYPES:
            self.type.addItem(label, key)
            if unavailable:
                item = model.item(self.type.count() - 1)
                item.setEnabled(False)
                item.setToolTip(unavailable)

        self.keep_forever = QCheckBox("Keep forever")
        self.retention = QSpinBox()
        self.retention.setRange(1, 9999)
        self.retention_unit = QComboBox()
        for key, label in RETENTION_UNITS:
            self.retention_unit.addItem(label, key)
        retention_row = QHBoxLayout()
        retention_row.addWidget(self.retention)
        retention_row.addWidget(self.retention_unit)
        retention_row.addWidget(self.keep_forever)
        retention_row.addStretch(1)
        self.keep_forever.toggled.connect(self._retention_toggled)

        self.every = QCheckBox("Every")
        self.frequency = QSpinBox()
        self.frequency.setRange(1, 999)
        self.frequency_unit = QComboBox()
        for key, label in FREQUENCY_UNITS:
            self.frequency_unit.addItem(label, key)
        freq_row = QHBoxLayout()
        freq_row.addWidget(self.every)
        freq_row.addWidget(self.frequency)
        freq_row.addWidget(self.frequency_unit)
        freq_row.addStretch(1)
        self.every.toggled.connect(self._frequency_toggled)

        self.grid = WeekGrid()
        self.windows_text = QLabel()
        self.windows_text.setWordWrap(True)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.grid.clear)
        grid_row = QHBoxLayout()
        grid_row.addWidget(self.grid)
        grid_row.addWidget(clear, 0, Qt.AlignmentFlag.AlignBottom)
        grid_row.addStretch(1)

        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("&Type:", self.type)
        form.addRow("Retention:", retention_row)
        form.addRow("", note("How long the images of this schedule are kept before they "
                             "expire."))
        form.addRow("Frequency:", freq_row)
        form.addRow("", note("How often a backup is due; without a frequency the schedule "
                             "starts once in each window."))

        self.status = StatusLine()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(QLabel("<b>Start windows</b> — the hours in which backups may start "
                                "(click or drag):"))
        layout.addLayout(grid_row)
        layout.addWidget(self.windows_text)
        layout.addStretch(1)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

        self._set(schedule or {"name": self._free_name(), "type": "full", "retention": "2w",
                               "frequency": "1d", "windows": []})
        self.name.textChanged.connect(self.revalidate)
        self.retention.valueChanged.connect(self.revalidate)
        self.grid.changed.connect(self.revalidate)
        self.revalidate()

    def _free_name(self):
        for name in ("daily-full", "weekly-full", "full"):
            if name not in self.taken:
                return name
        n = 2
        while f"full-{n}" in self.taken:
            n += 1
        return f"full-{n}"

    def _set(self, s):
        self.name.setText(s["name"])
        self.type.setCurrentIndex(max(0, self.type.findData(s["type"])))
        ret = timeutil.parse_duration(s.get("retention") or "infinite")
        self.keep_forever.setChecked(ret is None)
        if ret is not None:
            n, u = split_duration(ret, RETENTION_UNITS)
            self.retention.setValue(n)
            self.retention_unit.setCurrentIndex(self.retention_unit.findData(u))
        else:
            self.retention.setValue(2)
            self.retention_unit.setCurrentIndex(self.retention_unit.findData("w"))
        freq = timeutil.parse_duration(s["frequency"]) if s.get("frequency") else None
        self.every.setChecked(freq is not None)
        n, u = split_duration(freq or 86400, FREQUENCY_UNITS)
        self.frequency.setValue(n)
        self.frequency_unit.setCurrentIndex(self.frequency_unit.findData(u))
        self._frequency_toggled(self.every.isChecked())
        self.grid.set_windows(s.get("windows") or [])

    def _retention_toggled(self, forever):
        self.retention.setEnabled(not forever)
        self.retention_unit.setEnabled(not forever)

    def _frequency_toggled(self, on):
        self.frequency.setEnabled(on)
        self.frequency_unit.setEnabled(on)

    def schedule(self):
        return {
            "name": self.name.text().strip(),
            "type": self.type.currentData(),
            "retention": "infinite" if self.keep_forever.isChecked()
            else f"{self.retention.value()}{self.retention_unit.currentData()}",
            "frequency": f"{self.frequency.value()}{self.frequency_unit.currentData()}"
            if self.every.isChecked() else None,
            "windows": self.grid.windows(),
        }

    def problem(self):
        s = self.schedule()
        if not s["name"]:
            return "Give the schedule a name."
        try:
            check_name("schedule", s["name"])
        except ValidationError as e:
            return f"{e.message[0].upper()}{e.message[1:]}: {e.hint}."
        if s["name"] in self.taken:
            return f"The policy already has a schedule named '{s['name']}'."
        return None

    def revalidate(self, *_):
        self.windows_text.setText(describe(self.grid.windows()))
        p = self.problem()
        if p:
            self.status.problem(p)
        else:
            self.status.clear()
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(p is None)
