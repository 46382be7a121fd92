"""One schedule of a policy: level (full, differential or cumulative), retention, how often
(every N hours/days/weeks, or calendar days) and start windows."""

from PySide6.QtCore import QDate, Qt
from PySide6.QtWidgets import QAbstractItemView, QButtonGroup, QCheckBox, QComboBox, \
    QDateEdit, QDialog, QDialogButtonBox, QFormLayout, QGridLayout, QGroupBox, QHBoxLayout, \
    QLabel, QLayout, QLineEdit, QListWidget, QPushButton, QRadioButton, QSpinBox, QToolButton, \
    QVBoxLayout, QWidget

from app import timeutil
from app.config import check_name
from app.errors import ValidationError
from ui.wizards.schedule_text import DAYS, TYPE_HELP, TYPE_LABELS, describe_calendar, \
    ordinal
from ui.wizards.common import StatusLine, note
from ui.wizards.week_grid import WeekGrid, daily_windows, describe

TYPES = ("full", "differential", "cumulative", "catalog")
RETENTION_UNITS = (("d", "days"), ("w", "weeks"), ("y", "years"), ("h", "hours"))
FREQUENCY_UNITS = (("h", "hours"), ("d", "days"), ("w", "weeks"))
_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
DATE_FORMAT = "yyyy-MM-dd"


