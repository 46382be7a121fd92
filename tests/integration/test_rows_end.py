"""The image's index is closed as soon as the client's agent says it sent every row
("rows_end", with how many), while the agent still writes and syncs the end of the image. An
agent whose count does not match the rows that arrived is not believed: the backup fails and
records nothing."""

import os
import re

from app import status
from clihelp import cairn, cairn_json, local_dedup_policy

# What the client's agent sends is changed by a sitecustomize on its PYTHONPATH, as a damaged
# or hostile agent would: the first batch of rows is never sent, though it is counted.
DROP_FIRST_BATCH = """
from app.agent.archiver import index
_emit = index.IndexRows.emit_rows
def emit_rows(self, final=False):
    real = self.emit_encoded
    if getattr(self, "dropped", None) is None and real is not None:
        self.dropped = True
        self.emit_encoded = lambda event, text: None
        try:
            return _emit(self, final)
        finally:
            self.emit_encoded = real
    return _emit(self, final)
index.IndexRows.emit_rows = emit_rows
"""


def setup(tmp_path, agent_path=None):
    home, pool, src = tmp_path / "home", tmp_path / "pool", tmp_path / "src"
    for d in ("a", "b"):
        (src / d).mkdir(parents=True)
        for i in range(30):
            (src / d / f"f{i}").write_bytes(os.urandom(2000))
    local_dedup_policy(home, src, pool, agent_path=agent_path)
    return home


def test_the_index_holds_every_row_the_agent_counted(tmp_path):
    home = setup(tmp_path)
    for _ in range(2):   # a full, then one with a files cache
        doc, _ = cairn_json(home, "backup", "p", "--wait")
        assert doc["status"] == 0, doc
    images, _ = cairn_json(home, "images", "list")
    assert len(images["images"]) == 2
    for image in images["images"]:
        for d in ("a", "b"):
            listing, _ = cairn_json(home, "browse", image["id"], str(tmp_path / "src" / d))
            assert sorted(e["name"] for e in listing["entries"]) == \
                sorted(f"f{i}" for i in range(30))


def test_rows_that_do_not_add_up_fail_the_backup_and_record_nothing(tmp_path):
    bad = tmp_path / "bad-agent"
    bad.mkdir()
    (bad / "sitecustomize.py").write_text(DROP_FIRST_BATCH)
    home = setup(tmp_path, agent_path=bad)
    doc, p = cairn_json(home, "backup", "p", "--wait", check=False)
    job = doc["jobs"][0] if "jobs" in doc else doc
    assert p.returncode != 0 and job["status"] != status.OK, doc
    shown = cairn(home, "jobs", "show", job["id"]).stdout
    assert re.search(r"the agent says it sent \d+ rows; 0 arrived", shown), shown
    images, _ = cairn_json(home, "images", "list")
    assert images["images"] == []
