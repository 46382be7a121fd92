"""What the benchmarks share: a master on the embedded local host with the one catalog they
all back up through (storage server, disk pool without a water mark in the way, storage unit,
policy of one selection)."""

import os

from app.master import Master
from plugins.storage import registry


def local_master(home, vol, src, schedules=(), storage_type="advanced-disk", encrypted=False):
    """A Master in `home` writing images to the directory `vol`, with policy "p" backing up
    `src`; `schedules`: (name, type) pairs to add; `storage_type`: the storage server's type
    (one that needs a path, such as "dedup", is given `vol` as its path); `encrypted`: a
    dedup pool encrypted at rest (the master makes its key). The agent is started, as in a
    running console, so the first timed job does not pay for it."""
    m = Master(home)
    try:
        m.config.add_host("me", local=True)
        known = registry.get(storage_type)
        path = vol if known is not None and known.needs_path else None
        if encrypted:
            m.create_storage_server("ss", type=storage_type, host="me", path=path,
                                    options={"encrypted": True})
        else:
            m.config.add_storage_server("ss", type=storage_type, host="me", path=path)
        m.create_disk_pool("dp", server="ss", volumes=[vol], high_water=100, low_water=99)
        m.config.add_storage_unit("stu", pool="dp")
        m.config.add_policy("p", storage_unit="stu")
        m.config.add_policy_client("p", "me")
        m.config.add_policy_selection("p", src)
        for name, kind in schedules:
            m.config.add_schedule("p", name, type=kind)
        m.hosts.connect(m.config.host("me"))
    except BaseException:
        # A refused storage type must not leave the agent checking the volumes running.
        m.close()
        raise
    return m


def du(path):
    """The bytes of the files under path (a repository, a pool), as their sizes."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(d, f)).st_size
    return total
