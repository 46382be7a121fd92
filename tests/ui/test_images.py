"""The backup images view: selecting an image shows its files, one directory at a time."""

import pytest

pytestmark = pytest.mark.gui


def names(model, parent):
    return [model.index(r, 0, parent).data() for r in range(model.rowCount(parent))]


@pytest.fixture
def browse_calls(master, monkeypatch):
    calls = []
    real = master.browse

    def spy(image_id, path="/"):
        calls.append(path)
        return real(image_id, path)

    monkeypatch.setattr(master, "browse", spy)
    return calls


@pytest.fixture
def images_view(console, qtbot):
    console.window.select_view("restore")
    v = console.window.views["restore"]
    qtbot.waitUntil(lambda: v.loaded, timeout=5000)
    return v


def test_selecting_an_image_lists_its_files_lazily(images_view, master, qtbot, browse_calls):
    v = images_view
    files = v.files
    assert files.rowCount() == 0 and files.image_id is None
    newest = master.images()[0]["id"]
    assert v.select_key(newest)
    assert files.image_id == newest
    assert newest in v.files_title.text()

    # The single-directory chain /data/projects/alpha opens by itself.
    qtbot.waitUntil(lambda: files.index_of_path("/data/projects/alpha").isValid()
                    and files.rowCount(files.index_of_path("/data/projects/alpha")) == 5,
                    timeout=5000)
    alpha = files.index_of_path("/data/projects/alpha")
    assert names(files, alpha) == ["empty", "raw", "latest", "README.md", "results.csv"]
    assert v.tree.isExpanded(alpha)
    assert browse_calls == ["/", "/data", "/data/projects", "/data/projects/alpha"]

    readme = files.index_of_path("/data/projects/alpha/README.md")
    assert readme.siblingAtColumn(1).data() == "1.2 KiB"
    assert readme.siblingAtColumn(3).data() == "-rw-r--r--"
    assert readme.siblingAtColumn(4).data() == "1000:1000"
    latest = files.index_of_path("/data/projects/alpha/latest")
    assert latest.siblingAtColumn(5).data() == "raw/run-002.dat"
    assert not files.hasChildren(readme)

    raw = files.index_of_path("/data/projects/alpha/raw")
    assert files.hasChildren(raw) and files.rowCount(raw) == 0
    v.tree.expand(raw)
    qtbot.waitUntil(lambda: files.rowCount(raw) == 2, timeout=5000)
    assert names(files, raw) == ["run-001.dat", "run-002.dat"]
    assert browse_calls[-1] == "/data/projects/alpha/raw"

    empty = files.index_of_path("/data/projects/alpha/empty")
    v.tree.expand(empty)
    qtbot.waitUntil(lambda: not files.hasChildren(empty), timeout=5000)
    assert files.rowCount(empty) == 0


def test_switching_images_drops_the_old_tree(images_view, master, qtbot):
    v = images_view
    old, new = [i["id"] for i in master.images()][::-1]
    v.select_key(old)
    qtbot.waitUntil(lambda: v.files.rowCount() == 1, timeout=5000)
    v.select_key(new)
    assert v.files.image_id == new
    qtbot.waitUntil(lambda: v.files.index_of_path("/data/projects/alpha").isValid(),
                    timeout=5000)
    assert v.files.rowCount() == 1


def test_a_missing_index_is_reported_not_raised(images_view, master, qtbot):
    v = images_view
    image = master.images()[0]["id"]
    import os
    os.unlink(master.home.index_path(image))
    v.select_key(image)
    qtbot.waitUntil(lambda: v.files_error.isVisible(), timeout=5000)
    assert "Could not list /" in v.files_error.text()
    assert v.files.rowCount() == 0


def test_big_directories_arrive_in_batches(master, qtbot, tmp_path):
    from catalog import add_image
    from ui.bridge import Bridge
    from ui.models import ImageFilesModel

    many = [("/big", "d", 0)] + [(f"/big/f{i:05d}", "f", i) for i in range(2500)]
    add_image(master, "big_1", client=master.test_host, policy="p1", files=many)
    bridge = Bridge(master)
    try:
        model = ImageFilesModel(bridge)
        model.set_image("big_1")
        qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=5000)
        big = model.index(0, 0)
        assert model.canFetchMore(big)
        model.fetchMore(big)
        qtbot.waitUntil(lambda: model.rowCount(big) == ImageFilesModel.BATCH, timeout=5000)
        assert model.canFetchMore(big)
        model.fetchMore(big)
        model.fetchMore(big)
        assert model.rowCount(big) == 2500
        assert not model.canFetchMore(big)
    finally:
        bridge.shutdown()
