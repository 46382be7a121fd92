"""The console offers "Rebuild index" on every image (any pool type): it queues the job, and
the activity monitor names the job by its image."""

import pytest

from ui.job_text import type_text, type_tooltip

pytestmark = pytest.mark.gui


def test_rebuild_index_is_offered_for_an_image_and_queues_the_job(console, master, qtbot):
    page = console.window.views["restore"]
    console.window.select_view("restore")
    image = f"{master.test_host}_1790000000"
    qtbot.waitUntil(lambda: page.loaded and page.model.row_of(image) is not None,
                    timeout=5000)
    actions = page.image_actions
    assert page.select_key(image)
    assert actions.rebuild_index.isEnabled()
    queued = []
    actions.job_queued.connect(lambda job_id, text: queued.append((job_id, text)))
    before = {j["id"] for j in master.jobs.list()}
    actions.rebuild_index.trigger()
    qtbot.waitUntil(lambda: bool(queued), timeout=5000)
    [job] = [j for j in master.jobs.list() if j["id"] not in before]
    assert job["type"] == "rebuild-index" and job["params"] == {"image": image}
    assert queued == [(job["id"], f"Rebuild-index job {job['id']} queued for image {image}")]
    assert type_text(job) == f"rebuild-index image {image}"
    assert "from the image itself" in type_tooltip(job)

    # a second one for the same image while the first waits: refused, with the reason
    actions.rebuild_index.trigger()
    qtbot.waitUntil(lambda: actions.last_box is not None and actions.last_box.isVisible(),
                    timeout=5000)
    assert "being rebuilt already" in actions.last_box.text()
