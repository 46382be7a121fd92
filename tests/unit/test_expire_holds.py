"""Which images an expiry may remove while jobs hold some (app/jobs/holds.py, expire.py): a
held image stays with everything that goes with it, a hold ends with its job unless the job
stopped mid-commit, and a backup never chooses an image an expire job is removing."""

import pytest

from app.errors import ValidationError
from app.jobs import expire, holds, incremental
from app.jobs.commit import record_image
from app.jobs.store import DONE
from app.master import Master


@pytest.fixture
def m(tmp_path):
    m = Master(str(tmp_path / "home"))
    yield m
    m.close()


def image(m, iid, created, sources=(), part_of=None, schedule_type="full"):
    with m.db.tx() as c:
        record_image(c, id=iid, client="me", policy="p", schedule="s",
                     schedule_type=schedule_type, created=created,
                     expires="2000-01-01T00:00:00Z", bytes=1, files=1, storage_unit="stu",
                     pool="dp", storage_host="me", path=f"/pool/{iid}.tar", image_bytes=1,
                     job_id=None, selections=["/x"], warnings=0, checksum="crc32",
                     base_image=sources[0] if sources else None, sources=list(sources),
                     stream=None)
        if part_of:
            c.execute("UPDATE images SET part_of=? WHERE id=?", (part_of, iid))


def running_backup(m, **held):
    jid = m.jobs.create("backup", client="me", policy="p", schedule="s", storage_unit="stu")
    assert m.jobs.claim(jid, "test")
    with m.db.tx():
        holds.hold(m.db, jid, held)
    return jid


def test_a_held_image_stays_with_what_it_needs(m):
    image(m, "F", "2026-01-01T00:00:00Z")
    image(m, "D", "2026-01-02T00:00:00Z", sources=["F"], schedule_type="differential")
    image(m, "G", "2026-01-03T00:00:00Z")
    jid = running_backup(m, D="reads it as the base of its differential incremental")
    ready, kept = expire.due(m.db, 2e9)
    assert ready == ["G"]
    assert kept == {"D": f"backup job {jid} still reads it", "F": "image D still needs its data"}
    with pytest.raises(ValidationError) as e:
        expire.refuse_if_held(m.db, ["F", "D"], "F")
    assert e.value.message == (f"image F cannot be expired now: image D: backup job {jid} "
                               "(running) reads it as the base of its differential "
                               "incremental")
    assert f"wait for job {jid} to end" in e.value.hint
    # the job ends: its hold is gone with it
    m.jobs.finish(jid, 0)
    assert expire.due(m.db, 2e9) == (["D", "F", "G"], {})


def test_a_job_that_stopped_mid_commit_keeps_its_hold_until_the_commit_is_resolved(m):
    image(m, "F", "2026-01-01T00:00:00Z")
    jid = running_backup(m, F="reads it as its files cache")
    m.jobs.finish(jid, 99, "the process running this job stopped before it ended")
    assert m.jobs.get(jid)["state"] == DONE
    with m.db.tx() as c:
        c.execute("INSERT INTO image_commits(image_id, job_id, storage_host, pool, partial, "
                  "final, record, started) VALUES ('N', ?, 'me', 'dp', 'p', 'f', '{}', 'x')",
                  (jid,))
    [h] = holds.holders(m.db, ["F"])
    assert h["job"] == jid and "commit is not resolved yet" in holds.describe(h)
    with m.db.tx() as c:
        c.execute("DELETE FROM image_commits")
    assert holds.holders(m.db, ["F"]) == []


def test_a_set_goes_with_all_its_stream_images_or_not_at_all(m):
    image(m, "P1", "2026-01-01T00:00:00Z")
    image(m, "P2", "2026-01-01T00:00:01Z")
    image(m, "S", "2026-01-01T00:00:02Z", sources=["P1", "P2"])
    for p in ("P1", "P2"):
        with m.db.tx() as c:
            c.execute("UPDATE images SET part_of='S' WHERE id=?", (p,))
    assert expire.due(m.db, 2e9)[0] == ["P1", "P2", "S"]
    running_backup(m, P2="reads it as the base of its differential incremental")
    ready, kept = expire.due(m.db, 2e9)
    assert ready == [] and set(kept) == {"P1", "P2", "S"}


def test_a_backup_does_not_choose_an_image_being_expired_and_no_image_records_over_it(m):
    image(m, "F1", "2026-01-01T00:00:00Z")
    image(m, "F2", "2026-01-02T00:00:00Z")
    with m.db.tx() as c:
        c.execute("UPDATE images SET expiring=7 WHERE id='F2'")
    base, _ = incremental.choose_base(m.db, client="me", policy="p", pool="dp",
                                      level="differential")
    assert base["id"] == "F1"
    with pytest.raises(Exception) as e:
        image(m, "D", "2026-01-03T00:00:00Z", sources=["F2"])
    assert "F2" in str(e.value) and "it was not recorded" in str(e.value)
    assert m.db.one("SELECT 1 FROM images WHERE id='D'") is None


def test_an_image_whose_index_is_being_rebuilt_is_held(m):
    image(m, "F", "2026-01-01T00:00:00Z")
    jid = m.jobs.create("rebuild-index", params={"image": "F"})
    ready, kept = expire.due(m.db, 2e9)
    assert ready == [] and "F" in kept
    with pytest.raises(ValidationError, match="rebuilds the image's catalog index"):
        expire.refuse_if_held(m.db, ["F"], "F")
    m.jobs.claim(jid, "test")
    m.jobs.finish(jid, 0)
    assert expire.due(m.db, 2e9)[0] == ["F"]
