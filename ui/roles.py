"""What the console shows of itself to the user it acts for: an action or a button tagged
with the master method it calls (needs()) is hidden when the user's role may not call it
(Master.whoami's `can`). The master refuses such a call in any case (app/access.py); the
embedded console's local admin may call everything, so for it nothing changes."""

from PySide6.QtCore import QObject

PROPERTY = "cairn_needs"

#: the master method each kind's wizard ends in
CREATE = {"host": "add_host", "storage-server": "create_storage_server",
          "disk-pool": "create_disk_pool", "storage-unit": "create_storage_unit",
          "lifecycle": "create_lifecycle", "storage-unit-group": "create_storage_unit_group",
          "policy": "create_policy"}


def needs(obj, method):
    """Tags an action or a widget with the master method it calls; returns it."""
    if obj is not None:
        obj.setProperty(PROPERTY, method)
    return obj


def apply(root, can):
    """Hides what under `root` needs a method outside `can`; returns what it hid."""
    hidden = []
    for obj in [root] + root.findChildren(QObject):
        method = obj.property(PROPERTY) if hasattr(obj, "property") else None
        if method and method not in can and hasattr(obj, "setVisible"):
            obj.setVisible(False)
            hidden.append(obj)
    return hidden
