"""Each copy of an image at its own retention (app/jobs/copies.py, expire_copies.py): an image
goes whole once every copy has ended, a copy alone before that, the next copy taking the
primary's place; a copy stays while a copy of an image that reads from it stays in its pool,
or while a job holds the image."""

import pytest

from app.jobs import copies, expire, expire_copies, holds, restore_copies
from app.jobs.commit import record_image
from app.master import Master

PAST, LATER = "2000-01-01T00:00:00Z", "2100-01-01T00:00:00Z"


@pytest.fixture
def m(tmp_path):
    m = Master(str(tmp_path / "home"))
    yield m
    m.close()


def image(m, iid, created, expires=PAST, sources=()):
    with m.db.tx() as c:
        record_image(c, id=iid, client="me", policy="p", schedule="s",
                     schedule_type="differential" if sources else "full", created=created,
                     expires=expires, bytes=1, files=1, storage_unit="stu", pool="dp",
                     storage_host="me", path=f"/pool/{iid}.tar", image_bytes=1, job_id=None,
                     selections=["/x"], warnings=0, checksum="crc32",
                     base_image=sources[0] if sources else None, sources=list(sources),
                     stream=None)


def copy(m, iid, number, pool, expires):
    with m.db.tx() as c:
        copies.insert(c, iid, number, storage_unit=f"stu-{pool}", pool=pool, storage_host="me",
                      path=f"/{pool}/{iid}.tar", image_bytes=1, created=PAST, expires=expires,
                      job_id=None, state="ok", dedup=None)


def test_an_image_goes_whole_only_once_every_copy_has_ended(m):
    image(m, "A", "2026-01-01T00:00:00Z")
    copy(m, "A", 2, "dp2", LATER)
    assert expire.due(m.db, 2e9) == ([], {})
    assert expire_copies.due(m.db, 2e9) == ([("A", 1)], {})
    with m.db.tx() as c:
        c.execute("UPDATE image_copies SET expires=?", (PAST,))
    assert expire.due(m.db, 2e9) == (["A"], {})
    assert expire_copies.due(m.db, 2e9) == ([], {})
    assert [(c["copy"], c["primary"], c["pool"]) for c in copies.copies(m.db, "A")] == \
        [(1, True, "dp"), (2, False, "dp2")]


def test_a_copy_stays_while_a_copy_of_an_image_reading_from_it_stays_in_its_pool(m):
    image(m, "F", "2026-01-01T00:00:00Z")
    image(m, "D", "2026-01-02T00:00:00Z", expires=LATER, sources=["F"])
    copy(m, "F", 2, "dp2", LATER)
    copy(m, "D", 2, "dp2", LATER)
    units, kept = expire_copies.due(m.db, 2e9)
    assert units == []
    assert kept == {"F copy 1": "copy 1 of image D in disk pool dp still needs its data"}
    # D's copy in dp ends too: both go from dp, their copies in dp2 stay
    with m.db.tx() as c:
        c.execute("UPDATE images SET expires=? WHERE id='D'", (PAST,))
    assert expire_copies.due(m.db, 2e9) == ([("D", 1), ("F", 1)], {})


def test_a_held_image_keeps_its_copies(m):
    image(m, "A", "2026-01-01T00:00:00Z")
    copy(m, "A", 2, "dp2", LATER)
    jid = m.jobs.create("duplicate", client="me", storage_unit="stu")
    assert m.jobs.claim(jid, "test")
    with m.db.tx():
        holds.hold(m.db, jid, {"A": "it copies it to another pool"})
    units, kept = expire_copies.due(m.db, 2e9)
    assert units == [] and kept == {"A copy 1": f"duplicate job {jid} still reads it"}


def test_when_the_primary_goes_the_next_copy_takes_its_place(m):
    image(m, "A", "2026-01-01T00:00:00Z")
    copy(m, "A", 2, "dp2", LATER)
    copy(m, "A", 3, "dp3", LATER)
    with m.db.tx() as c:
        expire_copies.claim(c, 77, [("A", 1)])
    img = m.image("A")
    assert (img["copy_number"], img["pool"], img["path"], img["expires"]) == \
        (2, "dp2", "/dp2/A.tar", LATER)
    # the old primary is a copy now, marked as being removed by the job
    [old] = expire_copies.marked(m.db, 77)
    assert (old["copy_number"], old["pool"], old["path"]) == (1, "dp", "/pool/A.tar")
    assert [(c["copy"], c["pool"]) for c in copies.copies(m.db, "A")] == \
        [(2, "dp2"), (1, "dp"), (3, "dp3")]
    # a restore tries the copies still kept first, the primary first
    assert [c["copy"] for c in restore_copies.choices(m.db, m.image("A"))] == [2, 3]
    # a failed job leaves the copy it did not remove, unmarked
    with m.db.tx() as c:
        expire_copies.unclaim(c, 77)
    assert expire_copies.marked(m.db, 77) == []


def test_a_copy_number_is_its_step_unless_taken(m):
    image(m, "A", "2026-01-01T00:00:00Z")
    with m.db.tx() as c:
        assert copies.free_number(c, "A", 2) == 2
    copy(m, "A", 2, "dp2", LATER)
    with m.db.tx() as c:
        assert copies.free_number(c, "A", 2) == 3
        assert copies.free_number(c, "A", 5) == 5


def test_an_image_s_last_copy_never_goes_alone(m):
    """Both copies of an image ended, but a later image still needs its data: its copies are
    not expired one by one (the last would leave nothing), the image waits as a whole."""
    image(m, "F", "2026-01-01T00:00:00Z")
    image(m, "D", "2026-01-02T00:00:00Z", expires=LATER, sources=["F"])
    copy(m, "F", 2, "dp2", PAST)
    assert expire.due(m.db, 2e9) == ([], {"F": "image D still needs its data"})
    assert expire_copies.due(m.db, 2e9)[0] == []
    with m.db.tx() as c:
        assert expire_copies.claim(c, 9, [("F", 1), ("F", 2)]) == [("F", 1)]
    assert [(c["copy"], c["expiring"]) for c in copies.copies(m.db, "F")] == \
        [(2, None), (1, 9)]
