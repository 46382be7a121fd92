"""Start windows on a weekly grid: 7 days by 24 hours, selected by clicking or dragging a
rectangle of cells, and their conversion to and from the catalog's window list."""

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QPainter, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from ui.qtcompat import emit

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WEEK = 7 * 24


def cells_to_windows(cells):
    """Selected (day, hour) cells as windows [{"day", "start", "hours"}]: one per run of
    consecutive hours, running on past midnight (and from Sunday into Monday)."""
    on = [False] * WEEK
    for day, hour in cells:
        on[day * 24 + hour] = True
    if all(on):
        return [{"day": 0, "start": "00:00", "hours": WEEK}]
    if not any(on):
        return []
    # Start scanning just after an unselected hour, so no run is cut at the week's end.
    first_off = on.index(False)
    windows, run_start, length = [], None, 0
    for k in range(1, WEEK + 1):
        i = (first_off + k) % WEEK
        if on[i]:
            if run_start is None:
                run_start, length = i, 0
            length += 1
        elif run_start is not None:
            windows.append({"day": run_start // 24, "start": f"{run_start % 24:02d}:00",
                            "hours": length})
            run_start = None
    windows.sort(key=lambda w: (w["day"], w["start"]))
    return windows


def daily_windows(windows):
    """Windows cut into pieces of at most a day, each starting where the last one ended. A
    calendar schedule runs in the windows that open on its days, so a run of several days
    (the whole week selected) needs a window opening on each of them."""
    out = []
    for w in windows:
        hh, mm = (int(x) for x in w["start"].split(":"))
        begin, left = w["day"] * 24 * 60 + hh * 60 + mm, round(w["hours"] * 60)
        while left > 0:
            piece = min(left, 24 * 60)
            start = begin % (WEEK * 60)
            out.append({"day": start // (24 * 60),
                        "start": f"{start // 60 % 24:02d}:{start % 60:02d}",
                        "hours": piece // 60 if piece % 60 == 0 else round(piece / 60, 4)})
            begin, left = begin + piece, left - piece
    out.sort(key=lambda w: (w["day"], w["start"]))
    return out


def windows_to_cells(windows):
    """The hours a list of windows touches, as (day, hour) cells."""
    cells = set()
    for w in windows or []:
        hh, mm = (int(x) for x in w["start"].split(":"))
        begin = w["day"] * 24 * 60 + hh * 60 + mm
        end = begin + round(w["hours"] * 60)
        h = begin // 60
        while h * 60 < end:
            cells.add(((h // 24) % 7, h % 24))
            h += 1
    return cells


def _days_text(days):
    """[0, 1, 2, 4] as `Mon–Wed, Fri`."""
    runs, out = [], []
    for d in sorted(days):
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    for run in runs:
        if len(run) >= 3:
            out.append(f"{DAYS[run[0]]}–{DAYS[run[-1]]}")
        else:
            out.extend(DAYS[d] for d in run)
    return ", ".join(out)


def describe(windows):
    """`Starts within: Mon–Fri 22:00 for 6 hours; Sat 08:00 for 12 hours.`: windows of the
    same hours on several days are named once."""
    if not windows:
        return "No start windows: this schedule runs manual backups only."
    alike = {}
    for w in windows:
        alike.setdefault((w["start"], w["hours"]), []).append(w["day"])
    parts = []
    for (start, hours), days in sorted(alike.items(), key=lambda kv: (min(kv[1]), kv[0])):
        parts.append(f"{_days_text(days)} {start} for {hours:g} "
                     f"hour{'s' if hours != 1 else ''}")
    return "Starts within: " + "; ".join(parts) + "."


class WeekGrid(QWidget):
    """Click a cell to toggle it; drag to set a rectangle of cells to the state the first
    cell was given."""

    changed = Signal()

    LABEL_W, HEADER_H = 44, 22
    CELL_W, CELL_H = 22, 22

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cells = set()
        self._anchor = None
        self._mode = None
        self._before = None
        self.setMouseTracking(False)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setToolTip("Click or drag over the hours in which backups may start.")

    def sizeHint(self):
        return QSize(self.LABEL_W + 24 * self.CELL_W + 1, self.HEADER_H + 7 * self.CELL_H + 1)

    minimumSizeHint = sizeHint

    # ---- cells --------------------------------------------------------------------------------
    def cell_rect(self, day, hour):
        return QRect(self.LABEL_W + hour * self.CELL_W, self.HEADER_H + day * self.CELL_H,
                     self.CELL_W, self.CELL_H)

    def cell_at(self, pos):
        x, y = pos.x() - self.LABEL_W, pos.y() - self.HEADER_H
        if x < 0 or y < 0:
            return None
        hour, day = int(x // self.CELL_W), int(y // self.CELL_H)
        if 0 <= hour < 24 and 0 <= day < 7:
            return day, hour
        return None

    def windows(self):
        return cells_to_windows(self.cells)

    def set_windows(self, windows):
        self.cells = windows_to_cells(windows)
        self.update()
        emit(self.changed)

    def clear(self):
        self.cells = set()
        self.update()
        emit(self.changed)

    # ---- mouse ---------------------------------------------------------------------------------
    def mousePressEvent(self, event):
        cell = self.cell_at(event.position())
        if cell is None or event.button() != Qt.MouseButton.LeftButton:
            return
        self._anchor = cell
        self._mode = cell not in self.cells
        self._before = set(self.cells)
        self._apply(cell)

    def mouseMoveEvent(self, event):
        if self._anchor is None:
            return
        cell = self.cell_at(event.position())
        if cell is not None:
            self._apply(cell)

    def mouseReleaseEvent(self, event):
        self._anchor = None

    def _apply(self, cell):
        (d0, h0), (d1, h1) = self._anchor, cell
        rect = {(d, h) for d in range(min(d0, d1), max(d0, d1) + 1)
                for h in range(min(h0, h1), max(h0, h1) + 1)}
        cells = set(self._before)
        cells = cells | rect if self._mode else cells - rect
        if cells != self.cells:
            self.cells = cells
            self.update()
            emit(self.changed)

    # ---- painting -------------------------------------------------------------------------------
    def paintEvent(self, _event):
        p = QPainter(self)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        grid = pal.color(QPalette.ColorRole.Mid)
        on = pal.color(QPalette.ColorRole.Highlight)
        off = pal.color(QPalette.ColorRole.Base)
        weekend = pal.color(QPalette.ColorRole.AlternateBase)
        font = p.font()
        font.setPointSizeF(font.pointSizeF() * 0.85)
        p.setFont(font)
        p.setPen(text)
        for hour in range(0, 24, 2):
            r = QRect(self.LABEL_W + hour * self.CELL_W - 4, 0, self.CELL_W + 8, self.HEADER_H)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, f"{hour:02d}")
        for day in range(7):
            r = QRect(0, self.HEADER_H + day * self.CELL_H, self.LABEL_W - 6, self.CELL_H)
            p.setPen(text)
            p.drawText(r, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, DAYS[day])
            for hour in range(24):
                cr = self.cell_rect(day, hour)
                p.fillRect(cr, on if (day, hour) in self.cells else
                           weekend if day >= 5 else off)
                p.setPen(grid)
                p.drawRect(cr)
        p.end()
