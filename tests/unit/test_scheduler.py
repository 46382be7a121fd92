"""The scheduler on a real catalog: which windows fire, once, for whom; missed windows; two
masters on one catalog. Time comes from an injected clock in UTC; nothing sleeps and no
backup runs (the dispatcher is never started)."""

import threading
import time
from datetime import datetime, timezone

import pytest

from app import status as st
from app import timeutil
from app.errors import ValidationError
from app.master import Master
from app.scheduler import LAST_TICK, Scheduler

UTC = timezone.utc


def at(y, mo, d, h=0, mi=0):
    """Epoch seconds of a UTC wall time. Test dates lie years ahead, after the moment the
    test policies are created (windows before a policy existed are never "missed")."""
    return datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()


MON = at(2031, 3, 3)          # Monday 3 March 2031, 00:00 UTC
HOUR, DAY = 3600, 86400
assert datetime.fromtimestamp(MON, UTC).weekday() == 0


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    host = m.ensure_local_host()["name"]
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path)], check=False)
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=4)
    m.host = host
    yield m
    m.close()


def policy(m, name="p1", clients=None, selections=("/data",), priority=0, **schedules):
    m.config.add_policy(name, storage_unit="stu1", priority=priority)
    for c in clients or [m.host]:
        m.config.add_policy_client(name, c)
    for s in selections:
        m.config.add_policy_selection(name, s)
    for sname, kw in schedules.items():
        m.config.add_schedule(name, sname, **kw)


def daily(start="22:00", hours=8):
    return [{"day": d, "start": start, "hours": hours} for d in range(7)]


def scheduler(m):
    return Scheduler(m, clock=lambda: pytest.fail("the test passes `now` to every call"),
                     tz=UTC)


def backups(m):
    return [j for j in m.jobs.list() if j["type"] == "backup"]


def succeed(m, jid, started):
    """Runs a job through the real job store (claim, finish with status 0) and stamps its
    start with the test clock's time: the store stamps the real time."""
    assert m.jobs.claim(jid, "test")
    m.jobs.finish(jid, st.OK, "done")
    with m.db.tx() as c:
        c.execute("UPDATE jobs SET started=? WHERE id=?", (timeutil.iso(started), jid))


def fail(m, jid):
    assert m.jobs.claim(jid, "test")
    m.jobs.finish(jid, st.AGENT_FAILED, "failed")


def fired(m, s, now):
    """Whether a tick at `now` queues something; what it queued is ended again, so that the
    client is free for the next tick."""
    ids = s.tick(now)
    for j in ids:
        fail(m, j)
    return bool(ids)


# ---- frequency schedules ---------------------------------------------------------------------

def test_frequency_schedule_fires_in_its_window_once_and_again_after_the_frequency(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily("22:00", 8)))
    s = scheduler(m)
    assert s.tick(MON + 12 * HOUR) == []                 # Monday noon: no window open
    assert s.tick(MON + 21 * HOUR + 59 * 60) == []
    [jid] = s.tick(MON + 22 * HOUR)                      # the window opens
    job = m.jobs.get(jid)
    assert (job["policy"], job["schedule"], job["client"], job["state"]) == \
        ("p1", "nightly", m.host, "queued")
    # what it backs up and keeps is fixed when it is queued (app/policy_edit.py)
    assert job["params"] == {"selections": ["/data"], "schedule_type": "full",
                             "checksum": "crc32", "retention_s": 14 * 86400,
                             "excludes": {"paths": [], "names": []}}
    assert job["storage_unit"] == "stu1"
    row = m.db.one("SELECT not_after FROM jobs WHERE id=?", (jid,))
    assert row[0] == MON + 30 * HOUR                     # may not start after the window
    log = m.jobs.logs(jid)[0]["message"]
    assert "queued by the scheduler: schedule nightly" in log
    assert "2031-03-03T22:00:00Z" in log and "2031-03-04T06:00:00Z" in log

    assert s.tick(MON + 23 * HOUR) == []                 # queued already
    succeed(m, jid, MON + 22 * HOUR + 60)
    assert s.tick(MON + 23 * HOUR) == []                 # ran: not twice in one window
    assert s.tick(MON + 29 * HOUR) == []
    assert s.tick(MON + 31 * HOUR) == []                 # the window has closed
    assert s.tick(MON + DAY + 22 * HOUR) == []           # the next window: 1d not passed yet
    [again] = s.tick(MON + DAY + 22 * HOUR + 61)          # 1d after the last backup started
    assert again != jid
    runs = s.runs()
    assert [(r["due"], r["outcome"], r["job_id"]) for r in runs] == [
        ("2031-03-04T22:01:00Z", "queued", again),
        ("2031-03-03T22:00:00Z", "queued", jid)]
    assert runs[1]["job_state"] == "done" and runs[1]["job_status"] == 0


