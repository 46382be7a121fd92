"""The reports' rates over a real catalog: a row's rate is its bytes over its sub-second
elapsed time; a group of jobs that ran together has the sum of their rates, its mean and its
wall-clock rate; the restores report; and the published figures of a 12-client backup
(Figure 35's rows give Figure 36's per-client rates)."""

import json
import os
import sys

import pytest

from app import reports
from app import status as st
from app import timeutil
from app.master import Master

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from clihelp import cairn, cairn_json  # noqa: E402

KiB = 1024


def add_job(m, client, start_t, end_t, bytes, *, type="backup", policy="p1"):
    """An ended job with its sub-second clock, as the dispatcher leaves it."""
    with m.db.tx() as c:
        return c.execute(
            "INSERT INTO jobs(type, state, status, client, policy, schedule, storage_unit, "
            "created, started, ended, started_t, ended_t, bytes, files, params) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (type, "done", st.OK, client, policy, "Full", "stu1", timeutil.iso(start_t),
             timeutil.iso(start_t), timeutil.iso(end_t), start_t, end_t, bytes, 1,
             json.dumps({"schedule_type": "full"}))).lastrowid


@pytest.fixture
def m(tmp_path):
    master = Master(str(tmp_path / "home"))
    yield master
    master.close()


# Figure 35 as printed: client, backup time (07/08/15), kilobytes, elapsed time.
FIGURE_35 = [
    ("client33", "20:48:00", 209716256, "00:11:30"),
    ("client32", "20:47:59", 209716256, "00:09:07"),
    ("client31", "20:47:58", 209716256, "00:08:18"),
    ("client30", "20:47:57", 209716256, "00:08:58"),
    ("client29", "20:47:56", 209716256, "00:08:27"),
    ("client28", "20:47:55", 209716256, "00:08:11"),
    ("client27", "20:47:54", 209716256, "00:09:24"),
    ("client26", "20:47:53", 209716256, "00:10:33"),
    ("client25", "20:47:52", 209716256, "00:09:29"),
]
# Figure 36: the data rate of each of those clients, KiB/s, as printed.
FIGURE_36 = [303936.60, 383393.52, 421116.98, 389807.17, 413641.53, 427120.68, 371837.33,
             331305.30, 368569.87]


def seconds(hms):
    h, mi, s = (int(x) for x in hms.split(":"))
    return h * 3600 + mi * 60 + s


def test_figure_35_rows_give_figure_36_rates(m):
    ids = []
    for client, at, kb, elapsed in FIGURE_35:
        start = timeutil.parse_iso(f"2015-07-08T{at}Z")
        ids.append(add_job(m, client, start, start + seconds(elapsed), kb * KiB,
                           policy="backup_100m_12x"))
    r = reports.backup_report(m)
    rows = {x["job_id"]: x for x in r["rows"]}
    got = [rows[i]["rate_bytes_per_s"] / KiB for i in ids]
    assert [round(x, 2) for x in got] == FIGURE_36
    for row in r["rows"]:
        assert row["rate_bytes_per_s"] == row["bytes"] / row["elapsed_s"]
    # all started within 8 s of each other: one group
    [g] = r["groups"]
    assert sorted(g["jobs"]) == sorted(ids) and g["clients"] == 9
    assert g["total_average_rate_bytes_per_s"] / KiB == pytest.approx(sum(FIGURE_36), abs=0.05)
    assert round(g["total_average_rate_bytes_per_s"] / KiB) == 3_410_729
    assert g["mean_rate_bytes_per_s"] == pytest.approx(g["total_average_rate_bytes_per_s"] / 9)
    # the sum is n times the mean, as the seed's 12 x 375,917 = 4,511,013 KiB/s
    assert g["total_average_rate_bytes_per_s"] == pytest.approx(9 * g["mean_rate_bytes_per_s"])
    # wall clock: 9 x 209716256 KiB from 20:47:52 to the last end (client33: 20:59:30)
    assert g["span_s"] == 698
    assert g["wall_clock_rate_bytes_per_s"] == pytest.approx(9 * 209716256 * KiB / 698)
    assert g["wall_clock_rate_bytes_per_s"] < g["total_average_rate_bytes_per_s"]


def test_rates_use_the_sub_second_clock_and_jobs_in_one_second_stay_apart(m):
    t = 1_790_000_000.0
    a = add_job(m, "alpha", t + 0.10, t + 0.35, 1000)     # 0.25 s
    b = add_job(m, "beta", t + 0.50, t + 0.90, 1000)      # 0.4 s, same whole second as a
    c = add_job(m, "gamma", t + 0.80, t + 1.60, 4000)     # overlaps b
    r = reports.backup_report(m)
    rows = {x["job_id"]: x for x in r["rows"]}
    assert rows[a]["started"] == rows[b]["started"]        # the texts cannot tell them apart
    assert rows[a]["elapsed_s"] == pytest.approx(0.25)
    assert rows[a]["rate_bytes_per_s"] == 1000 / rows[a]["elapsed_s"]
    assert rows[b]["rate_bytes_per_s"] == pytest.approx(2500)
    assert [x["job_id"] for x in r["rows"]] == [a, b, c]
    assert (rows[a]["group"], rows[b]["group"], rows[c]["group"]) == (1, 2, 2)
    g = r["groups"][1]
    assert g["span_s"] == pytest.approx(1.1)
    assert g["total_average_rate_bytes_per_s"] == pytest.approx(2500 + 5000)
    assert g["mean_rate_bytes_per_s"] == pytest.approx(3750)
    assert g["wall_clock_rate_bytes_per_s"] == pytest.approx(5000 / 1.1)


