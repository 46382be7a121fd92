"""The restore browser over real backups: a full, then a differential after the tree changed.
Choosing a point in time selects the image that was the newest then and shows the tree as it
was; the image list names each image's level; expiring the full from the list names the
differential that goes with it, and the expire job shows in the activity monitor."""

import os

import pytest

from app import status as st
from app import timeutil
from app.master import Master

pytestmark = pytest.mark.gui

DAY = 86400


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def two_backups(tmp_path):
    """(master, source dir, full image, differential image). The full is dated 40 days back
    in the catalog, as if the tree had changed that long after it, and outside the 30 days
    the browser lists at first."""
    src, vol = str(tmp_path / "src"), tmp_path / "vol"
    vol.mkdir()
    write(f"{src}/docs/a.txt", "first\n")
    write(f"{src}/docs/keep.txt", "kept\n")
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    m.config.add_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", "me")
    m.config.add_policy_selection("p1", src)
    m.config.add_schedule("p1", "full", type="full")
    m.config.add_schedule("p1", "diff", type="differential")
    [job] = m.wait_for(m.start_backup("p1", schedule="full"))
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    full = m.images()[0]
    os.unlink(f"{src}/docs/a.txt")
    write(f"{src}/docs/b.txt", "second\n")
    [job] = m.wait_for(m.start_backup("p1", schedule="diff"))
    assert job["status"] == st.OK, m.jobs.logs(job["id"])
    diff = next(i for i in m.images() if i["id"] != full["id"])
    assert diff["schedule_type"] == "differential" and diff["base_image"] == full["id"]
    with m.db.tx() as c:
        c.execute("UPDATE images SET created=? WHERE id=?",
                  (timeutil.iso(timeutil.parse_iso(full["created"]) - 40 * DAY), full["id"]))
    yield m, src, m.image(full["id"]), m.image(diff["id"])
    m.close()


def open_page(make_console, m, qtbot, **kw):
    c = make_console(m, **kw)
    c.window.confirm_close_with_running_jobs = False
    c.window.select_view("restore")
    v = c.window.views["restore"]
    qtbot.waitUntil(lambda: v.loaded and v.files.image_id is not None, timeout=5000)
    return c, v


def names_in(v, qtbot, path):
    """The names the tree lists in directory `path` of the image shown."""
    v.files.reveal(path)
    qtbot.waitUntil(lambda: v.files.index_of_path(path).isValid() and not v.files.loading,
                    timeout=5000)
    parent = v.files.index_of_path(path)
    return sorted(v.files.index(r, 0, parent).data() for r in range(v.files.rowCount(parent)))


def level_of(v, image_id):
    from ui.image_columns import IMAGE_COLUMNS
    column = [c.key for c in IMAGE_COLUMNS].index("schedule_type")
    return v.model.index(v.model.row_of(image_id), column).data()


def test_a_point_in_time_selects_the_image_newest_then(make_console, two_backups, qtbot):
    m, src, full, diff = two_backups
    c, v = open_page(make_console, m, qtbot)
    # at first: the newest image of the last 30 days, with the tree of now
    assert v.image["id"] == diff["id"] and v.as_of.point.currentData() is None
    assert v.model.row_of(full["id"]) is None
    assert level_of(v, diff["id"]) == "Differential"
    assert names_in(v, qtbot, src + "/docs") == ["b.txt", "keep.txt"]

    # a day after the full: the full, found beyond the dates listed, with the tree of then
    v.as_of.set_point_in_time(timeutil.parse_iso(full["created"]) + DAY)
    qtbot.waitUntil(lambda: v.image is not None and v.image["id"] == full["id"],
                    timeout=5000)
    assert v.images.all_dates.isChecked()
    assert level_of(v, full["id"]) == "Full"
    assert names_in(v, qtbot, src + "/docs") == ["a.txt", "keep.txt"]
    assert f"is {full['id']}" in v.message.text()
    assert "Full" in v.file_pane.title.text()

    # Newest again
    v.as_of.point.setCurrentIndex(v.as_of.point.findData(None))
    qtbot.waitUntil(lambda: v.image["id"] == diff["id"], timeout=5000)
    assert names_in(v, qtbot, src + "/docs") == ["b.txt", "keep.txt"]
    assert not v.as_of.at.isEnabled()

    # before the first backup there is nothing: said, and the image shown stays
    v.as_of.set_point_in_time(timeutil.parse_iso(full["created"]) - DAY)
    qtbot.waitUntil(lambda: "has no image at or before" in v.message.text(), timeout=5000)
    assert v.image["id"] == diff["id"]
    assert v.as_of.at.isEnabled()


def test_expiring_the_full_names_the_differential_that_depends_on_it(make_console,
                                                                     two_backups, qtbot):
    m, src, full, diff = two_backups
    c, v = open_page(make_console, m, qtbot, run_dispatcher=True)
    v.images.all_dates.setChecked(True)
    qtbot.waitUntil(lambda: v.model.row_of(full["id"]) is not None, timeout=5000)
    assert v.select_key(full["id"])
    assert v.images.expire_action.isEnabled()

    # from the image list's context menu
    rect = v.table.visualRect(v.proxy.mapFromSource(v.model.index(v.model.row_of(full["id"]),
                                                                  0)))
    v.table.customContextMenuRequested.emit(rect.center())
    assert v.images.expire_action in v.images.context_menu.actions()
    v.images.context_menu.close()
    v.images.expire_action.trigger()
    qtbot.waitUntil(lambda: v.images.expire_box is not None and v.images.expire_box.isVisible(),
                    timeout=5000)
    box = v.images.expire_box
    assert full["id"] in box.text() and "and the image that depends on it?" in box.text()
    info = box.informativeText()
    assert info.index(full["id"]) < info.index("will be expired with it") < info.index(diff["id"])
    assert "Differential" in info and "Full" in info
    assert box.defaultButton() is box.button(box.StandardButton.Cancel)

    started = []
    v.expire_started.connect(started.append)
    box.button(box.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: bool(started), timeout=5000)
    job_id = started[0]
    assert f"job {job_id}" in v.message.text()

    c.window.select_view("activity")
    a = c.window.views["activity"]
    qtbot.waitUntil(lambda: a.model.row_of(job_id) is not None, timeout=5000)
    assert a.model.row_dict(a.model.row_of(job_id))["type"] == "expire"
    qtbot.waitUntil(lambda: m.jobs.get(job_id)["state"] == "done", timeout=30000)
    assert m.jobs.get(job_id)["status"] == st.OK, m.jobs.logs(job_id)
    assert m.images() == []


def test_cancelling_the_confirmation_expires_nothing(make_console, two_backups, qtbot):
    m, src, full, diff = two_backups
    c, v = open_page(make_console, m, qtbot)
    assert v.image["id"] == diff["id"]
    v.images.expire_selected()
    qtbot.waitUntil(lambda: v.images.expire_box is not None and v.images.expire_box.isVisible(),
                    timeout=5000)
    assert "No other image depends on it." in v.images.expire_box.informativeText()
    v.images.expire_box.button(v.images.expire_box.StandardButton.Cancel).click()
    assert [j for j in m.jobs.list() if j["type"] == "expire"] == []
    assert len(m.images()) == 2
