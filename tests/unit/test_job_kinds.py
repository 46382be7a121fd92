"""The kinds of job (app/jobs/kinds.py): every job the master queues has a kind the
dispatcher can run, and a kind's prepare() refuses a job before anything is written or any
host is asked. The restore's paths and relocation are checked by one function when it is
queued (on the chosen paths) and when it is prepared (on everything below them)."""

import ast
import importlib
from pathlib import Path

import pytest

from app import status as st
from app.catalog_index import build_index
from app.errors import NotFound, ValidationError
from app.jobs import benchmark, catalog_backup, kinds, object_benchmark
from app.jobs.commit import record_image
from app.master import Master
from app.relocate import RelocationError

REPO = Path(__file__).resolve().parents[2]


def _created_types():
    """The job types the product's code queues: the first argument of every
    `<...>jobs.create(...)` call under app/, a string or a module constant."""
    found = {}
    for path in sorted((REPO / "app").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "create" and node.args):
                continue
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name != "jobs":
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                found[arg.value] = f"{path.name}:{node.lineno}"
            elif isinstance(arg, ast.Name):
                value = getattr(importlib.import_module(module), arg.id)
                found[value] = f"{path.name}:{node.lineno}"
            else:
                pytest.fail(f"{path.name}:{node.lineno}: a job type this test cannot read")
    return found


def test_every_job_type_the_master_queues_has_a_kind():
    created = _created_types()
    # backup, restore, expire, verify, reclaim, cleanup, rebuild-index
    assert len(created) >= 7, created
    missing = {t: where for t, where in created.items() if t not in kinds.KINDS}
    assert not missing, f"job types without a kind in app/jobs/kinds.py: {missing}"
    for t in created:
        assert kinds.kind_of({"type": t, "params": {}}) == t
    # the parent of a multi-stream backup has a kind of its own
    parent = {"type": "backup", "params": {"streams": [["/a"], ["/b"]]}}
    assert kinds.kind_class(kinds.kind_of(parent)) is not kinds.kind_class("backup")
    # a bucket's benchmark too, by the names its modules use
    assert (kinds.BENCHMARK, kinds.OBJECT_WORKLOAD, kinds.CATALOG_BACKUP) == (
        benchmark.JOB_TYPE, object_benchmark.WORKLOAD, catalog_backup.JOB_TYPE)
    assert kinds.kind_of({"type": "benchmark", "params": {"workload": "object"}}) == \
        "object-benchmark"


def test_every_kind_has_prepare_and_run():
    for name in kinds.KINDS:
        cls = kinds.kind_class(name)
        assert callable(getattr(cls, "prepare", None)), name
        assert callable(getattr(cls, "run", None)), name
    # each kind's class is its own
    assert len({kinds.kind_class(name) for name in kinds.KINDS}) == len(kinds.KINDS)


# ---- a restore, prepared ---------------------------------------------------------------------

def _file(path, offset):
    return [path, "f", 0o644, 1000, 100, 5, 0, offset, 1024, "", ""]


def _dir(path):
    return [path, "d", 0o755, 1000, 100, 0, 0, -1, 0, "", ""]


@pytest.fixture
def m(tmp_path, monkeypatch):
    """A master with one image (IMG, with /data/a1 and /data/a2) in its catalog, whose hosts
    must not be asked anything."""
    m = Master(str(tmp_path / "home"))
    host = m.ensure_local_host()["name"]
    with m.db.tx() as c:
        record_image(c, id="IMG", client=host, policy="p", schedule="s",
                     schedule_type="full", created="2026-01-01T00:00:00Z", expires=None,
                     bytes=10, files=2, storage_unit="stu", pool="dp", storage_host=host,
                     path="/pool/IMG.tar", image_bytes=4096, job_id=None,
                     selections=["/data"], warnings=0, checksum="crc32", base_image=None,
                     sources=[], stream=None)
    build_index(m.home.index_path("IMG"),
                [_dir("/data"), _file("/data/a1", 512), _file("/data/a2", 2048)])

    def no_host(*args, **kw):
        raise AssertionError("a host was asked")

    monkeypatch.setattr(m.hosts, "connect", no_host)
    yield m
    m.close()