def test_a_failed_backup_is_not_queued_again_in_the_same_window_but_in_the_next(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily("22:00", 8)))
    s = scheduler(m)
    [jid] = s.tick(MON + 22 * HOUR)
    fail(m, jid)
    assert s.tick(MON + 23 * HOUR) == []
    assert len(s.tick(MON + DAY + 22 * HOUR)) == 1


def test_short_frequency_fires_several_times_in_a_long_window(master):
    m = master
    policy(m, hourly=dict(type="full", frequency="4h",
                          windows=[{"day": 0, "start": "00:00", "hours": 24}]))
    s = scheduler(m)
    [a] = s.tick(MON + HOUR)
    succeed(m, a, MON + HOUR)
    assert s.tick(MON + 4 * HOUR) == []
    [b] = s.tick(MON + 5 * HOUR)
    assert b != a


def test_default_frequency_full_weekly_incremental_daily(master):
    m = master
    policy(m, weekly=dict(type="full", windows=daily("01:00", 2)))
    sched = m.config.policy("p1")["schedules"][0]
    assert (sched["frequency_s"], sched["frequency"], sched["kind"]) == (7 * DAY, "1w",
                                                                         "frequency")
    s = scheduler(m)
    [jid] = s.tick(MON + 1 * HOUR)
    succeed(m, jid, MON + HOUR)
    for d in range(1, 7):
        assert s.tick(MON + d * DAY + HOUR + 60) == [], f"day {d}"
    assert len(s.tick(MON + 7 * DAY + HOUR + 60)) == 1


def test_window_past_midnight_and_over_the_week_end(master):
    m = master
    policy(m, night=dict(type="full", frequency="1d",
                         windows=[{"day": 0, "start": "22:00", "hours": 8}]),
           sunday=dict(type="full", frequency="1d",
                       windows=[{"day": 6, "start": "23:00", "hours": 3}]))
    s = scheduler(m)
    [jid] = s.tick(MON + DAY + 3 * HOUR)                 # Tuesday 03:00: Monday's window
    assert m.jobs.get(jid)["schedule"] == "night"
    assert s.runs()[0]["due"] == "2031-03-03T22:00:00Z"
    assert s.runs()[0]["window_end"] == "2031-03-04T06:00:00Z"
    succeed(m, jid, MON + DAY + 3 * HOUR)
    assert s.tick(MON + DAY + 6 * HOUR) == []            # Tuesday 06:00: closed
    [sun] = s.tick(MON + 7 * DAY + HOUR)                 # next Monday 01:00: Sunday's window
    assert m.jobs.get(sun)["schedule"] == "sunday"
    assert s.runs()[0]["due"] == "2031-03-09T23:00:00Z"


def test_manual_only_schedules_never_fire(master):
    m = master
    policy(m, manual=dict(type="full", frequency="1h"), other=dict(type="differential"))
    assert [x["kind"] for x in m.config.policy("p1")["schedules"]] == ["manual", "manual"]
    s = scheduler(m)
    for h in range(0, 8 * 24, 3):
        assert s.tick(MON + h * HOUR) == []
    assert backups(m) == [] and s.runs() == [] and s.next_runs(now=MON) == []


def test_inactive_policies_and_policies_without_clients_do_not_fire(master):
    m = master
    policy(m, "p1", nightly=dict(type="full", windows=daily()))
    m.config.add_policy("p2", storage_unit="stu1")
    m.config.add_policy_selection("p2", "/x")
    m.config.add_schedule("p2", "nightly", type="full", windows=daily())
    m.update_object("policy", "p1", active=False)
    assert scheduler(m).tick(MON + 23 * HOUR) == []
    assert backups(m) == []


