"""Schedules in the catalog: types, frequency, calendar and start windows, checked with clear
messages, through the config API and the `cairn` command."""

import json

import pytest

from app import cli
from app.schedule_rules import calendar_from_text, calendar_matches, check_calendar, \
    check_frequency, parse_window_text, parse_windows_text
from app.errors import ValidationError
from app.master import Master

DAILY = [{"day": d, "start": "22:00", "hours": 8} for d in range(7)]


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def master(home, tmp_path):
    m = Master(home)
    host = m.ensure_local_host()["name"]
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path)], check=False)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    yield m
    m.close()


def schedules(m):
    return {s["name"]: s for s in m.config.policy("p1")["schedules"]}


# ---- the config API --------------------------------------------------------------------------

def test_incremental_types_are_accepted_and_unknown_ones_refused(master):
    cfg = master.config
    cfg.add_schedule("p1", "diff", type="differential")
    cfg.add_schedule("p1", "cum", type="cumulative")
    cfg.add_schedule("p1", "full", type="full")
    assert {n: s["type"] for n, s in schedules(master).items()} == \
        {"diff": "differential", "cum": "cumulative", "full": "full"}
    with pytest.raises(ValidationError, match="schedule type 'weekly' is unknown") as e:
        cfg.add_schedule("p1", "w", type="weekly")
    assert "full, differential, cumulative or catalog" in e.value.hint


def test_frequency_schedules_and_their_defaults(master):
    cfg = master.config
    cfg.add_schedule("p1", "twice", type="differential", frequency="12h", windows=DAILY)
    cfg.add_schedule("p1", "weekly", type="full", windows=DAILY)
    cfg.add_schedule("p1", "nightly", type="cumulative", windows=DAILY)
    cfg.add_schedule("p1", "manual", type="full", frequency="1d")
    cfg.add_schedule("p1", "bare", type="differential")
    s = schedules(master)
    assert (s["twice"]["frequency_s"], s["twice"]["frequency"]) == (12 * 3600, "12h")
    assert (s["weekly"]["frequency_s"], s["weekly"]["kind"]) == (7 * 86400, "frequency")
    assert s["nightly"]["frequency_s"] == 86400
    assert (s["manual"]["kind"], s["manual"]["frequency"]) == ("manual", "1d")
    assert (s["bare"]["kind"], s["bare"]["frequency_s"], s["bare"]["calendar"]) == \
        ("manual", None, None)


@pytest.mark.parametrize("frequency, message", [
    ("often", "frequency 'often' is not a duration"),
    ("infinite", "frequency 'infinite' is not a length of time"),
    ("0h", "frequency '0h' is not a duration"),
    ("5m", "frequency 5m is too short"),
    (True, "frequency True is not a duration"),
])
def test_bad_frequencies(master, frequency, message):
    with pytest.raises(ValidationError, match=message):
        master.config.add_schedule("p1", "s", type="full", frequency=frequency, windows=DAILY)
    assert schedules(master) == {}


def test_check_frequency():
    assert check_frequency(None) is None and check_frequency(" ") is None
    assert check_frequency("1w") == 7 * 86400 and check_frequency(3600) == 3600
    assert check_frequency("15m") == 900


def test_calendar_schedules_are_stored_in_canonical_form(master):
    cfg = master.config
    cfg.add_schedule("p1", "cal", type="full", windows=DAILY,
                     calendar={"weekdays": ["wed", 0, "Monday"], "monthdays": ["last", 15, "1"],
                               "exclude": ["2026-12-25", "2026-01-01", "2026-12-25"]})
    s = schedules(master)["cal"]
    assert s["calendar"] == {"weekdays": [0, 2], "monthdays": [1, 15, "last"],
                             "exclude": ["2026-01-01", "2026-12-25"]}
    assert (s["kind"], s["frequency_s"]) == ("calendar", None)
    # JSON text works as well (the console keeps schedules as text)
    cfg.add_schedule("p1", "cal2", type="differential", windows=json.dumps(DAILY),
                     calendar='{"monthdays": [1]}')
    assert schedules(master)["cal2"]["calendar"] == {"weekdays": [], "monthdays": [1],
                                                     "exclude": []}


