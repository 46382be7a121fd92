"""`cairn ... delete`: refused with the dependents named while in use, then in order."""

from clihelp import cairn, cairn_json


def test_delete_through_the_cli(tmp_path):
    home, vol = tmp_path / "home", tmp_path / "vol"
    vol.mkdir()
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "ss1", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", vol)
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    p = cairn(home, "disk-pool", "delete", "dp1", check=False)
    assert p.returncode != 0
    assert "still used by 1 storage unit (stu1)" in p.stderr
    doc, _ = cairn_json(home, "storage-unit", "delete", "stu1")
    assert doc == {"deleted": "stu1", "kind": "storage-unit"}
    cairn(home, "disk-pool", "delete", "dp1")
    cairn(home, "storage-server", "delete", "ss1")
    cairn(home, "host", "remove", "me")
    doc, _ = cairn_json(home, "host", "list")
    assert doc["hosts"] == []
