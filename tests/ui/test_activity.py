"""The activity monitor: the job table fed only with what changed, counters, filters and saved
filters, cancel and restart from its actions, the throughput plot, and real backups followed
to their end or canceled from the monitor."""

import os

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QInputDialog, QMessageBox, QTableView

from app import status as st
from app.jobs.rules import category
from ui import fmt
from ui.job_table import COLUMNS, JobFilter, JobTableModel
from ui.models import ROW_ROLE

pytestmark = pytest.mark.gui


def job(i, state="queued", status=None, **kw):
    d = {"id": i, "type": "backup", "state": state, "status": status, "client": "c1",
         "policy": "p1", "schedule": "daily", "storage_unit": "stu1", "started": None,
         "ended": None, "elapsed_s": None, "files": 0, "bytes": 0, "rate_bytes_per_s": None,
         "percent": None, "eta_s": None, "wait_reason": None, "cancel_requested": False}
    d.update(kw)
    return d


def col(key):
    return [c.key for c in COLUMNS].index(key)


def shown_ids(proxy):
    return [proxy.index(r, 0).data(ROW_ROLE)["id"] for r in range(proxy.rowCount())]


# ---- the model ---------------------------------------------------------------------------------

@pytest.mark.qt_log_level_fail("WARNING")
def test_job_model_passes_the_model_tester_while_rows_change(qtmodeltester):
    model = JobTableModel()
    qtmodeltester.check(model)
    model.apply_changes([job(i) for i in range(1, 6)])
    model.apply_changes([job(2, "active"), job(7)], removed=[1, 4])
    assert sorted(model.row_dict(r)["id"] for r in range(model.rowCount())) == [2, 3, 5, 7]
    model.apply_changes([], removed=[99])      # unknown keys are ignored
    assert model.rowCount() == 4


def sorted_view(qtbot, column, order=Qt.SortOrder.DescendingOrder):
    model = JobTableModel()
    proxy = JobFilter()
    proxy.setSourceModel(model)
    view = QTableView()
    qtbot.addWidget(view)
    view.setModel(proxy)
    view.setSortingEnabled(True)
    view.sortByColumn(col(column), order)
    return model, proxy, view


def test_changed_rows_keep_the_selection_and_the_sort(qtbot):
    model, proxy, view = sorted_view(qtbot, "bytes")
    model.apply_changes([job(i, "active", bytes=i * 100) for i in range(1, 11)])
    assert shown_ids(proxy) == list(range(10, 0, -1))
    view.selectRow(shown_ids(proxy).index(3))
    resets, removed = [], []
    model.modelReset.connect(lambda: resets.append(1))
    model.rowsRemoved.connect(lambda *a: removed.append(a))

    with qtbot.waitSignal(model.dataChanged) as changed:
        model.apply_changes([job(3, "active", bytes=5000), job(4, "active", bytes=4500)])
    # neighbouring rows 3 and 4 (model rows 2 and 3) in one signal, over the changed columns
    top, bottom = changed.args[0], changed.args[1]
    assert (top.row(), bottom.row()) == (2, 3)
    assert top.column() <= col("bytes") <= bottom.column()
    assert shown_ids(proxy)[:3] == [3, 4, 10]
    selected = [proxy.data(i, ROW_ROLE)["id"] for i in view.selectionModel().selectedRows()]
    assert selected == [3]
    assert not resets and not removed


def expected_ids(model, column, descending=True, accept=lambda j: True):
    """The job IDs in the order the view must show: Python's sort of the column's own sort
    key, ties by job ID."""
    c = COLUMNS[col(column)]
    jobs = [model.row_dict(r) for r in range(model.rowCount())]
    jobs = sorted((j for j in jobs if accept(j)), key=lambda j: (c.sort(j), j["id"]),
                  reverse=descending)
    return [j["id"] for j in jobs]


def selected_ids(view):
    return sorted(view.model().data(i, ROW_ROLE)["id"]
                  for i in view.selectionModel().selectedRows())


