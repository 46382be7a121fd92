"""The owner names an image records (app/formats/owners.py): what a backup writes, what a
summary read from a pool must look like to be believed, and the bounds that keep the summary
member within what its reader reads."""

import json

from app.formats import imagemeta, owners


def test_recorded_names_leave_out_unknown_ids_and_keep_bytes_that_are_not_utf8():
    names = {0: b"root", 1000: b"al\xffice", 7: b""}
    doc = owners.record({0, 1000, 7}, {0}, names.__getitem__, lambda g: "wheel")
    assert doc == {"users": {"0": "root", "1000": "al\udcffice"}, "groups": {"0": "wheel"}}
    text = owners.to_column(doc)
    users, groups = owners.from_column(text)
    assert users == {0: "root", 1000: "al\udcffice"} and groups == {0: "wheel"}
    assert users[1000].encode("utf-8", "surrogateescape") == b"al\xffice"


def test_many_owners_stay_within_the_summary_readers_limit():
    ids = range(3 * owners.MAX_IDS)
    doc = owners.record(ids, ids, lambda i: "u" * 200 + str(i), lambda i: "g" * 200 + str(i))
    for kind in owners.KINDS:
        assert 0 < len(doc[kind]) <= owners.MAX_IDS
        assert "0" in doc[kind]          # the lowest ids are the ones kept
    summary = json.dumps({"owners": doc, "files": 1}, indent=1, sort_keys=True)
    assert len(summary.encode("utf-8")) < imagemeta.SUMMARY_LIMIT
    assert imagemeta.summary_problem(json.loads(summary)) is None


def test_a_summary_with_hostile_owners_is_not_believed():
    for bad in ("root", {"users": []}, {"users": {"x": "root"}}, {"users": {"0": ""}},
                {"groups": {"0": 5}}, {"users": {"0": "a\0b"}},
                {"users": {str(i): "n" for i in range(owners.MAX_IDS + 1)}}):
        why = imagemeta.summary_problem({"files": 1, "owners": bad})
        assert why and "owners" in why, bad
        assert owners.to_column(bad) is None
    assert owners.from_column("not json") == ({}, {})
    assert owners.from_column('{"users": {"0": ""}}') == ({}, {})


def test_labels_show_names_where_known_and_numbers_otherwise():
    users, groups = {0: "root", 1000: "alice"}, {0: "root"}
    assert owners.label(1000, 0, users, groups) == "alice:root"
    assert owners.label(1000, 100, users, groups) == "alice:100"
    assert owners.detail(1000, 100, users, groups) == (
        "user alice (uid 1000), gid 100 (no name recorded)")
    # a set image: its stream images' names together, the first naming an id winning
    assert owners.merged([({0: "root"}, {}), ({0: "other", 5: "e"}, {5: "g"})]) == (
        {0: "root", 5: "e"}, {5: "g"})
