"""The restore page's point in time, "Files as of": Newest, or a moment, for which the
client's newest image made at or before it is looked up (on the bridge's threads) for the page
to select, so that its files show the client as it was then."""

from PySide6.QtCore import QDateTime, QObject, Signal
from PySide6.QtWidgets import QComboBox, QDateTimeEdit, QHBoxLayout, QLabel

from app import timeutil
from app.errors import NotFound
from ui import fmt
from ui.qtcompat import emit

AT_FORMAT = "yyyy-MM-dd HH:mm"


def _image_at(m, client, at):
    """The client's newest image at or before `at`, or None when it has none then."""
    try:
        return m.image_at(client, at=at)
    except NotFound:
        return None


class PointInTime(QObject):
    """The point in time (the image that was the newest at a moment): `bar` holds "Files as
    of", the choice (`point`) and the moment (`at`), a row of its own so that the page stays
    as narrow as a small window; the page puts Expire at its end. `client()` gives the
    client whose images are looked up, or None."""

    #: the image of the chosen point in time (its id), for the page to select
    found = Signal(str)
    #: a sentence for the page's message line, and whether it tells of an error
    message = Signal(str, bool)

    def __init__(self, bridge, client, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.client = client
        self.busy = False           # an image is being looked up
        self._generation = 0
        self.point = QComboBox()
        self.point.setObjectName("restore-point")
        self.point.addItem("Newest", None)
        self.point.addItem("At a time", "at")
        self.point.setToolTip("Shows the files as they were at a moment: selects the client's "
                              "newest image made at or before it")
        self.at = QDateTimeEdit(QDateTime.currentDateTime())
        self.at.setObjectName("restore-at")
        self.at.setCalendarPopup(True)
        self.at.setDisplayFormat(AT_FORMAT)
        self.at.setEnabled(False)
        self.bar = QHBoxLayout()
        self.bar.addWidget(QLabel("Files as of"))
        self.bar.addWidget(self.point)
        self.bar.addWidget(self.at)
        self.bar.addStretch(1)
        self.point.currentIndexChanged.connect(self._point_changed)
        self.at.dateTimeChanged.connect(self._point_changed)

    def point_in_time(self):
        """The chosen moment as an ISO time, or None for the newest image."""
        if self.point.currentData() != "at":
            return None
        # The edit shows minutes: 20:00 takes in the images made during that minute.
        start = self.at.dateTime().toSecsSinceEpoch()
        return timeutil.iso(start - start % 60 + 59)

    def set_point_in_time(self, when):
        """`when`: None for the newest image, or seconds since the epoch."""
        self.at.blockSignals(True)
        if when is not None:
            self.at.setDateTime(QDateTime.fromSecsSinceEpoch(int(when)))
        self.at.blockSignals(False)
        index = self.point.findData(None if when is None else "at")
        if index != self.point.currentIndex():
            self.point.setCurrentIndex(index)   # _point_changed goes on
        else:
            self._point_changed()

    def client_changed(self):
        """At a time, looks up the new client's image of that time."""
        if self.point.currentData() == "at":
            self.go_to_point_in_time()

    def _point_changed(self, *_):
        self.at.setEnabled(self.point.currentData() == "at")
        self.go_to_point_in_time()

    def go_to_point_in_time(self):
        """Selects the client's newest image made at or before the chosen moment: looks it
        up, and the page selects what `found` names; False when there is no client."""
        client = self.client()
        if client is None:
            return False
        self._generation += 1
        gen, at = self._generation, self.point_in_time()
        shown = self.at.dateTime().toString(AT_FORMAT) if at else None
        self.busy = True
        self.bridge.call(_image_at, client, at,
                         done=lambda image: self._point_found(gen, client, shown, image),
                         failed=lambda err: self._point_failed(gen, err), context=self)
        return True

    def _point_found(self, gen, client, shown, image):
        if gen != self._generation:
            return
        self.busy = False
        if image is None:
            self._say(f"Client {client} has no image at or before {shown}: choose "
                      "a later time, or Newest." if shown else
                      f"Client {client} has no image.", error=True)
            return
        if shown is None:
            self._say("")
        else:
            self._say(f"The newest image at or before {shown} is {image['id']}, "
                      f"from {fmt.local_time(image['created'])}: its files show the "
                      "client as it was then.")
        emit(self.found, image["id"])

    def _point_failed(self, gen, err):
        if gen != self._generation:
            return
        self.busy = False
        message = getattr(err, "message", str(err))
        self._say(f"Cannot find the image of that time: {message}", error=True)

    def _say(self, text, error=False):
        emit(self.message, text, error)
