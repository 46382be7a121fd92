"""Test storage performance (ui/benchmark_dialog.py): offered in a disk pool's properties and
on the disk pool wizard's volumes page; Start queues the benchmark job off the UI thread, the
window follows it step by step and ends with its steps in the table and the plot (write, read
and combined against pairs, the sizing levels as lines), the run listed among the server's
runs; a refusal (a backup uses the pool) is shown with its hint. For a cloud server it runs
the object benchmark of the bucket (against the loopback S3 server): thread counts in the
table, write and read against threads in the plot."""

import threading

import pytest
from PySide6.QtCore import Qt

from app import storage_sizing
from app.master import Master
from ui.benchmark_dialog import BenchmarkDialog
from ui.bridge import Bridge
from ui.job_text import result_text, type_text, type_tooltip
from ui.properties import PropertiesDialog

pytestmark = pytest.mark.gui

FAST = dict(step_seconds=0.3, file_size=4 << 20)


@pytest.fixture
def site(tmp_path):
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    m = Master(str(tmp_path / "home"))
    m.ensure_local_host()
    host = m.host_list()[0]["name"]
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(v1), str(v2)])
    m.config.add_storage_unit("stu1", pool="dp1")
    bridge = Bridge(m)
    runner = threading.Thread(target=m.dispatcher.run_forever, kwargs={"poll": 0.1},
                              daemon=True)
    runner.start()
    yield m, bridge, host
    m.dispatcher.stop()
    runner.join(30)
    bridge.shutdown()
    m.close()


def test_a_run_is_followed_then_shown_as_table_and_plot(qtbot, site):
    m, bridge, _ = site
    dlg = BenchmarkDialog(bridge, "ss1", volumes=m.disk_pools()[0]["volumes"], pool="dp1",
                          tuning=FAST)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitUntil(lambda: dlg.run_list.count() == 1, timeout=5000)
    assert dlg.run_list.itemText(0) == "(no run yet)"
    qtbot.waitUntil(lambda: not bridge.pending, timeout=5000)
    assert dlg.workload.findData("object") == -1 and dlg.workload.currentData() == "stgpool"
    assert dlg.max_pairs.isVisible() and not dlg.threads_row.isVisible()
    dlg.max_pairs.setValue(3)
    qtbot.mouseClick(dlg.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dlg.job_id is not None, timeout=5000)
    assert not dlg.start_button.isEnabled() and dlg.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: dlg.job is not None and dlg.job["state"] == "done",
                    timeout=60000)
    qtbot.waitUntil(lambda: dlg.run_list.count() == 1 and bool(dlg.runs), timeout=5000)
    job = m.job(dlg.job_id)
    assert job["status"] == 0, [x["message"] for x in m.job_logs(dlg.job_id)]
    steps = job["result"]["steps"]
    assert dlg.table.rowCount() == len(steps) >= 1
    assert dlg.table.item(0, 0).text() == "1"
    assert dlg.table.item(len(steps) - 1, 3).text() == f"{steps[-1]['combined_mb_s']:.1f}"
    for key in ("write_mb_s", "read_mb_s", "combined_mb_s"):
        assert dlg.plot.points(key) == [(s["threads"], s[key]) for s in steps]
    assert [line.value() for line in dlg.plot.marks] == \
        [lv["low_mb_s"] for lv in storage_sizing.LEVELS]
    assert dlg.verdict.text().startswith("Sizing: ")
    assert "ended" in dlg.state.text() and dlg.start_button.isEnabled()
    assert dlg.run_list.itemText(0).startswith(f"#{dlg.runs[0]['id']} ")
    # the activity monitor and the job's details name it and say what it found
    assert type_text(job) == "benchmark server ss1 (stgpool)"
    assert "thread pairs" in type_tooltip(job)
    found = result_text(job).splitlines()
    assert len(found) == len(steps) + 1 and found[0].startswith("1 pair(s): write ")
    assert found[-1].startswith("Sizing: ")


def test_a_refusal_is_shown_with_its_hint(qtbot, site):
    m, bridge, host = site
    jid = m.jobs.create("backup", client=host, storage_unit="stu1")
    assert m.jobs.claim(jid, "another-master")
    dlg = BenchmarkDialog(bridge, "ss1", tuning=FAST)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.mouseClick(dlg.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "in use" in dlg.state.text(), timeout=5000)
    assert "--force" in dlg.state.text() and dlg.start_button.isEnabled()
    assert dlg.job_id is None


def test_offered_in_pool_properties_and_the_volumes_page(qtbot, site):
    m, bridge, _ = site
    [pool] = [p for p in m.disk_pools() if p["name"] == "dp1"]
    props = PropertiesDialog(bridge, "disk-pool", pool)
    qtbot.addWidget(props)
    props.show()
    assert props.benchmark_button.text() == "&Test storage performance…"
    dlg = props.test_performance()
    assert dlg.server == "ss1" and dlg.volumes == pool["volumes"]
    assert "dp1" in dlg.windowTitle()
    dlg.close()

    from ui.wizards.disk_pool import DiskPoolWizard
    wiz = DiskPoolWizard(bridge)
    qtbot.addWidget(wiz)
    wiz.show()
    qtbot.waitUntil(lambda: wiz.server() == "ss1", timeout=10000)
    wiz.next()
    page = wiz.volumes_page
    qtbot.waitUntil(lambda: not wiz.busy, timeout=10000)
    assert page.test_performance() is None  # nothing checked yet: says so
    page.path.setText(pool["volumes"][0] + "/new")
    page.add_typed()
    dlg = page.test_performance()
    assert dlg is not None and dlg.volumes == [pool["volumes"][0] + "/new"]
    dlg.close()


