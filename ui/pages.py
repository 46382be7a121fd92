"""The pages of the main window, one per navigation node (see main_window.NAVIGATION).

Each page is a QWidget with `name`, `loaded`, `due(now)`, `refresh()`, `save_state(settings)`
and `restore_state(settings)`; a page that loads more after its first refresh also has
`settled`. A page that shows jobs has an `opened(dict)` signal that opens the job's details.
`due` and `refresh` come from ui/polled.py, the refresh loop the pages share."""

from ui import views
from ui.activity import ActivityView
from ui.audit_view import AuditView
from ui.cluster_view import ClusterView
from ui.dashboard import DashboardView
from ui.restore_view import RestoreView
from ui.getting_started import GettingStartedView
from ui.reports import ReportsView


def make_pages(bridge):
    specs = {s.name: s for s in views.LIST_SPECS}
    pages = [
        views.OverviewView("overview", "Master — this catalog", "master", views.STEPS, bridge),
        DashboardView(bridge),
        GettingStartedView(bridge),
        views.OverviewView("storage", "Storage", "storage", views.STEPS[1:4], bridge),
        views.ObjectListView(specs["hosts"], bridge),
        views.ObjectListView(specs["storage-servers"], bridge),
        views.ObjectListView(specs["disk-pools"], bridge),
        views.ObjectListView(specs["storage-units"], bridge),
        views.ObjectListView(specs["lifecycles"], bridge),
        views.ObjectListView(specs["storage-unit-groups"], bridge),
        ClusterView(bridge),
        views.ObjectListView(specs["policies"], bridge),
        ActivityView(bridge),
        RestoreView(bridge),
        ReportsView(bridge),
        AuditView(bridge),
    ]
    return pages
