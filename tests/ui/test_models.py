"""Model sanity: Qt's own model tester (and pytest-qt's Python one) on every model, also
while rows change."""

import pytest

from catalog import add_lifecycle
from ui import job_table, views
from ui.bridge import Bridge
from ui.file_tree import ImageFilesModel
from ui.models import ObjectTableModel

pytestmark = pytest.mark.gui


def _jobs(n, state="queued"):
    return [{"id": i, "type": "backup", "state": state, "status": None, "client": "c",
             "policy": "p", "schedule": "s", "storage_unit": "u", "started": None,
             "elapsed_s": None, "files": 0, "bytes": 0, "rate_bytes_per_s": None,
             "percent": None, "eta_s": None, "wait_reason": None} for i in n]


@pytest.mark.parametrize("force_py", [False, True])
@pytest.mark.qt_log_level_fail("WARNING")
def test_object_table_model(qtmodeltester, force_py):
    model = ObjectTableModel(job_table.COLUMNS, key="id")
    qtmodeltester.check(model, force_py=force_py)
    model.set_rows(_jobs(range(1, 6)))
    changed = _jobs(range(2, 9))
    changed[0]["state"] = "active"
    model.set_rows(changed)                 # 1 removed, 2 changed, 6-8 added
    assert [model.row_dict(r)["id"] for r in range(model.rowCount())] == [2, 3, 4, 5, 6, 7, 8]
    assert model.index(0, 2).data() == "active"
    model.set_rows(_jobs([3, 5, 8]))        # removals in several runs
    assert sorted(model.row_dict(r)["id"] for r in range(model.rowCount())) == [3, 5, 8]
    model.set_rows([])
    assert model.rowCount() == 0


def test_unchanged_rows_emit_nothing(qtbot):
    model = ObjectTableModel(job_table.COLUMNS, key="id")
    model.set_rows(_jobs(range(3)))
    with qtbot.assertNotEmitted(model.dataChanged), \
            qtbot.assertNotEmitted(model.rowsInserted), \
            qtbot.assertNotEmitted(model.modelReset):
        model.set_rows(_jobs(range(3)))


def test_a_changed_cell_is_reported_alone(qtbot):
    model = ObjectTableModel(job_table.COLUMNS, key="id")
    model.set_rows(_jobs(range(3)))
    rows = _jobs(range(3))
    rows[1]["files"] = 7
    with qtbot.waitSignal(model.dataChanged) as sig:
        model.set_rows(rows)
    top, bottom = sig.args[0], sig.args[1]
    files_col = [c.key for c in model.columns].index("files")
    assert (top.row(), top.column(), bottom.row(), bottom.column()) == \
        (1, files_col, 1, files_col)


@pytest.mark.parametrize("spec", views.LIST_SPECS, ids=lambda s: s.name)
@pytest.mark.qt_log_level_fail("WARNING")
def test_every_list_model_with_catalog_rows(qtmodeltester, master, spec, tmp_path):
    add_lifecycle(master, tmp_path)
    master.create_storage_unit_group("spread", "stu1,stu2", "least-loaded")
    model = ObjectTableModel(spec.columns, key=spec.key)
    qtmodeltester.check(model)
    rows = spec.fetch(master)
    assert rows
    model.set_rows(rows)
    for r in range(model.rowCount()):
        for c in range(model.columnCount()):
            assert isinstance(model.index(r, c).data(), str)


@pytest.mark.parametrize("force_py", [False, True])
@pytest.mark.qt_log_level_fail("WARNING")
def test_image_files_model(qtmodeltester, qtbot, master, force_py):
    bridge = Bridge(master)
    try:
        model = ImageFilesModel(bridge)
        qtmodeltester.check(model, force_py=force_py)
        model.set_image(master.images()[0]["id"])
        qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=5000)
        data = model.index(0, 0)
        model.fetchMore(data)
        qtbot.waitUntil(lambda: model.rowCount(data) == 1, timeout=5000)
        projects = model.index(0, 0, data)
        model.fetchMore(projects)
        qtbot.waitUntil(lambda: model.rowCount(projects) == 1, timeout=5000)
        assert model.parent(model.index(0, 0, projects)) == projects
        model.set_image(None)
        assert model.rowCount() == 0
    finally:
        bridge.shutdown()