def test_no_job_while_a_backup_of_the_policy_and_client_is_queued(master):
    m = master
    policy(m, nightly=dict(type="full", windows=daily()))
    [manual] = m.start_backup("p1")
    s = scheduler(m)
    assert s.tick(MON + 23 * HOUR) == []
    assert s.runs() == []                    # nothing decided: it may still run in this window
    fail(m, manual)
    assert len(s.tick(MON + 23 * HOUR + 60)) == 1


def test_a_policy_without_selections_is_skipped_with_the_reason(master):
    m = master
    policy(m, selections=(), nightly=dict(type="full", windows=daily()))
    s = scheduler(m)
    assert s.tick(MON + 23 * HOUR) == []
    [run] = s.runs()
    assert run["outcome"] == "skipped: the policy has no backup selections"
    assert run["job_id"] is None and backups(m) == []


# ---- several schedules of one policy ---------------------------------------------------------

def test_one_job_per_client_full_over_cumulative_over_differential(master):
    m = master
    m.config.add_host("c2", address="192.0.2.2")
    policy(m, clients=[m.host, "c2"],
           diff=dict(type="differential", frequency="1d", windows=daily()),
           cum=dict(type="cumulative", frequency="1d", windows=daily()),
           full=dict(type="full", frequency="1w", windows=daily()))
    s = scheduler(m)
    ids = s.tick(MON + 23 * HOUR)
    assert sorted(m.jobs.get(j)["client"] for j in ids) == sorted([m.host, "c2"])
    assert {m.jobs.get(j)["schedule"] for j in ids} == {"full"}
    assert {m.jobs.get(j)["params"]["schedule_type"] for j in ids} == {"full"}
    runs = {(r["schedule"], r["client"]): r["outcome"] for r in s.runs()}
    for c in (m.host, "c2"):
        assert runs[("full", c)] == "queued"
        assert runs[("cum", c)] == "skipped: full schedule full runs instead"
        assert runs[("diff", c)] == "skipped: full schedule full runs instead"
    for j in ids:
        succeed(m, j, MON + 23 * HOUR)
    # The full ran in this window: the incrementals are not queued on top of it.
    assert s.tick(MON + 23 * HOUR + 60) == []
    # The next night only the incrementals are due; cumulative outranks differential.
    ids = s.tick(MON + DAY + 22 * HOUR)
    assert {m.jobs.get(j)["schedule"] for j in ids} == {"cum"}
    runs = {(r["schedule"], r["client"], r["due"]): r["outcome"] for r in s.runs()}
    assert runs[("diff", "c2", "2031-03-04T22:00:00Z")] == \
        "skipped: cumulative schedule cum runs instead"


def test_an_incremental_in_its_own_window_after_a_full_ran_in_a_longer_one(master):
    m = master
    policy(m, weekly=dict(type="full", windows=[{"day": 5, "start": "08:00", "hours": 24}]),
           nightly=dict(type="differential", windows=daily("22:00", 4)))
    s = scheduler(m)
    [full] = s.tick(MON + 5 * DAY + 9 * HOUR)            # Saturday 09:00
    succeed(m, full, MON + 5 * DAY + 9 * HOUR)
    assert s.tick(MON + 5 * DAY + 22 * HOUR) == []       # Saturday 22:00: the full ran today
    run = [r for r in s.runs() if r["schedule"] == "nightly"][0]
    assert run["outcome"].startswith("skipped: full schedule weekly ran in this window")
    assert len(s.tick(MON + 6 * DAY + 22 * HOUR)) == 1   # Sunday night: the incremental


# ---- calendar schedules ----------------------------------------------------------------------

def test_calendar_weekdays(master):
    m = master
    policy(m, cal=dict(type="full", calendar={"weekdays": ["mon", "wed"]},
                       windows=daily("22:00", 4)))
    s = scheduler(m)
    assert [d for d in range(7) if fired(m, s, MON + d * DAY + 23 * HOUR)] == [0, 2]
    assert s.tick(MON + 2 * DAY + 23 * HOUR + 60) == []   # once per window
    assert [d for d in range(7, 14) if fired(m, s, MON + d * DAY + 23 * HOUR)] == [7, 9]


