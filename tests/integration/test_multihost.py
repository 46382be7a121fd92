"""Storage unit groups across real hosts: two clients and two storage servers, each host in a
network namespace of its own with its own address and sshd (tests/netbed.py). Every job
reaches its hosts over SSH and moves its data from the client's address to the storage
server's, so placement, failover after a storage host dies and restores from wherever each
image is are tested as a site would see them. Restores are compared byte for byte."""

import os
import threading
import time

import pytest

from app import status as st
from app.master import Master
from treegen import assert_trees_equal

SCHEDULES = [{"name": "full", "type": "full"}, {"name": "diff", "type": "differential"}]


@pytest.fixture
def site(netbed, tmp_path):
    """Master here; clients c1, c2 and storage servers sa, sb each on its own host. sa's
    pool pa behind unit ua, sb's pool pb behind unit ub."""
    m = Master(str(tmp_path / "home"))
    hosts = {}
    for name in ("c1", "c2", "sa", "sb"):
        h = netbed.add_host(name)
        m.add_host(name, address=h.address, port=h.port, user=h.user, key_file=h.key_file,
                   trust_host_key=True)
        hosts[name] = h
    for s in ("a", "b"):
        vol = tmp_path / f"vol-s{s}"
        vol.mkdir()
        m.create_storage_server(f"s{s}", type="advanced-disk", host=f"s{s}")
        m.create_disk_pool(f"p{s}", server=f"s{s}", volumes=[str(vol)])
        m.create_storage_unit(f"u{s}", pool=f"p{s}", max_concurrent_jobs=4)
    m.set_setting("max_jobs_per_client", 8)
    yield m, hosts, tmp_path
    m.close()


def tree(tmp_path, name, size=256 << 10):
    src = tmp_path / f"src-{name}"
    (src / "sub").mkdir(parents=True)
    (src / "data.bin").write_bytes(os.urandom(size))
    (src / "sub" / "note.txt").write_text(f"tree {name}\n")
    return src


def policy(m, name, group, client, src):
    m.create_policy(name, storage_unit_group=group, clients=[client], selections=[str(src)],
                    schedules=SCHEDULES)


