"""`cairn lifecycle` and `cairn policy create --lifecycle` as an admin's script uses them: one
JSON document each, a clear refusal (what is wrong, what to do) for a wrong step, a policy
naming both or neither, and a lifecycle still in use."""

from app import status as st
from clihelp import cairn, cairn_json


def test_lifecycle_commands(tmp_path):
    home = tmp_path / "home"
    cairn(home, "host", "add", "me", "--local")
    for n in ("a", "b"):
        (tmp_path / n).mkdir()
        cairn(home, "storage-server", "create", f"s{n}", "--type", "advanced-disk", "--host",
              "me")
        cairn(home, "disk-pool", "create", f"p{n}", "--server", f"s{n}", "--volume",
              tmp_path / n)
        cairn(home, "storage-unit", "create", f"u{n}", "--pool", f"p{n}")
    doc, _ = cairn_json(home, "lifecycle", "create", "gold", "--step", "backup:ua:2w",
                        "--step", "duplicate:ub:90d")
    assert [(s["copy"], s["kind"], s["storage_unit"], s["pool"], s["retention"])
            for s in doc["steps"]] == [(1, "backup", "ua", "pa", "2w"),
                                       (2, "duplicate", "ub", "pb", "90d")]
    doc, p = cairn_json(home, "lifecycle", "create", "tin", "--step", "backup:ua:2w",
                        "--step", "duplicate:ua:4w", check=False)
    assert p.returncode == st.INVALID_REQUEST
    assert "both keep their copy in disk pool pa" in doc["error"] and doc["hint"]

    doc, _ = cairn_json(home, "policy", "create", "p", "--lifecycle", "gold")
    assert (doc["storage_unit"], doc["lifecycle"]) == ("ua", "gold")
    p = cairn(home, "policy", "create", "q", check=False)
    assert p.returncode != 0 and \
        "--storage-unit --lifecycle --storage-unit-group is required" in p.stderr
    p = cairn(home, "policy", "create", "q", "--lifecycle", "gold", "--storage-unit", "ua",
              check=False)
    assert p.returncode != 0 and "not allowed with" in p.stderr

    doc, _ = cairn_json(home, "lifecycle", "show", "gold")
    assert doc["policies"] == ["p"]
    doc, _ = cairn_json(home, "lifecycle", "list")
    assert [x["name"] for x in doc["lifecycles"]] == ["gold"]
    assert "gold  backup:ua:2w duplicate:ub:90d  p" in cairn(home, "lifecycle", "list").stdout
    doc, p = cairn_json(home, "lifecycle", "delete", "gold", check=False)
    assert p.returncode == st.INVALID_REQUEST and "still used by 1 policy (p)" in doc["error"]
    doc, _ = cairn_json(home, "policy", "set", "p", "lifecycle", "none")
    assert (doc["storage_unit"], doc["lifecycle"]) == ("ua", None)
    doc, _ = cairn_json(home, "lifecycle", "delete", "gold")
    assert doc == {"deleted": "gold", "kind": "lifecycle"}
    doc, p = cairn_json(home, "lifecycle", "show", "gold", check=False)
    assert p.returncode == st.INVALID_REQUEST and "no lifecycle named 'gold'" in doc["error"]