def test_the_dispatcher_keeps_a_sub_second_clock(m):
    jid = m.jobs.create("backup", client="alpha", policy="p1", schedule="daily",
                        storage_unit="stu1")
    assert m.jobs.claim(jid, "test")
    m.jobs.finish(jid, st.OK, bytes=12345)
    row = m.db.one("SELECT started, ended, started_t, ended_t, rate_bytes_per_s FROM jobs "
                   "WHERE id=?", (jid,))
    assert row["started_t"] != int(row["started_t"]) or row["ended_t"] != int(row["ended_t"])
    assert 0 <= row["ended_t"] - row["started_t"] < 5
    [x] = reports.backup_report(m)["rows"]
    assert x["elapsed_source"] == "clock"
    assert x["rate_bytes_per_s"] == 12345 / (row["ended_t"] - row["started_t"])


def test_the_restores_report(m):
    add_job(m, "alpha", 1000.0, 1100.0, 10_000)               # a backup: not listed
    r1 = add_job(m, "alpha", 2000.0, 2010.0, 5_000, type="restore")
    r2 = add_job(m, "beta", 2005.0, 2020.0, 3_000, type="restore")
    r = reports.restore_report(m)
    assert r["report"] == "restores"
    assert [x["job_id"] for x in r["rows"]] == [r1, r2]
    [g] = r["groups"]
    assert g["total_average_rate_bytes_per_s"] == pytest.approx(500 + 200)
    assert g["wall_clock_rate_bytes_per_s"] == pytest.approx(8000 / 20)
    assert r["summary"]["jobs"] == 2
    assert reports.report_choices(m, "restore") == {"clients": ["alpha", "beta"],
                                                    "policies": ["p1"]}


def test_report_restores_through_the_cli(tmp_path):
    home = tmp_path / "home"
    m = Master(str(home))
    try:
        add_job(m, "alpha", 2000.0, 2010.0, 5_000, type="restore")
        add_job(m, "beta", 2005.0, 2020.0, 3_000, type="restore")
    finally:
        m.close()
    doc, _ = cairn_json(home, "report", "restores")
    assert doc["report"] == "restores" and len(doc["rows"]) == 2
    assert doc["groups"][0]["total_average_rate_bytes_per_s"] == pytest.approx(700)
    human = cairn(home, "report", "restores").stdout
    assert "sum of per-client rates" in human and "wall-clock" in human
    backups, _ = cairn_json(home, "report", "backups")
    assert backups["rows"] == []


def add_samples(m, jid, samples):
    with m.db.tx() as c:
        c.executemany("INSERT INTO job_samples(job_id, t, bytes, files) VALUES (?,?,?,0)",
                      [(jid, t, b) for t, b in samples])


def stalled_job(m):
    """Started at 1000, silent for 300 s, then 10 MB/s for 120 s, then 1 MB/s for 60 s."""
    jid = add_job(m, "alpha", 1000.0, 1480.0, 1_260_000_000)
    add_samples(m, jid, [(1300.0 + s, 10_000_000 * min(s, 120) + 1_000_000 * max(0, s - 120))
                         for s in range(0, 181)])
    return jid


def test_job_figures_in_jobs_show_and_the_report(tmp_path):
    home = tmp_path / "home"
    m = Master(str(home))
    try:
        jid = stalled_job(m)
    finally:
        m.close()
    job, _ = cairn_json(home, "jobs", "show", jid, "--peak-window", "60", "--first-minutes", "6")
    f = job["figures"]
    assert f["peak_bytes_per_s"] == pytest.approx(10_000_000)   # the stall does not count
    assert f["peak_window_s"] == 60
    assert f["first_s"] == 360 and f["first_bytes"] == pytest.approx(60 * 10_000_000)
    assert f["average_bytes_per_s"] == pytest.approx(1_260_000_000 / 480)
    # an hour's window on a 3-minute sampled run: the whole sampled run
    whole, _ = cairn_json(home, "jobs", "show", jid, "--peak-window", "3600")
    assert whole["figures"]["peak_bytes_per_s"] == pytest.approx(1_260_000_000 / 180)
    assert whole["figures"]["first_s"] == 3600
    human = cairn(home, "jobs", "show", jid).stdout
    assert "sustained peak" in human and "first 60 min" in human

    doc, _ = cairn_json(home, "report", "backups", "--peak-window", "30", "--first-minutes", "7")
    [row] = doc["rows"]
    assert row["peak_bytes_per_s"] == pytest.approx(10_000_000)
    assert row["first_bytes"] == pytest.approx(120 * 10_000_000)   # 300 s stall + 120 s
    assert doc["peak_window_s"] == 30 and doc["first_s"] == 420

    bad = cairn(home, "jobs", "show", jid, "--peak-window", "0", check=False)
    assert bad.returncode == st.INVALID_REQUEST
    assert "peak window must be a positive time" in bad.stderr and "Traceback" not in bad.stderr
    bad = cairn(home, "report", "restores", "--first-minutes", "-1", check=False)
    assert bad.returncode == st.INVALID_REQUEST and "Traceback" not in bad.stderr
