"""The live progress lines of a waiting command: what a job's row holds reaches the terminal
escaped, a line never passes the terminal's width, colour only without NO_COLOR, and the
block is redrawn in place."""

import io

from app.cli import progress_line
from app.cli.progress_line import Block, clock, fit, job_line, use_color


def job(**kw):
    j = dict(id=7, type="backup", client="me", state="active", status=None, phase="copying",
             bytes=3 << 20, files=12, total_bytes=10 << 20, total_files=40,
             rate_bytes_per_s=1 << 20, percent=30.0, elapsed_s=65, wait_reason=None,
             cancel_requested=False)
    j.update(kw)
    return j


def test_a_running_job_shows_phase_percent_totals_rate_and_time_left():
    line = job_line(job())
    assert line == ("[1:05] job 7 backup me: copying 30.0%  3.0 MiB / 10.0 MiB  "
                    "12 / 40 files  1.0 MiB/s  ETA 0:07")


def test_before_the_totals_are_known_there_is_no_percent_and_no_time_left():
    line = job_line(job(phase="scanning", total_bytes=None, total_files=None, percent=None))
    assert line == "[1:05] job 7 backup me: scanning  3.0 MiB  12 files  1.0 MiB/s"


def test_time_left_is_rounded_up_while_data_remains():
    line = job_line(job(bytes=(10 << 20) - 1000, rate_bytes_per_s=100 << 20))
    assert line.endswith("ETA 0:01")


def test_what_a_client_chose_cannot_reach_the_terminal_as_control_characters():
    hostile = "me\x1b]0;owned\x07\x1b[2J\r\n\u202e"
    for j in (job(client=hostile), job(state="queued", wait_reason=hostile),
              job(phase=hostile)):
        line = job_line(j)
        assert not any(c in line for c in "\x1b\x07\r\n\u202e"), line
        assert "\\033" in line


def test_a_line_fits_the_width_in_columns_wide_characters_counted_twice():
    line = job_line(job(client="\u6771\u4eac" * 10), color=True)
    cut = fit(line, 30)
    plain = cut.replace(progress_line.BOLD, "").replace(progress_line.RESET, "")
    assert plain == "[1:05] job 7 backup \u6771\u4eac\u6771\u4eac\u6771"
    assert fit("abc", 10) == "abc"


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_color(Tty()) and not use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "")   # no-color.org: set and not empty
    assert use_color(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())
    assert progress_line.BOLD not in job_line(job(), color=False)


def test_the_block_is_redrawn_in_place_and_cleared(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    b = Block(out)
    b.draw(["one", "two"])
    assert out.getvalue() == "one\x1b[K\ntwo\x1b[K\x1b[J"
    out.truncate(0), out.seek(0)
    b.draw(["three"])   # back up one line, redraw, clear what was below
    assert out.getvalue() == "\r\x1b[1Athree\x1b[K\x1b[J"
    out.truncate(0), out.seek(0)
    b.draw(["x" * 60])
    assert out.getvalue() == "\r" + "x" * 39 + "\x1b[K\x1b[J"
    out.truncate(0), out.seek(0)
    b.clear()
    assert out.getvalue() == "\r\x1b[J"


def test_clock():
    assert (clock(0), clock(65), clock(3605)) == ("0:00", "1:05", "1:00:05")
