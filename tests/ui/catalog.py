"""A small catalog for the console tests, made through the master API. Backup images are
written the way a backup commits them (an index file plus a catalog row), so that the tests
do not depend on running a real backup."""

import json
import os
import time

from app import status as st
from app import timeutil
from app.catalog_index import build_index

FILES = [
    # path, kind, size
    ("/data", "d", 0),
    ("/data/projects", "d", 0),
    ("/data/projects/alpha", "d", 0),
    ("/data/projects/alpha/README.md", "f", 1200),
    ("/data/projects/alpha/results.csv", "f", 5_400_000),
    ("/data/projects/alpha/raw", "d", 0),
    ("/data/projects/alpha/raw/run-001.dat", "f", 734_003_200),
    ("/data/projects/alpha/raw/run-002.dat", "f", 734_003_200),
    ("/data/projects/alpha/latest", "l", 0),
    ("/data/projects/alpha/empty", "d", 0),
]


def add_image(m, image_id, *, client, policy, schedule="daily", storage_unit="stu1",
              created=None, files=FILES):
    rows, offset = [], 0
    for path, kind, size in files:
        link = "raw/run-002.dat" if kind == "l" else ""
        length = 512 + ((size + 511) // 512) * 512 if kind == "f" else 512
        rows.append([path, kind, 0o644 if kind == "f" else 0o755, 1000, 1000, size,
                     1_790_000_000_000_000_000, offset, length, "", link])
        offset += length
    build_index(m.home.index_path(image_id), rows)
    created = created or timeutil.iso(time.time())
    total = sum(s for _, k, s in files if k == "f")
    with m.db.tx() as c:
        c.execute("INSERT INTO images(id, client, policy, schedule, schedule_type, created, "
                  "expires, bytes, files, storage_unit, pool, storage_host, path, image_bytes, "
                  "job_id, selections, warnings) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                  (image_id, client, policy, schedule, "full", created,
                   timeutil.iso(timeutil.parse_iso(created) + 14 * 86400), total,
                   sum(k == "f" for _, k, _ in files), storage_unit, "dp1", client,
                   f"/vol/{image_id}.tar", offset, None, json.dumps(["/data/projects/alpha"]),
                   0))


def populate(m, tmp_dir, *, jobs=True, images=True):
    """Local host, storage server ss1, disk pool dp1, storage unit stu1, policy p1 with a
    client and a selection; a few jobs in different states; two images."""
    host = m.ensure_local_host()["name"]
    vol = os.path.join(str(tmp_dir), "vol1")
    os.makedirs(vol, exist_ok=True)
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[vol], check=False)
    m.config.add_storage_unit("stu1", pool="dp1", max_concurrent_jobs=2)
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", host)
    m.config.add_policy_selection("p1", "/data/projects/alpha")
    m.config.add_schedule("p1", "daily", type="full", retention="2w")
    ids = {}
    if jobs:
        common = dict(client=host, policy="p1", schedule="daily", storage_unit="stu1")
        ids["done"] = m.jobs.create("backup", **common)
        m.jobs.claim(ids["done"], "test")
        m.jobs.progress(ids["done"], bytes=1_473_411_600, files=5, rate=98_000_000)
        m.jobs.finish(ids["done"], st.OK)
        ids["failed"] = m.jobs.create("backup", **common)
        m.jobs.claim(ids["failed"], "test")
        m.jobs.finish(ids["failed"], st.VOLUME_UNAVAILABLE, "volume /vol1 is not writable")
        ids["active"] = m.jobs.create("backup", **common)
        m.jobs.claim(ids["active"], "test")
        m.jobs.progress(ids["active"], bytes=600_000_000, files=3, rate=120_000_000,
                        total_bytes=1_473_411_600, total_files=5)
        ids["queued"] = m.jobs.create("restore", **common)
        m.jobs.set_wait_reason(ids["queued"], "storage unit stu1 is at its limit of 2 "
                                              "concurrent jobs")
    if images:
        add_image(m, f"{host}_1790000000", client=host, policy="p1",
                  created="2026-09-21T20:00:00Z")
        add_image(m, f"{host}_1790086400", client=host, policy="p1",
                  created="2026-09-22T20:00:00Z")
    return host, ids


def add_lifecycle(m, tmp_dir, name="gold"):
    """A second pool (ss2, dp2, stu2) and lifecycle `name`: back up to stu1, copy to stu2."""
    vol = os.path.join(str(tmp_dir), "vol2")
    os.makedirs(vol, exist_ok=True)
    if not any(u["name"] == "stu2" for u in m.storage_units()):
        m.create_storage_server("ss2", type="advanced-disk", host=m.ensure_local_host()["name"])
        m.create_disk_pool("dp2", server="ss2", volumes=[vol], check=False)
        m.create_storage_unit("stu2", pool="dp2")
    return m.create_lifecycle(name, ["backup:stu1:2w", "duplicate:stu2:8w"])
