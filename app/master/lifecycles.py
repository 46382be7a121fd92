"""Lifecycles (a backup, then duplications to other pools, each copy with its own retention)
and the copies of images. Part of the master API (app/master/__init__.py)."""

import json

from app import status
from app.jobs import copies
from app.jobs.duplicate_queue import JOB_TYPE as DUPLICATE
from app.jobs.store import DONE


class LifecyclesAPI:
    def create_lifecycle(self, name, steps, comment=""):
        """A lifecycle from its steps: "backup:STU:RETENTION" first, then one or more
        "duplicate:STU:RETENTION" (app/lifecycles.py), each to another disk pool."""
        return self.lifecycle_config.add(name, steps, comment=comment)

    def lifecycle(self, name):
        """One lifecycle with its steps (copy number, kind, storage unit, pool, host,
        retention) and the policies that use it."""
        return self.lifecycle_config.get(name)

    def lifecycles(self):
        """Every lifecycle, by name, as lifecycle() gives it."""
        return self.lifecycle_config.all()

    def duplicate_jobs(self, job_ids):
        """The duplicate jobs that backup jobs (or the parents of multi-stream backups)
        queued for their images, with their later attempts, oldest first."""
        ids = [int(j) for j in job_ids]
        if not ids:
            return []
        rows = self.db.all(f"SELECT id FROM jobs WHERE type='duplicate' AND parent_id IN "
                           f"({','.join('?' * len(ids))}) ORDER BY id", ids)
        return [self.jobs.get(r[0]) for r in rows]

    def image_copies(self, image_id):
        """Every copy of an image, the primary first: {"image", "copies": [{"copy",
        "primary", "storage_unit", "pool", "storage_host", "path", "image_bytes", "created",
        "expires", "job_id", "state", ...}], "duplications": the duplicate jobs queued or
        running for it}."""
        img = self.image(image_id)
        pending = [{"job": j["id"], "state": j["state"], "copy": j["params"].get("copy"),
                    "storage_unit": j["storage_unit"]}
                   for j in self.jobs.list() if j["type"] == "duplicate"
                   and j["state"] != "done" and j["params"].get("image") == img["id"]]
        return {"image": img["id"], "copies": copies.copies(self.db, img["id"]),
                "duplications": pending}

    def duplication_problems(self):
        """The copies a lifecycle wants that are not made and that no attempt is queued or
        running for: the newest attempt of a duplication (an image to a disk pool) ended
        without the copy, the image is still in the catalog and has no copy in that pool.
        [{"image", "copy", "pool", "storage_unit", "job", "status", "status_text", "attempts",
        "ended", "why"}], oldest first: what the console warns about."""
        latest = {}
        for r in self.db.all("SELECT id, params, state, status FROM jobs WHERE type=? "
                             "ORDER BY id", (DUPLICATE,)):
            p = json.loads(r["params"] or "{}")
            latest[(p.get("image"), p.get("pool"))] = r
        out = []
        for (image, pool), r in latest.items():
            if r["state"] != DONE or r["status"] in (status.OK, status.PARTIAL):
                continue
            jid = r["id"]
            j = self.jobs.get(jid)
            if not self.db.one("SELECT 1 FROM images WHERE id=?", (image,)) or \
                    copies.copy_on_pool(self.db, image, pool) is not None:
                continue
            ended = next((x["message"] for x in reversed(self.jobs.logs(jid))
                          if x["message"].startswith("ended with status")), "")
            why = ended.partition(": ")[2] or j["status_text"]
            out.append({"image": image, "copy": j["params"].get("copy"), "pool": pool,
                        "storage_unit": j["storage_unit"], "job": jid, "status": j["status"],
                        "status_text": j["status_text"], "attempts": j["attempt"],
                        "ended": j["ended"], "why": why})
        return out
