"""Icons and other files from resources/, found both in a source tree and in a one-folder
build (where PyInstaller unpacks data files under sys._MEIPASS)."""

import functools
import os
import sys

from PySide6.QtGui import QIcon


def resources_dir():
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle and os.path.isdir(os.path.join(bundle, "resources")):
        return os.path.join(bundle, "resources")
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "resources")


def icon_path(name):
    return os.path.join(resources_dir(), "icons", f"{name}.svg")


@functools.lru_cache(maxsize=None)
def icon(name):
    """The icon resources/icons/NAME.svg; a missing file gives an empty icon, not an error,
    so that a damaged installation still opens."""
    path = icon_path(name)
    return QIcon(path) if os.path.isfile(path) else QIcon()