@pytest.mark.parametrize("kw, message", [
    (dict(frequency="1d", calendar={"weekdays": [0]}), "either every so often or on calendar "
                                                       "days, not both"),
    (dict(calendar={"exclude": ["2026-12-25"]}), "needs at least one weekday or day of the "
                                                 "month"),
    (dict(calendar={}), "needs at least one weekday"),
    (dict(calendar={"weekdays": ["funday"]}), "calendar weekday 'funday' is not a day of the "
                                              "week"),
    (dict(calendar={"weekdays": [7]}), "calendar weekday 7 is not a day of the week"),
    (dict(calendar={"weekdays": [True]}), "not a day of the week"),
    (dict(calendar={"monthdays": [0]}), "calendar day of the month 0 is not valid"),
    (dict(calendar={"monthdays": [32]}), "day of the month 32 is not valid"),
    (dict(calendar={"monthdays": ["first"]}), "day of the month 'first' is not valid"),
    (dict(calendar={"monthdays": [1], "exclude": ["2026-13-01"]}),
     "exclusion date '2026-13-01' is not a date"),
    (dict(calendar={"monthdays": [1], "exclude": ["25.12.2026"]}), "is not a date"),
    (dict(calendar={"monthdays": [1], "exclude": [20261225]}), "is not a date"),
    (dict(calendar={"monthdays": [1], "days": [1]}), "unknown fields: days"),
    (dict(calendar=[1, 2]), "must be an object"),
    (dict(calendar="{not json"), "calendar is not valid JSON"),
    (dict(calendar={"monthdays": {"a": 1}}), "must be a list"),
    (dict(calendar={"weekdays": ["sat"]}, windows=[{"day": 0, "start": "22:00", "hours": 8}]),
     "names Saturday but no start window opens on that day"),
    (dict(calendar={"weekdays": [0]}, windows=None), "a calendar schedule needs a start "
                                                     "window"),
])
def test_bad_calendars(master, kw, message):
    kw.setdefault("windows", DAILY)
    with pytest.raises(ValidationError, match=message):
        master.config.add_schedule("p1", "s", type="full", **kw)
    assert schedules(master) == {}


def test_calendar_matching():
    import datetime as d
    cal = check_calendar({"weekdays": ["sat"], "monthdays": [31, "last"],
                          "exclude": ["2031-05-31"]})
    assert calendar_matches(cal, d.date(2031, 3, 1))          # a Saturday
    assert not calendar_matches(cal, d.date(2031, 3, 2))
    assert calendar_matches(cal, d.date(2031, 2, 28))         # last day
    assert calendar_matches(cal, d.date(2031, 1, 31))
    assert calendar_matches(cal, d.date(2031, 4, 30))         # last, though not the 31st
    assert not calendar_matches(cal, d.date(2031, 5, 31))     # excluded
    assert not calendar_matches(cal, d.date(2031, 5, 30))


def test_window_text():
    assert parse_window_text("mon 22:00 8h") == [{"day": 0, "start": "22:00", "hours": 8}]
    assert parse_window_text("daily 22:00 8h") == [{"day": d, "start": "22:00", "hours": 8}
                                                   for d in range(7)]
    assert parse_window_text("mon-fri 20:00 90m") == [
        {"day": d, "start": "20:00", "hours": 1.5} for d in range(5)]
    assert [w["day"] for w in parse_window_text("fri-mon 01:00 1h")] == [0, 4, 5, 6]
    assert [w["day"] for w in parse_window_text("Sat,SUN 01:00 2")] == [5, 6]
    assert [w["day"] for w in parse_window_text("weekend 01:00 1d")] == [5, 6]
    assert parse_windows_text(["mon 22:00 8h", "sat 08:00 1d"]) == [
        {"day": 0, "start": "22:00", "hours": 8}, {"day": 5, "start": "08:00", "hours": 24}]
    for text, message in [("mon 22:00", "is not DAYS, a start time and a length"),
                          ("funday 22:00 8h", "'funday' is not a day of the week"),
                          ("mon 25:00 8h", "start '25:00' is not a time of day"),
                          ("mon 22:00 8x", "length '8x' is not a duration"),
                          ("mon 22:00 0h", "has no length")]:
        with pytest.raises(ValidationError, match=message):
            parse_window_text(text)


def test_window_text_checked_with_the_windows(master):
    with pytest.raises(ValidationError, match="overlap"):
        master.config.add_schedule("p1", "s", type="full",
                                   windows=parse_windows_text(["daily 22:00 25h"]))
    with pytest.raises(ValidationError, match="out of range"):
        master.config.add_schedule("p1", "s", type="full",
                                   windows=parse_windows_text(["mon 22:00 200h"]))


def test_calendar_from_cli_text():
    assert calendar_from_text() is None
    assert calendar_from_text("mon,wed", "1,15,last", ["2026-12-25"]) == {
        "weekdays": [0, 2], "monthdays": [1, 15, "last"], "exclude": ["2026-12-25"]}
    with pytest.raises(ValidationError, match="exclusion dates belong to a calendar schedule"):
        calendar_from_text(exclude=["2026-12-25"])
    with pytest.raises(ValidationError, match="'x' is not valid"):
        calendar_from_text(monthdays="1,x")


def test_create_policy_takes_calendar_schedules_all_or_nothing(master):
    host = master.config.local_host()["name"]
    with pytest.raises(ValidationError, match="not both"):
        master.create_policy("p2", storage_unit="stu1", clients=[host], selections=["/d"],
                             schedules=[{"name": "a", "type": "full", "windows": DAILY,
                                         "frequency": "1d", "calendar": {"weekdays": [1]}}])
    assert [p["name"] for p in master.config.policies()] == ["p1"]
    pol = master.create_policy("p2", storage_unit="stu1", clients=[host], selections=["/d"],
                               schedules=[{"name": "a", "type": "cumulative", "windows": DAILY,
                                           "calendar": {"weekdays": [1]}}])
    assert pol["schedules"][0]["calendar"]["weekdays"] == [1]


