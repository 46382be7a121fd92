"""Restores: checking a request, previewing where files land, queueing the job. Part of the master
API (app/master/__init__.py)."""

import os

from app import shared_volumes
from app.config import check_abs_path
from app.errors import NotFound, ValidationError
from app.jobs.restore_copies import check_copy
from app.jobs.restore_plan import chosen_paths
from app.relocate import join_target, plan_targets, Relocation


OVERWRITE_CHOICES = ("skip", "overwrite", "rename")
# How restored files are written: "auto" past the page cache (O_DIRECT) where the target's
# file system suits it, "off" always through it.
DIRECT_IO_CHOICES = ("auto", "off")
# A restore whose image and target are on one host runs in up to this many processes when
# asked; "auto" (None) lets the host choose (one per core, at most 4, for 64 MiB or more).
MAX_RESTORE_STREAMS = 16


class RestoresAPI:
    def _restore_request(self, image_id, paths, to, to_host, overwrite, relocate):
        img = self.image(image_id)
        if not paths:
            raise ValidationError("choose at least one path to restore",
                                  hint="give --path PATH (browse the image to find paths)")
        norm = [("/" if p == "/" else check_abs_path("path", p)) for p in paths]
        norm = [p for p in dict.fromkeys(norm)
                if not any(p != q and (q == "/" or p.startswith(q + "/")) for q in norm)]
        to = check_abs_path("restore target", to)
        shared_volumes.check_restore_target(self.db, to)
        if not to_host and not self.db.one("SELECT 1 FROM hosts WHERE name=?",
                                           (img["client"],)):
            raise NotFound(f"image {img['id']} is of client {img['client']}, which is not a "
                           "configured host (the image was imported from its pool, or the "
                           "host was removed)",
                           hint="restore to another host with --to-host HOST, or add the "
                                f"host: `cairn host add {img['client']} ...`")
        host = self.config.host(to_host or img["client"])
        if overwrite not in OVERWRITE_CHOICES:
            raise ValidationError(f"overwrite choice {overwrite!r} is unknown",
                                  hint=f"choose one of: {', '.join(OVERWRITE_CHOICES)}")
        relocation = (relocate if isinstance(relocate, Relocation)
                      else Relocation.from_dict(relocate))
        return img, norm, to, host, relocation

    def preview_restore(self, image_id, paths, to, to_host=None, overwrite="skip",
                        relocate=None, limit=50, check_limit=200_000):
        """Where a restore would put the chosen paths, before it runs: the first `limit`
        items (path, kind, target on the target host) and a check of up to `check_limit`
        entries for collisions; an invalid relocation raises, naming the first bad path."""
        img, norm, to, host, relocation = self._restore_request(
            image_id, paths, to, to_host, overwrite, relocate)
        seen, complete = [], True
        with self.open_index(img) as idx:
            for p in norm:
                if p != "/" and idx.lookup(p) is None:
                    raise NotFound(f"{p} is not in image {image_id}")
                walk = (e for top in idx.list_dir("/") for e in idx.walk(top.path)) \
                    if p == "/" else idx.walk(p)
                for e in walk:
                    if len(seen) >= check_limit:
                        complete = False
                        break
                    seen.append((e.path, e.kind))
                if not complete:
                    break
        targets = plan_targets(relocation, seen) if relocation else \
            {p: p for p, _ in seen}
        items = [{"path": p, "kind": k, "target": join_target(to, targets[p])}
                 for p, k in seen[:limit]]
        return {"image": img["id"], "to": to, "to_host": host["name"], "items": items,
                "checked": len(seen), "complete": complete,
                "relocate": relocation.to_dict()}

    def start_restore(self, image_id, paths, to, to_host=None, overwrite="skip",
                      relocate=None, direct_io="auto", streams=None, copy=None):
        """Queues a restore job. `relocate` ({"strip", "add", "rename": {"pattern",
        "replacement", "mode"}}, see app/relocate.py) changes where paths land under `to`;
        it is checked on the chosen paths now and on everything below them when the job
        builds its plan, before anything is written. `direct_io`: "auto" writes large files
        past the page cache where the target's file system suits it, "off" never (see
        DIRECT_IO_CHOICES). `streams`: the number of processes that restore at once when the
        image and the target are on one host (None: the host decides). `copy`: the number of
        the image's copy to read, and no other (None: the primary copy, then the next when
        one cannot be read; app/jobs/restore_copies.py)."""
        if direct_io not in DIRECT_IO_CHOICES:
            raise ValidationError(f"direct I/O choice {direct_io!r} is unknown",
                                  hint=f"choose one of: {', '.join(DIRECT_IO_CHOICES)}")
        if streams is not None and (isinstance(streams, bool) or not isinstance(streams, int)
                                    or not 1 <= streams <= MAX_RESTORE_STREAMS):
            raise ValidationError(f"{streams!r} parallel restore streams: not a number from 1 "
                                  f"to {MAX_RESTORE_STREAMS}",
                                  hint="use 1 for one process, more for files restored by "
                                       "several processes at once, or leave it to the host "
                                       "(auto)")
        img, norm, to, host, relocation = self._restore_request(
            image_id, paths, to, to_host, overwrite, relocate)
        if copy is not None:
            check_copy(self.db, img, copy)
        # The job checks them again, on everything below them, when it builds its plan.
        with self.open_index(img) as idx:
            chosen_paths(idx, norm, relocation, below=False, missing=lambda p: NotFound(
                f"{p} is not in image {image_id}",
                hint=f"see `cairn browse {image_id} {os.path.dirname(p)}`"))
        # "reads": every image whose data the restore may read, so none expires under it.
        params = {"image": img["id"], "reads": [img["id"]] + img["sources"], "paths": norm,
                  "to": to, "to_host": host["name"],
                  "overwrite": overwrite}
        if relocation:
            params["relocate"] = relocation.to_dict()
        if direct_io != "auto":
            params["direct_io"] = direct_io
        if streams is not None:
            params["parallel_streams"] = streams
        if copy is not None:
            params["copy"] = copy
        # One transaction with the check, so that an expire job either sees this restore's
        # reads or has marked its images before (app/jobs/holds.py).
        with self.db.tx() as c:
            for iid in params["reads"]:
                row = c.execute("SELECT expiring FROM images WHERE id=?", (iid,)).fetchone()
                if row is not None and row[0] is not None:
                    raise ValidationError(f"image {iid}, which this restore reads, is being "
                                          f"removed by expire job {row[0]}",
                                          hint="restore from another image")
            return self.jobs.create("restore", client=img["client"], policy=img["policy"],
                                    schedule=img["schedule"], storage_unit=img["storage_unit"],
                                    params=params, c=c)