def test_calendar_monthdays_last_day_and_excluded_dates(master):
    m = master
    policy(m, cal=dict(type="full", windows=daily("22:00", 4),
                       calendar={"monthdays": [15, "last"], "exclude": ["2031-03-31"]}))
    s = scheduler(m)

    def fires(y, mo, d):
        return fired(m, s, at(y, mo, d, 23))

    assert not fires(2031, 2, 27)
    assert fires(2031, 2, 28)                  # the last day of February 2031
    assert not fires(2031, 3, 1)
    assert not fires(2031, 3, 14)
    assert fires(2031, 3, 15)
    assert not fires(2031, 3, 30)
    assert not fires(2031, 3, 31)              # last day, but excluded
    assert fires(2031, 4, 30)                  # last day of a 30-day month
    assert fires(2032, 2, 29)                  # leap year
    assert [r["due"] for r in s.runs()] == ["2032-02-29T22:00:00Z", "2031-04-30T22:00:00Z",
                                            "2031-03-15T22:00:00Z", "2031-02-28T22:00:00Z"]


def test_calendar_day_is_the_day_the_window_starts(master):
    m = master
    policy(m, cal=dict(type="full", windows=daily("22:00", 8),
                       calendar={"monthdays": ["last"]}))
    s = scheduler(m)
    assert s.tick(at(2031, 4, 1, 3)) != []     # 1 April 03:00: the window of 31 March
    assert s.runs()[0]["due"] == "2031-03-31T22:00:00Z"
    assert s.tick(at(2031, 4, 1, 23)) == []


def test_windows_are_read_in_the_schedulers_time_zone(master):
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone data on this machine")
    m = master
    policy(m, nightly=dict(type="full", windows=[{"day": 0, "start": "22:00", "hours": 2}]))
    s = Scheduler(m, tz=berlin)
    # 22:00 in Berlin is 21:00 UTC in winter and 20:00 UTC in summer.
    assert s.tick(at(2031, 3, 3, 20, 30)) == []
    assert len(s.tick(at(2031, 3, 3, 21, 30))) == 1
    nxt = [e for e in s.next_runs(now=at(2031, 7, 1)) if e["schedule"] == "nightly"]
    assert nxt[0]["window_start"] == "2031-07-07T20:00:00Z"


# ---- missed windows --------------------------------------------------------------------------

def test_windows_that_closed_while_no_master_ran_are_reported_as_missed(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily("22:00", 8)),
           cal=dict(type="differential", calendar={"weekdays": ["tue"]},
                    windows=daily("20:00", 1)))
    s = scheduler(m)
    assert s.tick(MON + 12 * HOUR) == []       # the first tick: nothing before it is judged
    assert s.last_missed == []
    # The master is down from Monday noon to Thursday noon: three nightly windows closed,
    # and Tuesday's calendar window.
    assert s.tick(MON + 3 * DAY + 12 * HOUR) == []
    missed = [m.jobs.get(j) for j in s.last_missed]
    assert len(missed) == 4
    assert {(j["state"], j["status"]) for j in missed} == {("done", st.WINDOW_CLOSED)}
    assert sorted((j["schedule"], j["client"]) for j in missed) == \
        [("cal", m.host)] + [("nightly", m.host)] * 3
    log = m.jobs.logs(missed[0]["id"])
    assert "closed while no master was running" in log[-1]["message"]
    runs = s.runs()
    assert [(r["schedule"], r["due"], r["outcome"]) for r in runs] == [
        ("nightly", "2031-03-05T22:00:00Z", "missed"),
        ("nightly", "2031-03-04T22:00:00Z", "missed"),
        ("cal", "2031-03-04T20:00:00Z", "missed"),
        ("nightly", "2031-03-03T22:00:00Z", "missed")]
    assert all(r["job_status"] == st.WINDOW_CLOSED for r in runs)
    assert float(m.db.one("SELECT value FROM settings WHERE key=?", (LAST_TICK,))[0]) == \
        MON + 3 * DAY + 12 * HOUR
    # reported once
    assert s.tick(MON + 3 * DAY + 12 * HOUR + 60) == [] and s.last_missed == []
    assert len(backups(m)) == 4


