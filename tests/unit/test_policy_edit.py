"""A policy changed after creation (day two): clients, selections, schedules and excludes
removed or changed through the master API and the `cairn` command, with clear errors; queued
jobs keep what they were queued with; the scheduler's next pass follows an edited schedule.
Real catalog files; no backup runs here (tests/integration/test_policy_excludes.py runs
them)."""

import json
from datetime import datetime, timezone

import pytest

from app import cli
from app.backup_excludes import PSEUDO_FILESYSTEMS, default_excludes
from app.errors import NotFound, ValidationError
from app.master import Master
from app.scheduler import Scheduler

UTC = timezone.utc
MON = datetime(2031, 3, 3, tzinfo=UTC).timestamp()     # a Monday, after the policy exists
HOUR, DAY = 3600, 86400


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def m(home, tmp_path):
    m = Master(home)
    m.host = m.ensure_local_host()["name"]
    m.config.add_host("other", address="192.0.2.7")
    (tmp_path / "pool").mkdir()
    m.create_storage_server("ss1", type="advanced-disk", host=m.host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path / "pool")], check=False)
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=4)
    m.create_policy("p1", storage_unit="stu1", clients=[m.host, "other"],
                    selections=["/data", "/home"],
                    schedules=[{"name": "weekly", "type": "full", "retention": "4w",
                                "windows": [{"day": 5, "start": "20:00", "hours": 12}]},
                               {"name": "daily", "type": "differential", "retention": "1w"}])
    yield m
    m.close()


