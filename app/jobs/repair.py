"""A repair job: a copy of an image that a verify found damaged (or missing) is written again
in its place from a good copy in another pool (a lifecycle's second copy), so that the pool
holds a whole copy again without anyone restoring by hand.

It is a copy like a duplicate job's (app/jobs/duplicate.py), the other way round: the source
is the first copy outside the damaged pool that can be read, the target the damaged copy's
own place. The damaged file is first set aside under a partial name in its folder (so that
nothing takes it for the image while the good copy is written), the copy is written under
its own partial name and committed to the image's name, and the damaged file is removed only
then; a failure puts it back. Between two pools that keep chunks only the chunks the damaged
pool lacks travel: those a verify found damaged were set aside there, so they are exactly
what is sent again.

A process stopped half-way leaves, at worst, the image's file set aside: the copy in the
pool is then missing (restores read the next copy; the next verify names it and queues a
repair again), and the set-aside file is a partial file that a cleanup removes."""

import posixpath

from app import status as st
from app.errors import CairnError
from app.jobs import copies, holds
from app.jobs.duplicate import DuplicateJob
from app.jobs.result import JobResult
from plugins.storage import registry

JOB_TYPE = "repair"


def queue_repairs(master, ctx, pool, image_ids):
    """After a verify of `pool` found the images `image_ids` damaged: a repair job for each
    whose copy in this pool has a copy in another pool to be read from. Returns
    [{"image", "copy", "job", "from"}]; the job's log says what was queued and what could
    not be."""
    out = []
    for iid in dict.fromkeys(i for i in image_ids if i):
        mine = copies.copy_on_pool(master.db, iid, pool)
        others = [c for c in copies.copies(master.db, iid)
                  if c["pool"] != pool and c["path"] and c["state"] == "ok"]
        if mine is None or not mine["path"]:
            continue
        if not others:
            ctx.log(f"image {iid} has no copy in another pool: it cannot be repaired; restore "
                    "what it holds while its other files are readable, and back it up again",
                    "warning")
            continue
        if master.db.one("SELECT 1 FROM jobs WHERE type=? AND state!='done' AND "
                         "json_extract(params, '$.image')=? AND "
                         "json_extract(params, '$.copy')=?", (JOB_TYPE, iid, mine["copy"])):
            continue
        jid = master.jobs.create(
            JOB_TYPE, client=master.image(iid)["client"], storage_unit=mine["storage_unit"],
            params={"image": iid, "copy": mine["copy"], "pool": pool},
            parent_id=ctx.id,
            note=f"repair queued by verify job {ctx.id}: copy {mine['copy']} of image "
                 f"{iid} in disk pool {pool} is written again from copy {others[0]['copy']} "
                 f"(disk pool {others[0]['pool']})")
        ctx.log(f"image {iid}: repair job {jid} queued, from copy {others[0]['copy']} in disk "
                f"pool {others[0]['pool']}")
        out.append({"image": iid, "copy": mine["copy"], "job": jid,
                    "from": others[0]["copy"]})
    return out


