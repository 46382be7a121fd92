"""Light and dark palettes that follow the desktop.

The Fusion style is used everywhere so the console looks the same on every desktop. Qt
reports the desktop's colour scheme; when it is dark but the platform gave no dark palette
(common with Fusion outside KDE), a dark palette is set here. CAIRN_CONSOLE_THEME=dark|light
forces one, e.g. for screenshots."""

import os

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QProxyStyle, QStyle, QStyleFactory

_PE = QStyle.PrimitiveElement
_INDICATORS = (_PE.PE_IndicatorCheckBox, _PE.PE_IndicatorItemViewItemCheck,
               _PE.PE_IndicatorRadioButton)


def _is_dark(palette):
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def dark_palette():
    p = QPalette()
    window, base, text = QColor(45, 47, 51), QColor(30, 32, 35), QColor(224, 226, 229)
    disabled = QColor(128, 131, 136)
    roles = {
        QPalette.ColorRole.Window: window,
        QPalette.ColorRole.WindowText: text,
        QPalette.ColorRole.Base: base,
        QPalette.ColorRole.AlternateBase: QColor(38, 40, 44),
        QPalette.ColorRole.ToolTipBase: QColor(55, 58, 63),
        QPalette.ColorRole.ToolTipText: text,
        QPalette.ColorRole.PlaceholderText: QColor(150, 153, 158),
        QPalette.ColorRole.Text: text,
        QPalette.ColorRole.Button: QColor(53, 56, 61),
        QPalette.ColorRole.ButtonText: text,
        QPalette.ColorRole.BrightText: QColor(255, 90, 90),
        QPalette.ColorRole.Light: QColor(70, 73, 78),
        QPalette.ColorRole.Midlight: QColor(60, 63, 68),
        QPalette.ColorRole.Mid: QColor(40, 42, 46),
        QPalette.ColorRole.Dark: QColor(25, 26, 29),
        QPalette.ColorRole.Shadow: QColor(0, 0, 0),
        QPalette.ColorRole.Highlight: QColor(42, 110, 187),
        QPalette.ColorRole.HighlightedText: QColor(255, 255, 255),
        QPalette.ColorRole.Link: QColor(110, 170, 240),
        QPalette.ColorRole.LinkVisited: QColor(170, 140, 230),
    }
    for role, color in roles.items():
        p.setColor(role, color)
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text,
                 QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return p


class IndicatorStyle(QProxyStyle):
    """Fusion, with check boxes and radio buttons that can be seen on a dark palette: Fusion
    outlines them in the window colour darkened, which on a dark base is all but black on
    black (the restore tree's check boxes vanished). Their outline is drawn again in the
    placeholder text colour there."""

    def __init__(self):
        super().__init__(QStyleFactory.create("Fusion"))

    def drawPrimitive(self, element, option, painter, widget=None):
        super().drawPrimitive(element, option, painter, widget)
        if element not in _INDICATORS or not _is_dark(option.palette):
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.setPen(QPen(option.palette.color(QPalette.ColorRole.PlaceholderText), 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        side = min(option.rect.width(), option.rect.height()) - 1
        r = QRect(0, 0, side, side)
        r.moveCenter(option.rect.center())
        if element == _PE.PE_IndicatorRadioButton:
            painter.drawEllipse(r.adjusted(1, 1, -1, -1))
        else:
            painter.drawRoundedRect(r, 2, 2)
        painter.restore()


def wanted_scheme(app):
    forced = os.environ.get("CAIRN_CONSOLE_THEME", "").strip().lower()
    if forced in ("dark", "light"):
        return forced
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return "dark"
    if scheme == Qt.ColorScheme.Light:
        return "light"
    return None


def apply(app):
    app.setStyle(IndicatorStyle())

    def update(*_):
        # An empty palette resolves to the platform's again, so a later change of the
        # desktop's scheme is followed rather than masked by what was set before.
        app.setPalette(QPalette())
        platform = app.palette()
        scheme = wanted_scheme(app)
        if scheme == "dark" and not _is_dark(platform):
            app.setPalette(dark_palette())
        elif scheme == "light" and _is_dark(platform):
            app.setPalette(app.style().standardPalette())

    update()
    app.styleHints().colorSchemeChanged.connect(update)