# ---- the `cairn` command ---------------------------------------------------------------------

def run_cli(capsys, home, *args):
    rc = cli.main(["--home", home, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_add_schedule_flags(master, home, capsys):
    rc, out, err = run_cli(capsys, home, "policy", "add-schedule", "p1", "full", "--type",
                           "full", "--retention", "4w", "--json")
    assert rc == 0, err
    assert json.loads(out)["schedules"][0]["kind"] == "manual"
    rc, out, err = run_cli(capsys, home, "policy", "add-schedule", "p1", "nightly", "--type",
                           "differential", "--frequency", "1d", "--window", "mon-fri 22:00 8h",
                           "--window", "sat 08:00 4h", "--json")
    assert rc == 0, err
    s = json.loads(out)["schedules"][1]
    assert (s["type"], s["frequency_s"], s["kind"]) == ("differential", 86400, "frequency")
    assert [(w["day"], w["start"], w["hours"]) for w in s["windows"]] == \
        [(d, "22:00", 8) for d in range(5)] + [(5, "08:00", 4)]
    rc, out, err = run_cli(capsys, home, "policy", "add-schedule", "p1", "monthly", "--type",
                           "cumulative", "--window", "daily 22:00 8h", "--weekdays", "sun",
                           "--monthdays", "1,15,last", "--exclude-date", "2026-12-25",
                           "--exclude-date", "2027-01-01", "--json")
    assert rc == 0, err
    s = json.loads(out)["schedules"][2]
    assert s["calendar"] == {"weekdays": [6], "monthdays": [1, 15, "last"],
                             "exclude": ["2026-12-25", "2027-01-01"]}
    assert s["frequency_s"] is None and s["kind"] == "calendar"
    # without --json: one line, as before
    rc, out, err = run_cli(capsys, home, "policy", "add-schedule", "p1", "weekly", "--type",
                           "full", "--window", "sat 20:00 12h")
    assert rc == 0 and "schedules ['full', 'nightly', 'monthly', 'weekly']" in out
    assert schedules(master)["weekly"]["frequency"] == "1w"


@pytest.mark.parametrize("args, message", [
    (["--window", "mon 22:00"], "is not DAYS, a start time and a length"),
    (["--window", "someday 22:00 8h"], "'someday' is not a day of the week"),
    (["--window", "daily 22:00 25h"], "overlap"),
    (["--frequency", "often", "--window", "mon 22:00 8h"], "frequency 'often' is not a "
                                                           "duration"),
    (["--frequency", "1d", "--weekdays", "mon", "--window", "mon 22:00 8h"], "not both"),
    (["--weekdays", "mon"], "needs a start window"),
    (["--weekdays", "mon,xyz", "--window", "daily 22:00 8h"], "'xyz' is not a day"),
    (["--monthdays", "0", "--window", "daily 22:00 8h"], "day of the month '0' is not valid"),
    (["--exclude-date", "2026-12-25", "--window", "daily 22:00 8h"],
     "exclusion dates belong to a calendar schedule"),
    (["--monthdays", "1", "--exclude-date", "Christmas", "--window", "daily 22:00 8h"],
     "exclusion date 'Christmas' is not a date"),
])
def test_cli_add_schedule_errors(master, home, capsys, args, message):
    rc, out, err = run_cli(capsys, home, "policy", "add-schedule", "p1", "s", "--type", "full",
                           *args)
    assert rc == 10
    assert message in err and "Traceback" not in err
    rc, out, err = run_cli(capsys, home, "policy", "add-schedule", "p1", "s", "--type", "full",
                           *args, "--json")
    doc = json.loads(out)
    assert doc["status"] == 10 and message in doc["error"] and doc["hint"]
    assert schedules(master) == {}


def test_cli_schedule_runs(master, home, capsys):
    host = master.config.local_host()["name"]
    master.config.add_policy_client("p1", host)
    master.config.add_policy_selection("p1", "/data")
    master.config.add_schedule("p1", "nightly", type="full", windows=DAILY)
    rc, out, err = run_cli(capsys, home, "schedule", "runs", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["runs"] == []
    assert doc["upcoming"] and doc["upcoming"][0]["schedule"] == "nightly"
    assert doc["upcoming"][0]["client"] == host
    rc, out, err = run_cli(capsys, home, "schedule", "runs", "--policy", "p1", "--horizon",
                           "1h", "--json")
    assert rc == 0 and len(json.loads(out)["upcoming"]) <= 1
    rc, out, err = run_cli(capsys, home, "schedule", "runs")
    assert rc == 0 and "upcoming:" in out and "recorded:" in out and "nightly" in out
    rc, out, err = run_cli(capsys, home, "schedule", "runs", "--policy", "nope")
    assert rc == 10 and "no policy named 'nope'" in err
    rc, out, err = run_cli(capsys, home, "schedule", "runs", "--horizon", "forever")
    assert rc == 10 and "must be a length of time" in err
