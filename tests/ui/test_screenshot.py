"""`cairn console --screenshot FILE --view VIEW`."""

import os
import subprocess
import sys

import pytest
from PySide6.QtGui import QImage

from ui.app import main
from ui.main_window import VIEW_NAMES

pytestmark = pytest.mark.gui

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def distinct_colors(img, step=16):
    return {img.pixel(x, y) for x in range(0, img.width(), step)
            for y in range(0, img.height(), step)}


@pytest.mark.parametrize("view", VIEW_NAMES)
def test_each_view_renders_to_png(master, tmp_path, view):
    out = tmp_path / f"{view}.png"
    assert main(home=master.home.root, screenshot=str(out), view=view) == 0
    img = QImage(str(out))
    assert not img.isNull()
    assert (img.width(), img.height()) == (1280, 800)
    assert len(distinct_colors(img)) > 8, "the screenshot is blank"


@pytest.mark.parametrize("kind", ["storage-server", "disk-pool", "storage-unit", "policy"])
def test_each_wizard_renders_to_png(master, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    assert main(home=master.home.root, screenshot=str(out), view=f"wizard:{kind}") == 0
    img = QImage(str(out))
    assert not img.isNull()
    assert img.width() >= 700 and img.height() >= 500
    assert len(distinct_colors(img, step=8)) > 4, "the screenshot is blank"


def test_a_wizard_is_a_screenshot_view_only(tmp_path, capsys):
    assert main(home=str(tmp_path / "h"), view="wizard:policy") == 2
    assert "'wizard:policy'" in capsys.readouterr().err


def test_screenshot_waits_for_the_data(master, tmp_path, qapp):
    """The window grabbed is the loaded one: the list and the status bar are filled."""
    from ui import app as console_app
    grabbed = {}
    real = console_app.take_screenshot

    def spy(console, path):
        rc = real(console, path)
        v = console.window.current_view
        grabbed.update(rows=v.model.rowCount(), jobs=console.window.jobs_label.text(),
                       files=v.files.rowCount())
        return rc

    console_app.take_screenshot = spy
    try:
        assert main(home=master.home.root, screenshot=str(tmp_path / "r.png"),
                    view="restore") == 0
    finally:
        console_app.take_screenshot = real
    assert grabbed == {"rows": 2, "jobs": "Jobs: 1 running, 1 queued", "files": 1}


def test_unknown_view_is_an_error_listing_the_views(tmp_path, capsys):
    assert main(home=str(tmp_path / "h"), screenshot=str(tmp_path / "x.png"),
                view="nope") == 2
    err = capsys.readouterr().err
    assert "'nope'" in err
    for v in ("hosts", "storage-servers", "disk-pools", "storage-units", "policies",
              "activity", "restore"):
        assert v in err
    assert not (tmp_path / "x.png").exists()


def _cli(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_screenshot_without_a_display(master, tmp_path, settings_dir):
    out = tmp_path / "cli.png"
    r = _cli("--home", master.home.root, "console", "--screenshot", str(out),
             "--view", "activity", env_extra={"XDG_CONFIG_HOME": str(settings_dir)})
    assert r.returncode == 0, r.stderr
    img = QImage(str(out))
    assert (img.width(), img.height()) == (1280, 800)
    assert r.stderr.strip() == ""


def test_cli_unknown_view_exits_2(tmp_path):
    r = _cli("--home", str(tmp_path / "h"), "console", "--screenshot",
             str(tmp_path / "x.png"), "--view", "jobs")
    assert r.returncode == 2
    assert "choose one of:" in r.stderr and "activity" in r.stderr