def test_ticks_that_move_rows_keep_the_sort_and_the_selection(qtbot):
    import random
    rnd = random.Random(5)
    model, proxy, view = sorted_view(qtbot, "bytes")
    jobs = {i: job(i, "active", bytes=rnd.randrange(1000)) for i in range(1, 301)}
    model.apply_changes(list(jobs.values()))
    assert shown_ids(proxy) == expected_ids(model, "bytes")
    # one selected job near the top, one near the bottom, the current row on a third
    top, bottom, current = shown_ids(proxy)[2], shown_ids(proxy)[-3], shown_ids(proxy)[150]
    sm = view.selectionModel()
    view.selectRow(2)
    sm.select(proxy.index(proxy.rowCount() - 3, 0),
              sm.SelectionFlag.Select | sm.SelectionFlag.Rows)
    sm.setCurrentIndex(proxy.index(150, 0), sm.SelectionFlag.NoUpdate)
    resets = []
    proxy.modelReset.connect(lambda: resets.append(1))
    for tick in range(20):
        moved = rnd.sample(sorted(jobs), 40) + [top, bottom, current]
        for i in moved:
            # the selected jobs swap ends of the table every tick
            big = (i == top) == (tick % 2 == 0)
            b = rnd.randrange(2000, 3000) if i in (top, bottom) and big else \
                rnd.randrange(10) if i in (top, bottom) else rnd.randrange(1000)
            jobs[i] = dict(jobs[i], bytes=b)
        model.apply_changes([jobs[i] for i in moved])
        assert shown_ids(proxy) == expected_ids(model, "bytes"), tick
        assert selected_ids(view) == sorted([top, bottom]), tick
        assert proxy.data(sm.currentIndex(), ROW_ROLE)["id"] == current
    assert shown_ids(proxy)[0] in (top, bottom) and shown_ids(proxy)[-1] in (top, bottom)
    assert not resets


def test_every_column_sorts_both_ways(qtbot):
    import random
    rnd = random.Random(9)
    states = [("queued", None), ("active", None), ("done", st.OK), ("done", st.PARTIAL),
              ("done", st.CANCELED), ("done", st.VOLUME_UNAVAILABLE)]
    model, proxy, view = sorted_view(qtbot, "id")
    rows = []
    for i in range(1, 121):
        state, status = rnd.choice(states)
        rows.append(job(i, state, status, type=rnd.choice(["backup", "restore", "Backup"]),
                        client=rnd.choice(["alpha", "Beta", "gamma", None]),
                        bytes=rnd.randrange(5) << 30, files=rnd.randrange(3),
                        started=rnd.choice([None, "2024-05-01T10:00:00Z",
                                            "2024-05-02T09:00:00Z"]),
                        percent=rnd.choice([None, 10.5, 99.0]),
                        dedup_ratio=rnd.choice([None, 2.5, 7.0]),
                        cancel_requested=rnd.random() < 0.2,
                        wait_reason=rnd.choice([None, "storage unit", "Drive"])))
    model.apply_changes(rows)
    header = view.horizontalHeader()
    for c in COLUMNS:
        for order in (Qt.SortOrder.DescendingOrder, Qt.SortOrder.AscendingOrder):
            header.setSortIndicator(col(c.key), order)      # as a click on the header does
            assert proxy.sortColumn() == col(c.key)
            assert shown_ids(proxy) == expected_ids(
                model, c.key, order == Qt.SortOrder.DescendingOrder), (c.key, order)


def test_filter_follows_ticks_in_a_sorted_view(qtbot):
    model, proxy, view = sorted_view(qtbot, "bytes")
    model.apply_changes([job(i, "active", bytes=i * 10, client=f"c{i % 3}")
                         for i in range(1, 41)])
    proxy.set_filter(state="active", client="c1")
    active_c1 = lambda j: category(j) == "active" and j["client"] == "c1"  # noqa: E731
    assert shown_ids(proxy) == expected_ids(model, "bytes", accept=active_c1)
    view.selectRow(shown_ids(proxy).index(16))
    # 16 ends (no longer shown), 19 overtakes everything, 7 leaves client c1, 41 is new
    model.apply_changes([job(16, "done", st.OK, bytes=160, client="c1"),
                         job(19, "active", bytes=10_000, client="c1"),
                         job(7, "active", bytes=70, client="c2"),
                         job(41, "active", bytes=5, client="c1"),
                         job(13, "active", bytes=9_000, client="c1")], removed=[10])
    assert shown_ids(proxy) == expected_ids(model, "bytes", accept=active_c1)
    assert shown_ids(proxy)[:2] == [19, 13] and shown_ids(proxy)[-1] == 41
    assert 16 not in shown_ids(proxy) and selected_ids(view) == []
    view.selectRow(shown_ids(proxy).index(4))
    proxy.set_filter(text="c1")
    assert selected_ids(view) == [4]
    proxy.set_filter(state="all", client="")       # the selection survives the filter
    assert shown_ids(proxy) == expected_ids(model, "bytes", accept=lambda j: "c1" in
                                            j["client"])
    assert selected_ids(view) == [4]
    proxy.set_filter(text="")
    assert shown_ids(proxy) == expected_ids(model, "bytes")
    assert selected_ids(view) == [4]
    assert proxy.mapToSource(proxy.mapFromSource(model.index(model.row_of(4), 3))).row() == \
        model.row_of(4)


