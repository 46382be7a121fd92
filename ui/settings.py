"""What the console remembers between runs (the window's layout, each page's columns and
splitters, the activity monitor's saved filters): one QSettings store, which the pages and
the main window open alike."""

from PySide6.QtCore import QSettings

SETTINGS_ORG, SETTINGS_APP = "Cairn", "console"


def settings():
    return QSettings(SETTINGS_ORG, SETTINGS_APP)
