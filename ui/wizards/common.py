"""What the setup wizards share: calls to the master that the wizard counts (so that it knows
when it is busy), the status line of a page (busy bar, problem, error with its hint), pages
that gate Next on their own check, and the summary and result pages every wizard ends with."""

import html
import re

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QProgressBar, \
    QSizePolicy, QVBoxLayout, QWidget, QWizard, QWizardPage

from app.config import check_name
from app.errors import ValidationError
from ui.qtcompat import emit
from ui.resources import icon

MIN_SIZE = (780, 560)


class Calls(QObject):
    """Master calls through the bridge, counted until their result arrives."""

    changed = Signal()

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.pending = 0

    def run(self, fn, *args, done=None, failed=None, context=None):
        self.pending += 1
        emit(self.changed)

        def finish(callback):
            def deliver(result):
                self.pending -= 1
                emit(self.changed)
                if callback is not None:
                    callback(result)
            return deliver

        call_id = self.bridge.call(fn, *args, done=finish(done), failed=finish(failed),
                                   context=context)
        if call_id is None:  # the bridge is shut down: nothing will come back
            self.pending -= 1
            emit(self.changed)
        return call_id


def message_of(error):
    """(message, hint) of a CallError or CairnError."""
    return getattr(error, "message", str(error)), getattr(error, "hint", None)


class StatusLine(QWidget):
    """One line under a page's fields: a busy bar with what is being done, the reason why the
    page cannot go on, or an error with its hint."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, 0)
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(90)
        self.bar.setFixedHeight(14)
        self.icon = QLabel()
        self.icon.setFixedSize(18, 18)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 4, 0, 0)
        row.addWidget(self.bar, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.label, 1)
        self.kind = None
        self.clear()

    @property
    def text(self):
        return self.label.text()

    def plain_text(self):
        doc = self.label.text().replace("<br>", "\n")
        return html.unescape(re.sub(r"<[^>]+>", "", doc))

    def _show(self, kind, rich, icon_name=None):
        self.kind = kind
        self.bar.setVisible(kind == "busy")
        self.icon.setVisible(icon_name is not None)
        if icon_name:
            self.icon.setPixmap(icon(icon_name).pixmap(16, 16))
        self.label.setText(rich)
        self.setVisible(bool(rich) or kind == "busy")

    def busy(self, text):
        self._show("busy", html.escape(text))

    def problem(self, text):
        self._show("problem", html.escape(text), "wizard-problem")

    def info(self, text):
        self._show("info", html.escape(text))

    def error(self, error, prefix=None):
        message, hint = message_of(error)
        text = f"{prefix}: {message}" if prefix else message
        rich = f"<b>{html.escape(text)}</b>"
        if hint:
            rich += f"<br>{html.escape(hint)}"
        self._show("error", rich, "state-failed")

    def ok(self, text):
        self._show("ok", html.escape(text), "state-ok")

    def clear(self):
        self._show(None, "")


class Page(QWizardPage):
    """A page whose Next/Finish is enabled only while problem() is None and nothing it needs
    is still loading; the status line under its fields says why not."""

    def __init__(self, title, subtitle=None):
        super().__init__()
        self.setTitle(title)
        if subtitle:
            self.setSubTitle(subtitle)
        self.body = QVBoxLayout()
        self.status = StatusLine()
        outer = QVBoxLayout(self)
        outer.addLayout(self.body, 1)
        outer.addWidget(self.status)
        self.loading = None      # what is being loaded, shown as busy
        self.load_error = None   # a failed load, shown with its hint

    # ---- to override --------------------------------------------------------------------
    def problem(self):
        return None

    # ---- validation ---------------------------------------------------------------------
    def isComplete(self):
        return self.loading is None and self.load_error is None and self.problem() is None

    def revalidate(self, *_):
        if self.loading is not None:
            self.status.busy(self.loading)
        elif self.load_error is not None:
            self.status.error(self.load_error)
        else:
            p = self.problem()
            if p:
                self.status.problem(p)
            else:
                self.status.clear()
        emit(self.completeChanged)

    def start_loading(self, text):
        self.loading, self.load_error = text, None
        self.revalidate()

    def loaded(self, error=None):
        self.loading, self.load_error = None, error
        self.revalidate()

    def call(self, fn, *args, done=None, failed=None):
        return self.wizard_calls().run(fn, *args, done=done, failed=failed, context=self)

    def wizard_calls(self):
        return self._calls

    def attach(self, calls):
        self._calls = calls


def name_problem(kind, name, existing):
    """Why `name` cannot be the name of a new object of `kind`, or None."""
    if not name:
        return f"Give the {kind} a name."
    try:
        check_name(kind, name)
    except ValidationError as e:
        return f"{e.message[0].upper()}{e.message[1:]}: {e.hint}."
    if name in existing:
        return f"A {kind} named '{name}' already exists."
    return None


def narrow(spin, width=110):
    """Spin boxes as wide as their numbers, not as the page."""
    spin.setMaximumWidth(width)
    return spin


def fit_combo(combo):
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
    combo.setMinimumContentsLength(24)
    return combo


def disabled_check(text, reason):
    """A checkbox for a feature this version does not have: shown, off, and saying why."""
    box = QCheckBox(f"{text} — {reason}")
    box.setEnabled(False)
    box.setToolTip(reason)
    return box


def note(text):
    """A grey explanatory line."""
    label = QLabel(text)
    label.setWordWrap(True)
    pal = label.palette()
    pal.setColor(label.foregroundRole(), pal.color(pal.ColorRole.PlaceholderText))
    label.setPalette(pal)
    return label


class SummaryPage(Page):
    """What will be created, as label/value rows from the wizard's summary()."""

    def __init__(self, what):
        super().__init__("Summary", f"Check what will be created, then click Create to create "
                                    f"the {what}.")
        # One rich-text label rather than a form: long values (schedules, volumes) wrap and
        # keep their full height.
        self.table = QLabel()
        self.table.setWordWrap(True)
        self.table.setTextFormat(Qt.TextFormat.RichText)
        self.table.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.body.addWidget(self.table)
        self.body.addStretch(1)
        self._rows = []
        self.setButtonText(QWizard.WizardButton.NextButton, "&Create")

    def initializePage(self):
        self._rows = [(f"{label}:", value) for label, value in self.wizard().summary()]
        cells = "".join(
            "<tr><td align='right' style='padding:2px 10px 2px 0'><b>"
            + html.escape(label) + "</b></td><td style='padding:2px 0'>"
            + html.escape(value).replace("\n", "<br>") + "</td></tr>"
            for label, value in self._rows)
        self.table.setText(f"<table cellspacing='0'>{cells}</table>")
        self.revalidate()

    def rows(self):
        return list(self._rows)


