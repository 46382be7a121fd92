"""`--wait` on a terminal: a live line per running job, redrawn in place, then the summary
printed without a terminal; `--progress json` for scripts; Ctrl-C asks whether to cancel.

The backups run on the embedded local host through a slowed data path: the client agent is
started with a sitecustomize that sleeps before each file it copies, so a backup of a few
dozen small files lasts seconds, long enough to be seen and interrupted whatever the
machine's speed. The tests look at what was drawn and how the jobs ended, not at timing."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from app import status
from app.master import Master
from clihelp import ROOT, cairn, cairn_json
from ptyhelp import PtyRun, interruptible

FILES = 40
SLOW = """
import time
from app.agent.archiver import filedata
_copy = filedata.FileData.copy
def copy(self, *a, **k):
    time.sleep({pause})
    return _copy(self, *a, **k)
filedata.FileData.copy = copy
"""
SUMMARY = re.compile(r"job (\d+) \(backup, me\): status (\d+) - [^;]+; (\d+) files, ")
REDRAW = "\r\x1b[K"


def setup(tmp_path, pause=0.15):
    home, vol, src, slow = (tmp_path / n for n in ("home", "vol", "src", "slow"))
    for d in (vol, src, slow):
        d.mkdir()
    for i in range(FILES):
        (src / f"f{i:03d}").write_bytes(bytes([i]) * (256 << 10))
    (slow / "sitecustomize.py").write_text(SLOW.format(pause=pause))
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "host", "set", "me", "agent_env", f"PYTHONPATH={slow}")
    cairn(home, "storage-server", "create", "ss1", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1", "--volume", vol)
    cairn(home, "storage-unit", "create", "stu1", "--pool", "dp1")
    cairn(home, "policy", "create", "p1", "--storage-unit", "stu1")
    cairn(home, "policy", "add-client", "p1", "me")
    cairn(home, "policy", "add-selection", "p1", src)
    return home


def wait_done(home, jid):
    # `jobs wait` without a terminal: it follows the job the headless master runs
    doc, _ = cairn_json(home, "jobs", "wait", jid, check=False)
    return doc["jobs"][0]


def seen_copying(text):
    return "copying" in text and "% " in text


def test_a_backup_on_a_terminal_shows_its_progress_then_the_summary(tmp_path):
    home = setup(tmp_path)
    run = PtyRun(home, "backup", "p1", "--wait", columns=120)
    rc, text = run.finish()
    assert rc == 0, text
    # lines redrawn in place: a carriage return, the line, the rest of it cleared
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", x.split("\x1b[K")[0])
             for x in text.split("\r")[1:] if "\x1b[K" in x]
    drawn = [x for x in lines if x.startswith("[") and "job " in x]
    assert REDRAW.replace("\r", "") in text and len(drawn) >= 3, text
    assert "\x1b[1mcopying\x1b[0m" in text   # the phase in bold, NO_COLOR unset
    copying = [x for x in drawn if ": copying " in x]
    assert copying, drawn
    # bytes and files of their totals, percent, rate and time left once known
    assert any(re.search(r"\d+\.\d% .* / 10\.0 MiB .* / 40 files .*/s .*ETA \d+:\d\d$", x)
               for x in copying), copying
    # the block is cleared, then the summary printed without a terminal follows
    m = SUMMARY.search(text.split("\x1b[J")[-1])
    assert m and m.group(2) == "0" and m.group(3) == str(FILES), text
    job = Master(str(home)).job(int(m.group(1)))
    assert job["status"] == 0 and job["phase"] is None


def test_without_a_terminal_the_output_is_the_summary_alone(tmp_path):
    home = setup(tmp_path, pause=0)
    p = cairn(home, "backup", "p1", "--wait")
    assert "\x1b" not in p.stdout and "\r" not in p.stdout
    [line] = p.stdout.splitlines()
    assert SUMMARY.match(line), line
    doc, p = cairn_json(home, "backup", "p1", "--wait")
    assert doc["status"] == 0 and "\x1b" not in p.stdout


def test_progress_json_is_a_stream_of_events_ending_with_the_job(tmp_path):
    home = setup(tmp_path)
    p = cairn(home, "backup", "p1", "--wait", "--progress", "json")
    docs = [json.loads(x) for x in p.stdout.splitlines()]
    events, final = docs[:-1], docs[-1]
    jid = final["jobs"][0]["id"]
    assert final["status"] == 0 and final["jobs"][0]["state"] == "done"
    assert all(e["job"] == jid for e in events)
    assert events[-1]["event"] == "end" and events[-1]["status"] == 0
    assert all(e["event"] == "progress" for e in events[:-1])
    copying = [e for e in events if e["phase"] == "copying"]
    assert copying and all(e["total_files"] == FILES for e in copying
                           if e["total_files"] is not None)
    assert [e["bytes"] for e in events] == sorted(e["bytes"] for e in events)
    assert {"state", "phase", "bytes", "files", "total_bytes", "total_files",
            "rate_bytes_per_s"} <= set(events[0])
    # an error, as with --json
    p = cairn(home, "backup", "nosuch", "--wait", "--progress", "json", check=False)
    assert p.returncode == 10 and json.loads(p.stdout)["error"].startswith("there is no policy")


@pytest.mark.parametrize("answer", ["y", "n"])
def test_ctrl_c_asks_whether_to_cancel(tmp_path, answer):
    home = setup(tmp_path)
    run = PtyRun(home, "backup", "p1", "--wait", env={"NO_COLOR": "1"})
    run.wait_for_output(seen_copying)
    run.proc.send_signal(signal.SIGINT)
    run.wait_for_output(lambda t: re.search(r"Cancel job \d+\? \[y/N\] $", t))
    run.type(answer + "\n")
    rc, text = run.finish()
    jid = int(re.search(r"Cancel job (\d+)\?", text).group(1))
    assert "\x1b[1m" not in text   # NO_COLOR
    if answer == "y":
        assert rc == status.CANCELED, text
        m = SUMMARY.search(text.split("Cancel job")[-1])
        assert m and int(m.group(1)) == jid and int(m.group(2)) == status.CANCELED, text
        job = Master(str(home)).job(jid)
        assert job["status"] == status.CANCELED
    else:
        assert rc == 130, text
        assert f"follow it with `cairn jobs show {jid}`" in text
        shown = cairn(home, "jobs", "show", jid).stdout
        # still going (copying, or committing what it copied) or already done
        assert re.search(r"^phase +(copying|committing)$", shown, re.M) or \
            re.search(r"^state +done$", shown, re.M), shown
        job = wait_done(home, jid)
        assert job["status"] == 0 and job["files"] == FILES, job


def test_ctrl_c_without_a_terminal_on_stdin_leaves_the_job_running(tmp_path):
    home = setup(tmp_path)
    run = PtyRun(home, "backup", "p1", "--wait", "--progress", "json", stdin_devnull=True)
    text = run.wait_for_output(lambda t: '"phase": "copying"' in t)
    run.proc.send_signal(signal.SIGINT)
    rc, text = run.finish()
    assert rc == 130 and "Cancel" not in text
    last = json.loads(text.strip().splitlines()[-1])
    [j] = last["jobs"]
    assert j["state"] == "active"
    assert wait_done(home, j["id"])["status"] == 0


def test_ctrl_c_cancels_the_jobs_a_wait_without_a_terminal_runs_itself(tmp_path):
    home = setup(tmp_path)
    env = dict(os.environ, CAIRN_HOME=str(home),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-m", "app", "backup", "p1", "--wait"], cwd=ROOT,
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    m = Master(str(home))
    deadline = time.monotonic() + 60
    while not any(j["state"] == "active" and j["files"] for j in m.job_list()):
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    [running] = m.job_list()
    # it runs in the command's own dispatcher, which cannot leave it behind
    assert running["runner"].split(":")[1] == str(p.pid)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == status.CANCELED, (out, err)
    [line] = out.splitlines()
    match = SUMMARY.match(line)
    assert match and int(match.group(2)) == status.CANCELED, out
    assert f"job {running['id']} ran in this command and is canceled" in err
    assert m.job(running["id"])["status"] == status.CANCELED
    assert m.images() == []
