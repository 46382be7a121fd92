"""The master API: the one entry point the CLI and the console use. It owns the catalog,
the configuration objects, the agent connections and the job queue."""

import json
import os
import time
from contextlib import contextmanager

from app import timeutil
from app import status
from app.catalog_index import IndexCorrupt, IndexReader
from app.config import Config, check_abs_path
from app.errors import CairnError, NotFound, ValidationError
from app.hosts import HostPool
from app.jobs.dispatcher import Dispatcher
from app.jobs.store import DONE, JobStore
from app.paths import Home
from app.store.db import Database

OVERWRITE_CHOICES = ("skip", "overwrite", "rename")


class Master:
    def __init__(self, home=None, password_provider=None):
        self.home = Home(home).ensure()
        self.db = Database(self.home.catalog)
        self.config = Config(self.db)
        self.jobs = JobStore(self.db)
        self.hosts = HostPool(self.home, password_provider)
        self.dispatcher = Dispatcher(self)

    def close(self):
        self.hosts.close()
        self.db.close()

    # ---- hosts ----------------------------------------------------------------------------
    def add_host(self, name, *, local=False, address=None, port=22, user=None, key_file=None,
                 trust_host_key=False, data_address=None, check=True):
        """Registers a host. An SSH host is connected once first (unless check=False), so
        that a wrong address, a refused key or an untrusted host key is reported now, not
        in the middle of the first backup."""
        if check and not local:
            probe_host = {"name": name, "kind": "ssh", "address": address, "port": port,
                          "user": user, "key_file": key_file and os.path.abspath(
                              os.path.expanduser(key_file))}
            t = self.hosts.transport(probe_host, trust_unknown_key=trust_host_key)
            try:
                from app.config import check_name
                check_name("host", name)
                if key_file and not os.path.isfile(os.path.expanduser(key_file)):
                    raise ValidationError(f"key file {key_file} does not exist")
                proc = t.start_agent()
                proc.close()
            finally:
                t.close()
        return self.config.add_host(name, local=local, address=address, port=port, user=user,
                                    key_file=key_file, data_address=data_address)

    def trust_host_key(self, name, fingerprint=None, replace=False):
        """Trusts the key a registered SSH host presents now: exactly the key seen, and only
        if it matches `fingerprint` when one is given. `replace` drops the keys trusted
        before (after a host was reinstalled)."""
        from app.errors import HostKeyChanged, HostKeyUnknown
        from app.transport import hostkeys
        host = self.config.host(name)
        if host["kind"] != "ssh":
            raise ValidationError(f"host {name!r} is reached without SSH; it has no host key")
        port = host["port"] or 22
        if replace:
            hostkeys.remove(self.home.known_hosts, host["address"], port)
        t = self.hosts.transport(host)
        try:
            t.connect()
        except HostKeyUnknown as e:
            if fingerprint and fingerprint != e.fingerprint:
                raise ValidationError(
                    f"host {name} presents {e.key_type} {e.fingerprint}, not {fingerprint}; "
                    "nothing was trusted",
                    hint="check the fingerprint with the host's administrator") from None
            hostkeys.add(self.home.known_hosts, host["address"], port, e.pkey)
            return {"host": name, "trusted": True, "key_type": e.key_type,
                    "fingerprint": e.fingerprint}
        except HostKeyChanged as e:
            raise HostKeyChanged(e.message, hint=f"if the host was reinstalled, check the new "
                                 f"fingerprint and run: cairn host trust {name} --replace "
                                 f"--fingerprint {e.fingerprint}") from None
        finally:
            t.close()
        return {"host": name, "trusted": False, "already_trusted": True}

    def ensure_local_host(self):
        """The embedded default: this machine is a host from the start."""
        h = self.config.local_host()
        if h is None:
            import socket
            name = socket.gethostname().split(".")[0] or "localhost"
            from app.config import NAME_RE
            if not NAME_RE.match(name) or self.db.one("SELECT 1 FROM hosts WHERE name=?",
                                                      (name,)):
                name = "localhost"
            h = self.config.add_host(name, local=True)
        return h

    def probe_host(self, name):
        host = self.config.host(name)
        conn = self.hosts.connect(host)
        info = conn.call("probe", timeout=120)
        info["host"] = name
        info["agent"] = conn.info
        return info

    def list_host_dir(self, name, path):
        host = self.config.host(name)
        return self.hosts.connect(host).call("list_dir", {"path": path}, timeout=60)

    # ---- storage --------------------------------------------------------------------------
    def create_storage_server(self, name, *, type, host, path=None):
        return self.config.add_storage_server(name, type=type, host=host, path=path)

    def check_volumes(self, server, volumes):
        srv = self.config.storage_server(server)
        conn = self.hosts.connect(self.config.host(srv["host"]))
        return conn.call("check_volumes", {"paths": volumes}, timeout=120)["volumes"]

    def create_disk_pool(self, name, *, server, volumes, high_water=98, low_water=80,
                         max_io_streams=None, check=True):
        vols, *_ = self.config.validate_disk_pool(
            name, server=server, volumes=volumes, high_water=high_water, low_water=low_water,
            max_io_streams=max_io_streams)
        if check:
            bad = [v for v in self.check_volumes(server, vols) if not v["ok"]]
            if bad:
                srv = self.config.storage_server(server)
                raise ValidationError(
                    "volume " + "; ".join(f"{v['path']}: {v['error']}" for v in bad)
                    + f" (on host {srv['host']})",
                    hint="create the directory on the storage server and make it writable "
                         "for the agent's user, then try again")
        return self.config.add_disk_pool(name, server=server, volumes=vols,
                                         high_water=high_water, low_water=low_water,
                                         max_io_streams=max_io_streams)

    # ---- editing --------------------------------------------------------------------------
    def dependents(self, kind, name):
        """What still uses a configuration object (kind: host, storage-server, disk-pool,
        storage-unit, policy); it can be deleted only when this is empty."""
        from app import config_edit
        deps = config_edit.dependents(self.db, kind, name)
        return {"kind": kind, "name": name, "dependents": deps,
                "text": config_edit.describe(deps)}

    def delete_object(self, kind, name):
        from app import config_edit
        return config_edit.delete(self.db, kind, name)

    def update_object(self, kind, name, **changes):
        from app import config_edit
        return config_edit.update(self.db, self.config, kind, name, **changes)

    # ---- backups --------------------------------------------------------------------------
    def start_backup(self, policy, client=None, schedule=None):
        """Queues one backup job per client of the policy (or the one client given)."""
        pol = self.config.policy(policy)
        if not pol["clients"]:
            raise ValidationError(f"policy {policy!r} has no clients",
                                  hint=f"add one with `cairn policy add-client {policy} HOST`")
        if not pol["selections"]:
            raise ValidationError(f"policy {policy!r} has no backup selections",
                                  hint=f"add one with `cairn policy add-selection {policy} PATH`")
        if client is not None and client not in pol["clients"]:
            raise ValidationError(f"{client!r} is not a client of policy {policy!r}",
                                  hint=f"its clients: {', '.join(pol['clients'])}")
        scheds = pol["schedules"]
        if schedule is None:
            full = [s for s in scheds if s["type"] == "full"]
            if not scheds:
                # A manual backup of a policy without schedules is a full with the default
                # retention, as admins expect from a user-directed backup.
                sched = {"name": "manual", "type": "full"}
            else:
                sched = (full or scheds)[0]
        else:
            sched = next((s for s in scheds if s["name"] == schedule), None)
            if sched is None:
                raise NotFound(f"policy {policy!r} has no schedule {schedule!r}",
                               hint="its schedules: " + (", ".join(s["name"] for s in scheds)
                                                         or "none"))
        ids = []
        for c in ([client] if client else pol["clients"]):
            ids.append(self.jobs.create(
                "backup", client=c, policy=policy, schedule=sched["name"],
                storage_unit=pol["storage_unit"], priority=pol["priority"],
                params={"selections": pol["selections"], "schedule_type": sched["type"],
                        "checksum": pol["checksum"]}))
        return ids

    # ---- images ---------------------------------------------------------------------------
    def images(self, client=None, policy=None):
        sql, args = "SELECT * FROM images WHERE 1=1", []
        if client:
            sql += " AND client=?"
            args.append(client)
        if policy:
            sql += " AND policy=?"
            args.append(policy)
        return [_image_dict(r) for r in self.db.all(sql + " ORDER BY created DESC, id DESC",
                                                     args)]

    def image(self, image_id):
        row = self.db.one("SELECT * FROM images WHERE id=?", (image_id,))
        if row is None:
            raise NotFound(f"there is no image {image_id!r}",
                           hint="see `cairn images list`")
        return _image_dict(row)

    def image_at(self, client, policy=None, at=None):
        """The newest image of a client (under a policy) created at or before `at`."""
        self.config.host(client)
        sql, args = "SELECT * FROM images WHERE client=?", [client]
        if policy:
            sql += " AND policy=?"
            args.append(policy)
        if at is not None:
            sql += " AND created<=?"
            args.append(timeutil.iso(timeutil.parse_iso(at)))
        row = self.db.one(sql + " ORDER BY created DESC, id DESC LIMIT 1", args)
        if row is None:
            when = f" at or before {at}" if at else ""
            raise NotFound(f"client {client!r} has no image{when}"
                           + (f" under policy {policy!r}" if policy else ""))
        return _image_dict(row)

    def expire_image(self, image_id):
        """Removes an image from its pool, its index and the catalog, now."""
        img = self.image(image_id)
        busy = self.db.one("SELECT id FROM jobs WHERE state!='done' AND type='restore' AND "
                           "params LIKE ?", (f'%"image": "{img["id"]}"%',))
        if busy:
            raise ValidationError(f"image {image_id} is being restored by job {busy[0]}",
                                  hint="wait for that job or cancel it")
        conn = self.hosts.connect(self.config.host(img["storage_host"]))
        conn.call("remove_image", {"path": img["path"]}, timeout=120)
        with self.db.tx() as c:
            c.execute("DELETE FROM images WHERE id=?", (img["id"],))
        try:
            os.unlink(self.home.index_path(img["id"]))
        except FileNotFoundError:
            pass
        return {"expired": img["id"], "path": img["path"], "bytes": img["image_bytes"]}

    @contextmanager
    def open_index(self, img):
        """The catalog file index of an image; a missing or damaged one (found on opening or
        on any read inside the block) becomes a clear error."""
        path = self.home.index_path(img["id"])
        try:
            reader = IndexReader(path)
        except FileNotFoundError:
            raise CairnError(f"the file index of image {img['id']} is missing ({path})",
                             status_code=status.IMAGE_DAMAGED) from None
        except IndexCorrupt as e:
            raise CairnError(f"the file index of image {img['id']} is damaged: {e}",
                             status_code=status.IMAGE_DAMAGED) from None
        try:
            with reader:
                yield reader
        except IndexCorrupt as e:
            raise CairnError(f"the file index of image {img['id']} is damaged: {e}",
                             status_code=status.IMAGE_DAMAGED) from None

    def browse(self, image_id, path="/"):
        img = self.image(image_id)
        path = "/" if path in (None, "", "/") else check_abs_path("path", path)
        with self.open_index(img) as idx:
            if path != "/":
                e = idx.lookup(path)
                if e is None:
                    raise NotFound(f"{path} is not in image {image_id}")
                if e.kind != "d":
                    return {"image": img["id"], "path": path, "entries": [e.to_dict()]}
            try:
                entries = idx.list_dir(path)
            except KeyError:
                entries = []
        return {"image": img["id"], "path": path, "entries": [e.to_dict() for e in entries]}

    def start_restore(self, image_id, paths, to, to_host=None, overwrite="skip"):
        img = self.image(image_id)
        if not paths:
            raise ValidationError("choose at least one path to restore",
                                  hint="give --path PATH (browse the image to find paths)")
        norm = [("/" if p == "/" else check_abs_path("path", p)) for p in paths]
        to = check_abs_path("restore target", to)
        host = self.config.host(to_host or img["client"])
        if overwrite not in OVERWRITE_CHOICES:
            raise ValidationError(f"overwrite choice {overwrite!r} is unknown",
                                  hint=f"choose one of: {', '.join(OVERWRITE_CHOICES)}")
        with self.open_index(img) as idx:
            for p in norm:
                if p != "/" and idx.lookup(p) is None:
                    raise NotFound(f"{p} is not in image {image_id}",
                                   hint=f"see `cairn browse {image_id} {os.path.dirname(p)}`")
        return self.jobs.create("restore", client=img["client"], policy=img["policy"],
                                schedule=img["schedule"], storage_unit=img["storage_unit"],
                                params={"image": img["id"], "paths": norm, "to": to,
                                        "to_host": host["name"], "overwrite": overwrite})

    # ---- running jobs ---------------------------------------------------------------------
    def wait_for(self, job_ids, timeout=None, poll=0.3):
        """Run the jobs here if no other dispatcher is active, else wait for them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if Dispatcher.lease_holder(self.db) is None:
                if self.dispatcher.run_until_done(job_ids):
                    break
            states = [self.jobs.get(j)["state"] for j in job_ids]
            if all(s == DONE for s in states):
                break
            if deadline and time.monotonic() > deadline:
                raise CairnError("timed out waiting for jobs " + ", ".join(map(str, job_ids)))
            time.sleep(poll)
        return [self.jobs.get(j) for j in job_ids]


def _image_dict(row):
    d = dict(row)
    d["selections"] = json.loads(d["selections"])
    return d
