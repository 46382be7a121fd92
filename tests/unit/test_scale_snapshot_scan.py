"""The Storage Scale provider's locate(), snapshots and policy-engine scans, against the test
double of the mm commands (tests/scale_double) serving file systems whose mount points are
real directories here, and its list-file parser on literal lines."""

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from plugins.filesystems import storage_scale as ss
from plugins.filesystems.storage_scale.cluster import _snapshots

DOUBLE_BIN = Path(__file__).resolve().parent.parent / "scale_double" / "bin"


class Cluster:
    """A cluster described to the double: fs1 (with filesets projects, projects/deep and an
    unlinked one), fs10 beside it, and inner mounted inside fs1, all under root/gpfs."""

    def __init__(self, root):
        self.root = root
        self.spec_file = root / "cluster.json"
        self.log = root / "calls.jsonl"
        self.fs1 = root / "gpfs" / "fs1"
        self.fs10 = root / "gpfs" / "fs10"
        self.inner = self.fs1 / "mnt" / "inner"
        for d in (self.fs1 / "projects" / "deep", self.fs10, self.inner):
            d.mkdir(parents=True)

    def spec(self):
        return {
            "cluster": {"name": "hpc.example.com", "id": "42"},
            "log": str(self.log),
            "nodes": [{"number": 1, "name": "gpfs-1.example.com", "ip": "10.0.0.1",
                       "designation": "quorumManager"}],
            "filesystems": [
                {"device": "fs1", "mount_point": str(self.fs1), "mounted_on": ["gpfs-1"],
                 "filesets": [
                     {"name": "root", "id": 0, "path": str(self.fs1)},
                     {"name": "projects", "id": 1, "path": str(self.fs1 / "projects"),
                      "independent": True},
                     {"name": "deep", "id": 2, "path": str(self.fs1 / "projects" / "deep"),
                      "parent_id": 1},
                     {"name": "old", "id": 3, "path": None}]},
                {"device": "fs10", "mount_point": str(self.fs10), "mounted_on": ["gpfs-1"],
                 "filesets": [{"name": "root", "id": 0, "path": str(self.fs10)}]},
                {"device": "inner", "mount_point": str(self.inner), "mounted_on": ["gpfs-1"],
                 "filesets": [{"name": "root", "id": 0, "path": str(self.inner)}]},
            ]}

    def write(self, spec):
        self.spec_file.write_text(json.dumps(spec))

    def amend(self, **changes):
        """Change the description as it is now (snapshots taken so far included)."""
        spec = json.loads(self.spec_file.read_text())
        spec.update(changes)
        self.write(spec)
        return spec

    def fs(self, device):
        spec = json.loads(self.spec_file.read_text())
        return next(f for f in spec["filesystems"] if f["device"] == device)

    def calls(self, cmd=None):
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r["args"] for r in rows if cmd is None or r["cmd"] == cmd]


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    c = Cluster(tmp_path)
    c.write(c.spec())
    monkeypatch.setenv(ss.ENV_BIN, str(DOUBLE_BIN))
    monkeypatch.setenv("CAIRN_SCALE_DOUBLE", str(c.spec_file))
    monkeypatch.delenv(ss.ENV_SUDO, raising=False)
    return c


def snapshots(device="fs1"):
    """{(name, fileset): snapshot} as mmlssnapshot lists them, read as cluster_info reads
    them (the whole of cluster_info runs a dozen commands)."""
    out = ss.run("mmlssnapshot", device, "-Y")
    return {(s["name"], s["fileset"]): s for s in _snapshots(out)}


# ---- locate ---------------------------------------------------------------------------------

