"""Throughput plots (pyqtgraph) in the console's palette: the data rate of all jobs in the
activity monitor, and of one job in its details window.

Rates are shown in MiB/s, the binary units the tables use. Colours come from the widget's
QPalette (ui/theme.py sets a light or a dark one) and follow it when it changes."""

import time

import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QPalette

# pyqtgraph repaints through void Qt calls; this PySide6's reference fault must be handled
# before the first plot exists (see ui.qtcompat).
import ui.qtcompat  # noqa: F401,E402

MiB = float(1 << 20)


def _clock_text(seconds):
    seconds = int(round(seconds))
    h, rest = divmod(abs(seconds), 3600)
    m, s = divmod(rest, 60)
    sign = "-" if seconds < 0 else ""
    return f"{sign}{h}:{m:02d}:{s:02d}" if h else f"{sign}{m}:{s:02d}"



def throughput_axes(pi, bottom):
    """A plot item that shows, never edits: no buttons, menu or mouse panning; a grid, MiB/s
    up the left and `bottom` along the bottom."""
    pi.hideButtons()
    pi.setMenuEnabled(False)
    pi.setMouseEnabled(x=False, y=False)
    pi.showGrid(x=True, y=True, alpha=0.25)
    pi.setLabel("left", "Throughput (MiB/s)")
    pi.setLabel("bottom", bottom)
    return pi

class ElapsedAxis(pg.AxisItem):
    """Seconds since a job started as m:ss (h:mm:ss past an hour), ticks on round minutes."""

    STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
             14400, 28800)

    def tickSpacing(self, minVal, maxVal, size):
        span = max(maxVal - minVal, 1e-9)
        # room for a label like 12:30 every ~80 pixels
        want = span * 80.0 / max(size, 1.0)
        major = next((s for s in self.STEPS if s >= want), self.STEPS[-1])
        return [(major, 0)]

    def tickStrings(self, values, scale, spacing):
        if spacing < 1:  # a job of a second or less: tenths of a second
            return [f"{v:.1f} s" for v in values]
        return [_clock_text(v) for v in values]


class ThroughputPlot(pg.PlotWidget):
    """One rate curve (bytes/s in, MiB/s shown) with its area filled, in the palette's colours.

    `clock=True`: the x axis shows the local time of day (the activity monitor);
    otherwise time since the job started (a job's details)."""

    def __init__(self, title="", clock=False, parent=None):
        axis = pg.DateAxisItem(orientation="bottom") if clock else ElapsedAxis("bottom")
        # m:ss labels carry their own unit; a "(x0.001)" scale beside them reads as nonsense
        axis.enableAutoSIPrefix(False)
        super().__init__(parent=parent, axisItems={"bottom": axis})
        self.setObjectName("throughput-plot")
        self.clock = clock
        self.title = title
        pi = throughput_axes(self.getPlotItem(), "Local time" if clock
                             else "Time since the job started (m:ss)")
        pi.getAxis("left").setWidth(56)
        self.curve = pi.plot([], [], fillLevel=0)
        self.curve.setClipToView(True)
        self._xs, self._ys = [], []
        self._span = None
        self.setMinimumHeight(150)
        self._apply_palette()

    # ---- data -----------------------------------------------------------------------------
    def set_points(self, points, span=None):
        """(t, bytes_per_s) points. `span` (seconds) fixes the x range to the last `span`
        seconds up to the newest point (the activity monitor's moving window)."""
        self._xs = [float(t) for t, _ in points]
        self._ys = [r / MiB for _, r in points]
        self._span = span
        self.curve.setData(self._xs, self._ys)
        self._fit()

    @property
    def points(self):
        return list(zip(self._xs, self._ys))

    def _fit(self):
        vb = self.getPlotItem().getViewBox()
        top = max(self._ys, default=0.0)
        top = _nice_top(top)
        # a little below 0, so that the axis labels its 0 (pyqtgraph drops a label on the edge)
        vb.setYRange(-top * 0.04, top, padding=0)
        if self._xs:
            right = self._xs[-1]
            left = right - self._span if self._span else self._xs[0]
        else:
            right = time.time() if self.clock else 60.0
            left = right - (self._span or 60.0)
        if right <= left:
            right = left + 1.0
        vb.setXRange(left, right, padding=0)

    # ---- palette --------------------------------------------------------------------------
    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) \
                and hasattr(self, "curve"):     # not while pyqtgraph builds the widget
            self._apply_palette()

    def _apply_palette(self):
        pal = self.palette()
        base = pal.color(QPalette.ColorRole.Base)
        text = pal.color(QPalette.ColorRole.Text)
        muted = pal.color(QPalette.ColorRole.PlaceholderText)
        line = QColor(pal.color(QPalette.ColorRole.Highlight))
        self.setBackground(base)
        pi = self.getPlotItem()
        for name in ("left", "bottom"):
            ax = pi.getAxis(name)
            ax.setPen(pg.mkPen(muted))
            ax.setTextPen(pg.mkPen(text))
            ax.label.setDefaultTextColor(text)
        fill = QColor(line)
        fill.setAlpha(70)
        self.curve.setPen(pg.mkPen(line, width=2))
        self.curve.setBrush(pg.mkBrush(fill))
        self.colors = {"background": base, "text": text, "line": line}


def _nice_top(value):
    """A round upper bound for the y axis a little above `value` (at least 1 MiB/s)."""
    if value <= 1.0:
        return 1.0
    v = value * 1.15
    mag = 10 ** (len(str(int(v))) - 1)
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * mag >= v:
            return m * mag
    return 10 * mag

