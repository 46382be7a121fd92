"""What a measured disk throughput supports: the daily ingest levels of the sizing guide that
tsmdiskperf comes with (the Small, Medium and Large blueprints), each with the combined
write-and-read throughput in MiB/s a pool's disks need for it. The guide marks these levels on
its throughput chart with arrows; the figures are the ones it gives for the same blueprints
(about 100-200, 400-600 and 800-1000 MiB/s). A rate at or above a level's upper figure
supports it, one within its range is at the low end, one below it does not."""

LEVELS = (
    {"name": "small", "label": "Small", "ingest": "up to 10 TB a day",
     "low_mb_s": 100, "high_mb_s": 200},
    {"name": "medium", "label": "Medium", "ingest": "10-20 TB a day",
     "low_mb_s": 400, "high_mb_s": 600},
    {"name": "large", "label": "Large", "ingest": "20-100 TB a day",
     "low_mb_s": 800, "high_mb_s": 1000},
)


def verdict(mb_s):
    """[{level..., "supported": "yes" | "low end" | "no"}] for a combined throughput."""
    out = []
    for level in LEVELS:
        if mb_s is None:
            said = "no"
        elif mb_s >= level["high_mb_s"]:
            said = "yes"
        elif mb_s >= level["low_mb_s"]:
            said = "low end"
        else:
            said = "no"
        out.append(dict(level, supported=said))
    return out


def summary(mb_s):
    """The verdict in one sentence."""
    if mb_s is None:
        return "no throughput was measured"
    levels = verdict(mb_s)
    top = [lv for lv in levels if lv["supported"] != "no"]
    if not top:
        first = levels[0]
        return (f"{mb_s:.0f} MiB/s combined is below the {first['label']} level "
                f"({first['ingest']} needs {first['low_mb_s']}-{first['high_mb_s']} MiB/s)")
    best = top[-1]
    text = (f"{mb_s:.0f} MiB/s combined supports the {best['label']} level ({best['ingest']})"
            + (", at its low end" if best["supported"] == "low end" else ""))
    nxt = next((lv for lv in levels if lv["supported"] == "no"), None)
    if nxt:
        text += (f"; {nxt['label']} ({nxt['ingest']}) needs {nxt['low_mb_s']}-"
                 f"{nxt['high_mb_s']} MiB/s")
    return text
