"""Storage unit groups with real backups on this machine: two (or three) advanced-disk storage
servers on the local host, each with its own pool, one group over their units. Concurrent
backups are spread (least-loaded, round-robin), prioritized keeps to the first unit while it
can take a job, failover moves on when the first unit's volume is unavailable or above its
high-water mark (and waits while it is only busy), an incremental follows its chain and is
made a full (and says so) when its chain's unit cannot take it; restores read each image from
the pool it is in, compared byte for byte."""

import os
import shutil
import time

import pytest

from app import status as st
from app.master import Master
from treegen import assert_trees_equal

SCHEDULES = [{"name": "full", "type": "full"}, {"name": "diff", "type": "differential"}]


@pytest.fixture
def site(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    for n in (1, 2, 3):
        vol = tmp_path / f"v{n}"
        vol.mkdir()
        m.config.add_storage_server(f"s{n}", type="advanced-disk", host="me")
        m.create_disk_pool(f"p{n}", server=f"s{n}", volumes=[str(vol)])
        m.create_storage_unit(f"u{n}", pool=f"p{n}", max_concurrent_jobs=4)
    m.set_setting("max_jobs_per_client", 8)
    yield m, tmp_path
    m.close()


def policy(m, tmp_path, name, group):
    """A policy of client `me` over its own small tree, writing to `group`."""
    src = tmp_path / f"src-{name}"
    src.mkdir()
    (src / "data.bin").write_bytes(os.urandom(256 << 10))
    (src / "note.txt").write_text(f"policy {name}\n")
    m.create_policy(name, storage_unit_group=group, clients=["me"], selections=[str(src)],
                    schedules=SCHEDULES)
    return src


def log_text(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def run(m, policies, schedule="full"):
    """Backs up the policies together (queued before the dispatcher starts any); returns the
    ended jobs, each with its image's pool."""
    ids = [jid for p in policies for jid in m.start_backup(p, schedule=schedule)]
    jobs = m.wait_for(ids)
    for j in jobs:
        assert j["status"] == st.OK, log_text(m, j["id"])
        j["pool"] = m.image(j["image_id"])["pool"]
    return jobs


def restored_equal(m, tmp_path, job, src):
    out = tmp_path / f"out-{job['id']}"
    [r] = m.wait_for([m.start_restore(job["image_id"], [str(src)], str(out))])
    assert r["status"] == st.OK, log_text(m, r["id"])
    assert_trees_equal(str(src), str(out) + str(src))


def test_least_loaded_spreads_concurrent_backups(site):
    m, tmp = site
    m.create_storage_unit_group("g", "u1,u2", "least-loaded")
    srcs = {f"p{i}": policy(m, tmp, f"p{i}", "g") for i in range(4)}
    jobs = run(m, list(srcs))
    assert sorted(j["pool"] for j in jobs) == ["p1", "p1", "p2", "p2"]
    assert [j["storage_unit"] for j in jobs] == ["u1", "u2", "u1", "u2"]
    assert "placed on storage unit u2 (group g, least-loaded: u1 1 running on its server" in \
        log_text(m, jobs[1]["id"])
    for j, src in zip(jobs[:2], list(srcs.values())[:2]):
        restored_equal(m, tmp, j, src)


def test_least_loaded_goes_to_the_server_that_wrote_least_recently(site):
    m, tmp = site
    m.create_storage_unit_group("g", "u1,u2", "least-loaded")
    policy(m, tmp, "small", "g")
    big = policy(m, tmp, "big", "g")
    (big / "more.bin").write_bytes(os.urandom(2 << 20))
    m.create_storage_unit_group("first", "u2", "prioritized")
    m.update_object("policy", "big", storage_unit_group="first")
    assert run(m, ["big"])[0]["storage_unit"] == "u2"
    # nothing runs anywhere: u2's server wrote 2 MiB in the last minutes, u1's nothing
    [j] = run(m, ["small"])
    assert j["storage_unit"] == "u1"
    assert "u2 0 running on its server, " in log_text(m, j["id"])
    [j] = run(m, ["small"])
    assert j["storage_unit"] == "u1"  # it wrote far less than the big one


def test_round_robin_rotates_per_job_together_and_one_by_one(site):
    m, tmp = site
    m.create_storage_unit_group("g", "u1,u2,u3", "round-robin")
    for i in range(4):
        policy(m, tmp, f"p{i}", "g")
    together = run(m, ["p0", "p1", "p2", "p3"])
    assert [j["storage_unit"] for j in together] == ["u1", "u2", "u3", "u1"]
    # the turn is kept in the catalog: the next jobs go on from u2
    alone = [run(m, [p])[0]["storage_unit"] for p in ("p0", "p1")]
    assert alone == ["u2", "u3"]
    assert "round-robin: the next in turn" in log_text(m, together[1]["id"])
    # a unit that cannot take a job is passed over, and the log says why
    m.update_object("disk-pool", "p1", high_water=2, low_water=1)
    m.dispatcher.placement.forget()
    [j] = run(m, ["p2"])
    assert j["storage_unit"] == "u2"
    assert "passed over u1: no volume of disk pool p1 can take an image" in log_text(m, j["id"])


def test_prioritized_keeps_to_the_first_unit_while_it_can(site):
    m, tmp = site
    m.update_object("storage-unit", "u1", max_concurrent_jobs=2)
    m.create_storage_unit_group("g", "u1,u2", "prioritized")
    for i in range(3):
        policy(m, tmp, f"p{i}", "g")
    one_by_one = [run(m, [p])[0]["storage_unit"] for p in ("p0", "p1", "p2")]
    assert one_by_one == ["u1", "u1", "u1"]
    together = run(m, ["p0", "p1", "p2"])
    assert [j["storage_unit"] for j in together] == ["u1", "u1", "u2"]
    assert "passed over u1: storage unit u1 is at its limit of 2 concurrent jobs" in \
        log_text(m, together[2]["id"])


def test_failover_moves_on_when_the_first_unit_is_unavailable_or_full(site):
    m, tmp = site
    m.update_object("storage-unit", "u1", max_concurrent_jobs=1)
    m.create_storage_unit_group("g", "u1,u2", "failover")
    srcs = {f"p{i}": policy(m, tmp, f"p{i}", "g") for i in range(2)}
    # only busy: the second job waits for u1 instead of going to u2
    assert [j["storage_unit"] for j in run(m, ["p0", "p1"])] == ["u1", "u1"]
    # u1's volume gone: the job goes to u2 and says why
    shutil.move(str(tmp / "v1"), str(tmp / "v1-away"))
    m.dispatcher.placement.forget()
    [j] = run(m, ["p0"])
    assert (j["storage_unit"], j["pool"]) == ("u2", "p2")
    assert "failover: the first available unit; passed over u1: no volume of disk pool p1" in \
        log_text(m, j["id"])
    restored_equal(m, tmp, j, srcs["p0"])
    # back, but above its high-water mark: u2 again
    shutil.move(str(tmp / "v1-away"), str(tmp / "v1"))
    m.update_object("disk-pool", "p1", high_water=2, low_water=1)
    m.dispatcher.placement.forget()
    [j] = run(m, ["p1"])
    assert j["storage_unit"] == "u2" and "high-water mark 2%" in log_text(m, j["id"])
    # below it again: the first unit takes the jobs again
    m.update_object("disk-pool", "p1", high_water=98, low_water=80)
    m.dispatcher.placement.forget()
    assert run(m, ["p1"])[0]["storage_unit"] == "u1"


def test_an_incremental_follows_its_chain_or_is_made_a_full(site):
    m, tmp = site
    m.create_storage_unit_group("g", "u1,u2", "round-robin")
    src = policy(m, tmp, "p", "g")
    [full] = run(m, ["p"])
    assert full["storage_unit"] == "u1"
    (src / "new.txt").write_text("after the full\n")
    # round-robin's turn is u2, but the chain is in p1
    [inc] = run(m, ["p"], schedule="diff")
    assert inc["storage_unit"] == "u1"
    img = m.image(inc["image_id"])
    assert (img["schedule_type"], img["base_image"]) == ("differential", full["image_id"])
    assert "differential incremental goes where its chain is (disk pool p1)" in \
        log_text(m, inc["id"])
    restored_equal(m, tmp, inc, src)
    # the chain's unit above its high-water mark: a full on the other unit, and the log says why
    m.update_object("disk-pool", "p1", high_water=2, low_water=1)
    m.dispatcher.placement.forget()
    (src / "newer.txt").write_text("after the incremental\n")
    [made_full] = run(m, ["p"], schedule="diff")
    img = m.image(made_full["image_id"])
    assert (made_full["storage_unit"], img["pool"]) == ("u2", "p2")
    assert (img["schedule_type"], img["base_image"]) == ("full", None)
    log = log_text(m, made_full["id"])
    assert "its chain's storage unit u1 cannot take it (no volume of disk pool p1" in log
    assert "so it runs as a full" in log
    restored_equal(m, tmp, made_full, src)
    # a chain in a pool no unit of the group has: a full, said
    m.update_object("disk-pool", "p1", high_water=98, low_water=80)
    m.create_storage_unit_group("other", "u3", "prioritized")
    m.update_object("policy", "p", storage_unit_group="other")
    [j] = run(m, ["p"], schedule="diff")
    assert j["storage_unit"] == "u3" and m.image(j["image_id"])["schedule_type"] == "full"
    assert "its chain is in disk pool p2, which no unit of the group has, so it runs as a " \
           "full" in log_text(m, j["id"])


def test_a_unit_whose_host_is_down_is_passed_over_and_with_none_left_the_job_fails(site):
    m, tmp = site
    # a storage server on a host nothing answers on (a closed port of this machine)
    m.config.add_host("dead", address="127.0.0.1", port=1, user="nobody")
    m.config.add_storage_server("sd", type="advanced-disk", host="dead")
    m.create_disk_pool("pd", server="sd", volumes=[str(tmp / "v1")], check=False)
    m.create_storage_unit("ud", pool="pd")
    m.create_storage_unit_group("g", "ud,u2", "prioritized")
    src = policy(m, tmp, "p", "g")
    [j] = run(m, ["p"])
    assert (j["storage_unit"], j["pool"]) == ("u2", "p2")
    assert "passed over ud: its storage server's host dead cannot be reached" in \
        log_text(m, j["id"])
    restored_equal(m, tmp, j, src)
    # a host that cannot be reached is not asked again at every tick (each try can cost the
    # tick the SSH connect timeout), but for DOWN_TTL; a unit with room, for AVAILABLE_TTL
    from app.jobs import placement
    until_dead = m.dispatcher.placement._available["ud"][0] - time.monotonic()
    until_ok = m.dispatcher.placement._available["u2"][0] - time.monotonic()
    assert placement.AVAILABLE_TTL < until_dead <= placement.DOWN_TTL
    assert until_ok <= placement.AVAILABLE_TTL
    # no unit left: the job goes to the first and fails there with its status, said
    m.create_storage_unit_group("none-left", "ud", "prioritized")
    m.update_object("policy", "p", storage_unit_group="none-left")
    [jid] = m.start_backup("p", schedule="full")
    [j] = m.wait_for([jid])
    assert j["storage_unit"] == "ud" and j["status"] not in (st.OK, st.PARTIAL)
    assert "no unit of group none-left can take it (ud: its storage server's host dead " \
           "cannot be reached" in log_text(m, j["id"])


@pytest.mark.parametrize("selection", ["least-loaded", "round-robin"])
def test_a_clients_jobs_queued_together_are_spread_over_the_servers(site, sshd, selection):
    """Two clients in two policies, queued policy after policy: me, other, me, other. Taken
    one by one, least-loaded (equal loads, then the first unit) and round-robin (in turn)
    would send both of me's jobs to u1 and both of other's to u2; a client's own jobs on a
    server count against it, so each client's two jobs go to both servers."""
    m, tmp = site
    m.add_host("other", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    m.create_storage_unit_group("g", "u1,u2", selection)
    for name in ("first", "second"):
        policy(m, tmp, name, "g")
        m.add_policy_client(name, "other")
    jobs = run(m, ["first", "second"])
    assert [(j["policy"], j["client"]) for j in jobs] == [
        ("first", "me"), ("first", "other"), ("second", "me"), ("second", "other")]
    placed = {(j["policy"], j["client"]): j["storage_unit"] for j in jobs}
    assert placed == {("first", "me"): "u1", ("first", "other"): "u2",
                      ("second", "me"): "u2", ("second", "other"): "u1"}
    assert {j["pool"] for j in jobs if j["client"] == "me"} == {"p1", "p2"}
    log = log_text(m, jobs[2]["id"])
    if selection == "least-loaded":
        assert "u1 1 running on its server (1 of client me, counted twice), 0 bytes" in log
    else:
        assert "round-robin: the next in turn; passed over u1: client me runs 1 job on its " \
               "storage server" in log


def test_the_streams_of_one_backup_stay_together_while_other_jobs_spread(site):
    """Three streams of one backup queued with another policy's job, least-loaded: the
    streams all go where the first went, in the same round, and the other job to the
    other server."""
    m, tmp = site
    m.create_storage_unit_group("g", "u1,u2", "least-loaded")
    src = tmp / "src-streams"
    for part in "abc":
        (src / part).mkdir(parents=True)
        (src / part / "f.bin").write_bytes(os.urandom(64 << 10))
    m.create_policy("streams", storage_unit_group="g", clients=["me"], multiple_streams=True,
                    selections=[str(src / "a"), "NEW_STREAM", str(src / "b"), "NEW_STREAM",
                                str(src / "c")], schedules=SCHEDULES)
    policy(m, tmp, "single", "g")
    [parent] = m.start_backup("streams", schedule="full")
    [single] = m.start_backup("single", schedule="full")
    [pj, sj] = m.wait_for([parent, single])
    children = [dict(r) for r in m.db.all("SELECT * FROM jobs WHERE parent_id=? ORDER BY id",
                                          (parent,))]
    assert pj["status"] == st.OK and sj["status"] == st.OK, log_text(m, parent)
    assert [c["storage_unit"] for c in children] == ["u1", "u1", "u1"]
    assert all("its other streams went there" in log_text(m, c["id"]) for c in children[1:])
    assert sj["storage_unit"] == "u2"