@pytest.mark.qt_log_level_fail("WARNING")
def test_job_filter_passes_the_model_tester_while_rows_change(qtmodeltester, qtbot):
    model, proxy, view = sorted_view(qtbot, "bytes")
    qtmodeltester.check(proxy)
    model.apply_changes([job(i, "active", bytes=i) for i in range(1, 30)])
    view.selectRow(5)
    model.apply_changes([job(3, "active", bytes=1000), job(30, "queued")], removed=[4, 5, 20])
    proxy.set_filter(state="active")
    model.apply_changes([job(3, "done", st.OK, bytes=1000), job(31, "active", bytes=7)])
    view.sortByColumn(col("client"), Qt.SortOrder.AscendingOrder)
    proxy.set_filter(state="all", text="backup")
    model.apply_changes([], removed=list(range(1, 32)))
    assert proxy.rowCount() == 0


def test_inserts_removals_and_counters():
    model = JobTableModel()
    model.apply_changes([job(1), job(2, "active"), job(3, "done", st.OK),
                         job(4, "done", st.PARTIAL), job(5, "done", st.CANCELED),
                         job(6, "done", st.VOLUME_UNAVAILABLE)])
    assert dict(model.counts) == {"queued": 1, "active": 1, "done": 2, "failed": 1,
                                  "canceled": 1}
    inserted = []
    model.rowsInserted.connect(lambda p, a, b: inserted.append((a, b)))
    model.apply_changes([job(1, "active"), job(2, "done", st.OK), job(7), job(8)],
                        removed=[6])
    assert inserted == [(5, 6)]                 # both new jobs in one insert, at the end
    assert model.row_of(6) is None and model.rowCount() == 7
    assert dict(model.counts) == {"queued": 2, "active": 1, "done": 3, "failed": 0,
                                  "canceled": 1}
    assert model.index(model.row_of(1), col("state")).data() == "active"