def test_a_window_the_master_acted_in_is_not_missed(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily("22:00", 8)))
    s = scheduler(m)
    s.tick(MON + 12 * HOUR)
    [jid] = s.tick(MON + 23 * HOUR)
    fail(m, jid)
    # The master goes down at 23:00 and returns Tuesday 12:00: Monday's window had its run.
    assert s.tick(MON + DAY + 12 * HOUR) == [] and s.last_missed == []
    # A backup running all through a window (so nothing was queued) is no missed window
    # either: the master was there and saw it busy.
    [manual] = m.start_backup("p1")
    assert s.tick(MON + DAY + 23 * HOUR) == []
    assert s.tick(MON + 2 * DAY + 7 * HOUR) == [] and s.last_missed == []
    fail(m, manual)


def test_missed_windows_are_looked_for_one_week_back_at_most(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily("22:00", 2)))
    s = scheduler(m)
    s.tick(MON)
    s.tick(MON + 30 * DAY)
    assert len(s.last_missed) == 7


# ---- two masters -----------------------------------------------------------------------------

def test_two_masters_on_one_catalog_ticking_at_the_same_instant_queue_one_job(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily()))
    other = Master(m.home.root)
    try:
        scheds = [scheduler(m), scheduler(other)]
        now = MON + 23 * HOUR
        barrier = threading.Barrier(2)
        results, errors = [None, None], []

        def run(i):
            try:
                barrier.wait(10)
                results[i] = scheds[i].tick(now)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert sorted(len(r) for r in results) == [0, 1]
        assert len(backups(m)) == 1
        assert m.db.one("SELECT count(*) FROM schedule_runs")[0] == 1
        # and one after the other, later in the same window
        fail(m, backups(m)[0]["id"])
        assert scheds[1].tick(now + 60) == [] and scheds[0].tick(now + 60) == []
        assert len(backups(m)) == 1
    finally:
        other.close()


def test_a_run_recorded_by_another_master_is_not_queued_again(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily()))
    with m.db.tx() as c:
        c.execute("INSERT INTO schedule_runs(policy, schedule, client, due, window_end, "
                  "outcome, noted) VALUES ('p1','nightly',?,?,?,'queued',?)",
                  (m.host, "2031-03-03T22:00:00Z", "2031-03-04T06:00:00Z",
                   "2031-03-03T22:00:00Z"))
    assert scheduler(m).tick(MON + 23 * HOUR) == []
    assert backups(m) == []


# ---- upcoming runs ---------------------------------------------------------------------------

def test_next_runs_lists_the_windows_where_each_schedule_would_fire(master):
    m = master
    policy(m, weekly=dict(type="full", windows=[{"day": 5, "start": "20:00", "hours": 12}]),
           nightly=dict(type="differential", frequency="1d",
                        windows=[{"day": d, "start": "22:00", "hours": 6} for d in range(5)]),
           monthly=dict(type="full", calendar={"monthdays": [1]}, windows=daily("01:00", 2)))
    s = scheduler(m)
    nxt = s.next_runs(now=MON + 12 * HOUR)
    assert [(e["schedule"], e["due"]) for e in nxt] == [
        ("nightly", "2031-03-03T22:00:00Z"), ("nightly", "2031-03-04T22:00:00Z"),
        ("nightly", "2031-03-05T22:00:00Z"), ("nightly", "2031-03-06T22:00:00Z"),
        ("nightly", "2031-03-07T22:00:00Z"), ("weekly", "2031-03-08T20:00:00Z")]
    assert nxt[0]["window_end"] == "2031-03-04T04:00:00Z" and nxt[0]["runs"] == 1
    assert all(e["client"] == m.host and e["note"] is None for e in nxt)
    # The calendar schedule within a month; the open window counts from now.
    later = s.next_runs(now=at(2031, 4, 1, 1, 30), horizon_s=DAY)
    assert [(e["schedule"], e["due"], e["window_start"]) for e in later] == [
        ("monthly", "2031-04-01T01:30:00Z", "2031-04-01T01:00:00Z"),
        ("nightly", "2031-04-01T01:30:00Z", "2031-03-31T22:00:00Z"),   # Monday's, still open
        ("nightly", "2031-04-01T22:00:00Z", "2031-04-01T22:00:00Z")]
    # Both due now: the full runs, the differential is noted as skipped.
    assert later[1]["note"] == "skipped: full schedule monthly runs instead"
    # once queued it is no longer upcoming
    [jid] = s.tick(at(2031, 4, 1, 1, 30))
    assert m.jobs.get(jid)["schedule"] == "monthly"
    assert [e["schedule"] for e in s.next_runs(now=at(2031, 4, 1, 1, 31), horizon_s=DAY)] == \
        ["nightly"]
    assert s.next_runs("p1", now=MON, horizon_s=HOUR) == []
    with pytest.raises(Exception, match="no policy named 'nope'"):
        s.next_runs("nope", now=MON)


