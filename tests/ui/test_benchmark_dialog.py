"""Test storage performance (ui/benchmark_dialog.py): offered in a disk pool's properties and
on the disk pool wizard's volumes page; Start queues the benchmark job off the UI thread, the
window follows it step by step and ends with its steps in the table and the plot (write, read
and combined against pairs, the sizing levels as lines), the run listed among the server's
runs; a refusal (a backup uses the pool) is shown with its hint."""

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