def test_columns_show_the_job():
    model = JobTableModel()
    model.apply_changes([job(1, "active", bytes=3 << 30, files=12345, percent=40.7, eta_s=61,
                             rate_bytes_per_s=100 << 20, cancel_requested=True),
                         job(2, wait_reason="storage unit stu1 is at its limit"),
                         job(3, "done", st.OK, dedup_ratio=75.0, bytes=4 << 30),
                         job(4, "done", st.OK, dedup_ratio=99.96),
                         job(5, "done", st.OK, dedup_ratio=0.0)])

    def cell(key, column, role=Qt.ItemDataRole.DisplayRole):
        return model.index(model.row_of(key), col(column)).data(role)

    assert cell(1, "state") == "canceling"
    assert cell(1, "bytes") == "3.0 GiB"
    assert cell(1, "files") == "12,345"
    assert cell(1, "rate_bytes_per_s") == "100.0 MiB/s"
    assert cell(1, "percent") == "40.7%"
    assert cell(1, "eta_s") == "0:01:01"
    assert cell(1, "dedup_ratio") == ""
    assert cell(1, "dedup_ratio", Qt.ItemDataRole.ToolTipRole) is None
    assert cell(3, "dedup_ratio") == "75.0%"
    tip = cell(3, "dedup_ratio", Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("75.0% (3.0 GiB of 4.0 GiB) of this job's data was already in the "
                          "deduplicating pool")
    assert "not stored again" in tip and "client-side deduplication, not sent" in tip
    assert cell(4, "dedup_ratio") == "99.9%", "short of all of it is never shown as 100%"
    assert cell(5, "dedup_ratio") == "0.0%", "nothing deduplicated is a rate, not a blank"
    assert cell(2, "wait_reason") == "storage unit stu1 is at its limit"


def test_jobs_of_a_deduplicating_pool_say_what_they_work_on():
    from ui.job_text import result_text, what
    model = JobTableModel()
    model.apply_changes([
        job(1, type="verify", client=None, policy=None, storage_unit=None,
            params={"pool": "dd-pool"}),
        job(2, type="verify", params={"image": "c1_1790000000_7"}),
        job(3, "done", st.OK, type="reclaim", client=None, params={"pool": "dd-pool"},
            result={"freed_bytes": 3 << 30, "removed_chunks": 1200, "containers_deleted": 2,
                    "containers_compacted": 1, "live_chunks": 90000}),
        job(4, type="backup")])

    def cell(key, column, role=Qt.ItemDataRole.DisplayRole):
        return model.index(model.row_of(key), col(column)).data(role)

    assert cell(1, "type") == "verify pool dd-pool"
    assert cell(2, "type") == "verify image c1_1790000000_7"
    assert cell(3, "type") == "reclaim pool dd-pool"
    assert cell(4, "type") == "backup"
    assert "checks each chunk against its fingerprint" in cell(1, "type",
                                                               Qt.ItemDataRole.ToolTipRole)
    assert "no image uses" in cell(3, "type", Qt.ItemDataRole.ToolTipRole)
    assert what(model.row_dict(model.row_of(1))) == "verify pool dd-pool"
    assert what(model.row_dict(model.row_of(2))) == "verify image c1_1790000000_7 of c1"
    assert result_text(model.row_dict(model.row_of(3))) == (
        "Freed 3.0 GiB: 1,200 chunks no image used removed, 2 container files deleted, "
        "1 compacted; 90,000 chunks in use.")
    # the pool's name finds its jobs though they have no client or storage unit
    proxy = JobFilter()
    proxy.setSourceModel(model)
    proxy.set_filter(text="dd-pool")
    assert sorted(shown_ids(proxy)) == [1, 3]


def test_a_backup_that_used_the_files_cache_says_what_it_read():
    from ui import fmt
    from ui.job_text import result_text
    job = {"type": "backup", "bytes": 100 << 20, "dedup_ratio": 99.0,
           "result": {"read_bytes": 1 << 20, "files_cache_files": 1234,
                      "files_cache_bytes": 99 << 20}}
    assert fmt.dedup_text(job) == "99.0% (99.0 MiB of 100.0 MiB), 1.0 MiB read"
    assert result_text(job) == ("Read 1.0 MiB; 1,234 unchanged files (99.0 MiB) taken from "
                                "the files cache without reading them.")
    everything = dict(job, result={"read_bytes": 100 << 20, "files_cache_files": 0,
                                   "files_cache_bytes": 0})
    assert fmt.dedup_text(everything) == "99.0% (99.0 MiB of 100.0 MiB)"
    assert result_text(everything) == ""


def test_a_verify_result_names_the_damaged_files():
    from ui.job_text import RESULT_FILES, result_text, verify_result_text
    clean = {"images": [], "containers": 4, "container_damage": [], "damaged_chunks": 0}
    assert verify_result_text(clean) == "No damage found: every chunk matched its fingerprint."
    many = [f"/data/f{i}" for i in range(RESULT_FILES + 3)]
    damaged = {"images": [
        {"image": "c1_1_2", "path": "/s/images/c1/c1_1_2.recipe", "files": ["/data/a.dat"],
         "ranges": [{"offset": 0, "length": 10, "reason": "fingerprint mismatch"}]},
        {"image": "c1_1_3", "path": "/s/images/c1/c1_1_3.recipe", "files": many,
         "ranges": [{"offset": 0, "length": 1}, {"offset": 5, "length": 1}]},
        {"image": None, "path": "/s/images/c1/x.recipe", "error": "the recipe is truncated",
         "files": []}],
        "container_damage": [{"container": "/s/containers/00/0000001.ctr", "offset": 4096,
                              "reason": "bad frame header"}]}
    lines = verify_result_text(damaged).splitlines()
    assert lines[0] == "Image c1_1_2: 1 damaged chunk range, 1 file hit:"
    assert lines[1] == "    /data/a.dat"
    assert lines[2] == f"Image c1_1_3: 2 damaged chunk ranges, {RESULT_FILES + 3} files hit:"
    assert lines[2 + RESULT_FILES] == f"    /data/f{RESULT_FILES - 1}"
    assert lines[3 + RESULT_FILES] == "    … and 3 more"
    assert lines[4 + RESULT_FILES] == "Recipe /s/images/c1/x.recipe: the recipe is truncated"
    assert lines[-1] == "Container 0000001.ctr at byte 4096: bad frame header"
    assert result_text({"type": "verify", "result": damaged}) == verify_result_text(damaged)
    assert result_text({"type": "verify", "result": None}) == ""
    assert result_text({"type": "backup", "result": {"x": 1}}) == ""
    # what a verify set aside, and damage that no image uses
    healed = dict(damaged, set_aside=2)
    assert verify_result_text(healed).splitlines()[-1] == (
        "2 damaged chunks set aside: the next backup of the same data stores them again, and "
        "the images above become restorable in full once it has.")
    unused = {"images": [], "container_damage": damaged["container_damage"]}
    assert verify_result_text(unused).splitlines() == [
        "Container 0000001.ctr at byte 4096: bad frame header",
        "No image uses these records: space reclaim removes them when it compacts their "
        "containers."]


def test_an_advanced_disk_verify_result_names_each_file_and_why():
    from ui.job_text import RESULT_FILES, verify_result_text
    assert verify_result_text({"images": [], "checked": 3, "modes": []}) == \
        "No damage found: every tar header and file checksum matched."
    damaged = {"checked": 2, "images": [
        {"image": "c1_1_2", "path": "/v/cairn-images/c1/c1_1_2.tar", "error": None,
         "files": ["/data/a", "/data/b"],
         "damage": [{"path": "/data/a", "offset": 1536, "reason": "its data does not match"},
                    {"path": "/data/b", "offset": 9216, "reason": "its tar header is damaged"}],
         "structure": [{"offset": 0, "reason": "the end-of-archive marker is damaged",
                        "image_file": "/v/cairn-images/c1/c1_1_2.tar"}]}],
        "modes": [{"path": "/v/cairn-images", "mode": "0755", "error": None}]}
    assert verify_result_text(damaged).splitlines() == [
        "Image c1_1_2: 2 damaged files:",
        "    /data/a: its data does not match",
        "    /data/b: its tar header is damaged",
        "Image c1_1_2: /v/cairn-images/c1/c1_1_2.tar at byte 0: the end-of-archive marker "
        "is damaged",
        "1 file or folder of the pool was open to other users (Cairn keeps them private; find "
        "out who changed them):",
        "    /v/cairn-images (mode 0755): private again"]
    # a lost image of very many files: the result lists the first ones and counts them all
    lost = {"images": [dict(damaged["images"][0], structure=[], damaged_files=120_000,
                            damage=[{"path": f"/data/f{i}", "reason": "its image file cannot "
                                     "be read"} for i in range(RESULT_FILES + 1)])]}
    lines = verify_result_text(lost).splitlines()
    assert lines[0] == "Image c1_1_2: 120,000 damaged files:"
    assert lines[-1] == f"    … and {120_000 - RESULT_FILES:,} more"


# ---- the page in the console -------------------------------------------------------------------

def show(console, qtbot):
    console.window.select_view("activity")
    v = console.window.views["activity"]
    qtbot.waitUntil(lambda: v.loaded, timeout=5000)
    return v


def test_counters_count_all_jobs_and_filter_on_click(console, master, qtbot):
    v = show(console, qtbot)
    assert {s: b.text() for s, b in v.counters.items()} == {
        "queued": "1 queued", "active": "1 active", "done": "1 done", "failed": "1 failed",
        "canceled": "0 canceled"}
    v.counters["failed"].click()
    assert shown_ids(v.proxy) == [master.test_jobs["failed"]]
    assert v.counters["done"].text() == "1 done"        # counters ignore the filter
    assert "(1 of 4)" in v.title.text()


def test_filters_and_saved_filters(console, master, qtbot, monkeypatch):
    v = show(console, qtbot)
    jobs = master.test_jobs
    v.type_box.setCurrentIndex(v.type_box.findData("restore"))
    assert shown_ids(v.proxy) == [jobs["queued"]]
    v.type_box.setCurrentIndex(0)
    qtbot.keyClicks(v.search, "limit")            # the queued job's reason for waiting
    assert shown_ids(v.proxy) == [jobs["queued"]]
    v.search.clear()
    v.state_box.setCurrentIndex(v.state_box.findData("done"))
    assert shown_ids(v.proxy) == [jobs["done"]]
    qtbot.keyClicks(v.search, "status 0")
    assert shown_ids(v.proxy) == [jobs["done"]]

    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("good backups", True))
    v.save_filter_action.trigger()
    assert v.saved_box.findData("good backups") > 0

    v.set_filter()                                  # everything again
    assert len(shown_ids(v.proxy)) == 4
    v.saved_box.setCurrentIndex(v.saved_box.findData("good backups"))
    v.saved_box.activated.emit(v.saved_box.currentIndex())
    assert shown_ids(v.proxy) == [jobs["done"]]
    assert v.state_box.currentData() == "done" and v.search.text() == "status 0"

    # saved filters outlive the window
    console.window.close()
    from ui.activity import ActivityView
    again = ActivityView(console.bridge)
    assert again.saved_box.findData("good backups") > 0


