"""The master API over SSH: `cairn master serve --stdio` spoken to over its pipes (calls,
errors, refusals, batches, streams), then `cairn --master` against the loopback sshd doing
a first-day story, and the master's host key unknown (refused, shown by its fingerprint,
then trusted), and changed (refused)."""

import filecmp
import json
import os
import subprocess
import sys

import pytest

from app import status as st
from app.errors import NotFound, ValidationError
from app.formats import protocol
from app.remote import codec
from clihelp import ROOT, cairn


class Served:
    """`cairn master serve --stdio` on pipes, as sshd would run it."""

    def __init__(self, home, user="admin", env=None):
        self.p = subprocess.Popen(
            [sys.executable, "-m", "app", "--home", str(home), "master", "serve", "--stdio",
             "--user", user], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ, **(env or {})))
        first = self.read()
        self.hello, self.refused = first["hello"], first.get("error")
        self.n = 0

    def send(self, msg):
        self.p.stdin.write(protocol.encode(msg))
        self.p.stdin.flush()

    def read(self):
        line = self.p.stdout.readline()
        assert line, self.p.stderr.read().decode()
        return json.loads(line)

    def call(self, method, *args, **kwargs):
        self.n += 1
        self.send({"id": self.n, "method": method, "args": codec.encode(list(args)),
                   "kwargs": codec.encode(kwargs)})
        r = self.read()
        assert r["id"] == self.n
        if "error" in r:
            raise codec.decode_error(r["error"])
        return codec.decode(r["result"])

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(20) == 0


def test_the_served_api_calls_errors_batches_and_streams(tmp_path):
    s = Served(tmp_path / "home", env={"SSH_CONNECTION": "192.0.2.9 51000 192.0.2.1 22"})
    try:
        assert (s.hello["user"], s.hello["role"], s.hello["origin"], s.hello["protocol"]) == \
            ("admin", "admin", "192.0.2.9", 1)
        assert s.call("add_host", "me", local=True)["name"] == "me"
        assert [h["name"] for h in s.call("host_list")] == ["me"]
        # an error comes back as the same class with the same message and status
        with pytest.raises(NotFound) as e:
            s.call("policy", "nope")
        assert e.value.message == "there is no policy named 'nope'" and e.value.status == 10
        # the master's own parts and private names are refused, plainly
        for name in ("db", "config", "dispatcher", "_connect", "open_index"):
            with pytest.raises(ValidationError) as e:
                s.call(name)
            assert name in e.value.message
        # a batch: one round trip, each call its result or its error
        s.send({"id": 100, "batch": [{"method": "host_list"},
                                     {"method": "policy", "args": ["nope"]},
                                     {"method": "settings"}]})
        r = s.read()
        assert r["id"] == 100
        hosts, err, settings = r["result"]
        assert codec.decode(hosts["result"])[0]["name"] == "me"
        assert codec.decode_error(err["error"]).__class__ is NotFound
        assert "backup_tries" in codec.decode(settings["result"])
        settings_tries = codec.decode(settings["result"])["backup_tries"]["value"]
        # a stream: the change feed pushes its first event at once, and ends when canceled;
        # while it is open, other requests are answered
        s.send({"id": 200, "subscribe": "job_changes", "kwargs": {"interval": 0.05}})
        first = s.read()
        assert first["id"] == 200 and first["event"]["jobs"] == []
        assert "throughput" not in first["event"]
        assert s.call("host_list")[0]["name"] == "me"
        # what the activity monitor shows beside its table comes with each event, and a
        # heartbeat keeps the plot moving with nothing changing
        s.send({"id": 201, "subscribe": "job_changes", "kwargs": {
            "interval": 0.05, "throughput": 60, "heartbeat": 0.2, "settings": ["backup_tries"]}})
        beats = [s.read(), s.read()]
        for beat in beats:
            assert beat["id"] == 201 and beat["event"]["jobs"] == []
            assert len(codec.decode(beat["event"]["throughput"])) >= 50
            assert beat["event"]["settings"] == {"backup_tries": settings_tries}
        s.send({"cancel": 201})
        while "result" not in s.read():
            pass
        s.send({"cancel": 200})
        end = s.read()
        assert end["id"] == 200 and "result" in end
        # a line that is no request gets an error, and the server goes on
        s.p.stdin.write(b"{not json\n")
        s.p.stdin.flush()
        assert s.read()["error"]["type"] == "ValidationError"
        assert s.call("host_list")[0]["name"] == "me"
    finally:
        s.close()


