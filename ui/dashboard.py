"""The dashboard: health at a glance (Master.health, as `cairn status` shows it) on one page,
the console's first page once setup is done. The open warnings first, then the last day's
jobs with one click to the failed ones (the activity monitor filtered to them) or to a job's
details, the disk pools' capacity, the hosts' state, the clients' last good backups, the
catalog backup and where alerts go.

The hosts' answers come from the master's background asks (Master.health(wait=False)): a
refresh never waits for a host, and a host not asked yet shows as "checking…"."""

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from ui import fmt
from ui.polled import PolledPage
from ui.qtcompat import emit

ERROR_COLOUR, WARNING_COLOUR, OK_COLOUR = "#c0392b", "#b9770e", "#1e8449"


def _e(v):
    return html.escape("" if v is None else str(v))


def _table(head, rows):
    cells = "".join(f"<th align='left' style='padding-right:18px'>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='padding-right:18px'>{c}</td>" for c in r)
                   + "</tr>" for r in rows)
    return f"<table cellspacing='2'><tr>{cells}</tr>{body}</table>" if rows else "<i>none</i>"


def warnings_html(doc):
    if not doc["warnings"]:
        return f"<span style='color:{OK_COLOUR}'>No open warnings.</span>"
    return "<br>".join(
        f"<span style='color:{ERROR_COLOUR if w['severity'] == 'error' else WARNING_COLOUR}'>"
        f"<b>{_e(w['severity'].capitalize())}</b></span>: {_e(w['message'])}"
        for w in doc["warnings"])


def jobs_html(j):
    def ids(key):
        return " ".join(f"<a href='job:{i}'>{i}</a>" for i in j[key][:20]) + (
            " …" if len(j[key]) > 20 else "")
    failed = (f"<a href='jobs:failed'><b style='color:{ERROR_COLOUR}'>{j['failed_24h']} "
              f"failed</b></a>" if j["failed_24h"] else "0 failed")
    lines = [f"{j['succeeded_24h']} succeeded · {failed} · {j['partial_24h']} partial · "
             f"{j['missed_24h']} missed · {j['canceled_24h']} canceled; "
             f"{j['active']} running, {j['queued']} queued"]
    for what in ("failed", "partial", "missed"):
        if j[f"{what}_ids"]:
            lines.append(f"{what.capitalize()}: {ids(what + '_ids')}")
    return "<br>".join(lines)


def pools_html(doc):
    rows = []
    for p in doc["pools"]:
        if p["size_bytes"] is None:
            why = ("its host is not reachable" if "is not reachable" in (p["error"] or "")
                   else "its host is being asked" if "not asked yet" in (p["error"] or "")
                   else p["error"] or "no volume could be measured")
            use = f"<i>not known: {_e(why)}</i>"
            rows.append([_e(p["name"]), _e(p["host"]), use, "", "", ""])
            continue
        colour = ERROR_COLOUR if p["above_high_water"] else ""
        grow = ("" if p["growth_bytes_per_day"] is None
                else f"{fmt.size(p['growth_bytes_per_day'])}/day")
        rows.append([_e(p["name"]), _e(p["host"]),
                     f"<span style='color:{colour}'>{p['used_percent']:.0f}% "
                     f"({_e(fmt.size(p['used_bytes']))} of {_e(fmt.size(p['size_bytes']))})"
                     "</span>", _e(fmt.size(p["free_bytes"])), f"{p['high_water']}%",
                     _e(grow)])
    return _table(["Pool", "Host", "Used", "Free", "High water", "Growth"], rows)


def hosts_html(doc):
    rows = []
    for h in doc["hosts"]:
        if h["reachable"] is None:
            state = "checking…"
        elif h["reachable"]:
            state = f"<span style='color:{OK_COLOUR}'>reachable</span>"
        else:
            state = f"<span style='color:{ERROR_COLOUR}'>not reachable ({_e(h['error'])})</span>"
        rows.append([_e(h["name"]), state, _e(fmt.local_time(h["last_contact"]) or "never")])
    return _table(["Host", "State", "Last contact"], rows)