def test_new_changed_and_removed_jobs_follow_without_a_reset(console, master, qtbot):
    v = show(console, qtbot)
    resets = []
    v.model.modelReset.connect(lambda: resets.append(1))
    done = master.test_jobs["done"]
    assert v.select_key(done)
    new = master.start_backup("p1")[0]
    qtbot.waitUntil(lambda: v.model.row_of(new) is not None, timeout=4000)
    assert v.counters["queued"].text() == "2 queued"
    master.jobs.remove([master.test_jobs["failed"]])
    qtbot.waitUntil(lambda: v.model.row_of(master.test_jobs["failed"]) is None, timeout=4000)
    assert v.counters["failed"].text() == "0 failed"
    assert [r["id"] for r in v.selected_rows()] == [done]
    assert not resets


def test_restart_a_failed_job_from_the_toolbar(console, master, qtbot):
    v = show(console, qtbot)
    failed = master.test_jobs["failed"]
    v.select_key(master.test_jobs["done"])
    assert not v.restart_action.isEnabled()          # a successful job is not restarted
    v.select_key(failed)
    assert v.restart_action.isEnabled() and not v.cancel_action.isEnabled()
    before = {j["id"] for j in master.jobs.list()}
    v.restart_action.trigger()
    qtbot.waitUntil(lambda: len(master.jobs.list()) == len(before) + 1, timeout=4000)
    [new] = [j for j in master.jobs.list() if j["id"] not in before]
    old = master.jobs.get(failed)
    assert (new["type"], new["client"], new["policy"], new["schedule"], new["params"]) == \
        (old["type"], old["client"], old["policy"], old["schedule"], old["params"])
    qtbot.waitUntil(lambda: [r["id"] for r in v.selected_rows()] == [new["id"]], timeout=4000)
    assert f"Restarted as job {new['id']}" in v.message.text()