def test_the_file_system_is_the_one_with_the_longest_mount_point(cluster):
    loc = ss.locate(str(cluster.fs1 / "a" / "b.txt"))
    assert loc["device"] == "fs1" and loc["mount_point"] == str(cluster.fs1)
    assert loc["fileset"] == {"name": "root", "path": str(cluster.fs1), "independent": True}
    assert ss.locate(str(cluster.fs1))["device"] == "fs1"
    # /gpfs/fs10 is not below /gpfs/fs1
    assert ss.locate(str(cluster.fs10 / "x"))["device"] == "fs10"
    assert ss.locate(str(cluster.fs1 / "mnt" / "inner" / "y"))["device"] == "inner"
    assert ss.locate(str(cluster.fs1 / "mnt" / "innerly"))["device"] == "fs1"
    assert ss.locate(f"{cluster.fs1}/../fs10/z")["device"] == "fs10"
    assert ss.locate(str(cluster.root / "gpfs")) is None
    assert ss.locate(str(cluster.root / "gpfs" / "fs1x")) is None
    assert ss.locate("/") is None


def test_the_fileset_is_the_linked_one_with_the_deepest_junction(cluster):
    def fileset(*parts):
        return ss.locate(str(cluster.fs1.joinpath(*parts)))["fileset"]

    assert fileset("projects", "f") == {"name": "projects", "independent": True,
                                         "path": str(cluster.fs1 / "projects")}
    assert fileset("projects")["name"] == "projects"
    assert fileset("projects", "deep", "g") == {
        "name": "deep", "independent": False, "path": str(cluster.fs1 / "projects" / "deep")}
    assert fileset("projectsX", "h")["name"] == "root"
    assert fileset("old", "i")["name"] == "root"  # "old" is unlinked: no junction


def test_the_kernel_mount_table_says_where_a_file_system_really_is(cluster, tmp_path):
    moved = tmp_path / "mnt" / "fs1 moved"
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "sysfs /sys sysfs rw,nosuid 0 0\n"
        f"/dev/fs1 {str(moved).replace(' ', chr(92) + '040')} gpfs rw,relatime 0 0\n"
        f"fs10 {tmp_path / 'elsewhere'} ext4 rw 0 0\n")
    loc = ss.locate(str(moved / "projects" / "x"), mounts_file=str(mounts))
    assert loc["device"] == "fs1" and loc["mount_point"] == str(moved)
    # mmlsfileset names the junction under the default mount point; it moves along.
    assert loc["fileset"]["path"] == str(moved / "projects")
    assert ss.locate(str(cluster.fs1 / "a"), mounts_file=str(mounts)) is None
    # Other file systems stay at their default mount points (fs10's ext4 line is not gpfs).
    assert ss.locate(str(cluster.fs10 / "b"), mounts_file=str(mounts))["device"] == "fs10"


def test_locate_needs_an_absolute_path_and_storage_scale(cluster, tmp_path, monkeypatch):
    with pytest.raises(ss.InvalidArgument) as e:
        ss.locate("gpfs/fs1")
    assert isinstance(e.value, ValueError) and "absolute" in e.value.message
    assert cluster.calls() == []
    monkeypatch.setenv(ss.ENV_BIN, str(tmp_path))
    assert ss.locate(str(cluster.fs1)) is None


# ---- snapshots ------------------------------------------------------------------------------

def test_a_snapshot_shows_the_tree_as_it_was(cluster):
    (cluster.fs1 / "a.txt").write_text("before")
    (cluster.fs1 / "projects" / "p.txt").write_text("project")
    before = time.time()
    snap = ss.create_snapshot("fs1", "daily 1")
    after = time.time()
    assert snap["name"] == "daily 1" and snap["device"] == "fs1" and snap["fileset"] is None
    assert before <= snap["created"] <= after
    path = Path(snap["path"])
    assert path == cluster.fs1 / ".snapshots" / "daily 1"
    (cluster.fs1 / "a.txt").write_text("after, and longer")
    assert (path / "a.txt").read_text() == "before"
    assert (path / "projects" / "p.txt").read_text() == "project"
    assert cluster.calls("mmcrsnapshot") == [["fs1", "daily 1"]]

    fs1 = next(f for f in ss.cluster_info()["filesystems"] if f["device"] == "fs1")
    assert [(s["name"], s["fileset"], s["status"], s["id"]) for s in fs1["snapshots"]] == [
        ("daily 1", None, "Valid", 1)]
    # A later snapshot holds no copy of the earlier one.
    second = Path(ss.create_snapshot("fs1", "daily 2")["path"])
    assert not (second / ".snapshots").exists()
    assert (second / "a.txt").read_text() == "after, and longer"
    assert snapshots()[("daily 2", None)]["id"] == 2