class RepairJob(DuplicateJob):
    """A repair job (app/jobs/kinds.py): prepare() finds the image, its damaged copy and that
    copy's pool; run() writes the copy again from another."""

    def prepare(self):
        cfg, p = self.master.config, self.p
        self.damaged = copies.copy_numbered(self.master.db, p["image"], p["copy"])
        if self.damaged is None:
            return
        self.stu = cfg.storage_unit(self.damaged["storage_unit"])
        self.pool = cfg.disk_pool(self.stu["pool"])
        self.server = cfg.storage_server(self.pool["server"])
        self.storage_type = registry.of_server(self.server)
        self.host = cfg.host(self.server["host"])
        self.image = self.master.image(p["image"])

    def run(self):
        p, ctx = self.p, self.ctx
        if self.damaged is None or self.image is None:
            return JobResult(message=f"image {p['image']} has no copy {p['copy']} any more "
                                     "(it expired); nothing to repair")
        ctx.log(f"repair of copy {self.damaged['copy']} of image {self.image['id']} in disk "
                f"pool {self.pool['name']} on {self.host['name']} ({self.damaged['path']}): "
                "written again from a good copy in another pool")
        self._hold([self.image["id"]])
        try:
            self._repair(self.image, self.damaged)
        finally:
            holds.release(self.master.db, self.job["id"])
        return self._report()

    def _places(self, image, final):
        """(volume, partial path of the good copy, partial path of the damaged file), in the
        damaged file's folder."""
        volume = next((v for v in self.pool["volumes"]
                       if final.startswith(v.rstrip("/") + "/")), self.server.get("path"))

        def partial(tag):
            p = self.storage_type.image_paths(volume, image["client"],
                                              f"{image['id']}.{tag}{self.job['id']}")[0]
            if posixpath.dirname(p) != posixpath.dirname(final):
                name = posixpath.basename(final)
                p = posixpath.join(posixpath.dirname(final), f".{name}.{tag}{self.job['id']}"
                                                             ".partial")
            return p
        return volume, partial("repair"), partial("damaged")

    def _repair(self, image, damaged):
        ctx, master = self.ctx, self.master
        source, conn = self._source(image)
        target = master.hosts.connect(self.host)
        final = damaged["path"]
        volume, partial, aside = self._places(image, final)
        # compressed as the damaged copy was, if it was
        side = self.storage_type.duplicate_side(server=self.server, pool=self.pool,
                                                home=master.home, volume=volume,
                                                image_id=image["id"], source=damaged)
        present = target.call("stat_path", {"path": final}, timeout=60)["exists"]
        if present:
            target.call("set_aside_image", {"path": final, "aside": aside}, timeout=60)
        ctx.log(f"image {image['id']}: from copy {source['copy']} (disk pool {source['pool']} "
                f"on {source['storage_host']})"
                + ("; the damaged file is set aside until the good copy is in place"
                   if present else "; its file is missing"))
        ctx.flush()
        try:
            summary, received = self._transfer(image, source, conn, target, side, partial)
            stats = side.outcome(summary, received)
            committed = target.call("commit_image", {"partial": partial, "final": final,
                                                     "storage": side.commit_spec()},
                                    timeout=side.commit_timeout)
        except BaseException:
            self._put_back(target, partial, aside, final, present)
            raise
        if present:
            target.call("remove_image", {"path": aside}, timeout=120)
        self._record_repair(image, damaged, committed["bytes"] + side.stored_bytes(stats),
                            side.catalog_fields(stats).get("compression"))
        self._log_copy(image, damaged["copy"], summary, stats, side)

    def _put_back(self, target, partial, aside, final, present):
        for c in self.calls:
            c.cancel()
        for c in self.calls:
            c.wait_done(30)
        try:
            target.call("abort_image", {"partial": partial}, timeout=60)
            if present and not target.call("stat_path", {"path": final}, timeout=60)["exists"]:
                target.call("set_aside_image", {"path": final, "aside": aside, "back": True},
                            timeout=60)
        except CairnError as e:
            self.ctx.log(f"the damaged file could not be put back ({e.message}); the copy in "
                         "this pool counts as missing until repaired", "warning")

    def _record_repair(self, image, damaged, image_bytes, compression=None):
        with self.master.db.tx() as c:
            if damaged["primary"]:
                c.execute("UPDATE images SET image_bytes=?, compression=? WHERE id=?",
                          (image_bytes, compression, image["id"]))
            else:
                c.execute("UPDATE image_copies SET image_bytes=?, compression=?, state='ok' "
                          "WHERE image_id=? AND copy_number=?",
                          (image_bytes, compression, image["id"], damaged["copy"]))
        if image_bytes <= 0:
            raise CairnError(f"the repaired copy of image {image['id']} is empty",
                             status_code=st.STORAGE_WRITE_FAILED)
