"""Light and dark palettes that follow the desktop.

The Fusion style is used everywhere so the console looks the same on every desktop. Qt
reports the desktop's colour scheme; when it is dark but the platform gave no dark palette
(common with Fusion outside KDE), a dark palette is set here. CAIRN_CONSOLE_THEME=dark|light
forces one, e.g. for screenshots."""

import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette


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
    app.setStyle("Fusion")

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