def log_text(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def run(m, policies, schedule="full"):
    ids = [jid for p in policies for jid in m.start_backup(p, schedule=schedule)]
    jobs = m.wait_for(ids, timeout=180)
    for j in jobs:
        assert j["status"] == st.OK, log_text(m, j["id"])
        j["pool"] = m.image(j["image_id"])["pool"]
    return jobs


def restored_equal(m, tmp_path, image_id, src, client):
    out = tmp_path / f"out-{image_id}"
    [r] = m.wait_for([m.start_restore(image_id, [str(src)], str(out), to_host=client)],
                     timeout=180)
    assert r["status"] == st.OK, log_text(m, r["id"])
    assert_trees_equal(str(src), str(out) + str(src))
    return log_text(m, r["id"])


def test_least_loaded_spreads_backups_over_two_hosts_and_restores_read_each_image_there(site):
    m, hosts, tmp = site
    m.create_storage_unit_group("g", "ua,ub", "least-loaded")
    srcs = {}
    for i, client in enumerate(("c1", "c1", "c2", "c2")):
        srcs[f"p{i}"] = (client, tree(tmp, f"p{i}"))
        policy(m, f"p{i}", "g", client, srcs[f"p{i}"][1])
    jobs = run(m, list(srcs))
    assert sorted(j["pool"] for j in jobs) == ["pa", "pa", "pb", "pb"]
    # each client's two jobs went to both servers, over the network between their addresses
    for client in ("c1", "c2"):
        assert sorted(j["pool"] for j in jobs if j["client"] == client) == ["pa", "pb"]
    for j in jobs:
        server = "sa" if j["pool"] == "pa" else "sb"
        assert f"data plane: {j['client']} -> {server} ({hosts[server].address}:" in \
            log_text(m, j["id"])
    for j, (client, src) in zip(jobs, srcs.values()):
        log = restored_equal(m, tmp, j["image_id"], src, client)
        server = "sa" if j["pool"] == "pa" else "sb"
        assert f"data plane: {server} -> {client}" in log


def test_prioritized_and_round_robin_behave_as_named(site):
    m, hosts, tmp = site
    m.create_storage_unit_group("prio", "ub,ua", "prioritized")
    m.create_storage_unit_group("rr", "ua,ub", "round-robin")
    src = tree(tmp, "c1")
    policy(m, "prio", "prio", "c1", src)
    policy(m, "rr", "rr", "c1", src)
    # prioritized: the first unit every time it can take the job, alone or together
    assert [j["pool"] for j in run(m, ["prio"])] == ["pb"]
    assert [j["pool"] for j in run(m, ["prio"])] == ["pb"]
    # round-robin: each job the next unit in turn
    assert [run(m, ["rr"])[0]["pool"] for _ in range(3)] == ["pa", "pb", "pa"]
    # prioritized moves on when its first unit's host does not answer, and says why; the
    # host's other unit is known down with it, without asking the dead host again
    m.create_storage_unit("ub2", pool="pb", max_concurrent_jobs=4)
    m.create_storage_unit_group("prio2", "ub,ub2,ua", "prioritized")
    m.update_object("policy", "prio", storage_unit_group="prio2")
    hosts["sb"].power_off()
    m.dispatcher.placement.forget()
    started = time.monotonic()
    [j] = run(m, ["prio"])
    assert j["pool"] == "pa"
    log = log_text(m, j["id"])
    assert "passed over ub: its storage server's host sb cannot be reached" in log
    assert "; ub2: its storage server's host sb cannot be reached" in log
    # one probe of the dead host (its connection timeout), not one per unit
    assert time.monotonic() - started < 30
    restored_equal(m, tmp, j["image_id"], src, "c1")


def test_a_storage_host_killed_mid_backup_sends_the_queued_job_and_the_retry_elsewhere(site):
    """Failover: ua takes one job at a time. A long backup runs on sa and another waits for
    ua; sa dies. The running backup fails with a host or data-plane status, the waiting one
    goes to ub, and the failed one's retry lands on ub too; both restore identically."""
    m, hosts, tmp = site
    m.update_object("storage-unit", "ua", max_concurrent_jobs=1)
    m.create_storage_unit_group("fo", "ua,ub", "failover")
    # c1's link at 40 Mbit/s: its 24 MiB take about 5 s, time enough to pull the plug.
    hosts["c1"].limit(rate_mbit=40)
    big, small = tree(tmp, "big", 24 << 20), tree(tmp, "small")
    policy(m, "big", "fo", "c1", big)
    policy(m, "small", "fo", "c2", small)
    m.set_setting("backup_tries", 2)
    m.set_setting("retry_delay", "1s")
    now = time.time()
    first = m.queue_backup(m.config.policy("big"), "c1", {"name": "full", "type": "full"},
                           not_after=now + 3600)
    waiting = m.queue_backup(m.config.policy("small"), "c2", {"name": "full", "type": "full"},
                             not_after=now + 3600)
    killed = threading.Event()

    def pull_the_plug():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            j = m.jobs.get(first)
            if j["state"] == "active" and (j["bytes"] or 0) > (2 << 20):
                hosts["sa"].power_off()
                killed.set()
                return
            time.sleep(0.05)

    plug = threading.Thread(target=pull_the_plug, daemon=True)
    plug.start()
    started = time.monotonic()
    j1, j2 = m.wait_for([first, waiting], timeout=240)
    plug.join()
    assert killed.is_set(), "the first backup never got going on sa"
    assert j1["status"] in (st.HOST_UNREACHABLE, st.DATA_PLANE_FAILED), log_text(m, first)
    assert "the connection to sa was lost" in log_text(m, first) or \
        "data connection" in log_text(m, first)
    assert j1["storage_unit"] == "ua"
    assert j2["status"] == st.OK and j2["storage_unit"] == "ub", log_text(m, waiting)
    assert "passed over ua: its storage server's host sa cannot be reached" in \
        log_text(m, waiting)
    [retry] = m.db.all("SELECT id FROM jobs WHERE retry_of=?", (first,))
    [j3] = m.wait_for([retry[0]], timeout=240)
    assert j3["status"] == st.OK and j3["storage_unit"] == "ub", log_text(m, retry[0])
    assert j3["attempt"] == 2
    elapsed = time.monotonic() - started
    # the dead host cost at most the connect timeouts, not TCP's minutes of retransmissions
    assert elapsed < 120, f"failover took {elapsed:.0f} s"
    restored_equal(m, tmp, j2["image_id"], small, "c2")
    restored_equal(m, tmp, j3["image_id"], big, "c1")
    # nothing half-written was recorded for the killed attempt
    assert j1["image_id"] is None
