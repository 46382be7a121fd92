"""The client backups report over a real catalog: rows, filters, groups of jobs that ran
together, the summary, daily totals per client, CSV export and `cairn report backups`."""

import csv
import io
import json
import os
import sys

import pytest

from app import reports
from app import status as st
from app import timeutil
from app.errors import ValidationError
from app.master import Master

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from clihelp import cairn, cairn_json  # noqa: E402
from treegen import make_tree  # noqa: E402

GiB = 1 << 30


def add_job(m, client, started, ended, bytes, *, policy="p1", schedule="daily", files=10,
            status=st.OK, type="backup", state="done", schedule_type="full"):
    """A job row as the dispatcher leaves it, with chosen times."""
    with m.db.tx() as c:
        cur = c.execute(
            "INSERT INTO jobs(type, state, status, client, policy, schedule, storage_unit, "
            "created, started, ended, bytes, files, params) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (type, state, status, client, policy, schedule, "stu1", started, started,
             ended, bytes, files, json.dumps({"schedule_type": schedule_type})))
        return cur.lastrowid


@pytest.fixture
def m(tmp_path):
    master = Master(str(tmp_path / "home"))
    yield master
    master.close()


@pytest.fixture
def history(m):
    """Three clients over two days. On day 1, jobs a1, b1 and c1 overlap as a chain
    (a1 with b1, b1 with c1); a2 runs alone later. On day 2, a3 and b2 only touch."""
    ids = {
        "a1": add_job(m, "alpha", "2026-09-21T20:00:00Z", "2026-09-21T20:10:00Z", 6 * GiB),
        "b1": add_job(m, "beta", "2026-09-21T20:05:00Z", "2026-09-21T20:20:00Z", 3 * GiB,
                      files=7),
        "c1": add_job(m, "gamma", "2026-09-21T20:15:00Z", "2026-09-21T20:30:00Z", 3 * GiB,
                      policy="p2", status=st.PARTIAL),
        "a2": add_job(m, "alpha", "2026-09-21T23:00:00Z", "2026-09-21T23:01:40Z", 100 << 20),
        "a3": add_job(m, "alpha", "2026-09-22T01:00:00Z", "2026-09-22T01:10:00Z", 2 * GiB),
        "b2": add_job(m, "beta", "2026-09-22T01:10:00Z", "2026-09-22T01:20:00Z", GiB,
                      status=st.VOLUME_UNAVAILABLE),
    }
    # Neither a job still running, nor a restore, nor a queued backup is reported.
    add_job(m, "alpha", "2026-09-21T20:00:00Z", None, GiB, state="active", status=None)
    add_job(m, "alpha", "2026-09-21T20:00:00Z", "2026-09-21T20:40:00Z", GiB, type="restore")
    m.jobs.create("backup", client="alpha", policy="p1", schedule="daily", storage_unit="stu1")
    return ids


def by_id(report):
    return {r["job_id"]: r for r in report["rows"]}


def test_rows_are_the_backup_jobs_that_ended(m, history):
    r = reports.backup_report(m)
    assert [x["job_id"] for x in r["rows"]] == [history[k] for k in
                                               ("a1", "b1", "c1", "a2", "a3", "b2")]
    b1 = by_id(r)[history["b1"]]
    assert b1["client"] == "beta" and b1["policy"] == "p1" and b1["schedule"] == "daily"
    assert b1["schedule_type"] == "full"
    assert b1["started"] == "2026-09-21T20:05:00Z" and b1["ended"] == "2026-09-21T20:20:00Z"
    assert b1["elapsed_s"] == 900 and b1["files"] == 7 and b1["bytes"] == 3 * GiB
    assert b1["rate_bytes_per_s"] == pytest.approx(3 * GiB / 900)
    assert b1["status"] == 0 and b1["status_text"] == st.text(0)
    assert by_id(r)[history["b2"]]["status"] == st.VOLUME_UNAVAILABLE


def test_jobs_that_overlap_form_one_group_with_a_combined_rate(m, history):
    r = reports.backup_report(m)
    rows = by_id(r)
    group = {k: rows[history[k]]["group"] for k in history}
    # a1-b1-c1 are chained by overlaps; a2 alone; a3 and b2 only touch at 01:10:00.
    assert group == {"a1": 1, "b1": 1, "c1": 1, "a2": 2, "a3": 3, "b2": 4}
    first = r["groups"][0]
    assert first["jobs"] == [history["a1"], history["b1"], history["c1"]]
    assert first["started"] == "2026-09-21T20:00:00Z" and first["ended"] == "2026-09-21T20:30:00Z"
    assert first["span_s"] == 1800 and first["bytes"] == 12 * GiB
    combined = 12 * GiB / 1800
    assert first["rate_bytes_per_s"] == pytest.approx(combined)
    for k in ("a1", "b1", "c1"):
        assert rows[history[k]]["group_rate_bytes_per_s"] == pytest.approx(combined)
    # a job alone: its group's rate is its own
    a2 = rows[history["a2"]]
    assert a2["group_rate_bytes_per_s"] == pytest.approx(a2["rate_bytes_per_s"])