def split_duration(seconds, units):
    """(number, unit) of a duration in the largest of `units` that divides it."""
    for u, _ in sorted(units, key=lambda x: -_UNIT_SECONDS[x[0]]):
        if seconds % _UNIT_SECONDS[u] == 0:
            return seconds // _UNIT_SECONDS[u], u
    return max(1, seconds // 3600), "h"


class CalendarBox(QGroupBox):
    """Calendar days: weekdays, days of the month (the last one included) and dates left
    out, such as holidays."""

    def __init__(self, parent=None):
        super().__init__("Calendar days", parent)
        self.weekdays = []
        week = QHBoxLayout()
        week.addWidget(QLabel("Weekdays:"))
        for d in DAYS:
            box = QCheckBox(d)
            self.weekdays.append(box)
            week.addWidget(box)
        week.addStretch(1)

        self.monthdays = {}
        month = QGridLayout()
        month.setSpacing(2)
        for n in range(1, 32):
            self.monthdays[n] = self._day_button(str(n), f"Runs on the {ordinal(n)} of every month "
                                                 "that has it")
            month.addWidget(self.monthdays[n], (n - 1) // 7, (n - 1) % 7)
        self.monthdays["last"] = self._day_button("Last day", "Runs on the last day of every "
                                                  "month (28th to 31st)")
        month.addWidget(self.monthdays["last"], 4, 3, 1, 4)

        self.exclude = QListWidget()
        self.exclude.setObjectName("calendar-exclude")
        self.exclude.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.exclude.setMaximumHeight(90)
        self.exclude_date = QDateEdit(QDate.currentDate())
        self.exclude_date.setCalendarPopup(True)
        self.exclude_date.setDisplayFormat(DATE_FORMAT)
        self.add_exclude = QPushButton("Add")
        self.remove_exclude = QPushButton("Remove")
        self.add_exclude.clicked.connect(self.add_excluded)
        self.remove_exclude.clicked.connect(self.remove_excluded)
        self.exclude_date.dateChanged.connect(self._exclude_buttons)
        self.exclude.itemSelectionChanged.connect(self._exclude_buttons)
        pick = QHBoxLayout()
        pick.addWidget(self.exclude_date, 1)
        pick.addWidget(self.add_exclude)
        pick.addWidget(self.remove_exclude)
        excluded = QVBoxLayout()
        excluded.addWidget(QLabel("Except on these dates:"))
        excluded.addWidget(self.exclude, 1)
        excluded.addLayout(pick)

        monthly = QVBoxLayout()
        monthly.addWidget(QLabel("Days of the month:"))
        monthly.addLayout(month)
        monthly.addStretch(1)
        row = QHBoxLayout()
        row.addLayout(monthly)
        row.addSpacing(16)
        row.addLayout(excluded, 1)

        self.summary = note("")
        lay = QVBoxLayout(self)
        lay.addLayout(week)
        lay.addLayout(row)
        lay.addWidget(self.summary)
        self._listeners = []
        for box in self.weekdays:
            box.toggled.connect(self._changed)
        self._exclude_buttons()
        self._changed()

    def _day_button(self, text, tip):
        b = QToolButton()
        b.setText(text)
        b.setCheckable(True)
        b.setToolTip(tip)
        b.setMinimumWidth(30)
        # the style's own checked look is too faint to tell chosen days at a glance
        b.setStyleSheet("QToolButton:checked { background: palette(highlight); "
                        "color: palette(highlighted-text); border: 1px solid palette(dark); "
                        "border-radius: 2px; }")
        b.toggled.connect(self._changed)
        return b

    def on_change(self, callback):
        self._listeners.append(callback)

    def _changed(self, *_):
        self.summary.setText("A backup is due " + describe_calendar(self.calendar())
                             + ", in that day's start window.")
        for callback in self._listeners:
            callback()

    # ---- excluded dates ----------------------------------------------------------------------
    def excluded(self):
        return [self.exclude.item(i).text() for i in range(self.exclude.count())]

    def _set_excluded(self, dates):
        self.exclude.clear()
        self.exclude.addItems(sorted(set(dates)))
        self._exclude_buttons()

    def add_excluded(self, date=None):
        text = date or self.exclude_date.date().toString(DATE_FORMAT)
        if text in self.excluded():
            return False
        self._set_excluded(self.excluded() + [text])
        self._changed()
        return True

    def remove_excluded(self):
        gone = {i.text() for i in self.exclude.selectedItems()}
        if gone:
            self._set_excluded([d for d in self.excluded() if d not in gone])
            self._changed()

    def _exclude_buttons(self, *_):
        text = self.exclude_date.date().toString(DATE_FORMAT)
        self.add_exclude.setEnabled(text not in self.excluded())
        self.remove_exclude.setEnabled(bool(self.exclude.selectedItems()))

    # ---- the whole calendar ------------------------------------------------------------------
    def calendar(self):
        return {"weekdays": [d for d, box in enumerate(self.weekdays) if box.isChecked()],
                "monthdays": [k for k, b in self.monthdays.items() if b.isChecked()],
                "exclude": self.excluded()}

    def set_calendar(self, calendar):
        calendar = calendar or {}
        days = set(calendar.get("weekdays") or ())
        for d, box in enumerate(self.weekdays):
            box.setChecked(d in days)
        monthdays = set(calendar.get("monthdays") or ())
        for k, b in self.monthdays.items():
            b.setChecked(k in monthdays)
        self._set_excluded(calendar.get("exclude") or ())
        self._changed()


class ScheduleDialog(QDialog):
    """Edits a schedule dict {"name", "type", "retention", "frequency", "windows"} plus
    "calendar" for a calendar schedule; `taken` holds the names of the policy's other
    schedules."""

    def __init__(self, schedule=None, taken=(), parent=None):
        super().__init__(parent)
        self.setWindowTitle("Schedule")
        self.taken = set(taken)

        self.name = QLineEdit()
        types = self._build_types()
        retention_row = self._build_retention()
        freq_row = self._build_how_often()
        grid_row = self._build_grid()
        form = self._build_form(types, retention_row, freq_row)
        self._build_buttons()
        windows = self._build_windows(grid_row)
        self._lay_out(form, windows)

        self._set(schedule or {"name": self._free_name(), "type": "full", "retention": "2w",
                               "frequency": "1d", "windows": []})
        self._revalidate_on_change()
        self.revalidate()

    # ---- building the dialog, called in this order by __init__ -------------------------------
    def _build_types(self):
        """The radio buttons of the three levels, as a column."""
        self.type_buttons = {}
        self.type_group = QButtonGroup(self)
        types = QVBoxLayout()
        types.setSpacing(2)
        for key in TYPES:
            b = QRadioButton(f"{TYPE_LABELS[key]} — {TYPE_HELP[key]}")
            b.setObjectName(f"type-{key}")
            self.type_buttons[key] = b
            self.type_group.addButton(b)
            types.addWidget(b)
        return types

    def _build_retention(self):
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
        return retention_row

    def _build_how_often(self):
        """Every N hours/days/weeks, or on calendar days (the calendar box)."""
        self.every = QRadioButton("Every")
        self.on_calendar = QRadioButton("On calendar days")
        often = QButtonGroup(self)
        often.addButton(self.every)
        often.addButton(self.on_calendar)
        self.frequency = QSpinBox()
        self.frequency.setRange(1, 999)
        self.frequency_unit = QComboBox()
        for key, label in FREQUENCY_UNITS:
            self.frequency_unit.addItem(label, key)
        freq_row = QHBoxLayout()
        freq_row.addWidget(self.every)
        freq_row.addWidget(self.frequency)
        freq_row.addWidget(self.frequency_unit)
        freq_row.addSpacing(24)
        freq_row.addWidget(self.on_calendar)
        freq_row.addStretch(1)
        self.calendar_box = CalendarBox()
        self.every.toggled.connect(self._how_often_toggled)
        return freq_row

    def _build_grid(self):
        """The week grid of start windows, with its Clear button."""
        self.grid = WeekGrid()
        self.windows_text = QLabel()
        self.windows_text.setWordWrap(True)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.grid.clear)
        grid_row = QHBoxLayout()
        grid_row.addWidget(self.grid)
        grid_row.addWidget(clear, 0, Qt.AlignmentFlag.AlignBottom)
        grid_row.addStretch(1)
        return grid_row

    def _build_form(self, types, retention_row, freq_row):
        form = QFormLayout()
        form.addRow("&Name:", self.name)
        form.addRow("Type:", types)
        form.addRow("Retention:", retention_row)
        form.addRow("", note("How long the images of this schedule are kept before they "
                             "expire."))
        form.addRow("How often:", freq_row)
        self.how_often_text = note("A backup is due once this long has passed since the "
                                   "last successful backup of this schedule; it starts in "
                                   "the next start window.")
        form.addRow("", self.how_often_text)
        self.read_all = QCheckBox("Read every file (deduplicating pools: do not use the files "
                                  "cache)")
        self.read_all.setObjectName("read-all")
        self.read_all.setToolTip(
            "A full into a deduplicating pool normally takes files that did not change since "
            "the last full from the pool without reading them. A full schedule that reads "
            "every file, for example once a month beside nightly fulls, makes sure the pool "
            "holds each file as it is now, whatever the cache missed.")
        form.addRow("Files:", self.read_all)
        return form

    def _build_buttons(self):
        self.status = StatusLine()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

    def _build_windows(self, grid_row):
        """The start windows: what they are, the grid and what it says."""
        windows = QWidget()
        wl = QVBoxLayout(windows)
        wl.setContentsMargins(0, 0, 0, 0)
        wl.addWidget(QLabel("<b>Start windows</b> — the hours in which backups may start "
                            "(click or drag). Without any, the schedule never starts by "
                            "itself: its backups run only when started by hand."))
        wl.itemAt(0).widget().setWordWrap(True)
        wl.addLayout(grid_row)
        wl.addWidget(self.windows_text)
        return windows

    def _lay_out(self, form, windows):
        layout = QVBoxLayout(self)
        # Wrapped notes make the dialog's own size guess short: never below what the week
        # grid and the calendar need.
        layout.setSizeConstraint(QLayout.SizeConstraint.SetMinimumSize)
        layout.addLayout(form)
        layout.addWidget(self.calendar_box)
        layout.addWidget(windows)
        layout.addStretch(1)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

    def _revalidate_on_change(self):
        self.name.textChanged.connect(self.revalidate)
        self.retention.valueChanged.connect(self.revalidate)
        self.retention_unit.currentIndexChanged.connect(self.revalidate)
        self.keep_forever.toggled.connect(self.revalidate)
        self.frequency.valueChanged.connect(self.revalidate)
        self.frequency_unit.currentIndexChanged.connect(self.revalidate)
        self.every.toggled.connect(self.revalidate)
        self.type_group.buttonToggled.connect(self.revalidate)
        self.calendar_box.on_change(self.revalidate)
        self.grid.changed.connect(self.revalidate)


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
        self.type_buttons.get(s["type"], self.type_buttons["full"]).setChecked(True)
        self.read_all.setChecked(bool(s.get("read_all")))
        # limit=False: a schedule saved before retentions were limited is shown as it is, and
        # problem() asks for a shorter one
        ret = timeutil.parse_duration(s.get("retention") or "infinite", limit=False)
        self.keep_forever.setChecked(ret is None)
        if ret is not None:
            n, u = split_duration(ret, RETENTION_UNITS)
            self.retention.setValue(n)
            self.retention_unit.setCurrentIndex(self.retention_unit.findData(u))
        else:
            self.retention.setValue(2)
            self.retention_unit.setCurrentIndex(self.retention_unit.findData("w"))
        self._retention_toggled(ret is None)
        freq = timeutil.parse_duration(s["frequency"], limit=False) if s.get("frequency") \
            else s.get("frequency_s")
        n, u = split_duration(freq or 86400, FREQUENCY_UNITS)
        self.frequency.setValue(n)
        self.frequency_unit.setCurrentIndex(self.frequency_unit.findData(u))
        calendar = s.get("calendar")
        (self.on_calendar if calendar else self.every).setChecked(True)
        self.calendar_box.set_calendar(calendar)
        self._how_often_toggled()
        self.grid.set_windows(s.get("windows") or [])

    def _retention_toggled(self, forever):
        self.retention.setEnabled(not forever)
        self.retention_unit.setEnabled(not forever)

    def _how_often_toggled(self, *_):
        every = self.every.isChecked()
        self.frequency.setEnabled(every)
        self.frequency_unit.setEnabled(every)
        self.calendar_box.setVisible(not every)
        self.how_often_text.setVisible(every)
        if self.isVisible():
            self._fit_height(shrink=True)

    def _fit_height(self, shrink=False):
        # Qt sizes a window by its layout's minimum, which counts each wrapped note as one
        # line and so squeezes the week grid: ask for the height at this width instead.
        self.layout().activate()
        need = self.layout().totalHeightForWidth(self.width())
        if need > self.height() or shrink:
            self.resize(self.width(), need)

    def showEvent(self, event):
        super().showEvent(event)
        self._fit_height()

    def schedule_type(self):
        return next(k for k, b in self.type_buttons.items() if b.isChecked())

    def schedule(self):
        """The schedule as add_schedule's arguments plus its name; "calendar" only for a
        calendar schedule, which has no frequency; "read_all" only for a full that reads
        every file."""
        s = {
            "name": self.name.text().strip(),
            "type": self.schedule_type(),
            "retention": "infinite" if self.keep_forever.isChecked()
            else f"{self.retention.value()}{self.retention_unit.currentData()}",
            "frequency": f"{self.frequency.value()}{self.frequency_unit.currentData()}",
            "windows": self.grid.windows(),
        }
        if self.read_all.isChecked() and s["type"] == "full":
            s["read_all"] = True
        if self.on_calendar.isChecked():
            s["frequency"] = None
            s["calendar"] = self.calendar_box.calendar()
            s["windows"] = daily_windows(s["windows"])
        return s

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
        for what, value in (("retention", s["retention"]), ("frequency", s["frequency"])):
            try:
                timeutil.parse_duration(value, what=what)
            except ValidationError as e:
                return f"The {e.message}: {e.hint}."
        cal = s.get("calendar")
        if cal is not None:
            if not cal["weekdays"] and not cal["monthdays"]:
                return "Check at least one weekday or day of the month, or choose “Every”."
            if not s["windows"]:
                return ("A calendar schedule needs a start window: mark the hours it may "
                        "start in on the grid below.")
            # The catalog runs a calendar day in the windows that open on it.
            opening = {w["day"] for w in s["windows"]}
            lost = [DAYS[d] for d in cal["weekdays"] if d not in opening]
            if lost:
                them = "that day" if len(lost) == 1 else "those days"
                return (f"No start window opens on {', '.join(lost)}, so the calendar would "
                        f"never run then: add a window on {them} or uncheck "
                        f"{'it' if len(lost) == 1 else 'them'}.")
        return None

    def revalidate(self, *_):
        # only a full reads files the cache would skip; incrementals read what changed
        self.read_all.setEnabled(self.schedule_type() == "full")
        self.windows_text.setText(describe(self.schedule()["windows"]))
        p = self.problem()
        if p:
            self.status.problem(p)
        else:
            self.status.clear()
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(p is None)
        if self.isVisible():
            self._fit_height()
