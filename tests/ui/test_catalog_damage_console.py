"""The console on a damaged catalog: it says what is wrong and what to do, at startup or in
the view that needs the damaged part, and never dies with sqlite's traceback."""

import sqlite3

import pytest
from PySide6.QtGui import QImage

from app import status as st
from ui.app import main

pytestmark = pytest.mark.gui


def test_a_catalog_that_is_no_database_is_reported_at_startup(home, tmp_path, capsys, qapp):
    from app.master import Master
    Master(home).close()
    catalog = f"{home}/catalog.db"
    with open(catalog, "wb") as f:
        f.write(b"not a catalog\n" * 500)
    out = tmp_path / "startup.png"
    assert main(home=home, screenshot=str(out)) == st.CATALOG_FAILED
    err = capsys.readouterr().err
    assert catalog in err and "cairn catalog check" in err and "Traceback" not in err
    img = QImage(str(out))          # the message box the admin sees
    assert not img.isNull() and img.width() > 200


def test_damaged_jobs_show_in_the_activity_monitor(master, tmp_path, capsys, qapp):
    catalog = master.db.path
    master.close()
    conn = sqlite3.connect(catalog)
    pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name='jobs'")]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(catalog, "r+b") as f:
        for p in pages:
            f.seek((p - 1) * size)
            f.write(bytes((i * 151 + 7) % 256 for i in range(size)))
    from ui import app as console_app
    seen = {}
    real = console_app.take_screenshot

    def spy(console, path):
        rc = real(console, path)
        seen["text"] = console.window.current_view.placeholder.text()
        return rc

    console_app.take_screenshot = spy
    try:
        assert main(home=master.home.root, screenshot=str(tmp_path / "a.png"),
                    view="activity") == 0
    finally:
        console_app.take_screenshot = real
    assert "Could not read the catalog" in seen["text"] and catalog in seen["text"]
    assert "damaged" in seen["text"] and "cairn catalog check" in seen["text"]
    assert "Traceback" not in capsys.readouterr().err