def run_cli(capsys, home, *args):
    rc = cli.main(["--home", home, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def sched(m, name, policy="p1"):
    return next(s for s in m.policy(policy)["schedules"] if s["name"] == name)


# ---- clients and selections ------------------------------------------------------------------

def test_remove_client_and_selection_with_clear_errors(m):
    m.add_policy_exclude("p1", "/data/scratch", client="other")
    pol = m.remove_policy_client("p1", "other")
    assert pol["clients"] == [m.host] and pol["client_excludes"] == {}
    assert pol["warnings"] == []
    with pytest.raises(NotFound, match="'other' is not a client of policy 'p1'") as e:
        m.remove_policy_client("p1", "other")
    assert m.host in e.value.hint
    with pytest.raises(NotFound, match="no host named 'ghost'"):
        m.remove_policy_client("p1", "ghost")
    with pytest.raises(NotFound, match="no policy named 'nope'"):
        m.remove_policy_selection("nope", "/data")
    assert m.remove_policy_selection("p1", "/data/")["selections"] == ["/home"]
    with pytest.raises(NotFound, match="'/data' is not a backup selection") as e:
        m.remove_policy_selection("p1", "/data")
    assert "/home" in e.value.hint
    pol = m.remove_policy_selection("p1", "/home")
    assert pol["selections"] == []
    assert any("no backup selections left" in w for w in pol["warnings"])


def test_queued_jobs_keep_what_they_were_queued_with(m):
    m.add_policy_exclude("p1", "*.tmp")
    [jid] = m.start_backup("p1", client=m.host, schedule="weekly")
    pol = m.remove_policy_selection("p1", "/home")
    assert pol["warnings"] == [f"1 queued or running job ({jid}) keeps the selections it was "
                               "queued with"]
    m.remove_policy_exclude("p1", "*.tmp")
    pol = m.set_schedule("p1", "weekly", retention="1w")
    assert "keeps the schedule settings" in pol["warnings"][0]
    pol = m.remove_schedule("p1", "weekly")
    p = m.job(jid)["params"]
    assert p["selections"] == ["/data", "/home"]
    assert p["excludes"] == {"paths": [], "names": ["*.tmp"]}
    assert (p["schedule_type"], p["retention_s"]) == ("full", 4 * 7 * DAY)


# ---- schedules -------------------------------------------------------------------------------

def test_set_schedule_changes_only_what_is_given_with_add_schedules_checks(m):
    before = sched(m, "weekly")
    m.set_schedule("p1", "weekly", retention="8w")
    after = sched(m, "weekly")
    assert after["retention_s"] == 8 * 7 * DAY
    assert {k: v for k, v in after.items() if not k.startswith("retention")} == \
        {k: v for k, v in before.items() if not k.startswith("retention")}
    # a calendar replaces the frequency, and is checked against the windows as when added
    with pytest.raises(ValidationError, match="the calendar names Monday but no start window"):
        m.set_schedule("p1", "weekly", calendar={"weekdays": ["mon"]})
    assert sched(m, "weekly") == after             # nothing half written
    s = m.set_schedule("p1", "weekly", calendar={"weekdays": ["sat"]})["schedules"][0]
    assert (s["kind"], s["frequency_s"], s["calendar"]["weekdays"]) == ("calendar", None, [5])
    s = m.set_schedule("p1", "weekly", frequency="3d")["schedules"][0]
    assert (s["kind"], s["frequency_s"], s["calendar"]) == ("frequency", 3 * DAY, None)
    with pytest.raises(ValidationError, match="not both"):
        m.set_schedule("p1", "weekly", frequency="1d", calendar={"weekdays": [5]})
    with pytest.raises(ValidationError, match="schedule type 'weekly' is unknown"):
        m.set_schedule("p1", "weekly", type="weekly")
    with pytest.raises(ValidationError, match="only a full schedule can read every file"):
        m.set_schedule("p1", "daily", read_all=True)
    # windows=[]: started by hand only; a type's default frequency follows the type
    s = m.set_schedule("p1", "daily", windows=[{"day": 0, "start": "22:00", "hours": 8}])
    assert sched(m, "daily")["frequency_s"] == DAY
    m.set_schedule("p1", "daily", type="full")
    assert sched(m, "daily")["frequency_s"] == 7 * DAY
    assert sched(m, "daily")["kind"] == "frequency"
    assert m.set_schedule("p1", "daily", windows=[])["schedules"][1]["kind"] == "manual"
    with pytest.raises(NotFound, match="policy 'p1' has no schedule named 'monthly'") as e:
        m.set_schedule("p1", "monthly", retention="1w")
    assert e.value.hint == "its schedules: weekly, daily"


def test_remove_schedule_and_the_last_one(m):
    assert [s["name"] for s in m.remove_schedule("p1", "daily")["schedules"]] == ["weekly"]
    with pytest.raises(NotFound, match="no schedule named 'daily'"):
        m.remove_schedule("p1", "daily")
    pol = m.remove_schedule("p1", "weekly")
    assert pol["schedules"] == []
    assert any("no schedules left" in w for w in pol["warnings"])
    # still backed up by hand: a full, kept for the default retention (not for ever)
    [jid] = m.start_backup("p1", client=m.host)
    assert m.job(jid)["params"]["schedule_type"] == "full"
    assert m.job(jid)["params"]["retention_s"] == 14 * DAY


def test_the_next_scheduler_pass_follows_an_edited_schedule(m):
    s = Scheduler(m, clock=lambda: pytest.fail("now is given"), tz=UTC)
    m.remove_policy_client("p1", "other")
    sat_8pm = MON + 5 * DAY + 20 * HOUR
    assert s.tick(MON + 22 * HOUR) == []                  # Monday: weekly's window is shut
    m.set_schedule("p1", "weekly", windows=[{"day": 0, "start": "21:00", "hours": 4}],
                   retention="5w")
    [jid] = s.tick(MON + 22 * HOUR)                       # the next pass: Monday's window
    job = m.job(jid)
    assert (job["schedule"], job["params"]["retention_s"]) == ("weekly", 5 * 7 * DAY)
    m.cancel_job(jid)
    upcoming = s.next_runs("p1", now=MON + 23 * HOUR)
    assert all(e["window_start"].endswith("21:00:00Z") for e in upcoming)
    assert not any(e["due"] == datetime.fromtimestamp(sat_8pm, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ") for e in upcoming)


# ---- excludes --------------------------------------------------------------------------------

def test_excludes_for_all_clients_and_one(m):
    pol = m.add_policy_exclude("p1", "*.tmp")
    pol = m.add_policy_exclude("p1", "/data/scratch/", client="other")
    assert pol["excludes"] == ["*.tmp"]
    assert pol["client_excludes"] == {"other": ["/data/scratch"]}
    with pytest.raises(ValidationError, match="already excluded"):
        m.add_policy_exclude("p1", "*.tmp")
    m.add_policy_exclude("p1", "*.tmp", client="other")      # one client's own: another row
    for bad, message in [("", "empty"), ("a/b", "neither a file name pattern nor an absolute"),
                         ("/data/*.tmp", "contains a wildcard"), ("/", "leave nothing"),
                         ("/data/../etc", "contains '..'")]:
        with pytest.raises(ValidationError, match=message):
            m.add_policy_exclude("p1", bad)
    m.config.add_host("stranger", address="192.0.2.9")
    with pytest.raises(ValidationError, match="'stranger' is not a client of policy 'p1'"):
        m.add_policy_exclude("p1", "*.o", client="stranger")
    with pytest.raises(NotFound, match="does not exclude '\\*.o'") as e:
        m.remove_policy_exclude("p1", "*.o")
    assert e.value.hint == "its excludes: *.tmp"
    pol = m.remove_policy_exclude("p1", "*.tmp", client="other")
    assert pol["client_excludes"] == {"other": ["/data/scratch"]} and pol["excludes"] == ["*.tmp"]
    [jid] = m.start_backup("p1", client="other", schedule="weekly")
    assert m.job(jid)["params"]["excludes"] == {"paths": ["/data/scratch"], "names": ["*.tmp"]}


def test_selections_that_backups_leave_out_are_warned_about(m, tmp_path):
    images = str(tmp_path / "pool" / "cairn-images")
    whose = f"the images of disk pool 'dp1' (host {m.host})"
    assert m.add_policy_selection("p1", "/srv")["warnings"] == []
    w = m.add_policy_selection("p1", "/proc")["warnings"]
    assert w == ["/proc is a pseudo file system (process information): backups leave it out, "
                 "so this selection backs up nothing"]
    w = m.add_policy_selection("p1", "/run/user")["warnings"]
    assert w[0].startswith("/run/user lies in /run, runtime state")
    w = m.add_policy_selection("p1", str(tmp_path))["warnings"]
    assert w == [f"{tmp_path} holds {images} ({whose}): backups leave it out"]
    assert m.add_policy_selection("p1", str(tmp_path / "pool" / "sub"))["warnings"] == []
    assert m.add_policy_selection("p1", images + "/me")["warnings"] == [
        f"{images}/me lies in {images}, {whose}: backups leave it out, so this selection "
        "backs up nothing"]
    assert default_excludes(m.db, [images + "/me", "/home"]) == {
        images: whose + ", left out by default"}
    assert default_excludes(m.db, [str(tmp_path), "/"]) == {
        images: whose + ", left out by default",
        **{p: why + ", left out by default" for p, why in PSEUDO_FILESYSTEMS.items()}}
    w = m.add_policy_selection("p1", "/")["warnings"]
    assert [x.split(" (")[0] for x in w] == ["/ holds /proc", "/ holds /sys", "/ holds /dev",
                                              "/ holds /run", f"/ holds {images}"]


# ---- the `cairn` command ---------------------------------------------------------------------

def test_cli_day_two_forms(m, home, capsys):
    rc, out, err = run_cli(capsys, home, "policy", "show", "p1", "--json")
    assert rc == 0, err
    d = json.loads(out)
    for key in ("name", "storage_unit", "storage_unit_group", "lifecycle", "priority",
                "multiple_streams", "checksum", "snapshot", "file_list", "dedup",
                "skip_nodump", "active", "clients", "selections", "schedules", "excludes",
                "client_excludes"):
        assert key in d, key
    assert set(d["schedules"][0]) >= {"name", "type", "retention", "retention_s", "frequency",
                                      "frequency_s", "windows", "calendar", "read_all", "kind"}
    rc, out, err = run_cli(capsys, home, "policy", "add-selection", "p1", "/proc")
    assert rc == 0 and "warning: /proc is a pseudo file system" in err
    rc, out, err = run_cli(capsys, home, "policy", "add-selection", "p1", "/sys", "--json")
    assert rc == 0 and json.loads(out)["warnings"][0].startswith("/sys is a pseudo") and not err
    rc, out, err = run_cli(capsys, home, "policy", "remove-selection", "p1", "/proc")
    assert rc == 0 and "/proc" not in out
    rc, out, err = run_cli(capsys, home, "policy", "remove-client", "p1", "other", "--json")
    assert rc == 0 and json.loads(out)["clients"] == [m.host]
    rc, out, err = run_cli(capsys, home, "policy", "remove-client", "p1", "other")
    assert rc != 0 and "'other' is not a client of policy 'p1'" in err
    rc, out, err = run_cli(capsys, home, "policy", "add-exclude", "p1", "*.tmp")
    assert rc == 0, err
    rc, out, err = run_cli(capsys, home, "policy", "add-exclude", "p1", "/data/x",
                           "--client", m.host, "--json")
    assert json.loads(out)["client_excludes"] == {m.host: ["/data/x"]}
    rc, out, err = run_cli(capsys, home, "policy", "remove-exclude", "p1", "/data/x",
                           "--client", m.host, "--json")
    assert rc == 0 and json.loads(out)["client_excludes"] == {}
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--retention", "6w", "--window", "daily 22:00 8h", "--json")
    assert rc == 0, err
    s = json.loads(out)["schedules"][0]
    assert (s["retention"], len(s["windows"]), s["frequency"]) == ("6w", 7, "1w")
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--weekdays", "mon,fri", "--exclude-date", "2031-12-26", "--json")
    s = json.loads(out)["schedules"][0]
    assert s["calendar"] == {"weekdays": [0, 4], "monthdays": [], "exclude": ["2031-12-26"]}
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--monthdays", "1,last", "--json")
    s = json.loads(out)["schedules"][0]
    assert s["calendar"] == {"weekdays": [0, 4], "monthdays": [1, "last"],
                             "exclude": ["2031-12-26"]}
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--weekdays", "none", "--exclude-date", "none", "--json")
    assert json.loads(out)["schedules"][0]["calendar"] == {"weekdays": [], "monthdays": [1, "last"],
                                                           "exclude": []}
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--read-every-file", "--window", "none", "--frequency", "none",
                           "--weekdays", "none", "--monthdays", "none", "--json")
    assert rc == 0, err
    s = json.loads(out)["schedules"][0]
    assert (s["read_all"], s["kind"], s["calendar"]) == (True, "manual", None)
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--no-read-every-file", "--json")
    assert json.loads(out)["schedules"][0]["read_all"] is False
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly")
    assert rc != 0 and "nothing to change" in err
    rc, out, err = run_cli(capsys, home, "policy", "set-schedule", "p1", "weekly",
                           "--weekdays", "tue")
    assert rc != 0 and "needs a start window" in err
    rc, out, err = run_cli(capsys, home, "policy", "remove-schedule", "p1", "daily", "--json")
    assert [s["name"] for s in json.loads(out)["schedules"]] == ["weekly"]
    rc, out, err = run_cli(capsys, home, "policy", "show", "p1")
    assert rc == 0 and "excludes:   *.tmp" in out and "weekly: full, retention 6w" in out


# ---- the console's pages save whole lists ----------------------------------------------------

def test_change_lists_checks_everything_before_writing(m):
    before = m.policy("p1")
    weekly = dict(before["schedules"][0])
    with pytest.raises(ValidationError, match="neither a file name pattern"):
        m.change_policy_lists("p1", clients=[m.host], selections=["/srv"],
                              schedules=[weekly], excludes=[{"pattern": "a/b"}])
    with pytest.raises(ValidationError, match="'other' is not a client of policy 'p1'"):
        m.change_policy_lists("p1", clients=[m.host],
                              excludes=[{"pattern": "*.o", "client": "other"}])
    with pytest.raises(ValidationError, match="calendar names Monday"):
        m.change_policy_lists("p1", selections=["/srv"], schedules=[
            dict(weekly, frequency=None, calendar={"weekdays": ["mon"]})])
    after = m.policy("p1")
    assert after == before                              # nothing half written
    weekly["retention"] = "9w"
    pol = m.change_policy_lists(
        "p1", clients=[m.host], selections=["/home", "/srv", "/proc"],
        schedules=[weekly, {"name": "monthly", "type": "full", "retention": "1y"}],
        excludes=[{"pattern": "*.tmp", "client": None}, {"pattern": "/srv/x", "client": m.host}])
    assert pol["clients"] == [m.host]
    assert pol["selections"] == ["/home", "/srv", "/proc"]
    assert [(s["name"], s["retention"]) for s in pol["schedules"]] == [("weekly", "9w"),
                                                                        ("monthly", "1y")]
    assert sched(m, "weekly")["windows"] == before["schedules"][0]["windows"]
    assert pol["excludes"] == ["*.tmp"] and pol["client_excludes"] == {m.host: ["/srv/x"]}
    assert any(w.startswith("/proc is a pseudo file system") for w in pol["warnings"])
    # unchanged lists write nothing and say nothing
    again = m.change_policy_lists("p1", clients=pol["clients"], selections=pol["selections"],
                                  schedules=pol["schedules"], excludes=[
                                      {"pattern": "*.tmp"},
                                      {"pattern": "/srv/x", "client": m.host}])
    assert again["warnings"] == [] and {k: v for k, v in again.items() if k != "warnings"} == \
        {k: v for k, v in pol.items() if k != "warnings"}