def test_cancel_of_several_jobs_asks_once(console, master, qtbot, monkeypatch):
    v = show(console, qtbot)
    ids = [master.start_backup("p1")[0] for _ in range(3)]
    qtbot.waitUntil(lambda: all(v.model.row_of(i) is not None for i in ids), timeout=4000)
    v.select_keys(ids)
    asked = []

    def question(parent, title, text, *a):
        asked.append(text)
        return QMessageBox.StandardButton.Yes
    monkeypatch.setattr(QMessageBox, "question", question)
    v.cancel_action.trigger()
    assert len(asked) == 1 and "Cancel these 3 jobs?" in asked[0]
    qtbot.waitUntil(lambda: all(master.jobs.get(i)["status"] == st.CANCELED for i in ids),
                    timeout=4000)
    qtbot.waitUntil(lambda: v.counters["canceled"].text() == "3 canceled", timeout=4000)
    assert v.counters["failed"].text() == "1 failed"


def test_plot_follows_the_palette(console, qtbot):
    v = show(console, qtbot)
    plot = v.plot
    base = plot.palette().color(QPalette.ColorRole.Base)
    assert plot.colors["background"] == base
    dark = QPalette(plot.palette())
    dark.setColor(QPalette.ColorRole.Base, QColor(30, 32, 35))
    dark.setColor(QPalette.ColorRole.Text, QColor(224, 226, 229))
    plot.setPalette(dark)
    assert plot.colors["background"] == QColor(30, 32, 35)
    assert plot.colors["text"] == QColor(224, 226, 229)
    assert plot.getPlotItem().getAxis("left").labelText == "Throughput (MiB/s)"