def test_a_fileset_snapshot_appears_at_the_fileset_junction(cluster):
    (cluster.fs1 / "top.txt").write_text("not in the fileset")
    (cluster.fs1 / "projects" / "p.txt").write_text("project")
    snap = ss.create_snapshot("fs1", "p1", fileset="projects")
    assert snap["fileset"] == "projects"
    path = Path(snap["path"])
    assert path == cluster.fs1 / "projects" / ".snapshots" / "p1"
    assert (path / "p.txt").read_text() == "project"
    assert not (path / "top.txt").exists()
    assert cluster.calls("mmcrsnapshot") == [["fs1", "projects:p1"]]
    assert snapshots()[("p1", "projects")]["status"] == "Valid"


def test_deleting_a_snapshot_and_one_that_is_not_there(cluster):
    path = Path(ss.create_snapshot("fs1", "s1")["path"])
    ss.create_snapshot("fs1", "p1", fileset="projects")
    assert ss.delete_snapshot("fs1", "s1") is True
    assert not path.exists()
    assert set(snapshots()) == {("p1", "projects")}
    assert ss.delete_snapshot("fs1", "s1") is False
    assert ss.delete_snapshot("fs1", "s1", fileset="projects") is False
    assert ss.delete_snapshot("fs1", "p1", fileset="projects") is True
    assert snapshots() == {}
    # Each missing one was asked once: "not there" is no reason to try again.
    assert cluster.calls("mmdelsnapshot") == [
        ["fs1", "s1"], ["fs1", "s1"], ["fs1", "projects:s1"], ["fs1", "projects:p1"]]


def test_an_interrupted_delete_is_finished_by_deleting_again(cluster):
    path = Path(ss.create_snapshot("fs1", "s1")["path"])
    cluster.amend(failure="failed", failing=["mmdelsnapshot"], fail_count=1)
    assert ss.delete_snapshot("fs1", "s1") is True
    assert cluster.calls("mmdelsnapshot") == [["fs1", "s1"], ["fs1", "s1"]]
    assert not path.exists()
    assert snapshots() == {}


def test_a_delete_that_keeps_failing_is_an_error_and_leaves_the_snapshot_to_delete(cluster):
    ss.create_snapshot("fs1", "s1")
    cluster.amend(failure="failed", failing=["mmdelsnapshot"])
    with pytest.raises(ss.CommandFailed) as e:
        ss.delete_snapshot("fs1", "s1")
    assert "tried twice" in e.value.message
    assert "mmlssnapshot fs1" in e.value.hint
    assert len(cluster.calls("mmdelsnapshot")) == 2
    assert snapshots()[("s1", None)]["status"] == "DeleteRequired"
    cluster.amend(failure=None)
    assert ss.delete_snapshot("fs1", "s1") is True
    assert snapshots() == {}


def test_a_snapshot_name_taken_already_fails(cluster):
    ss.create_snapshot("fs1", "s1")
    with pytest.raises(ss.CommandFailed) as e:
        ss.create_snapshot("fs1", "s1")
    assert "already exists" in e.value.message and e.value.command == "mmcrsnapshot"
    assert [s["id"] for s in snapshots().values()] == [1]


def test_a_snapshot_whose_directory_is_elsewhere_is_an_error_and_is_deleted_again(cluster):
    spec = cluster.amend()
    spec["filesystems"][0]["snapdir"] = ".snaps"  # as after `mmsnapdir fs1 -s .snaps`
    cluster.write(spec)
    with pytest.raises(ss.CommandFailed) as e:
        ss.create_snapshot("fs1", "s1")
    assert str(cluster.fs1 / ".snapshots" / "s1") in e.value.message
    assert "deleted again" in e.value.message
    assert "mmsnapdir fs1 -q" in e.value.hint
    assert cluster.calls("mmdelsnapshot") == [["fs1", "s1"]]
    assert snapshots() == {}


