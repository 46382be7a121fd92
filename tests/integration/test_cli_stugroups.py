"""`cairn storage-unit-group` and `cairn policy create --storage-unit-group` as an admin's
script uses them: one JSON document each, and clear refusals (an unknown unit or selection,
a unit named twice, two targets for a policy, a group still in use, a unit a group uses)."""

from app import status as st
from clihelp import cairn, cairn_json


def test_storage_unit_group_commands(tmp_path):
    home = tmp_path / "home"
    cairn(home, "host", "add", "me", "--local")
    for n in ("a", "b"):
        (tmp_path / n).mkdir()
        cairn(home, "storage-server", "create", f"s{n}", "--type", "advanced-disk", "--host",
              "me")
        cairn(home, "disk-pool", "create", f"p{n}", "--server", f"s{n}", "--volume",
              tmp_path / n)
        cairn(home, "storage-unit", "create", f"u{n}", "--pool", f"p{n}")
    doc, _ = cairn_json(home, "storage-unit-group", "create", "spread", "--units", "ub,ua",
                        "--selection", "least-loaded")
    assert doc["selection"] == "least-loaded"
    assert [(u["position"], u["storage_unit"], u["pool"], u["server"]) for u in doc["units"]] \
        == [(1, "ub", "pb", "sb"), (2, "ua", "pa", "sa")]
    doc, p = cairn_json(home, "storage-unit-group", "create", "x", "--units", "ua,nope",
                        "--selection", "failover", check=False)
    assert p.returncode == st.INVALID_REQUEST and "no storage unit named 'nope'" in doc["error"]
    assert "ua, ub" in doc["hint"]
    doc, p = cairn_json(home, "storage-unit-group", "create", "x", "--units", "ua,ua",
                        "--selection", "failover", check=False)
    assert p.returncode == st.INVALID_REQUEST and "named twice" in doc["error"]
    p = cairn(home, "storage-unit-group", "create", "x", "--units", "ua", "--selection",
              "random", check=False)
    assert p.returncode != 0 and "invalid choice: 'random'" in p.stderr
    doc, p = cairn_json(home, "storage-unit-group", "create", "spread", "--units", "ua",
                        "--selection", "failover", check=False)
    assert p.returncode == st.INVALID_REQUEST and "already exists" in doc["error"]
    doc, _ = cairn_json(home, "storage-unit-group", "list")
    assert [g["name"] for g in doc["storage_unit_groups"]] == ["spread"]

    doc, _ = cairn_json(home, "policy", "create", "p", "--storage-unit-group", "spread")
    assert (doc["storage_unit"], doc["storage_unit_group"], doc["lifecycle"]) == \
        ("ub", "spread", None)
    p = cairn(home, "policy", "create", "q", "--storage-unit-group", "spread",
              "--storage-unit", "ua", check=False)
    assert p.returncode != 0 and "not allowed with" in p.stderr
    doc, p = cairn_json(home, "policy", "create", "q", "--storage-unit-group", "none",
                        check=False)
    assert p.returncode == st.INVALID_REQUEST and "no storage unit group named 'none'" in \
        doc["error"] and "spread" in doc["hint"]
    assert "spread" in cairn(home, "policy", "list").stdout

    doc, _ = cairn_json(home, "storage-unit-group", "show", "spread")
    assert doc["policies"] == ["p"]
    doc, p = cairn_json(home, "storage-unit-group", "delete", "spread", check=False)
    assert p.returncode == st.INVALID_REQUEST and "still used by 1 policy (p)" in doc["error"]
    assert "policy set" in doc["hint"]
    doc, p = cairn_json(home, "storage-unit", "delete", "ua", check=False)
    assert p.returncode == st.INVALID_REQUEST and "storage unit group (spread)" in doc["error"]
    doc, _ = cairn_json(home, "policy", "set", "p", "storage_unit", "ua")
    assert (doc["storage_unit"], doc["storage_unit_group"]) == ("ua", None)
    doc, _ = cairn_json(home, "policy", "set", "p", "storage_unit_group", "spread")
    assert (doc["storage_unit"], doc["storage_unit_group"]) == ("ub", "spread")
    doc, _ = cairn_json(home, "policy", "set", "p", "storage_unit_group", "none")
    assert (doc["storage_unit"], doc["storage_unit_group"]) == ("ub", None)
    doc, _ = cairn_json(home, "storage-unit-group", "delete", "spread")
    assert doc == {"deleted": "spread", "kind": "storage-unit-group"}
    doc, p = cairn_json(home, "storage-unit-group", "show", "spread", check=False)
    assert p.returncode == st.INVALID_REQUEST and "no storage unit group named 'spread'" in \
        doc["error"]
    assert "storage-unit-group create" in doc["hint"]