def test_layout_and_filter_are_remembered(make_console, master, qtbot):
    c = make_console(master)
    v = show(c, qtbot)
    v.splitter.setSizes([400, 300])
    v.set_filter(state="active")
    c.window.close()
    from app.master import Master
    c2 = make_console(Master(master.home.root))
    v2 = show(c2, qtbot)
    top, bottom = v2.splitter.sizes()
    assert top / (top + bottom) == pytest.approx(400 / 700, abs=0.03)
    assert v2.state_box.currentData() == "active"


def test_a_click_on_a_header_sorts_and_the_sort_is_remembered(make_console, master, qtbot):
    from PySide6.QtCore import QPoint
    from PySide6.QtTest import QTest
    c = make_console(master)
    v = show(c, qtbot)
    jobs = master.test_jobs
    assert shown_ids(v.proxy) == sorted(jobs.values(), reverse=True)     # newest first
    v.select_key(jobs["failed"])
    header = v.table.horizontalHeader()
    c_bytes = col("bytes")
    v.table.scrollTo(v.proxy.index(0, c_bytes))
    x = header.sectionViewportPosition(c_bytes) + header.sectionSize(c_bytes) // 2
    QTest.mouseClick(header.viewport(), Qt.MouseButton.LeftButton,
                     Qt.KeyboardModifier.NoModifier, QPoint(x, header.height() // 2))
    assert v.proxy.sortColumn() == c_bytes
    assert shown_ids(v.proxy) == expected_ids(v.model, "bytes",
                                              header.sortIndicatorOrder()
                                              == Qt.SortOrder.DescendingOrder)
    assert [r["id"] for r in v.selected_rows()] == [jobs["failed"]]
    # the running job grows past the finished one: it moves, the selection stays
    master.jobs.progress(jobs["active"], bytes=2_000_000_000, files=4, rate=1)
    v.refresh()
    qtbot.waitUntil(lambda: shown_ids(v.proxy) == expected_ids(
        v.model, "bytes", header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder)
        and v.model.row_dict(v.model.row_of(jobs["active"]))["bytes"] == 2_000_000_000,
        timeout=4000)
    assert [r["id"] for r in v.selected_rows()] == [jobs["failed"]]
    order = header.sortIndicatorOrder()
    c.window.close()

    from app.master import Master
    c2 = make_console(Master(master.home.root))
    v2 = show(c2, qtbot)
    assert v2.proxy.sortColumn() == c_bytes and v2.proxy.sortOrder() == order
    assert shown_ids(v2.proxy) == expected_ids(v2.model, "bytes",
                                               order == Qt.SortOrder.DescendingOrder)


# ---- real backups ------------------------------------------------------------------------------

def configure(m, tmp_path, src):
    host = m.config.local_host()["name"]
    vol = tmp_path / "vol"
    vol.mkdir()
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=2)
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", host)
    m.config.add_policy_selection("p1", str(src))


def cell(v, key, column):
    return v.model.index(v.model.row_of(key), col(column)).data()


def test_monitor_follows_a_real_backup_to_its_end(make_console, empty_master, tmp_path,
                                                  qtbot):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}.bin").write_bytes(os.urandom(1 << 20))
    configure(empty_master, tmp_path, src)
    c = make_console(empty_master, run_dispatcher=True)
    v = show(c, qtbot)
    jid = empty_master.start_backup("p1")[0]
    qtbot.waitUntil(lambda: v.model.row_of(jid) is not None
                    and cell(v, jid, "state") == "done", timeout=60000)
    assert cell(v, jid, "status") == "0"
    assert cell(v, jid, "bytes") == fmt.size(4 << 20)
    assert cell(v, jid, "files") == "4"
    assert cell(v, jid, "percent") == "100.0%"
    assert v.counters["done"].text() == "1 done"