def test_next_runs_notes_the_schedule_that_runs_instead(master):
    m = master
    policy(m, full=dict(type="full", frequency="1w", windows=daily()),
           diff=dict(type="differential", frequency="1d", windows=daily()))
    nxt = scheduler(m).next_runs(now=MON + 12 * HOUR, horizon_s=DAY)
    assert [(e["schedule"], e["note"], e["runs"]) for e in nxt] == [
        ("full", None, 1), ("diff", "skipped: full schedule full runs instead", 0)]
    # a week on: the full is not due for a week, the differential runs every night
    nxt = scheduler(m).next_runs(now=MON + 12 * HOUR, horizon_s=8 * DAY)
    assert [(e["schedule"], e["due"][:10], e["note"] is None) for e in nxt] == [
        ("full", "2031-03-03", True), ("diff", "2031-03-03", False)] + [
        ("diff", f"2031-03-{d:02d}", True) for d in range(4, 10)] + [
        ("full", "2031-03-10", True), ("diff", "2031-03-10", False)]


# ---- cost --------------------------------------------------------------------------------------

def test_a_tick_over_100_policies_with_10_clients_each_is_fast(master):
    m = master
    clients = [f"c{i}" for i in range(10)]
    for c in clients:
        m.config.add_host(c, address="192.0.2.1")
    for i in range(100):
        policy(m, f"p{i:03d}", clients=clients,
               full=dict(type="full", frequency="1w", windows=daily()),
               inc=dict(type="differential", windows=daily()))
    s = scheduler(m)
    t = time.perf_counter()
    queued = s.tick(MON + 23 * HOUR)
    first = time.perf_counter() - t
    assert len(queued) == 1000
    t = time.perf_counter()
    assert s.tick(MON + 23 * HOUR + 5) == []
    again = time.perf_counter() - t
    for j in queued:
        fail(m, j)
    t = time.perf_counter()
    assert s.tick(MON + 23 * HOUR + 10) == []            # every run recorded already
    recorded = time.perf_counter() - t
    assert first < 1.0 and again < 0.5 and recorded < 0.5, (first, again, recorded)


def test_a_full_schedule_that_reads_every_file_queues_backups_without_the_files_cache(master):
    m = master
    policy(m, nightly=dict(type="full", frequency="1d", windows=daily("22:00", 8)),
           monthly=dict(type="full", calendar={"weekdays": [], "monthdays": [3],
                                               "exclude": []},
                        windows=daily("20:00", 1), read_all=True))
    s = scheduler(m)
    [jid] = s.tick(MON + 20 * HOUR)  # Monday the 3rd: the monthly full's window
    job = m.jobs.get(jid)
    assert job["schedule"] == "monthly" and job["params"]["no_files_cache"] is True
    fail(m, jid)
    [jid] = s.tick(MON + 22 * HOUR)
    assert m.jobs.get(jid)["schedule"] == "nightly"
    assert "no_files_cache" not in m.jobs.get(jid)["params"]
    fail(m, jid)
    # by hand too, and the schedule says so wherever it is shown
    [jid] = m.start_backup("p1", schedule="monthly")
    assert m.jobs.get(jid)["params"]["no_files_cache"] is True
    monthly = next(x for x in m.config.policy("p1")["schedules"] if x["name"] == "monthly")
    assert monthly["read_all"] is True


def test_only_a_full_schedule_reads_every_file(master):
    m = master
    policy(m)
    with pytest.raises(ValidationError, match="only a full schedule can read every file"):
        m.config.add_schedule("p1", "d", type="differential", read_all=True)
    with pytest.raises(ValidationError, match="not yes or no"):
        m.config.add_schedule("p1", "f", type="full", read_all="sometimes")


# ---- catalog schedules -----------------------------------------------------------------------

CATALOG_PASS = b"catalog passphrase for the tests"