def test_jobs_queued_through_the_served_master_run_without_a_dispatcher_of_its_own(tmp_path):
    """A console on a remote master runs no dispatcher: a backup it queues runs in a
    headless one that the served master starts, as a local command starts one."""
    import time
    from app.master import Master
    src, vol, home = tmp_path / "src", tmp_path / "vol", tmp_path / "home"
    src.mkdir()
    vol.mkdir()
    (src / "f.txt").write_text("queued from afar\n")
    m = Master(str(home))
    try:
        m.config.add_host("me", local=True)
        m.config.add_storage_server("ss", type="advanced-disk", host="me")
        m.create_disk_pool("dp", server="ss", volumes=[str(vol)])
        m.config.add_storage_unit("stu", pool="dp")
        m.config.add_policy("p", storage_unit="stu")
        m.config.add_policy_client("p", "me")
        m.config.add_policy_selection("p", str(src))
    finally:
        m.close()
    s = Served(home)
    try:
        [job_id] = s.call("start_backup", "p")
        deadline = time.monotonic() + 60
        while s.call("job", job_id)["state"] != "done" and time.monotonic() < deadline:
            time.sleep(0.2)
        job = s.call("job", job_id)
        assert (job["state"], job["status"]) == ("done", 0)
        # it ran in another process: the served master holds no lease of its own
        assert job["runner"] and str(s.p.pid) not in job["runner"].split(":")
        # its log as a stream: the entries pushed, then the job once it ended
        s.send({"id": 300, "subscribe": "job_log", "kwargs": {"job_id": job_id}})
        entries, end = [], None
        while end is None:
            msg = s.read()
            assert msg["id"] == 300
            if "event" in msg:
                entries += codec.decode(msg["event"])
            else:
                end = codec.decode(msg["result"])
        assert entries == s.call("job_logs", job_id) and end["state"] == "done"
    finally:
        s.close()


def test_a_batch_on_the_embedded_master_as_over_the_wire(tmp_path):
    from app.master import Master
    m = Master(str(tmp_path / "home"))
    try:
        m.add_host("me", local=True)
        hosts, images, jobs = m.batch([("host_list",), ("images", ("me",)),
                                     ("job_list", (), {"state": "queued"})])
        assert hosts[0]["name"] == "me" and images == [] and jobs == []
        with pytest.raises(NotFound):
            m.batch([("host_list",), ("policy", ("nope",))])
        ok, err = m.batch([("host_list",), ("policy", ("nope",))], return_exceptions=True)
        assert ok[0]["name"] == "me" and isinstance(err, NotFound)
    finally:
        m.close()


def test_the_served_master_acts_for_its_user_only(tmp_path):
    """Over the wire as anywhere, the master checks each call against its user's role, one by
    one in a batch too, and an unknown user gets nothing but the refusal."""
    from app.errors import PermissionDenied
    from app.master import Master
    home = tmp_path / "home"
    key = tmp_path / "vic_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    # what sshd with ExposeAuthInfo tells the command of the key the client logged in with
    auth = tmp_path / "auth_info"
    auth.write_text("publickey " + " ".join(public.split()[:2]) + "\n")
    m = Master(str(home))
    try:
        m.add_host("me", local=True)
        m.add_user("vic", "viewer", keys=[public])
    finally:
        m.close()
    s = Served(home, user="vic", env={"SSH_CONNECTION": "192.0.2.7 4000 192.0.2.1 22",
                                      "SSH_USER_AUTH": str(auth)})
    try:
        assert (s.hello["user"], s.hello["role"]) == ("vic", "viewer")
        tries = s.call("setting", "backup_tries")
        assert s.call("host_list")[0]["name"] == "me"
        with pytest.raises(PermissionDenied) as e:
            s.call("add_host", "other", local=True)
        assert (e.value.user, e.value.role, e.value.action) == ("vic", "viewer", "add_host")
        s.send({"id": 50, "batch": [{"method": "host_list"},
                                    {"method": "set_setting", "args": ["backup_tries", "5"]}]})
        ok, refused = s.read()["result"]
        assert "result" in ok and refused["error"]["type"] == "PermissionDenied"
        assert s.call("setting", "backup_tries") == tries
    finally:
        s.close()
    for user, said in (("mallory", "mallory"), ("admin", "belongs to user vic")):
        bad = Served(home, user=user, env={"SSH_USER_AUTH": str(auth)})
        assert bad.hello is None and bad.refused["type"] == "PermissionDenied"
        assert said in bad.refused["message"]
        assert bad.p.wait(20) != 0
    m = Master(str(home))
    try:
        log = m.audit_entries()
        assert any(e["action"] == "add_host" and e["outcome"] == "refused" and
                   e["origin"] == "192.0.2.7" for e in log)
        [login] = [e for e in log if e["action"] == "login" and e["outcome"] == "ok"]
        assert login["user"] == "vic" and login["details"]["key"].startswith("SHA256:")
    finally:
        m.close()


def test_values_keep_their_kind_on_the_wire():
    from app.catalog_index.reader import Entry
    e = Entry("/a", "a", "f", 0o644, 0, 0, 3, 5, 0, 3, "x", "")
    value = {"users": {0: "root", 1000: "ann"}, "raw": b"\x00\xff", "points": [(1.0, 2.5)],
             "entries": [e, e], "name": "caf\udce9", "$c": "a key of its own", "s": {1, 2}}
    back = codec.decode(json.loads(json.dumps(codec.encode(value))))
    assert back == value
    assert type(back["entries"][0]) is Entry and back["entries"][0].to_dict()["name"] == "a"