def test_cancel_a_large_backup_from_the_context_menu(make_console, empty_master, tmp_path,
                                                     qtbot, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    block = os.urandom(64 << 20)
    with open(src / "big.bin", "wb") as f:
        for _ in range(48):                         # 3 GiB: seconds of copying
            f.write(block)
    configure(empty_master, tmp_path, src)
    c = make_console(empty_master, run_dispatcher=True)
    v = show(c, qtbot)
    jid = empty_master.start_backup("p1")[0]

    def running():
        v.refresh()
        return v.model.row_of(jid) is not None and cell(v, jid, "state") == "active" \
            and v.model.row_dict(v.model.row_of(jid))["bytes"] > 0
    qtbot.waitUntil(running, timeout=30000)
    v.select_key(jid)
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a: QMessageBox.StandardButton.Yes)
    idx = v.proxy.mapFromSource(v.model.index(v.model.row_of(jid), 1))
    v._context_menu(v.table.visualRect(idx).center())
    menu = v.context_menu
    [cancel] = [a for a in menu.actions() if a.text() == "&Cancel job"]
    assert cancel.isEnabled()
    menu.close()
    cancel.trigger()
    qtbot.waitUntil(lambda: cell(v, jid, "state") == "done", timeout=60000)
    assert cell(v, jid, "status") == str(st.CANCELED)
    assert empty_master.images() == []
    assert v.model.row_dict(v.model.row_of(jid))["bytes"] < 3 << 30


def test_the_dedup_rate_follows_the_storage_unit_in_a_new_table(console, qtbot):
    v = show(console, qtbot)
    hh = v.table.horizontalHeader()
    assert hh.visualIndex(col("dedup_ratio")) == hh.visualIndex(col("storage_unit")) + 1
    assert not hh.isSectionHidden(col("dedup_ratio"))
    assert "already held" in v.model.headerData(col("dedup_ratio"), Qt.Orientation.Horizontal,
                                                Qt.ItemDataRole.ToolTipRole)


def test_an_import_result_names_what_was_not_recorded_and_why():
    from ui.job_text import result_text, type_text
    r = {"pool": "dp1", "imported": ["a", "b"], "sets": ["s"], "already_known": 3,
         "incomplete": [{"image": "c", "why": "its base image x is neither in the catalog "
                                             "nor on the pool"}],
         "errors": [{"image": "d", "error": "its metadata names image id '../x'"}],
         "missing": {"hosts": ["client9"], "policies": [], "schedules": [],
                     "storage_units": []}, "key": None}
    lines = result_text({"type": "import", "result": r}).splitlines()
    assert lines[0] == ("Imported 2 images and 1 set image from disk pool dp1; 3 were in the "
                        "catalog already.")
    assert lines[1] == ("Chain incomplete, not recorded: c: its base image x is neither in the "
                        "catalog nor on the pool")
    assert lines[2] == "Not recorded: d: its metadata names image id '../x'"
    assert "client9" in lines[3] and "another host" in lines[3]
    assert type_text({"type": "import", "params": {"pool": "dp1"}}) == "import pool dp1"


def test_a_verify_result_says_which_repairs_it_queued():
    from ui.job_text import verify_result_text
    r = {"checked": 1, "modes": [], "images": [
        {"image": "c1_1_2", "path": "/v/c1_1_2.tar", "error": None, "files": ["/data/a"],
         "damage": [{"path": "/data/a", "offset": 1536, "reason": "its data does not match"}],
         "structure": []}],
        "repairs": [{"image": "c1_1_2", "copy": 1, "job": 7, "from": 2}]}
    assert verify_result_text(r).splitlines()[-1] == \
        "Image c1_1_2: repair job 7 writes copy 1 again from copy 2."


def test_the_plot_title_says_nothing_runs_once_the_jobs_ended(console, master, qtbot):
    v = show(console, qtbot)
    series = [(1.0, 300 * (1 << 20)), (2.0, 385 * (1 << 20))]
    v._update_plot_title(series)
    assert "now 385.0 MiB/s, 1 job running" in v.plot_title.text()
    master.jobs.finish(master.test_jobs["active"], st.OK)
    qtbot.waitUntil(lambda: v.counters["active"].text() == "0 active", timeout=5000)
    v._update_plot_title(series)
    assert "now 0 B/s, 0 jobs running" in v.plot_title.text()