def test_the_screenshot_view_shows_the_newest_run(qtbot, make_console, tmp_path):
    from ui.app import take_dialog_screenshot
    vol = tmp_path / "vol"
    vol.mkdir()
    m = Master(str(tmp_path / "shot-home"))
    try:
        host = m.ensure_local_host()["name"]
        m.create_storage_server("ss1", type="advanced-disk", host=host)
        m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
        [job] = m.wait_for([m.start_storage_benchmark("ss1", max_pairs=2, **FAST)], 60)
        assert job["status"] == 0
        console = make_console(m)
        out = tmp_path / "shot.png"
        assert take_dialog_screenshot(console, "benchmark", str(out)) == 0
        assert out.stat().st_size > 10000
    finally:
        m.close()


MiB = 1 << 20
OBJECT_FAST = dict(objects_per_thread=1, ranged_size=64 << 10, ranged_per_thread=4,
                   part_size=5 * MiB)


@pytest.fixture
def cloud_site(tmp_path, s3_server, s3_bucket):
    m = Master(str(tmp_path / "home"))
    host = m.ensure_local_host()["name"]
    m.create_storage_server("cs1", type="cloud", host=host, path=str(tmp_path / "cache"),
                            options={"endpoint": s3_server.endpoint, "bucket": s3_bucket},
                            credentials={"access_key": s3_server.access_key,
                                         "secret_key": s3_server.secret_key})
    m.create_disk_pool("cp1", server="cs1", volumes=[])
    bridge = Bridge(m)
    runner = threading.Thread(target=m.dispatcher.run_forever, kwargs={"poll": 0.1},
                              daemon=True)
    runner.start()
    yield m, bridge, s3_bucket
    m.dispatcher.stop()
    runner.join(30)
    bridge.shutdown()
    m.close()


def test_a_cloud_server_runs_the_object_benchmark_of_its_bucket(qtbot, cloud_site,
                                                                 s3_server):
    m, bridge, bucket = cloud_site
    [pool] = m.disk_pools()
    dlg = BenchmarkDialog(bridge, "cs1", volumes=pool["volumes"], pool="cp1",
                          tuning=OBJECT_FAST)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitUntil(lambda: dlg.workload.currentData() == "object", timeout=5000)
    assert dlg.bucket_label.text() == f"{bucket}@{s3_server.endpoint}"
    assert dlg.threads_row.isVisible() and dlg.object_size.isVisible()
    assert not dlg.max_pairs.isVisible() and not dlg.vols_label.isVisible()
    # its cache's disks can still be measured
    assert {dlg.workload.itemData(i) for i in range(dlg.workload.count())} == \
        {"object", "stgpool", "db"}
    dlg.max_threads.setValue(2)
    dlg.object_size.setValue(6)
    qtbot.mouseClick(dlg.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dlg.job_id is not None, timeout=5000)
    qtbot.waitUntil(lambda: dlg.job is not None and dlg.job["state"] == "done",
                    timeout=60000)
    qtbot.waitUntil(lambda: bool(dlg.runs) and not bridge.pending, timeout=5000)
    job = m.job(dlg.job_id)
    assert job["status"] == 0, [x["message"] for x in m.job_logs(dlg.job_id)]
    assert job["params"]["workload"] == "object" and job["params"]["object_size"] == 6 * MiB
    steps = job["result"]["steps"]
    assert [s["threads"] for s in steps] == [1, 2]
    assert dlg.table.rowCount() == 2
    assert dlg.table.horizontalHeaderItem(0).text() == "Threads"
    assert dlg.table.item(1, 1).text() == "6.0 MiB"
    assert dlg.table.item(1, 2).text() == f"{steps[1]['write_mb_s']:.1f}"
    assert dlg.table.item(1, 3).text() == f"{steps[1]['read_mb_s']:.1f}"
    for key in ("write_mb_s", "read_mb_s"):
        assert dlg.plot.points(key) == [(s["threads"], s[key]) for s in steps]
    assert dlg.plot.points("combined_mb_s") == []
    assert not any(line.isVisible() for line in dlg.plot.marks)
    assert dlg.plot.getPlotItem().getAxis("bottom").labelText == "Threads"
    assert dlg.verdict.text().startswith("Best write ")
    assert "object of 6.0 MiB, 2 thread count(s), best write" in dlg.run_list.itemText(0)
    assert type_text(job) == "benchmark server cs1 (object)"
    found = result_text(job).splitlines()
    assert found[0].startswith("1 thread(s): write ") and found[-1].startswith("Best write")
    # a disk workload chosen: its settings come back
    dlg.workload.setCurrentIndex(dlg.workload.findData("stgpool"))
    assert dlg.max_pairs.isVisible() and not dlg.threads_row.isVisible()