def clients_html(doc):
    rows = [[_e(c["name"]), _e(fmt.local_time(c["last_successful_backup"]) or "none"),
             f"<span style='color:{WARNING_COLOUR}'>none in {doc['stale_client_days']} days"
             "</span>" if c["stale"] else ""] for c in doc["clients"]]
    return _table(["Client", "Last successful backup", ""], rows)


def catalog_html(cb):
    last = fmt.local_time(cb["last"]) if cb["last"] else "never"
    return _e(f"Last catalog backup: {last}") + (
        f" <span style='color:{WARNING_COLOUR}'>(overdue)</span>" if cb["overdue"] else "")


def alerts_html(al):
    if not al or not al["channels"]:
        return (f"<span style='color:{WARNING_COLOUR}'>No alerts are sent</span>: a failure "
                "is seen only here. <a href='alerts:'>Set up alerts…</a>")
    where = {"email": "email to {}", "syslog": "syslog ({})", "webhook": "webhook {}",
             "command": "command {}"}
    parts = [_e(where[k].format(al["to"][k])) for k in al["channels"]]
    text = "Alerts go by " + "; ".join(parts) + "."
    if al["last"]:
        text += " Last message " + _e(fmt.local_time(al["last"]))
        text += "." if not al["failed"] else (
            f": <span style='color:{ERROR_COLOUR}'>not sent by "
            f"{_e(', '.join(al['failed']))}</span>.")
    return text + " <a href='alerts:'>Alert settings…</a>"


class DashboardView(PolledPage):
    name = "dashboard"
    refresh_s = 10.0
    #: a job's row ({"id"}), to show in its details window
    job_opened = Signal(dict)
    #: the activity monitor, filtered to a state ("failed")
    jobs_requested = Signal(str)
    #: the alert settings
    alerts_requested = Signal()

    def __init__(self, bridge, parent=None):
        super().__init__(bridge, parent)
        self.loaded = False
        #: False while a host is still being asked (it shows "checking…")
        self.settled = False
        self.doc = None
        self.sections = {}
        inner = QWidget()
        lay = QVBoxLayout(inner)
        title = QLabel("<h2>Dashboard</h2>")
        lay.addWidget(title)
        for key, heading in (("warnings", "Open warnings"), ("jobs", "Jobs, last 24 hours"),
                             ("pools", "Disk pools"), ("hosts", "Hosts"),
                             ("clients", "Clients"), ("catalog", "Catalog backup"),
                             ("alerts", "Alerts")):
            head = QLabel(f"<b>{heading}</b>")
            body = QLabel("Looking…")
            body.setObjectName(f"dashboard-{key}")
            body.setTextFormat(Qt.TextFormat.RichText)
            body.setWordWrap(True)
            body.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
            body.linkActivated.connect(self.link_clicked)
            body.setContentsMargins(8, 0, 0, 10)
            lay.addWidget(head)
            lay.addWidget(body)
            self.sections[key] = body
        lay.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    def poll_call(self):
        return (lambda m: m.health(wait=False),)

    def polled(self, doc):
        self.doc = doc
        s = self.sections
        s["warnings"].setText(warnings_html(doc))
        s["jobs"].setText(jobs_html(doc["jobs"]))
        s["pools"].setText(pools_html(doc))
        s["hosts"].setText(hosts_html(doc))
        s["clients"].setText(clients_html(doc))
        s["catalog"].setText(catalog_html(doc["catalog_backup"]))
        s["alerts"].setText(alerts_html(doc.get("alerts")))
        # while hosts are still being asked, read again soon rather than in refresh_s
        checking = any(h["reachable"] is None for h in doc["hosts"])
        self.settled = not checking
        self.refresh_s = 1.0 if checking else DashboardView.refresh_s
        self.loaded = True
        emit(self.refreshed)

    def poll_failed(self, err):
        self.settled = True
        self.sections["warnings"].setText(
            f"<span style='color:{ERROR_COLOUR}'>Could not read the master: {_e(err)}</span>")
        self.loaded = True
        emit(self.refreshed)

    def link_clicked(self, link):
        kind, _, value = link.partition(":")
        if kind == "job":
            emit(self.job_opened, {"id": int(value)})
        elif kind == "jobs":
            emit(self.jobs_requested, value)
        elif kind == "alerts":
            emit(self.alerts_requested)

    def save_state(self, settings):
        pass

    def restore_state(self, settings):
        pass
