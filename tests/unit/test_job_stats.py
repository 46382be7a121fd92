"""Throughput figures over hand-made samples, the catalog's change counter that lets the
activity monitor read only what changed, and restarting a failed job."""

import pytest

from app import status as st
from app.errors import ValidationError
from app.jobs import stats

MB = 1_000_000


def ramp(seconds, rate_at):
    """Cumulative samples one a second from t=1000, rate_at(second) bytes moved in each."""
    out, total = [], 0
    for s in range(seconds + 1):
        if s:
            total += rate_at(s)
        out.append({"t": 1000.0 + s, "bytes": total, "files": s})
    return out


def test_points_add_the_start_and_sort():
    pts = stats.points([(1002.0, 20), (1001.0, 10)], started=1000.0)
    assert pts == [(1000.0, 0), (1001.0, 10), (1002.0, 20)]
    assert stats.points([(1001.0, 10)], started=1005.0) == [(1001.0, 10)]


def test_rates_between_neighbours():
    assert stats.rates([(0.0, 0), (2.0, 10 * MB), (4.0, 14 * MB)]) == \
        [(2.0, 5 * MB), (4.0, 2 * MB)]


def test_bytes_at_interpolates_and_clamps():
    pts = [(0.0, 0), (10.0, 100)]
    assert stats.bytes_at(pts, 5.0) == 50
    assert stats.bytes_at(pts, -1.0) == 0
    assert stats.bytes_at(pts, 99.0) == 100
    assert stats.bytes_at([], 3.0) == 0


def test_summary_of_a_job_that_ramps_up_holds_and_ramps_down():
    # 30 s at 10 MB/s rising to a 200 s plateau of 100 MB/s, then 100 s at 20 MB/s
    def rate(s):
        return 10 * MB if s <= 30 else 100 * MB if s <= 230 else 20 * MB
    samples = ramp(330, rate)
    s = stats.summary(samples)
    assert s["duration_s"] == 330
    assert s["bytes"] == 30 * 10 * MB + 200 * 100 * MB + 100 * 20 * MB
    assert s["average_bytes_per_s"] == pytest.approx(s["bytes"] / 330)
    assert s["peak_bytes_per_s"] == pytest.approx(100 * MB)
    assert 30 <= s["peak_at_s"] <= 220
    assert s["peak_window_s"] == 10
    assert s["first"][60] == 30 * 10 * MB + 30 * 100 * MB
    assert s["first"][120] == 30 * 10 * MB + 90 * 100 * MB
    assert s["first"][300] == 30 * 10 * MB + 200 * 100 * MB + 70 * 20 * MB
    assert s["tail_bytes_per_s"] == pytest.approx(20 * MB)


def test_a_one_second_burst_is_not_the_sustained_peak():
    samples = ramp(60, lambda s: 500 * MB if s == 20 else 10 * MB)
    s = stats.summary(samples)
    assert s["peak_bytes_per_s"] == pytest.approx((9 * 10 + 500) * MB / 10)
    assert max(r for _, r in stats.rates(stats.points(samples))) == 500 * MB


def test_a_short_job_has_no_later_marks_and_its_peak_is_its_sampled_run():
    samples = ramp(5, lambda s: 4 * MB)
    s = stats.summary(samples, started=999.0)      # nothing moved in the first second
    assert s["duration_s"] == 6
    assert s["first"] == {60: None, 120: None, 300: None}
    # the second before the first sample counts in the average, not in the peak
    assert s["peak_window_s"] == 5
    assert s["peak_bytes_per_s"] == pytest.approx(4 * MB)
    assert s["average_bytes_per_s"] == pytest.approx(20 * MB / 6)
    # data in the first N minutes: all of it when the job ran shorter
    assert s["first_s"] == 3600 and s["first_bytes"] == 20 * MB


def test_a_stall_before_the_first_sample_does_not_understate_the_peak():
    # started at 0, reported nothing for 610 s (its first sample already holds 1 GB), then
    # 100 MB/s until 1800: shorter than the hour's window, whose peak is then its sampled run
    samples = [{"t": 600.0 + s, "bytes": 100 * MB * s} for s in range(10, 1201, 10)]
    s = stats.summary(samples, started=0.0, window=3600, first_s=3600)
    assert s["peak_bytes_per_s"] == pytest.approx(100 * MB)    # not 120 GB over 1800 s
    assert s["peak_window_s"] == 1190 and s["peak_at_s"] == pytest.approx(610)
    assert s["first_bytes"] == 1200 * 100 * MB
    assert s["average_bytes_per_s"] == pytest.approx(1200 * 100 * MB / 1800)
    # a longer run: the first 60 minutes include the stall
    samples = [{"t": 600.0 + s, "bytes": 100 * MB * s} for s in range(10, 4001, 10)]
    s = stats.summary(samples, started=0.0, window=3600, first_s=3600)
    assert s["peak_bytes_per_s"] == pytest.approx(100 * MB)
    assert s["first_bytes"] == pytest.approx(3000 * 100 * MB)


def test_the_peak_window_is_exact_between_sparse_samples():
    # samples a minute apart; a 90 s window ends and starts between samples
    pts = [(0.0, 0), (60.0, 60 * MB), (120.0, 60 * MB + 60 * 10 * MB), (180.0, 660 * MB)]
    peak, at = stats.sustained_peak(pts, 90)
    # the best 90 s: 60 s at 10 MB/s plus 30 s at 1 MB/s
    assert peak == pytest.approx((600 + 30) * MB / 90)
    assert at == 30.0