def test_a_job_inside_a_longer_one_joins_its_group_and_later_ones_too(m):
    # the long job spans both short ones, which do not overlap each other
    long = add_job(m, "a", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z", 3600)
    s1 = add_job(m, "b", "2026-01-01T00:10:00Z", "2026-01-01T00:11:00Z", 600)
    s2 = add_job(m, "c", "2026-01-01T00:50:00Z", "2026-01-01T01:30:00Z", 1200)
    r = reports.backup_report(m)
    assert {x["job_id"]: x["group"] for x in r["rows"]} == {long: 1, s1: 1, s2: 1}
    assert r["groups"][0]["rate_bytes_per_s"] == pytest.approx((3600 + 600 + 1200) / 5400)


def test_summary(m, history):
    s = reports.backup_report(m)["summary"]
    total = 6 * GiB + 3 * GiB + 3 * GiB + (100 << 20) + 2 * GiB + GiB
    elapsed = 600 + 900 + 900 + 100 + 600 + 600
    busy = 1800 + 100 + 600 + 600
    assert s["jobs"] == 6 and s["clients"] == 3
    assert (s["succeeded"], s["partial"], s["failed"]) == (4, 1, 1)
    assert s["bytes"] == total and s["files"] == 57
    assert s["elapsed_s"] == elapsed and s["busy_s"] == busy and s["groups"] == 4
    assert s["average_rate_bytes_per_s"] == pytest.approx(total / elapsed)
    assert s["combined_rate_bytes_per_s"] == pytest.approx(total / busy)


def test_filters(m, history):
    r = reports.backup_report(m, client="alpha")
    assert [x["job_id"] for x in r["rows"]] == [history["a1"], history["a2"], history["a3"]]
    # groups are formed among the rows shown: a1 is alone without beta and gamma
    assert [x["group"] for x in r["rows"]] == [1, 2, 3]
    assert r["rows"][0]["group_rate_bytes_per_s"] == pytest.approx(6 * GiB / 600)
    r = reports.backup_report(m, policy="p2")
    assert [x["job_id"] for x in r["rows"]] == [history["c1"]]
    # since is inclusive, until exclusive, both on the start time
    r = reports.backup_report(m, since="2026-09-21T20:05:00Z", until="2026-09-22T01:10:00Z")
    assert [x["job_id"] for x in r["rows"]] == [history[k] for k in ("b1", "c1", "a2", "a3")]
    assert r["since"] == "2026-09-21T20:05:00Z" and r["until"] == "2026-09-22T01:10:00Z"
    # epoch seconds work as well as ISO text; other offsets are converted to UTC
    r = reports.backup_report(m, since=timeutil.parse_iso("2026-09-22T00:00:00Z"),
                              until="2026-09-22T03:10:00+02:00")
    assert [x["job_id"] for x in r["rows"]] == [history["a3"]]
    assert reports.backup_report(m, client="nobody")["rows"] == []


def test_bad_ranges_are_clear_errors(m):
    with pytest.raises(ValidationError, match="'yesterday' is not a time") as e:
        reports.backup_report(m, since="yesterday")
    assert "ISO 8601" in e.value.hint
    with pytest.raises(ValidationError, match="range is empty"):
        reports.backup_report(m, since="2026-09-22T00:00:00Z", until="2026-09-21T00:00:00Z")


def test_daily_totals_per_client_fill_every_day(m, history):
    add_job(m, "gamma", "2026-09-24T10:00:00Z", "2026-09-24T10:01:00Z", 5 << 20)
    d = reports.backup_report(m)["daily"]
    assert d["days"] == ["2026-09-21", "2026-09-22", "2026-09-23", "2026-09-24"]
    assert d["clients"] == ["alpha", "beta", "gamma"]
    assert d["bytes"]["alpha"] == [6 * GiB + (100 << 20), 2 * GiB, 0, 0]
    assert d["bytes"]["beta"] == [3 * GiB, GiB, 0, 0]
    assert d["bytes"]["gamma"] == [3 * GiB, 0, 0, 5 << 20]
    assert d["jobs"]["alpha"] == [2, 1, 0, 0]
    assert reports.daily_totals([]) == {"days": [], "clients": [], "bytes": {}, "jobs": {}}


def test_the_chart_covers_the_range_asked_for(m, history):
    d = reports.backup_report(m, since="2026-09-20T00:00:00Z", until="2026-09-25T00:00:00Z")
    assert d["daily"]["days"] == ["2026-09-20", "2026-09-21", "2026-09-22", "2026-09-23",
                                  "2026-09-24"]
    assert d["daily"]["bytes"]["beta"] == [0, 3 * GiB, GiB, 0, 0]
    empty = reports.backup_report(m, since="2026-10-01T00:00:00Z",
                                  until="2026-10-03T00:00:00Z")["daily"]
    assert empty["days"] == ["2026-10-01", "2026-10-02"] and empty["clients"] == []
    # a range of years shows the days with backups only
    long = reports.backup_report(m, since="2000-01-01T00:00:00Z", until="2030-01-01T00:00:00Z")
    assert long["daily"]["days"] == ["2026-09-21", "2026-09-22"]


def test_choices_name_the_clients_and_policies_with_backups(m, history):
    assert reports.report_choices(m) == {"clients": ["alpha", "beta", "gamma"],
                                         "policies": ["p1", "p2"]}


def test_csv_export(m, history, tmp_path):
    rows = reports.backup_report(m)["rows"]
    # a name that needs quoting: commas, quotes and a line break
    rows[0]["schedule"] = 'nightly, "big"\nrun'
    out = tmp_path / "report.csv"
    assert reports.write_csv(rows, str(out)) == {"path": str(out), "rows": 6}
    text = out.read_bytes().decode("utf-8")
    assert text.startswith(",".join(reports.CSV_COLUMNS) + "\r\n")
    back = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(back) == 6
    first = back[0]
    assert first["schedule"] == 'nightly, "big"\nrun'
    assert first["job_id"] == str(history["a1"]) and first["client"] == "alpha"
    assert first["started"] == "2026-09-21T20:00:00Z" and first["ended"] == "2026-09-21T20:10:00Z"
    assert first["bytes"] == str(6 * GiB) and first["elapsed_s"] == "600"
    assert first["rate_bytes_per_s"] == str(round(6 * GiB / 600))
    assert first["group"] == "1" and first["group_rate_bytes_per_s"] == str(round(12 * GiB / 1800))
    assert first["status"] == "0" and first["image_id"] == ""
    assert back[5]["status"] == str(st.VOLUME_UNAVAILABLE)
    # private, like the catalog it comes from: it names the clients and their backups
    assert oct(out.stat().st_mode & 0o777) == oct(0o600)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_csv_export_to_a_missing_directory_writes_nothing(tmp_path):
    with pytest.raises(ValidationError, match="does not exist"):
        reports.write_csv([], str(tmp_path / "nope" / "r.csv"))
    assert not (tmp_path / "nope").exists()


def test_report_of_real_backups_through_the_cli(tmp_path):
    """Two real backups on the embedded default, reported by `cairn report backups`."""
    home, vol, src = tmp_path / "home", tmp_path / "vol", tmp_path / "src"
    vol.mkdir()
    make_tree(str(src))
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "ss1", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", str(vol))
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1")
    cairn(home, "policy", "add-client", "p1", "me")
    cairn(home, "policy", "add-selection", "p1", str(src))
    jobs = [cairn_json(home, "backup", "p1", "--wait")[0]["jobs"][0] for _ in range(2)]
    assert all(j["status"] == 0 for j in jobs)

    out = tmp_path / "r.csv"
    doc, _ = cairn_json(home, "report", "backups", "--client", "me", "--csv", out)
    assert [r["job_id"] for r in doc["rows"]] == [j["id"] for j in jobs]
    for row, job in zip(doc["rows"], jobs):
        assert (row["bytes"], row["files"], row["started"], row["ended"]) == \
            (job["bytes"], job["files"], job["started"], job["ended"])
        assert row["image_id"] == job["image_id"]
    assert doc["summary"]["jobs"] == 2 and doc["summary"]["bytes"] == sum(j["bytes"] for j in jobs)
    assert doc["csv"] == {"path": str(out), "rows": 2}
    with open(out, newline="") as f:
        assert [int(r["job_id"]) for r in csv.DictReader(f)] == [j["id"] for j in jobs]

    empty, _ = cairn_json(home, "report", "backups", "--since", "2000-01-01T00:00:00Z",
                          "--until", "2000-01-02T00:00:00Z")
    assert empty["rows"] == [] and empty["summary"]["jobs"] == 0
    human = cairn(home, "report", "backups").stdout
    assert "2 jobs, 0 failed" in human and str(jobs[0]["id"]) in human

    bad = cairn(home, "report", "backups", "--since", "last week", check=False)
    assert bad.returncode == st.INVALID_REQUEST
    assert "'last week' is not a time" in bad.stderr and "Traceback" not in bad.stderr


def test_a_job_shorter_than_its_times_can_show_keeps_the_rate_it_measured(m):
    jid = add_job(m, "alpha", "2026-09-21T20:00:00Z", "2026-09-21T20:00:01Z", 600 << 20)
    m.db.execute("UPDATE jobs SET rate_bytes_per_s=? WHERE id=?", (750 << 20, jid))
    rows = reports.backup_rows(m.db)
    reports.group_overlapping(rows)
    [row] = [r for r in rows if r["job_id"] == jid]
    assert row["rate_bytes_per_s"] == 750 << 20   # not 600 MiB over a "1 s" rounded span
    assert row["elapsed_s"] == 0.8 and row["elapsed_source"] == "measured"
    assert row["group_rate_bytes_per_s"] == pytest.approx(750 << 20)
