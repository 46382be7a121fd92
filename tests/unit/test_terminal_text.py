"""The escaping of text from clients for human output (app/terminal_text.py), and job log
lines that keep names that are not UTF-8 exactly."""

import os

import pytest

from app.jobs.store import JobStore
from app.store.db import Database
from app.terminal_text import escape, escape_all


@pytest.mark.parametrize("raw, shown", [
    (b"plain name.txt", "plain name.txt"),
    ("café ünïcödé 日本".encode(), "café ünïcödé 日本"),      # printable letters stay
    (b"a\nb", "a\\nb"),
    (b"a\rb\tc\x07\x08\x0b\x0c", "a\\rb\\tc\\a\\b\\v\\f"),
    (b"\x1b[2J", "\\033[2J"),
    (b"\x00\x01\x7f", "\\000\\001\\177"),
    (b"back\\slash", "back\\\\slash"),
    (b"\\033", "\\\\033"),                         # a name that only looks like an escape
    (b"caf\xe9\xff", "caf\\351\\377"),            # not UTF-8: the bytes themselves
    (b"\xc2\x9b", "\\302\\233"),                  # C1 control (8-bit CSI)
    ("x\u202ey\u200bz\u2028".encode(), "x\\342\\200\\256y\\342\\200\\213z\\342\\200\\250"),
])
def test_escapes_what_does_not_print(raw, shown):
    assert escape(os.fsdecode(raw)) == shown
    assert all(ch.isprintable() for ch in escape(os.fsdecode(raw)))


def test_escapes_are_unambiguous():
    names = [os.fsdecode(n) for n in (b"a\nb", b"a\\nb", b"a\\\nb", b"a\xe9", b"a\\351")]
    assert len({escape(n) for n in names}) == len(names)


def test_lone_surrogate_and_non_text():
    assert escape("\ud800") == "\\355\\240\\200"
    assert escape(42) == "42"


def test_escape_all_reaches_every_string_and_leaves_the_rest():
    doc = {"a\n": ["x\x1b", {"k": ("y\r", 3, None, 1.5, True)}], "n": 7}
    assert escape_all(doc) == {"a\\n": ["x\\033", {"k": ("y\\r", 3, None, 1.5, True)}],
                               "n": 7}
    assert doc["a\n"][0] == "x\x1b"     # a copy: the caller's document is unchanged


def test_job_log_keeps_names_that_are_not_utf8_exactly(tmp_path):
    jobs = JobStore(Database(str(tmp_path / "c.db")))
    jid = jobs.create("backup")
    name = os.fsdecode(b"/data/caf\xe9\n\x1b[2J")
    jobs.log(jid, f"{name}: cannot be read", "warning")
    jobs.log_many(jid, [("info", f"skipped {name}"), ("info", "plain")])
    messages = [x["message"] for x in jobs.logs(jid)]
    assert f"{name}: cannot be read" in messages and f"skipped {name}" in messages
    assert "plain" in messages
