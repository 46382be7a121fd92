"""The sizing levels a disk benchmark's throughput supports (app/storage_sizing.py): at or
above a level's upper figure it is supported, within its range at the low end, below not."""

from app import storage_sizing


def said(mb_s):
    return {lv["name"]: lv["supported"] for lv in storage_sizing.verdict(mb_s)}


def test_levels_by_throughput():
    assert said(50) == {"small": "no", "medium": "no", "large": "no"}
    assert said(100) == {"small": "low end", "medium": "no", "large": "no"}
    assert said(200) == {"small": "yes", "medium": "no", "large": "no"}
    assert said(450) == {"small": "yes", "medium": "low end", "large": "no"}
    assert said(1000) == {"small": "yes", "medium": "yes", "large": "yes"}
    assert said(None) == {"small": "no", "medium": "no", "large": "no"}


def test_summary_names_the_best_level_and_the_next():
    assert storage_sizing.summary(450) == (
        "450 MiB/s combined supports the Medium level (10-20 TB a day), at its low end; "
        "Large (20-100 TB a day) needs 800-1000 MiB/s")
    assert "below the Small level" in storage_sizing.summary(20)
    assert storage_sizing.summary(1500).endswith("Large level (20-100 TB a day)")
