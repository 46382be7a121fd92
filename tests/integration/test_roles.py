"""Users and roles enforced by the master (app/access.py): every role allowed and refused
what it should over the master API, the restore role held to its grants, the master's own
work (a dispatcher's jobs) unchecked, and every refusal and change in the audit log. Real
catalog files, a real backup of a local host."""

import os
import subprocess

import pytest

from app import access, status as st
from app.errors import NotFound, PermissionDenied, ValidationError
from app.master import Master
from app.users import rank


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A home with one backup image of /…/src (alpha/ and beta/ in it) and the users."""
    tmp = tmp_path_factory.mktemp("roles")
    src = tmp / "src"
    for d in ("alpha/deep", "beta"):
        (src / d).mkdir(parents=True)
    (src / "alpha" / "a.txt").write_text("alpha\n")
    (src / "alpha" / "deep" / "d.txt").write_text("deep\n")
    (src / "beta" / "b.txt").write_text("beta\n")
    (tmp / "vol").mkdir()
    (tmp / "out").mkdir()
    home = str(tmp / "home")
    m = Master(home)
    m.add_host("me", local=True)
    m.create_storage_server("ss1", type="advanced-disk", host="me")
    m.create_disk_pool("dp1", server="ss1", volumes=[str(tmp / "vol")])
    m.create_storage_unit("stu1", pool="dp1", max_concurrent_jobs=4)
    m.create_policy("p1", storage_unit="stu1", clients=["me"], selections=[str(src)],
                    schedules=[{"name": "full", "type": "full"}])
    [job] = m.wait_for(m.start_backup("p1"))
    assert job["status"] == st.OK
    m.add_user("olga", "operator")
    m.add_user("vic", "viewer")
    m.add_user("rita", "restore", grants=[f"me:{src}/alpha"],
               dest_grants=[f"me:{tmp}/out"])
    m.add_user("nogrant", "restore")
    image = m.images()[0]["id"]
    m.close()
    return {"home": home, "src": str(src), "tmp": str(tmp), "image": image}


def as_user(site, user, origin="10.1.2.3"):
    return Master(site["home"], user=user, origin=origin)


@pytest.fixture
def open_masters():
    made = []

    def make(site, user, origin="10.1.2.3"):
        m = as_user(site, user, origin)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


def refused(fn, *a, **kw):
    with pytest.raises(PermissionDenied) as e:
        fn(*a, **kw)
    assert e.value.status == st.PERMISSION_DENIED
    return e.value


def last_entry(site, **kw):
    m = Master(site["home"])
    try:
        return m.audit_entries(**kw)[-1]
    finally:
        m.close()


def test_every_public_method_is_classified_once():
    names = access.public_methods(Master)
    assert sorted(names - set(access.METHODS)) == [], "classify these in app/access.py"
    assert sorted(set(access.METHODS) - names) == [], "these are no master methods"
    assert set(access.METHODS.values()) == {"viewer", "restore", "operator", "admin"}
    # each one checked on the class (the one that closes the master excepted)
    unchecked = [n for n in access.METHODS if n not in access.UNCHECKED
                 and not hasattr(getattr(Master, n), "required_role")]
    assert unchecked == []


def test_a_new_method_without_a_class_fails_the_check():
    class Grown(Master):
        def brand_new_call(self):
            return 1
    assert "brand_new_call" in access.public_methods(Grown) - set(access.METHODS)


def test_viewer_reads_and_is_refused_the_rest(site, open_masters):
    m = open_masters(site, "vic")
    assert [p["name"] for p in m.policies()] == ["p1"]
    assert m.job_list() and m.images()
    assert m.whoami()["role"] == "viewer" and "start_backup" not in m.whoami()["can"]
    err = refused(m.start_backup, "p1")
    assert "user vic (role viewer) may not start backup" in err.message
    assert "operator" in err.message
    refused(m.browse, site["image"], "/")
    refused(m.set_setting, "backup_tries", 3)
    refused(m.add_user, "eve", "admin")
    e = last_entry(site)
    assert (e["user"], e["role"], e["origin"], e["action"], e["outcome"]) == \
        ("vic", "viewer", "10.1.2.3", "add_user", "refused")
    assert e["object"] == "user eve" and "may not" in e["details"]["reason"]


def test_operator_runs_jobs_restores_anywhere_and_changes_no_configuration(site, open_masters):
    m = open_masters(site, "olga", origin="192.0.2.7")
    jobs = m.start_backup("p1")
    # the dispatcher runs the job in this process: the master's own calls are not refused
    [job] = m.wait_for(jobs)
    assert job["status"] == st.OK
    e = last_entry(site, user="olga")
    assert (e["action"], e["object"], e["origin"]) == ("start_backup", "policy p1",
                                                        "192.0.2.7")
    assert e["details"]["result"] == {"jobs": jobs}
    out = os.path.join(site["tmp"], "op-out")
    jid = m.start_restore(site["image"], [site["src"] + "/beta"], out)
    [r] = m.wait_for([jid])
    assert r["status"] == st.OK
    e = last_entry(site, user="olga")
    assert e["action"] == "start_restore" and e["details"]["args"]["to"] == out
    assert e["details"]["args"]["paths"] == [site["src"] + "/beta"]
    refused(m.update_object, "policy", "p1", priority=5)
    refused(m.create_policy, "p2", storage_unit="stu1")
    refused(m.users)
    assert m.policy("p1")["priority"] == 0


def test_restore_role_browses_and_restores_only_its_grants(site, open_masters):
    m = open_masters(site, "rita")
    src, img = site["src"], site["image"]
    assert img in [i["id"] for i in m.images()]
    assert [c["client"] for c in m.image_clients()] == ["me"]
    assert m.image_at("me")["client"] == "me"
    # above the grant: only the way down to it is shown
    top = m.browse(img, os.path.dirname(src))
    assert [e["path"] for e in top["entries"]] == [src]
    assert [e["path"] for e in m.browse(img, src)["entries"]] == [src + "/alpha"]
    assert [e.path for e in m.list_entries(img, src)] == [src + "/alpha"]
    inside = m.browse(img, src + "/alpha")
    assert sorted(e["name"] for e in inside["entries"]) == ["a.txt", "deep"]
    found = m.search(img, "*.txt")
    assert sorted(x["name"] for x in found["matches"]) == ["a.txt", "d.txt"]
    refused(m.browse, img, src + "/beta")
    err = refused(m.browse, img, src + "/alpha/../beta")
    assert "'..'" in err.message
    out = os.path.join(site["tmp"], "out", "r1")
    jid = m.start_restore(img, [src + "/alpha/deep"], out)
    [job] = Master(site["home"]).wait_for([jid])
    assert job["status"] == st.OK
    assert os.path.exists(out + src + "/alpha/deep/d.txt")
    # into its granted tree on the client itself
    m.preview_restore(img, [src + "/alpha/a.txt"], src + "/alpha/restored")
    refused(m.start_restore, img, [src + "/beta"], out)
    refused(m.start_restore, img, [src + "/alpha/../beta"], out)
    refused(m.start_restore, img, ["/"], out)
    err = refused(m.start_restore, img, [src + "/alpha"], "/tmp/elsewhere")
    assert "not a granted destination" in err.message
    refused(m.start_restore, img, [src + "/alpha"], out + "/../../x")
    refused(m.cancel_job, jid)
    e = last_entry(site, user="rita")
    assert (e["action"], e["outcome"]) == ("cancel_job", "refused")


def test_restore_role_without_grants_sees_no_files(site, open_masters):
    m = open_masters(site, "nogrant")
    err = refused(m.browse, site["image"], "/")
    assert "no grant on client me" in err.message
    assert m.images() == [] and m.image_clients() == []
    refused(m.image_at, "me")
    assert m.job_list()   # it reads like a viewer


def test_unknown_user_is_refused_everything(site, open_masters):
    m = open_masters(site, "mallory", origin="203.0.113.9")
    err = refused(m.job_list)
    assert "'mallory' is not a Cairn user" in err.message
    refused(m.audit_login, key_fingerprint="SHA256:x")
    e = last_entry(site)
    assert (e["user"], e["origin"], e["action"], e["outcome"]) == \
        ("mallory", "203.0.113.9", "audit_login", "refused")


def test_login_is_recorded_with_the_key_and_a_role_change_counts_at_once(site, open_masters):
    m = open_masters(site, "vic", origin="198.51.100.4")
    e = m.audit_login(method="publickey", key_fingerprint="SHA256:abc")
    assert (e["action"], e["user"], e["details"]["key"]) == ("login", "vic", "SHA256:abc")
    admin = open_masters(site, None, origin=None)
    admin.set_user("vic", role="operator")
    try:
        assert m.whoami()["role"] == "operator"
    finally:
        admin.set_user("vic", role="viewer")
    e = last_entry(site)
    assert e["action"] == "set_user"
    assert (e["details"]["before"]["role"], e["details"]["after"]["role"]) == \
        ("operator", "viewer")


def test_configuration_change_is_audited_with_before_and_after(site, open_masters):
    m = open_masters(site, None, origin=None)
    m.update_object("policy", "p1", priority=3)
    e = last_entry(site)
    assert (e["user"], e["origin"], e["action"], e["object"]) == \
        ("admin", "local", "update_object", "policy p1")
    assert (e["details"]["before"]["priority"], e["details"]["after"]["priority"]) == (0, 3)
    m.update_object("policy", "p1", priority=0)
    m.update_object("storage-unit", "stu1", max_concurrent_jobs=5)
    e = last_entry(site)
    assert e["object"] == "storage-unit stu1"
    assert (e["details"]["before"]["max_concurrent_jobs"],
            e["details"]["after"]["max_concurrent_jobs"]) == (4, 5)


def test_the_last_admin_stays(site, open_masters):
    m = open_masters(site, None, origin=None)
    with pytest.raises(ValidationError, match="last user with the admin role"):
        m.remove_user("admin")
    with pytest.raises(ValidationError, match="last user with the admin role"):
        m.set_user("admin", role="viewer")
    assert m.user("admin")["role"] == "admin"


def test_a_call_with_wrong_arguments_is_refused_before_python_says_so(site, open_masters):
    refused(open_masters(site, "vic").set_setting)
    with pytest.raises(TypeError):
        open_masters(site, None, origin=None).set_setting()


def test_restore_role_lists_only_granted_directories_of_hosts(site, open_masters):
    m = open_masters(site, "rita")
    out = os.path.join(site["tmp"], "out")
    assert m.list_host_dir("me", out)["path"] == out
    above = m.list_host_dir("me", site["tmp"])
    assert sorted(e["name"] for e in above["entries"]) == ["out", "src"]
    refused(m.list_host_dir, "me", "/etc")
    refused(m.list_host_dir, "other-host", "/")


def test_a_login_name_bound_to_a_user_acts_as_it(site, open_masters):
    admin = open_masters(site, None, origin=None)
    admin.set_user("olga", login="olga.k")
    try:
        who = open_masters(site, "olga.k").whoami()
        assert (who["user"], who["role"]) == ("olga", "operator")
        with pytest.raises(ValidationError, match="already bound to user olga"):
            admin.set_user("vic", login="olga.k")
    finally:
        admin.set_user("olga", login="")
    refused(open_masters(site, "olga.k").job_list)


def test_a_login_with_another_users_key_is_refused(site, open_masters, tmp_path):
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    admin = open_masters(site, None, origin=None)
    fp = admin.set_user("olga", add_keys=[(tmp_path / "k.pub").read_text()])["keys"][0][
        "fingerprint"]
    try:
        assert open_masters(site, "olga").audit_login(key_fingerprint=fp)["outcome"] == "ok"
        err = refused(open_masters(site, "vic").audit_login, key_fingerprint=fp)
        assert "belongs to user olga, not vic" in err.message
        e = last_entry(site)
        assert (e["user"], e["action"], e["outcome"]) == ("vic", "login", "refused")
    finally:
        admin.set_user("olga", remove_keys=[fp])


# one call of each class, made so that it fails after the check where it is allowed
MATRIX = {"viewer": ("policy", ("no-such-policy",)),
          "restore": ("browse", ("no-such-image", "/")),
          "operator": ("cancel_job", (999999,)),
          "admin": ("delete_object", ("policy", "no-such-policy"))}


@pytest.mark.parametrize("user,role", [("vic", "viewer"), ("rita", "restore"),
                                       ("olga", "operator"), (None, "admin")])
def test_each_role_is_allowed_exactly_the_calls_of_its_rank(site, open_masters, user, role):
    m = open_masters(site, user)
    for need, (name, args) in MATRIX.items():
        assert access.METHODS[name] == need
        if rank(role) >= rank(need):
            with pytest.raises(NotFound):
                getattr(m, name)(*args)
        else:
            refused(getattr(m, name), *args)
