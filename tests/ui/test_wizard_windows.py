"""Start windows: the weekly grid's conversion, their validation in the catalog, and a policy
created all or nothing."""

import pytest

from app.schedule_rules import check_windows
from app.errors import ValidationError
from ui.wizards.week_grid import cells_to_windows, describe, windows_to_cells


def test_grid_cells_become_windows_running_past_midnight_and_the_week_end():
    cells = {(0, 22), (0, 23), (1, 0), (1, 1), (3, 9)}
    assert cells_to_windows(cells) == [{"day": 0, "start": "22:00", "hours": 4},
                                       {"day": 3, "start": "09:00", "hours": 1}]
    sunday_night = {(6, 23), (0, 0), (0, 1)}
    assert cells_to_windows(sunday_night) == [{"day": 6, "start": "23:00", "hours": 3}]
    assert cells_to_windows(set()) == []
    everything = {(d, h) for d in range(7) for h in range(24)}
    assert cells_to_windows(everything) == [{"day": 0, "start": "00:00", "hours": 168}]
    for c in (cells, sunday_night, everything):
        assert windows_to_cells(cells_to_windows(c)) == c
    assert windows_to_cells([{"day": 2, "start": "10:30", "hours": 1}]) == {(2, 10), (2, 11)}
    assert "manual backups only" in describe([])


def test_windows_are_checked_with_clear_messages():
    ok = check_windows('[{"day": 4, "start": "20:00", "hours": 10}, '
                       '{"day": 0, "start": "22:00", "hours": 6}]')
    assert ok == [{"day": 0, "start": "22:00", "hours": 6},
                  {"day": 4, "start": "20:00", "hours": 10}]
    assert check_windows(None) == [] and check_windows("") == []
    bad = [
        ("not json", "not valid JSON"),
        ({"day": 0}, "must be a list"),
        ([{"day": 7, "start": "22:00", "hours": 1}], "day 7 is not a day of the week"),
        ([{"day": True, "start": "22:00", "hours": 1}], "not a day of the week"),
        ([{"day": 0, "start": "24:00", "hours": 1}], "start '24:00' is not a time of day"),
        ([{"day": 0, "start": "22:00", "hours": 0}], "out of range"),
        ([{"day": 0, "start": "22:00"}], "has no hours"),
        ([{"day": 0, "start": "22:00", "hours": 1, "tz": "UTC"}], "unknown fields: tz"),
        ([{"day": 0, "start": "22:00", "hours": 6},
          {"day": 1, "start": "02:00", "hours": 1}], "overlap"),
        ([{"day": 6, "start": "23:00", "hours": 2},
          {"day": 0, "start": "00:30", "hours": 1}], "overlap"),
    ]
    for windows, message in bad:
        with pytest.raises(ValidationError, match=message):
            check_windows(windows)


def test_add_schedule_stores_checked_windows(empty_master, tmp_path):
    m = empty_master
    host = m.config.local_host()["name"]
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path)], check=False)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_schedule("p1", "nightly", type="full", frequency="1d",
                          windows=[{"day": 0, "start": "22:00", "hours": 6}])
    assert m.config.policy("p1")["schedules"][0]["windows"] == [
        {"day": 0, "start": "22:00", "hours": 6}]
    with pytest.raises(ValidationError, match="frequency 'often' is not a duration"):
        m.config.add_schedule("p1", "x", type="full", frequency="often")
    with pytest.raises(ValidationError, match="not a day of the week"):
        m.config.add_schedule("p1", "y", type="full", windows=[{"day": 9, "start": "01:00",
                                                                "hours": 1}])
    assert [s["name"] for s in m.config.policy("p1")["schedules"]] == ["nightly"]


def test_a_policy_is_created_all_or_nothing(empty_master, tmp_path):
    m = empty_master
    host = m.config.local_host()["name"]
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp_path)], check=False)
    m.config.add_storage_unit("stu1", pool="dp1")
    with pytest.raises(ValidationError, match="needs a start window"):
        m.create_policy("p1", storage_unit="stu1", clients=[host], selections=["/data"],
                        schedules=[{"name": "inc", "type": "differential",
                                    "calendar": {"weekdays": [0]}}])
    assert m.config.policies() == []
    assert m.db.one("SELECT count(*) FROM policy_clients")[0] == 0
    assert m.db.one("SELECT count(*) FROM policy_selections")[0] == 0
    pol = m.create_policy("p1", storage_unit="stu1", clients=[host], selections=["/data"],
                          schedules=[{"name": "full", "type": "full", "retention": "1w"}])
    assert pol["clients"] == [host] and pol["schedules"][0]["retention"] == "1w"
