"""The wizards' steps as bench/bench_remote_master.py times them: what each step of each
setup wizard reads from the master (the functions the wizards call, ui/wizards/), and for
the steps that read several lists the same reads made one by one, as the wizards made them
before they batched them.

    steps(host) -> [(name, fn(m), one_by_one(m) or None)]
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from ui.wizards import disk_pool, lifecycle, policy, storage_unit, stugroup  # noqa: E402


def setup(m, volume):
    """What the wizards' steps read: a storage server, a pool, a unit and a policy."""
    host = m.ensure_local_host()["name"]
    m.create_storage_server("ss1", type="advanced-disk", host=host)
    m.create_disk_pool("dp1", server="ss1", volumes=[str(volume)], check=False)
    m.config.add_storage_unit("stu1", pool="dp1")
    m.config.add_policy("p1", storage_unit="stu1")
    m.config.add_policy_client("p1", host)
    m.config.add_policy_selection("p1", "/data")
    return host


def _volumes_one_by_one(m, server):
    srv = m.storage_server(server)
    m.disk_pools()
    probe = m.probe_host(srv["host"])
    m.disk_pools()
    m.policies()
    return probe


def steps(host):
    return [
        ("storage server: its host", lambda m: m.host_list(), None),
        ("storage server: the host probed", lambda m: m.probe_host(host), None),
        ("storage server: the names taken", lambda m: m.storage_servers(), None),
        ("disk pool: the servers", lambda m: m.batch([("storage_servers",), ("disk_pools",)]),
         lambda m: (m.storage_servers(), m.disk_pools())),
        ("disk pool: the volumes (a probe)", lambda m: disk_pool._load_volumes(m, "ss1", host),
         lambda m: _volumes_one_by_one(m, "ss1")),
        ("disk pool: the names taken", lambda m: m.disk_pools(), None),
        ("storage unit: its lists", storage_unit._load_lists,
         lambda m: (m.disk_pools(), m.storage_units())),
        ("policy: its lists", policy._load_lists,
         lambda m: (m.storage_units(), m.policies(), m.storage_servers(), m.lifecycles(),
                    m.storage_unit_groups())),
        ("policy: the clients", lambda m: m.host_list(), None),
        ("policy: the pools' folders", lambda m: m.pool_paths(), None),
        ("policy: a directory browsed", lambda m: m.list_host_dir(host, "/"), None),
        ("lifecycle: its lists", lifecycle._load_lists,
         lambda m: (m.storage_units(), m.lifecycles())),
        ("storage unit group: its lists", stugroup._load_lists,
         lambda m: (m.storage_units(), m.storage_unit_groups())),
    ]
