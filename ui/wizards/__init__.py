"""The setup wizards of the console: storage server, disk pool, storage unit, lifecycle,
storage unit group and policy.

    wizard = make_wizard("disk-pool", bridge, parent, server="ss1")
    wizard.created.connect(lambda kind, name: ...)
    wizard.show()

Each wizard takes presets as keyword arguments (`server=`, `pool=`, `host=`, `name=`,
`storage_unit=`, `clients=`), emits `created(kind, name)` after it created its object, and is
`busy` while a call to the master is pending. The disk pool wizard emits `continued(wizard)`
when it opens the storage unit wizard after Finish."""

from ui.wizards.common import Calls
from ui.wizards.disk_pool import DiskPoolWizard
from ui.wizards.host_dialog import AddHostDialog
from ui.wizards.lifecycle import LifecycleWizard
from ui.wizards.policy import PolicyWizard
from ui.wizards.storage_server import StorageServerWizard
from ui.wizards.storage_unit import StorageUnitWizard
from ui.wizards.stugroup import StorageUnitGroupWizard

WIZARDS = {"storage-server": StorageServerWizard, "disk-pool": DiskPoolWizard,
           "storage-unit": StorageUnitWizard, "lifecycle": LifecycleWizard,
           "storage-unit-group": StorageUnitGroupWizard, "policy": PolicyWizard}


def make_wizard(kind, bridge, parent=None, **preset):
    try:
        cls = WIZARDS[kind]
    except KeyError:
        raise KeyError(f"there is no {kind!r} wizard; choose one of: "
                       + ", ".join(WIZARDS)) from None
    return cls(bridge, parent, **preset)


def make_host_dialog(bridge, parent=None):
    """The add-host dialog on its own (File > New > Host, the hosts list's New action);
    `dialog.host` is the registered host once it was accepted."""
    calls = Calls(bridge)
    dlg = AddHostDialog(calls, parent)
    calls.setParent(dlg)
    return dlg
