"""Alert settings are checked when they are set, all of a batch before any is kept, and an
empty value puts back the default."""

import pytest

from app.errors import ValidationError
from app.master import Master


@pytest.fixture
def m(tmp_path):
    master = Master(str(tmp_path / "home"))
    yield master
    master.close()


@pytest.mark.parametrize("name,value,says", [
    ("smtp_port", "70000", "port number"), ("smtp_port", "x", "port number"),
    ("smtp_tls", "tls", "must be one of"), ("sender", "cairn", "not a mail address"),
    ("recipients", "a@b.c, nobody", "'nobody' is not a mail address"),
    ("webhook_url", "ftp://x/y", "not an http or https URL"),
    ("interval", "soon", "not a duration"), ("host_down_after", "0m", "longer than zero"),
    ("kinds", "failed,late", "unknown alert kind 'late'"), ("syslog", "yes", "on or off"),
    ("command", "notify 'unclosed", "cannot be split"), ("colour", "red", "no alert setting"),
])
def test_a_wrong_value_is_refused_and_nothing_of_the_batch_is_kept(m, name, value, says):
    with pytest.raises(ValidationError) as e:
        m.set_alert_settings({"smtp_host": "mail.example.org", name: value})
    assert says in str(e.value)
    assert m.alert_settings()["settings"]["smtp_host"]["value"] == ""


def test_channels_follow_the_settings_and_an_empty_value_is_the_default(m):
    assert m.alert_settings()["channels"] == []
    doc = m.set_alert_settings({"smtp_host": "mail.example.org"})
    assert doc["channels"] == [] and "recipients is empty" in doc["problems"][0]
    doc = m.set_alert_settings({"recipients": " a@b.c ,d@e.f", "syslog": "on",
                                "kinds": "failed, failed ,missed"})
    assert doc["channels"] == ["email", "syslog"] and doc["problems"] == []
    assert doc["settings"]["recipients"]["value"] == "a@b.c, d@e.f"
    assert doc["settings"]["kinds"]["value"] == "failed,missed"
    doc = m.set_alert_settings({"kinds": "", "syslog": ""})
    assert doc["settings"]["kinds"]["value"] == doc["settings"]["kinds"]["default"]
    assert doc["channels"] == ["email"]
    with pytest.raises(ValidationError, match="the syslog channel is not configured"):
        m.alerts_test(channels=["syslog"])
