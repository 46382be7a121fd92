"""`cairn jobs restart`: a failed backup queued again with the same parameters."""

from clihelp import cairn, cairn_json
from treegen import assert_trees_equal, make_tree


def test_restart_a_failed_backup_after_fixing_its_cause(tmp_path):
    home, vol, src = tmp_path / "home", tmp_path / "vol", tmp_path / "src"
    vol.mkdir()
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "ss1", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", vol)
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1")
    cairn(home, "policy", "add-client", "p1", "me")
    cairn(home, "policy", "add-selection", "p1", src)
    cairn(home, "policy", "add-schedule", "p1", "full", "--type", "full")
    doc, _ = cairn_json(home, "backup", "p1", "--wait", check=False)
    [failed] = doc["jobs"]
    assert failed["status"] == 30  # the only selection is missing

    p = cairn(home, "jobs", "restart", str(failed["id"] + 1000), check=False)
    assert p.returncode != 0 and "no job" in (p.stderr + p.stdout).lower()

    make_tree(src)
    doc, _ = cairn_json(home, "jobs", "restart", str(failed["id"]), "--wait")
    [again] = doc["jobs"]
    assert again["id"] != failed["id"] and again["status"] == 0
    assert (again["policy"], again["client"], again["schedule"]) == ("p1", "me", "full")
    log, _ = cairn_json(home, "jobs", "log", str(failed["id"]))
    assert any(f"restarted as job {again['id']}" in x["message"] for x in log["log"])

    p = cairn(home, "jobs", "restart", str(again["id"]), check=False)
    assert p.returncode == 10 and "only a failed or canceled job" in p.stderr

    out = tmp_path / "out"
    cairn(home, "restore", again["image_id"], "--path", src, "--to", out, "--wait")
    assert_trees_equal(src, out / str(src).lstrip("/"))