def test_a_catalog_schedule_needs_the_catalog_backup_key_once(master):
    m = master
    m.config.add_policy("cat", storage_unit="stu1")
    with pytest.raises(ValidationError) as e:
        m.add_schedule("cat", "nightly", type="catalog", windows=daily("06:00", 2))
    assert "passphrase" in e.value.message and "--passphrase-file" in e.value.hint
    m.add_schedule("cat", "nightly", type="catalog", windows=daily("06:00", 2),
                   retention="1w", passphrase=CATALOG_PASS)
    # the key exists now: another catalog schedule needs no passphrase
    m.add_schedule("cat", "weekly", type="catalog", retention="8w")
    [n, w] = m.policy("cat")["schedules"]
    assert (n["type"], n["retention_s"], w["type"]) == ("catalog", 7 * DAY, "catalog")


def test_a_catalog_schedule_queues_catalog_backups_without_clients(master):
    m = master
    m.config.add_policy("cat", storage_unit="stu1")   # no clients, no selections
    m.add_schedule("cat", "nightly", type="catalog", windows=daily("06:00", 2),
                   retention="1w", passphrase=CATALOG_PASS)
    s = scheduler(m)
    assert s.tick(MON + 5 * HOUR) == []
    [jid] = s.tick(MON + 6 * HOUR)
    job = m.jobs.get(jid)
    assert (job["type"], job["policy"], job["schedule"], job["client"]) == \
        ("catalog-backup", "cat", "nightly", None)
    assert job["params"] == {"storage_unit": "stu1", "retention_s": 7 * DAY}
    assert m.db.one("SELECT not_after FROM jobs WHERE id=?", (jid,))[0] == MON + 8 * HOUR
    assert s.tick(MON + 6 * HOUR + 60) == []           # queued already
    succeed(m, jid, MON + 6 * HOUR)
    assert s.tick(MON + 7 * HOUR) == []                # done for today
    [r] = [r for r in s.runs("cat")]
    assert (r["client"], r["outcome"], r["job_id"]) == ("", "queued", jid)
    upcoming = s.next_runs("cat", now=MON + 7 * HOUR)
    assert upcoming and upcoming[0]["client"] == "" and upcoming[0]["type"] == "catalog"
    assert upcoming[0]["due"] == timeutil.iso(MON + DAY + 6 * HOUR)
    [nxt] = s.tick(MON + DAY + 6 * HOUR)               # the next day's window
    assert m.jobs.get(nxt)["type"] == "catalog-backup"
    assert not backups(m)


def test_backup_now_of_a_catalog_schedule_queues_a_catalog_backup(master):
    m = master
    policy(m, "mixed", nightly=dict(type="differential", windows=daily()))
    m.add_schedule("mixed", "cat", type="catalog", passphrase=CATALOG_PASS)
    [jid] = m.start_backup("mixed", schedule="cat")
    assert m.jobs.get(jid)["type"] == "catalog-backup"
    with pytest.raises(ValidationError):
        m.start_backup("mixed", client=m.host, schedule="cat")
    # without a schedule: the policy's backups, never its catalog schedule
    [b] = m.start_backup("mixed")
    assert m.jobs.get(b)["type"] == "backup" and m.jobs.get(b)["schedule"] == "nightly"
    m.config.add_policy("only", storage_unit="stu1")
    m.add_schedule("only", "cat", type="catalog")
    [c] = m.start_backup("only")
    assert m.jobs.get(c)["type"] == "catalog-backup"


def test_a_catalog_window_that_closed_while_no_master_ran_is_missed(master):
    m = master
    m.config.add_policy("cat", storage_unit="stu1")
    m.add_schedule("cat", "nightly", type="catalog", windows=daily("06:00", 2),
                   passphrase=CATALOG_PASS)
    s = scheduler(m)
    assert s.tick(MON + 12 * HOUR) == []
    # down from Monday noon to Wednesday noon: Tuesday's and Wednesday's windows closed
    assert s.tick(MON + 2 * DAY + 12 * HOUR) == []
    missed = [m.jobs.get(j) for j in s.last_missed]
    assert [(j["type"], j["schedule"], j["status"]) for j in missed] == \
        [("catalog-backup", "nightly", st.WINDOW_CLOSED)] * 2
    assert [(r["client"], r["outcome"]) for r in s.runs("cat")] == [("", "missed")] * 2