def test_summary_without_samples():
    s = stats.summary([])
    assert s["bytes"] == 0 and s["average_bytes_per_s"] is None
    assert s["peak_bytes_per_s"] is None


def test_aggregate_sums_jobs_that_overlap():
    rows = [(1, 100.0, 0), (1, 101.0, 10), (1, 102.0, 20), (1, 103.0, 30),
            (2, 102.0, 0), (2, 104.0, 100)]
    series = dict(stats.aggregate(rows, 100.0, 105.0, 1.0))
    assert series == {100.0: 0.0, 101.0: 10.0, 102.0: 10.0, 103.0: 10.0 + 50.0, 104.0: 50.0,
                      105.0: 0.0}


# ---- the catalog: change counter, removals, restart ------------------------------------------

@pytest.fixture
def m(tmp_path):
    from app.master import Master
    m = Master(str(tmp_path / "home"))
    host = m.ensure_local_host()["name"]
    (tmp_path / "vol").mkdir()
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path / "vol")], check=False)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", host)
    m.config.add_policy_selection("p1", str(tmp_path))
    m.host = host
    yield m
    m.close()


def test_changes_returns_only_what_was_written_since(m):
    a, b, c = (m.start_backup("p1")[0] for _ in range(3))
    first = m.jobs.changes()
    assert sorted(j["id"] for j in first["jobs"]) == [a, b, c]
    cursor = first["cursor"]
    assert m.jobs.changes(cursor) == {"cursor": cursor, "jobs": [], "removed": []}

    m.jobs.set_wait_reason(b, "storage unit stu1 is at its limit")
    got = m.jobs.changes(cursor)
    assert [j["id"] for j in got["jobs"]] == [b]
    assert got["jobs"][0]["wait_reason"].startswith("storage unit")
    assert got["cursor"] > cursor

    cursor = got["cursor"]
    m.jobs.claim(a, "test")
    m.jobs.request_cancel(c)
    got = m.jobs.changes(cursor)
    assert sorted(j["id"] for j in got["jobs"]) == [a, c]
    # an active job comes every time: its elapsed time moves on without a write
    assert [j["id"] for j in m.jobs.changes(got["cursor"])["jobs"]] == [a]
    m.jobs.finish(a, st.OK)
    assert [j["id"] for j in m.jobs.changes(got["cursor"])["jobs"]] == [a]


def test_removed_jobs_are_reported_once(m):
    a, b = m.start_backup("p1")[0], m.start_backup("p1")[0]
    cursor = m.jobs.changes()["cursor"]
    with pytest.raises(ValidationError, match="not ended"):
        m.jobs.remove([a])
    m.jobs.request_cancel(a)
    cursor = m.jobs.changes(cursor)["cursor"]
    m.jobs.remove([a])
    got = m.jobs.changes(cursor)
    assert got["removed"] == [a] and got["jobs"] == []
    assert m.jobs.changes(got["cursor"])["removed"] == []
    assert [j["id"] for j in m.jobs.list()] == [b]
    # a later job never takes a counter value below the removal's
    c = m.start_backup("p1")[0]
    assert [j["id"] for j in m.jobs.changes(got["cursor"])["jobs"]] == [c]


def test_restart_of_a_failed_backup_has_the_same_parameters(m):
    old = m.start_backup("p1")[0]
    m.jobs.claim(old, "test")
    m.jobs.finish(old, st.VOLUME_UNAVAILABLE, "volume is not writable")
    [new] = m.restart_job(old)
    before = m.jobs.get(old)
    assert new["id"] != old and new["state"] == "queued"
    for k in ("type", "client", "policy", "schedule", "storage_unit", "priority", "params"):
        assert new[k] == before[k], k
    assert any(f"restart of job {old}" in x["message"] for x in m.jobs.logs(new["id"]))
    assert any(f"restarted as job {new['id']}" in x["message"] for x in m.jobs.logs(old))


def test_restart_is_refused_for_jobs_that_cannot_be_restarted(m):
    queued = m.start_backup("p1")[0]
    with pytest.raises(ValidationError, match="only an ended job"):
        m.restart_job(queued)
    m.jobs.claim(queued, "test")
    m.jobs.finish(queued, st.OK)
    with pytest.raises(ValidationError, match="only a failed or canceled job"):
        m.restart_job(queued)
    gone = m.start_backup("p1")[0]
    m.jobs.request_cancel(gone)
    m.db.execute("DELETE FROM policy_clients")
    with pytest.raises(ValidationError, match="no longer a client"):
        m.restart_job(gone)
    assert len(m.jobs.list()) == 2


def test_job_stats_and_throughput_from_samples(m):
    import time
    a = m.start_backup("p1")[0]
    m.jobs.claim(a, "test")
    now = time.time()
    for s in range(11):
        m.jobs.progress(a, bytes=s * 5 * MB, files=s, rate=5 * MB, sample_t=now - 10 + s)
    live = m.job_stats(a)
    assert len(live["samples"]) == 11 and live["stats"] is None
    assert len(m.job_stats(a, after=now - 3)["samples"]) == 3
    m.jobs.finish(a, st.OK)
    done = m.job_stats(a)
    assert done["stats"]["bytes"] == 50 * MB
    series = m.throughput(window_s=20, now=now)
    assert series[-1][1] == pytest.approx(5 * MB)
    assert series[0][1] == 0.0
