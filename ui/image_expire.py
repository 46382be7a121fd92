"""Expire… on the restore page's list of backup images: asks the master what goes with the
selected image (the images that depend on it, and the space they take), names them in a
confirmation, then queues the expire job. What happens is said on the page's message line;
the confirmation is opened window-modal with open(), never exec()."""

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMessageBox

from ui import fmt, roles
from ui.image_columns import image_line
from ui.qtcompat import emit
from ui.resources import icon

#: dependent images named one by one in the confirmation
EXPIRE_LISTED = 15


def _expire_preview(m, image_id):
    return m.expire_preview(image_id)


def _start_expire(m, image_id):
    return m.start_expire(image_id)


def confirmation_text(preview):
    """The confirmation's informative text: the image, those that depend on it, the space
    they take and what expiring means."""
    first, others = preview["images"][0], preview["images"][1:]
    info = image_line(first)
    if others:
        info += (f"\n\n{'This image depends' if len(others) == 1 else 'These images depend'}"
                 " on it and will be expired with it:\n"
                 + "\n".join("  " + image_line(i) for i in others[:EXPIRE_LISTED]))
        if len(others) > EXPIRE_LISTED:
            info += f"\n  … and {len(others) - EXPIRE_LISTED} more"
    else:
        info += "\n\nNo other image depends on it."
    if preview.get("bytes") is not None:
        info += (f"\n\n{'Together they take' if others else 'It takes'} "
                 f"{fmt.size(preview['bytes'])} on the disk pool.")
    info += ("\n\nExpired images are removed from their disk pool and from the catalog: "
             "their files can no longer be restored.")
    return info


class ImageExpiry(QObject):
    """The expire action of a page that lists backup images: `view` has .bridge and .image
    (the selected image's dict or None); `show_message(text, error=False)` shows what
    happens. `action` is the action to put in the page's toolbar and context menu."""

    #: an expire job was queued (its id)
    started = Signal(int)

    def __init__(self, view, show_message):
        super().__init__(view)
        self.view = view
        self.bridge = view.bridge
        self.show_message = show_message
        self.box = None     # the confirmation shown last
        self.job = None     # the expire job queued last
        self.action = roles.needs(QAction(icon("action-delete"), "Expire…", view),
                                  "start_expire")
        self.action.setToolTip("Remove the selected image from its disk pool and the "
                               "catalog, with the images that depend on it")
        self.action.setEnabled(False)
        self.action.triggered.connect(self.expire_selected)

    def expire_selected(self):
        """Asks what goes with the selected image, then for a confirmation (box)."""
        image = self.view.image
        if image is None:
            return False
        self.action.setEnabled(False)
        self.show_message(f"Looking for the images that depend on {image['id']}…")
        self.bridge.call(_expire_preview, image["id"], done=self._confirm,
                         failed=lambda e: self._failed("Cannot expire", e), context=self)
        return True

    def _confirm(self, preview):
        images = preview["images"]
        self.action.setEnabled(self.view.image is not None)
        self.show_message("")
        first, others = images[0], images[1:]
        n = len(images)
        box = QMessageBox(QMessageBox.Icon.Warning, "Expire images" if n > 1 else "Expire image",
                          f"Expire image {first['id']}"
                          + (f" and the {n - 1} images that depend on it?" if n > 2
                             else " and the image that depends on it?" if n == 2 else "?"),
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                          self.view)
        box.setObjectName("expire-confirmation")
        # wide enough that each image keeps to one line
        box.setStyleSheet("QLabel#qt_msgbox_label, QLabel#qt_msgbox_informativelabel "
                          "{ min-width: 480px; }")
        box.setInformativeText(confirmation_text(preview))
        yes = box.button(QMessageBox.StandardButton.Yes)
        yes.setText(f"Expire {n} images" if n > 1 else "Expire")
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.buttonClicked.connect(
            lambda b: self._start(first["id"], [i["id"] for i in others])
            if b is yes else None)
        if self.box is not None:
            self.box.deleteLater()
        self.box = box
        box.open()

    def _start(self, image_id, others):
        self.bridge.call(_start_expire, image_id,
                         done=lambda job_id: self._started(image_id, others, job_id),
                         failed=lambda e: self._failed("Could not start the expiry", e),
                         context=self)

    def _started(self, image_id, others, job_id):
        self.job = job_id
        more = f" and {len(others)} more" if others else ""
        self.show_message(f"Expiring image {image_id}{more} as job {job_id}: follow it in the "
                          "activity monitor.")
        emit(self.started, job_id)

    def _failed(self, prefix, err):
        self.action.setEnabled(self.view.image is not None)
        message = getattr(err, "message", str(err))
        hint = getattr(err, "hint", None)
        self.show_message(f"{prefix}: {message}" + (f" ({hint})" if hint else ""), error=True)