def test_snapshots_of_filesets_that_cannot_have_them_are_refused_first(cluster):
    for fileset, said in (("deep", "dependent fileset"), ("old", "not linked"),
                          ("nope", "does not exist")):
        with pytest.raises(ss.ScaleError) as e:
            ss.create_snapshot("fs1", "s1", fileset=fileset)
        assert said in e.value.message and e.value.hint
    with pytest.raises(ss.ScaleError) as e:
        ss.create_snapshot("nofs", "s1")
    assert "nofs is not known" in e.value.message and "fs1" in e.value.hint
    assert cluster.calls("mmcrsnapshot") == []


@pytest.mark.parametrize("name", ["", "a/b", "fset:snap", "a,b", "..", "line\nbreak"])
def test_snapshot_names_the_commands_would_misread_are_refused(cluster, name):
    with pytest.raises(ss.InvalidArgument):
        ss.create_snapshot("fs1", name)
    with pytest.raises(ss.InvalidArgument):
        ss.delete_snapshot("fs1", name)
    assert cluster.calls() == []


def test_concurrent_snapshot_commands_keep_every_record(cluster):
    env = dict(os.environ)
    procs = [subprocess.Popen([str(DOUBLE_BIN / "mmcrsnapshot"), "fs1", f"s{i}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i in range(4)]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
        p.stderr.close()
    listed = snapshots()
    assert sorted(name for name, _ in listed) == ["s0", "s1", "s2", "s3"]
    assert sorted(s["id"] for s in listed.values()) == [1, 2, 3, 4]
    assert len(cluster.calls("mmcrsnapshot")) == 4


# ---- policy-engine scans --------------------------------------------------------------------

ODD = [b"plain", b"with space", b"line\nbreak", b"100%", b"a -- b", b"caf\xe9", b"x%41y"]


def make_tree(top):
    """A tree with odd names, hard links, a symbolic link and a subdirectory; returns the
    file linked from outside `top`."""
    top = os.fsencode(top)
    os.makedirs(os.path.join(top, b"sub", b"deeper"))
    for i, name in enumerate(ODD):
        with open(os.path.join(top, name), "wb") as f:
            f.write(b"x" * i)
    with open(os.path.join(top, b"h1"), "wb") as f:
        f.write(b"linked")
    os.link(os.path.join(top, b"h1"), os.path.join(top, b"sub", b"h2"))
    os.symlink(b"plain", os.path.join(top, b"ln"))
    os.mkfifo(os.path.join(top, b"sub", b"fifo"), 0o640)
    with open(os.path.join(top, b"sub", b"deeper", b"leaf"), "wb") as f:
        f.write(b"leaf")
    outside = os.path.join(os.path.dirname(top), b"outside-link")
    os.link(os.path.join(top, b"plain"), outside)
    return outside


def every_path(top):
    top = os.fsencode(top)
    out = {top}
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if x != b".snapshots"]
        out.update(os.path.join(d, n) for n in dirs + files)
    return out


def test_a_scan_lists_every_entry_with_its_kind_owner_size_times_and_links(cluster, tmp_path):
    data = cluster.fs1 / "data"
    make_tree(data)
    work = tmp_path / "work"
    work.mkdir()
    result = ss.policy_scan(str(data), workdir=str(work))
    got = dict(result)
    assert result.skipped == 0 and result.entries_read == len(got)
    assert set(got) == every_path(data)
    for path, st in got.items():
        real = os.lstat(path)
        assert st.st_mode == real.st_mode, path
        assert (st.st_ino, st.st_uid, st.st_gid) == (real.st_ino, real.st_uid, real.st_gid)
        assert st.st_size == real.st_size, path
        # The policy engine gives microseconds.
        assert st.st_mtime_ns == real.st_mtime_ns // 1000 * 1000, path
        assert st.st_ctime_ns == real.st_ctime_ns // 1000 * 1000, path
    top = os.fsencode(data)
    links = {os.path.relpath(p, top): st.st_nlink for p, st in got.items()}
    assert links[b"h1"] == links[os.path.join(b"sub", b"h2")] == 2
    # Linked from outside the scanned tree: one path here.
    assert os.lstat(os.path.join(top, b"plain")).st_nlink == 2 and links[b"plain"] == 1
    assert links[b"sub"] == links[b"."] == 1
    assert stat.S_ISLNK(got[os.path.join(top, b"ln")].st_mode)
    assert got[os.path.join(top, b"sub", b"fifo")].st_mode == stat.S_IFIFO | 0o640
    assert stat.S_ISDIR(got[os.path.join(top, b"sub", b"deeper")].st_mode)
    assert os.listdir(work) == []  # its files are gone once read

    args = cluster.calls("mmapplypolicy")[0]
    assert args[0] == str(data) and "-Y" not in args
    assert args[args.index("-I") + 1] == "defer"
    scan_dir = args[args.index("-s") + 1]
    assert os.path.dirname(scan_dir) == str(work)
    assert args[args.index("-f") + 1] == os.path.join(scan_dir, "cairn")
    assert "-S" not in args


def test_a_scan_of_a_subdirectory_lists_that_subtree_only(cluster, tmp_path):
    make_tree(cluster.fs1 / "data")
    sub = cluster.fs1 / "data" / "sub"
    got = dict(ss.policy_scan(str(sub), workdir=str(tmp_path)))
    assert set(got) == every_path(sub)
    assert got[os.fsencode(sub / "h2")].st_nlink == 1  # h1 is outside the subtree


def test_a_scan_leaves_the_snapshots_out(cluster, tmp_path):
    make_tree(cluster.fs1 / "data")
    ss.create_snapshot("fs1", "s1")
    ss.create_snapshot("fs1", "p1", fileset="projects")
    got = dict(ss.policy_scan(str(cluster.fs1), workdir=str(tmp_path)))
    assert not [p for p in got if b"/.snapshots" in p]
    assert os.fsencode(cluster.fs1 / "data" / "sub" / "h2") in got


def test_a_scan_of_a_snapshot_sees_the_tree_as_it_was(cluster, tmp_path):
    data = cluster.fs1 / "data"
    make_tree(data)
    before = {os.path.relpath(p, os.fsencode(data)): os.lstat(p).st_size
              for p in every_path(data)}
    ss.create_snapshot("fs1", "s1")
    with open(data / "plain", "ab") as f:
        f.write(b"grown")
    (data / "new file").write_text("new")
    os.unlink(data / "sub" / "deeper" / "leaf")

    result = ss.policy_scan(str(data), workdir=str(tmp_path), snapshot="s1")
    got = dict(result)
    snap_data = os.fsencode(cluster.fs1 / ".snapshots" / "s1" / "data")
    # The double names the snapshot's directory; see tests/scale_double/README.md.
    assert all(p == snap_data or p.startswith(snap_data + b"/") for p in got)
    assert {os.path.relpath(p, snap_data): st.st_size for p, st in got.items()} == before
    assert got[snap_data + b"/h1"].st_nlink == 2  # hard links survive in the snapshot
    assert stat.S_ISFIFO(got[snap_data + b"/sub/fifo"].st_mode)
    args = cluster.calls("mmapplypolicy")[0]
    assert args[0] == str(data) and args[args.index("-S") + 1] == "s1"


def test_a_failed_or_hanging_scan_leaves_no_files(cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(ss.CommandFailed) as e:
        ss.policy_scan(str(tmp_path / "not-gpfs"), workdir=str(work))
    assert "not in a GPFS file system" in e.value.message
    with pytest.raises(ss.CommandFailed):
        ss.policy_scan(str(cluster.fs1), workdir=str(work), snapshot="no-such-snapshot")
    assert os.listdir(work) == []
    cluster.amend(failure="hang", failing=["mmapplypolicy"])
    start = time.monotonic()
    with pytest.raises(ss.CommandTimeout):
        ss.policy_scan(str(cluster.fs1), workdir=str(work), timeout=0.5)
    assert time.monotonic() - start < 5
    assert os.listdir(work) == []


def test_an_abandoned_scan_removes_its_files_when_closed(cluster, tmp_path):
    make_tree(cluster.fs1 / "data")
    work = tmp_path / "work"
    work.mkdir()
    with ss.policy_scan(str(cluster.fs1 / "data"), workdir=str(work)) as result:
        path, st = next(result)
        assert path.startswith(os.fsencode(cluster.fs1 / "data"))
        assert os.listdir(work)
    assert os.listdir(work) == []


def test_a_scan_needs_an_absolute_directory_and_a_work_directory(cluster, tmp_path):
    with pytest.raises(ss.InvalidArgument):
        ss.policy_scan("data", workdir=str(tmp_path))
    with pytest.raises(ss.InvalidArgument) as e:
        ss.policy_scan(str(cluster.fs1), workdir=str(tmp_path / "missing"))
    assert "does not exist" in e.value.message
    assert cluster.calls() == []


def test_the_rules_escape_names_and_show_what_the_parser_reads():
    rules = ss.SCAN_RULES
    assert "RULE EXTERNAL LIST 'cairn' EXEC '' ESCAPE '%/'" in rules
    assert "DIRECTORIES_PLUS" in rules and "WHERE PATH_NAME NOT LIKE '%/.snapshots/%'" in rules
    shown = [rules.index(f"VARCHAR({f})") for f in ss.SHOW_FIELDS]
    assert shown == sorted(shown)


# ---- the list-file parser on literal lines --------------------------------------------------

@pytest.fixture
def utc():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


# 2024-01-10 09:10:11 UTC
T0 = 1704877811


LIST = (
    # ESCAPE '%/': SHOW and path percent-encoded; two spaces before SHOW as the engine writes.
    b"12 0 0  -rw-r--r--%201%201000%20100%205%202024-01-10%2009%3A10%3A11.123456"
    b"%202024-01-10%2009%3A10%3A12.5 -- /gpfs/fs1/a%20--%20b%0Ac%FF\n"
    # Without ESCAPE (another tool's rules): SHOW as is, one space; the first ' -- ' splits.
    b"13 7 0 drwxr-sr-x 3 0 0 4096 2024-01-10 09:10:11 2024-01-10 09:10:11"
    b" -- /gpfs/fs1/dir with space -- x\n"
    b"14 0 0  -rw-r--r--%203%200%200%206%202024-01-10%2009%3A10%3A11.000001"
    b"%202024-01-10%2009%3A10%3A11 -- /gpfs/fs1/h1\n"
    b"\n"
    b"14 0 0  -rw-r--r--%203%200%200%206%202024-01-10%2009%3A10%3A11.000001"
    b"%202024-01-10%2009%3A10%3A11 -- /gpfs/fs1/sub/h2\n"
    b"15 0 0  -rwsr-S--T%201%200%200%200%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- /gpfs/fs1/special\n"
    b"16 0 0  lrwxrwxrwx%201%200%200%201%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- /gpfs/fs1/ln\n"
    # Not understood: no separator, an unknown file type, a bad date, a relative path, a
    # SHOW value short, a line of another shape altogether.
    b"17 0 0  -rw-r--r--%201%200%200%200%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" /gpfs/fs1/no-separator\n"
    b"18 0 0  ?rw-r--r--%201%200%200%200%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- /gpfs/fs1/unknown-type\n"
    b"19 0 0  -rw-r--r--%201%200%200%200%202024-13-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- /gpfs/fs1/bad-date\n"
    b"20 0 0  -rw-r--r--%201%200%200%200%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- relative\n"
    b"21 0 0  -rw-r--r--%201%200%200%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- /gpfs/fs1/short\n"
    b"[I] Policy execution. 0 files dispatched.\n"
    # The last line without its line break.
    b"22 0 0  prw-r-----%201%200%200%200%202024-01-10%2009%3A10%3A11%202024-01-10%2009%3A10%3A11"
    b" -- /gpfs/fs1/fifo"
)


def test_the_parser_reads_literal_list_lines(tmp_path, utc):
    list_file = tmp_path / "cairn.list.cairn"
    list_file.write_bytes(LIST)
    result = ss.read_policy_list(str(list_file))
    got = list(result)
    assert result.skipped == 6
    assert list_file.exists()  # an existing list is left in place
    by_path = dict(got)
    assert [p for p, _ in got] == [
        b"/gpfs/fs1/a -- b\nc\xff", b"/gpfs/fs1/dir with space -- x", b"/gpfs/fs1/h1",
        b"/gpfs/fs1/sub/h2", b"/gpfs/fs1/special", b"/gpfs/fs1/ln", b"/gpfs/fs1/fifo"]

    a = by_path[b"/gpfs/fs1/a -- b\nc\xff"]
    assert a == ss.ScanStat(st_mode=stat.S_IFREG | 0o644, st_ino=12, st_uid=1000, st_gid=100,
                            st_size=5, st_mtime_ns=T0 * 10**9 + 123456000,
                            st_ctime_ns=(T0 + 1) * 10**9 + 500000000, st_nlink=1)
    d = by_path[b"/gpfs/fs1/dir with space -- x"]
    assert d.st_mode == stat.S_IFDIR | stat.S_ISGID | 0o755
    assert d.st_nlink == 1 and d.st_mtime_ns == T0 * 10**9
    # NLINK says 3; two of its paths are in this list.
    assert by_path[b"/gpfs/fs1/h1"].st_nlink == by_path[b"/gpfs/fs1/sub/h2"].st_nlink == 2
    assert by_path[b"/gpfs/fs1/h1"].st_mtime_ns == T0 * 10**9 + 1000
    assert by_path[b"/gpfs/fs1/special"].st_mode == (
        stat.S_IFREG | stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o740)
    assert stat.S_ISLNK(by_path[b"/gpfs/fs1/ln"].st_mode)
    assert by_path[b"/gpfs/fs1/fifo"].st_mode == stat.S_IFIFO | 0o640


def test_an_empty_or_missing_list_has_no_entries(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert list(ss.read_policy_list(str(empty))) == []
    missing = ss.read_policy_list(str(tmp_path / "missing"))
    assert list(missing) == [] and missing.skipped == 0


@pytest.mark.parametrize("text,mode", [
    ("drwxr-xr-x", stat.S_IFDIR | 0o755),
    ("-rw-------", stat.S_IFREG | 0o600),
    ("-rwxr-xr-x+", stat.S_IFREG | 0o755),  # an ACL mark after the bits
    ("-rws--x--x", stat.S_IFREG | stat.S_ISUID | 0o711),
    ("-rwSr--r--", stat.S_IFREG | stat.S_ISUID | 0o644),
    ("-rwxr-s---", stat.S_IFREG | stat.S_ISGID | 0o750),
    ("drwxrwxrwt", stat.S_IFDIR | stat.S_ISVTX | 0o777),
    ("drwxrwxrwT", stat.S_IFDIR | stat.S_ISVTX | 0o776),
    ("lrwxrwxrwx", stat.S_IFLNK | 0o777),
    ("crw-rw----", stat.S_IFCHR | 0o660),
    ("brw-r-----", stat.S_IFBLK | 0o640),
    ("prw-r--r--", stat.S_IFIFO | 0o644),
    ("srwxrwxrwx", stat.S_IFSOCK | 0o777),
    ("-rw-r--r", None),
    ("xrw-r--r--", None),
    ("-wr-r--r--", None),
    ("-rwtr--r--", None),
])
def test_modes_as_ls_writes_them(text, mode):
    assert ss.parse_mode(text) == mode
    if mode is not None:
        assert stat.filemode(mode) == text[:10]


def test_times_are_the_hosts_local_time_to_the_microsecond(utc):
    cache = {}
    assert ss.parse_time_ns("2024-01-10 09:10:11.123456", cache) == T0 * 10**9 + 123456000
    assert ss.parse_time_ns("2024-01-10 09:10:12", cache) == (T0 + 1) * 10**9
    assert list(cache) == ["2024-01-10 09:10"]
    assert ss.parse_time_ns("2024-01-10 25:10:12") is None
    assert ss.parse_time_ns("10/01/2024 09:10") is None
    os.environ["TZ"] = "CET-1CEST,M3.5.0,M10.5.0/3"  # Central Europe, without tzdata
    time.tzset()
    assert ss.parse_time_ns("2024-01-10 10:10:11") == T0 * 10**9  # UTC+1 in winter
    assert ss.parse_time_ns("2024-07-10 11:10:11") == (T0 + 182 * 86400) * 10**9  # UTC+2
