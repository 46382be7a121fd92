"""The getting-started page: the four setup steps (disk storage server, disk pool, storage
unit, backup policy) as large actions, each saying whether it is done, the next one
highlighted. Each action opens the step's wizard through the main window."""

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QPushButton, \
    QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from ui import roles
from ui.qtcompat import emit
from ui.resources import icon
from ui.views import CatalogCountsPage

# (wizard kind, count key, title, what it is, button text, word for the count)
STEPS = (
    ("storage-server", "storage_servers", "Configure a disk storage server",
     "A host plus a storage type: AdvancedDisk writes plain backup images as files on a "
     "mounted file system, such as a GPFS mount; dedup keeps a deduplicating pool there, "
     "which stores each piece of data once, compressed (and encrypted if you choose), so "
     "that nightly fulls take little new space.",
     "Configure a storage server…", "storage server"),
    ("disk-pool", "disk_pools", "Configure a disk pool",
     "One or more volumes (directories on mounted file systems) of the storage server, with "
     "high and low water marks and a limit on I/O streams.",
     "Configure a disk pool…", "disk pool"),
    ("storage-unit", "storage_units", "Create a storage unit",
     "What policies write to: a disk pool plus limits, such as how many backups may run on "
     "it at once.",
     "Create a storage unit…", "storage unit"),
    ("policy", "policies", "Create a backup policy",
     "What is backed up (clients and their directories), when (schedules with start "
     "windows and retention) and where to (a storage unit).",
     "Create a policy…", "policy"),
)


def _plural(n, word):
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


class StepCard(QFrame):
    def __init__(self, number, step, parent=None):
        super().__init__(parent)
        self.kind, self.key, title, text, button, self.word = step
        self.setObjectName(f"step-{self.kind}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        # as tall as its wrapped text needs at the width it gets (a Maximum policy capped it
        # at the height of a wide window and cut the text off on a narrow one)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

        num = QLabel(str(number))
        num.setAlignment(Qt.AlignmentFlag.AlignCenter)
        num.setFixedSize(34, 34)
        f = num.font()
        f.setPointSizeF(f.pointSizeF() * 1.3)
        f.setBold(True)
        num.setFont(f)
        self.number = num
        pic = QLabel()
        pic.setPixmap(icon(self.kind).pixmap(32, 32))
        head = QLabel(title)
        f = head.font()
        f.setPointSizeF(f.pointSizeF() * 1.15)
        f.setBold(True)
        head.setFont(f)
        about = QLabel(text)
        about.setWordWrap(True)
        self.state = QLabel("…")
        self.state.setTextFormat(Qt.TextFormat.RichText)
        self.button = QPushButton(icon("action-new"), button)
        self.button.setObjectName(f"start-{self.kind}")
        roles.needs(self.button, roles.CREATE.get(self.kind, "add_host"))
        self.button.setMinimumHeight(34)
        self.button.setMinimumWidth(self.button.fontMetrics().horizontalAdvance(button) + 60)

        grid = QGridLayout(self)
        grid.setContentsMargins(12, 10, 12, 10)
        grid.setHorizontalSpacing(12)
        grid.addWidget(num, 0, 0, 2, 1, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(pic, 0, 1, 2, 1, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(head, 0, 2)
        grid.addWidget(self.button, 0, 3, 2, 1, Qt.AlignmentFlag.AlignVCenter)
        grid.addWidget(about, 1, 2)
        grid.addWidget(self.state, 2, 2)
        grid.setColumnStretch(2, 1)

    def show_count(self, n, is_next):
        if n:
            self.state.setText(f"<span style='color:#2f7d46'>✔ Done</span> — "
                               f"{html.escape(_plural(n, self.word))}")
        elif is_next:
            self.state.setText("<b>Next step</b>")
        else:
            self.state.setText("Not done yet")
        self.button.setDefault(is_next)
        pal = self.palette()
        if n:
            color = "#2f7d46"
        else:
            color = pal.color(pal.ColorRole.Highlight if is_next else pal.ColorRole.Mid).name()
        self.number.setStyleSheet(f"border: 2px solid {color}; border-radius: 17px;"
                                  + (f"color: {color};" if is_next or n else ""))


class GettingStartedView(CatalogCountsPage):
    #: the admin chose a step: the wizard kind to open
    wizard_requested = Signal(str)
    refresh_s = 3.0

    def __init__(self, bridge, parent=None):
        super().__init__("getting-started", bridge, parent)

        title = QLabel("Getting started")
        f = title.font()
        f.setPointSizeF(f.pointSizeF() * 1.5)
        f.setBold(True)
        title.setFont(f)
        logo = QLabel()
        logo.setPixmap(icon("cairn").pixmap(40, 40))
        head = QHBoxLayout()
        head.addWidget(logo)
        head.addWidget(title, 1)
        intro = QLabel("Four steps set up where backups go and what is backed up. Each opens "
                       "a wizard that checks every choice on the hosts themselves.")
        intro.setWordWrap(True)

        self.cards = [StepCard(i + 1, s) for i, s in enumerate(STEPS)]
        for card in self.cards:
            card.button.clicked.connect(lambda _=False, k=card.kind: self.request(k))
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)

        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(16, 12, 16, 12)
        lay.setSpacing(10)
        lay.addLayout(head)
        lay.addWidget(intro)
        lay.addSpacing(4)
        for card in self.cards:
            lay.addWidget(card)
        lay.addSpacing(4)
        lay.addWidget(self.summary)
        lay.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    def request(self, kind):
        emit(self.wizard_requested, kind)

    def show_counts(self, c):
        next_kind = next((card.kind for card in self.cards if not c[card.key]), None)
        for card in self.cards:
            card.show_count(c[card.key], card.kind == next_kind)
        if next_kind is None:
            self.summary.setText(
                "<b>Setup is complete.</b> Start a backup from <i>Policies</i> (select a "
                "policy, then <i>Back up now</i>), watch it in the <i>Activity monitor</i>, "
                f"and restore from <i>Backup &amp; restore</i>. The catalog holds "
                f"{_plural(c['images'], 'backup image')}.")
        else:
            self.summary.setText("")

    def show_error(self, text):
        self.summary.setText(html.escape(text))