class ResultPage(Page):
    """Runs the wizard's create() on a worker when shown; Finish once it succeeded. A failure
    stays on this page with the error and its hint, and Back leads to the fields to fix."""

    def __init__(self, what):
        super().__init__("Result", f"Creating the {what} in the catalog.")
        self.what = what
        self.result = None
        self.error = None
        self.headline = QLabel()
        self.headline.setWordWrap(True)
        self.body.addWidget(self.headline)
        self.body.addWidget(self.status)   # the outcome right under the headline
        self.body.addStretch(1)

    def initializePage(self):
        w = self.wizard()
        w.setOption(QWizard.WizardOption.NoBackButtonOnLastPage, False)
        w.button(QWizard.WizardButton.CancelButton).show()
        self.setSubTitle(f"Creating the {self.what} in the catalog.")
        self.result, self.error = None, None
        self.headline.setText(f"Creating the {self.what}…")
        self.start_loading(f"Creating the {self.what}…")
        fn, args = w.create_call()
        self.call(fn, *args, done=self._created, failed=self._failed)

    def _created(self, result):
        w = self.wizard()
        self.result = result
        self.loaded()
        # Created is final: going back would only offer to create it twice.
        w.setOption(QWizard.WizardOption.NoBackButtonOnLastPage, True)
        name = w.created_name()
        self.headline.setText(f"The {self.what} '{name}' was created.")
        self.setSubTitle(f"The {self.what} is in the catalog.")
        # nothing is left to cancel: Finish closes the wizard
        w.button(QWizard.WizardButton.CancelButton).hide()
        self.status.ok(w.result_text(result))
        w.on_created(result)

    def _failed(self, error):
        self.error = error
        self.loaded()
        self.headline.setText(f"The {self.what} was not created. Go Back to change what the "
                              "error names, then create it again.")
        self.setSubTitle(f"The {self.what} was not created.")
        self.status.error(error)

    def revalidate(self, *_):
        if self.loading is not None:
            self.status.busy(self.loading)
        emit(self.completeChanged)

    def isComplete(self):
        return self.result is not None


class WizardBase(QWizard):
    """A setup wizard: counts its master calls (busy), ends with summary and result pages and
    reports what it created through `created(kind, name)`."""

    created = Signal(str, str)
    busy_changed = Signal(bool)

    KIND = ""       # as in WIZARDS: "disk-pool", ...
    WHAT = ""       # as the user reads it: "disk pool"

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.calls = Calls(bridge, self)
        self.calls.changed.connect(lambda: emit(self.busy_changed, self.busy))
        self.created_result = None
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setMinimumSize(*MIN_SIZE)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        self.setOption(QWizard.WizardOption.HaveHelpButton, False)
        self.setWindowIcon(icon(self.KIND_ICON))

    KIND_ICON = "cairn"

    @property
    def busy(self):
        return self.calls.pending > 0

    def add(self, page_id, page):
        page.attach(self.calls)
        self.setPage(page_id, page)
        return page

    # ---- what each wizard provides -----------------------------------------------------------
    def summary(self):
        return []

    def create_call(self):
        """(fn, args): the one worker call that creates everything."""
        raise NotImplementedError

    def created_name(self):
        raise NotImplementedError

    def result_text(self, result):
        return "Done."

    def on_created(self, result):
        self.created_result = result
        emit(self.created, self.KIND, self.created_name())