def _untouched(m, jid):
    """What the catalog holds of a job: its row and its log."""
    return tuple(m.db.one("SELECT * FROM jobs WHERE id=?", (jid,))), m.jobs.logs(jid)


def test_a_restore_of_an_image_gone_since_it_was_queued_is_refused_by_prepare(m):
    jid = m.start_restore("IMG", ["/data"], "/restored")
    with m.db.tx() as c:
        c.execute("DELETE FROM images WHERE id='IMG'")
    before = _untouched(m, jid)
    kind = kinds.make(m, m.jobs.get(jid))
    with pytest.raises(NotFound) as e:
        kind.prepare()
    assert e.value.status == st.INVALID_REQUEST
    assert e.value.message == "there is no image 'IMG'"
    assert _untouched(m, jid) == before
    # the dispatcher ends the job with that status and message, no host asked
    m.dispatcher.run_until_done([jid])
    assert m.jobs.get(jid)["status"] == st.INVALID_REQUEST
    assert [x["message"] for x in m.jobs.logs(jid)][-2:] == [
        "to fix: see `cairn images list`",
        f"ended with status {st.INVALID_REQUEST}: there is no image 'IMG'"]


def test_restore_paths_are_checked_by_one_function_when_queued_and_when_prepared(m):
    with pytest.raises(NotFound) as e:
        m.start_restore("IMG", ["/data/b"], "/restored")
    assert e.value.message == "/data/b is not in image IMG"
    assert e.value.hint == "see `cairn browse IMG /data`"
    jid = m.start_restore("IMG", ["/data/a2"], "/restored")
    # the index rebuilt without it before the job runs
    build_index(m.home.index_path("IMG"), [_dir("/data"), _file("/data/a1", 512)])
    before = _untouched(m, jid)
    with pytest.raises(ValidationError) as e:
        kinds.make(m, m.jobs.get(jid)).prepare()
    assert (e.value.status, e.value.message) == (st.INVALID_REQUEST,
                                                 "/data/a2 is not in the image")
    assert e.value.hint == "browse the image with `cairn browse IMAGE` to see its paths"
    assert _untouched(m, jid) == before


def test_a_relocation_is_checked_on_the_chosen_paths_when_queued_and_below_them_when_prepared(m):
    rename = {"rename": {"pattern": "a?", "replacement": "b", "mode": "glob"}}
    with pytest.raises(RelocationError):
        m.start_restore("IMG", ["/data/a1", "/data/a2"], "/restored", relocate=rename)
    # /data alone maps to itself: queued; below it, a1 and a2 would both become /data/b
    jid = m.start_restore("IMG", ["/data"], "/restored", relocate=rename)
    before = _untouched(m, jid)
    with pytest.raises(RelocationError) as e:
        kinds.make(m, m.jobs.get(jid)).prepare()
    assert e.value.status == st.INVALID_REQUEST
    assert e.value.message == "/data/a1 and /data/a2 would both be restored to /data/b"
    assert _untouched(m, jid) == before


def test_a_prepared_restore_has_its_plan_from_one_opening_of_the_index(m, monkeypatch):
    jid = m.start_restore("IMG", ["/data"], "/restored")
    opened = []
    real = type(m).open_index

    def counting(self, img):
        opened.append(img["id"])
        return real(self, img)

    monkeypatch.setattr(type(m), "open_index", counting)
    kind = kinds.make(m, m.jobs.get(jid))
    kind.prepare()
    assert opened == ["IMG"]
    assert [i["path"] for i in kind.plan] == ["/data/a1", "/data/a2"]
    assert (kind.nfiles, kind.nbytes) == (2, 2048)
