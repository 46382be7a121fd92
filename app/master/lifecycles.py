"""Lifecycles (a backup, then duplications to other pools, each copy with its own retention)
and the copies of images. Part of the master API (app/master/__init__.py)."""

from app.jobs import copies


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