# ---- over SSH ---------------------------------------------------------------------------------

@pytest.fixture
def remote(sshd, tmp_path):
    """`cairn --master ...` run as a desktop would (its own CAIRN_HOME: its known_hosts),
    the master served from another home through the loopback sshd."""
    master_home, desktop = tmp_path / "master", tmp_path / "desktop"
    serve = (f"cd {ROOT} && exec {sys.executable} -m app master serve --stdio "
             f"--home {master_home} --user admin")

    def run(*args, trust=False, json_doc=False, check=True, home=desktop, command=serve):
        opts = ["--master", f"{sshd.user}@{sshd.host}:{sshd.port}", "--identity",
                sshd.key_file, "--master-command", command] + (["--trust-master-key"]
                                                               if trust else [])
        p = cairn(home, *opts, *args, *(["--json"] if json_doc else []), check=check,
                  timeout=120)
        return (json.loads(p.stdout), p) if json_doc else p
    run.master_home, run.desktop = master_home, desktop
    return run


def test_a_first_day_story_against_a_master_over_ssh(remote, sshd, tmp_path):
    src, vol, new = tmp_path / "src", tmp_path / "vol", tmp_path / "new"
    (src / "sub").mkdir(parents=True)
    vol.mkdir()
    (src / "a.txt").write_text("first day\n")
    (src / "sub" / "b.bin").write_bytes(os.urandom(100_000))
    # the master's key is unknown to the desktop: refused, with its fingerprint
    p = remote("host", "list", check=False)
    assert p.returncode == st.HOST_KEY_UNKNOWN
    assert sshd.host_key_fingerprint in p.stderr and "--trust-master-key" in p.stderr
    # trusted once with --trust-master-key: recorded in the desktop's known_hosts
    remote("host", "add", "me", "--local", trust=True)
    assert sshd.host_public_key_line in (remote.desktop / "known_hosts").read_text()
    remote("storage-server", "create", "ss", "--type", "advanced-disk", "--host", "me",
           "--path", vol)
    remote("disk-pool", "create", "dp", "--server", "ss", "--volume", vol)
    remote("storage-unit", "create", "stu", "--pool", "dp")
    remote("policy", "create", "p", "--storage-unit", "stu")
    remote("policy", "add-client", "p", "me")
    remote("policy", "add-selection", "p", src)
    doc, _ = remote("backup", "p", "--wait", json_doc=True)
    assert doc["status"] == 0 and doc["jobs"][0]["state"] == "done"
    # waiting with progress: the master pushes the job as it changes, the end last
    p = remote("backup", "p", "--wait", "--progress", "json")
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert lines[-1]["status"] == 0 and lines[-2]["event"] == "end"
    doc, _ = remote("images", "list", "--policy", "p", json_doc=True)
    img = doc["images"][-1]
    assert len(doc["images"]) == 2
    assert img["files"] >= 2
    doc, _ = remote("browse", img["id"], str(src), json_doc=True)
    assert sorted(e["name"] for e in doc["entries"]) == ["a.txt", "sub"]
    doc, _ = remote("restore", img["id"], "--path", src, "--to", new, "--wait", json_doc=True)
    assert doc["status"] == 0
    restored = new / str(src).lstrip("/")
    assert filecmp.cmp(src / "sub" / "b.bin", restored / "sub" / "b.bin", shallow=False)
    assert (restored / "a.txt").read_text() == "first day\n"
    # the desktop's own home holds no catalog: everything happened on the master
    assert not (remote.desktop / "catalog.db").exists()
    assert (remote.master_home / "catalog.db").exists()
    # commands that need the master's machine are refused plainly
    p = remote("master", "run", check=False)
    assert p.returncode == st.INVALID_REQUEST and "over SSH" in p.stderr
    # a machine where the master cannot be started says so, with what the command said
    p = remote("jobs", "list", check=False, command="echo no cairn here >&2; exit 127")
    assert p.returncode == st.HOST_UNREACHABLE
    assert "the master did not start" in p.stderr and "no cairn here" in p.stderr


def test_a_changed_master_key_is_refused(remote, sshd, tmp_path):
    desktop = tmp_path / "desktop2"
    desktop.mkdir()
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True)
    fake = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    (desktop / "known_hosts").write_text(f"[{sshd.host}]:{sshd.port} {fake}\n")
    for trust in (False, True):
        p = remote("jobs", "list", trust=trust, check=False, home=desktop)
        assert p.returncode == st.HOST_KEY_CHANGED, p.stderr
        assert "CHANGED" in p.stderr and sshd.host_key_fingerprint in p.stderr
    assert not remote.master_home.exists()   # nothing ran on the master
