"""Backup images: listing, browsing and searching them through their catalog indexes, and expiring
them. Part of the master API (app/master/__init__.py)."""

import json
import os
from contextlib import contextmanager

from app import status, timeutil
from app.catalog_index import IndexCorrupt, IndexReader, rebuild_hint
from app.config import check_abs_path
from app.errors import CairnError, NotFound, ValidationError
from app.formats import owners
from app.jobs import expire
from app.jobs.reindex import aside_files
from app.search import has_wildcards, search_index


class ImagesAPI:
    # ---- images ---------------------------------------------------------------------------
    def images(self, client=None, policy=None, include_parts=False):
        """Images newest first. The stream images of a multi-stream backup are listed only
        with include_parts: their set image is the backup to browse and restore."""
        sql, args = f"SELECT *, {_COPIES} FROM images WHERE 1=1", []
        if not include_parts:
            sql += " AND part_of IS NULL"
        if client:
            sql += " AND client=?"
            args.append(client)
        if policy:
            sql += " AND policy=?"
            args.append(policy)
        return [_image_dict(r) for r in self.db.all(sql + " ORDER BY created DESC, id DESC",
                                                     args)]

    def image(self, image_id):
        row = self.db.one(f"SELECT *, {_COPIES} FROM images WHERE id=?", (image_id,))
        if row is None:
            raise NotFound(f"there is no image {image_id!r}",
                           hint="see `cairn images list`")
        return _image_dict(row)

    def image_at(self, client, policy=None, at=None):
        """The newest image of a client (under a policy) created at or before `at`. The
        client need not be a configured host when the catalog has images of it (imported
        from a pool)."""
        if not self.db.one("SELECT 1 FROM images WHERE client=? LIMIT 1", (client,)):
            self.config.host(client)
        sql = f"SELECT *, {_COPIES} FROM images WHERE client=? AND part_of IS NULL"
        args = [client]
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

    def expire_preview(self, image_id):
        """What expiring an image takes with it: every image that reads data from it (the
        incrementals after it, the stream images of a set), which must go together."""
        img = self.image(image_id)
        others = [self.image(i) for i in expire.dependents(self.db, [img["id"]])]
        others.sort(key=lambda d: (d["created"], d["id"]))
        return {"image": img["id"], "with": [d["id"] for d in others], "images": [img] + others,
                "bytes": img["image_bytes"] + sum(d["image_bytes"] for d in others)}

    def start_expire(self, image_id, with_dependents=True):
        """Queues an expire job for an image and everything that depends on it (see
        expire_preview). With with_dependents=False an image others depend on is refused."""
        preview = self.expire_preview(image_id)
        if preview["with"] and not with_dependents:
            raise ValidationError(
                f"image {image_id} is needed by {len(preview['with'])} other image(s): "
                f"{', '.join(preview['with'])}",
                hint="expire them together with --with-dependents")
        ids = [preview["image"]] + preview["with"]
        # A backup that reads one of them (its incremental base, its files cache) or a
        # restore: refused now, naming the job; the job checks again as it starts.
        expire.refuse_if_held(self.db, ids, image_id)
        return expire.make_job(self, ids, "expired by the administrator")

    def expire_image(self, image_id, with_dependents=False):
        """Expires an image (and, when allowed, its dependents) through an expire job, and
        waits for it."""
        jid = self.start_expire(image_id, with_dependents=with_dependents)
        [job] = self.wait_for([jid])
        if job["status"] != status.OK:
            raise CairnError(f"expiring image {image_id} failed: {job['status_text']} "
                             f"(see `cairn jobs log {jid}`)", status_code=job["status"])
        return {"expired": image_id, "job": jid, "images": job["params"]["images"],
                "bytes": job["bytes"]}

    def expire_due(self, now=None):
        """Queues expire jobs for images whose retention has ended (see app/jobs/expire.py)."""
        return expire.expire_due(self, now)

    def remove_index(self, image_id):
        path = self.home.index_path(image_id)
        # with the indexes that rebuilds of it kept aside
        for p in [path] + aside_files(path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    @contextmanager
    def open_index(self, img):
        """The catalog file index of an image; a missing or damaged one (found on opening or
        on any read inside the block) becomes a clear error."""
        path = self.home.index_path(img["id"])
        hint = (rebuild_hint(img["id"])
                + "; `cairn catalog check` lists every index that needs it")
        try:
            reader = IndexReader(path)
        except FileNotFoundError:
            raise CairnError(f"the file index of image {img['id']} is missing ({path})",
                             hint=hint, status_code=status.IMAGE_DAMAGED) from None
        except IndexCorrupt as e:
            raise CairnError(f"the file index of image {img['id']} is damaged: {e}",
                             hint=hint, status_code=status.IMAGE_DAMAGED) from None
        except OSError as e:
            raise CairnError(f"cannot read the file index of image {img['id']} ({path}): "
                             f"{e.strerror or e}", hint="check the file's permissions and the "
                             "disk that holds it (dmesg); " + hint,
                             status_code=status.IMAGE_DAMAGED) from None
        try:
            with reader:
                yield reader
        except IndexCorrupt as e:
            raise CairnError(f"the file index of image {img['id']} is damaged: {e}",
                             hint=hint, status_code=status.IMAGE_DAMAGED) from None
        except OSError as e:
            raise CairnError(f"cannot read the file index of image {img['id']} ({path}): "
                             f"{e.strerror or e}", hint="check the disk that holds it "
                             "(dmesg); " + hint, status_code=status.IMAGE_DAMAGED) from None

    def browse(self, image_id, path="/"):
        """A directory of an image (or the one entry a file path names). Each entry carries
        its uid and gid and, where the client had names for them when it was backed up, its
        `user` and `group` (else null)."""
        img = self.image(image_id)
        path = "/" if path in (None, "", "/") else check_abs_path("path", path)
        with self.open_index(img) as idx:
            if path != "/":
                e = idx.lookup(path)
                if e is None:
                    raise NotFound(f"{path} is not in image {image_id}")
                entries = [e] if e.kind != "d" else None
            else:
                entries = None
            if entries is None:
                try:
                    entries = idx.list_dir(path)
                except KeyError:
                    entries = []
        users, groups = self.owner_names(img["id"])
        out = []
        for e in entries:
            d = e.to_dict()
            d["user"], d["group"] = users.get(e.uid), groups.get(e.gid)
            out.append(d)
        return {"image": img["id"], "path": path, "entries": out}

    def owner_names(self, image_id):
        """(users, groups): {uid: name} and {gid: name} as the client named them when the
        image was backed up (app/formats/owners.py); a set image has its stream images'.
        Empty for an image made before names were recorded."""
        row = self.db.one("SELECT owners FROM images WHERE id=?", (image_id,))
        if row is None:
            raise NotFound(f"there is no image {image_id!r}", hint="see `cairn images list`")
        tables = [owners.from_column(row[0])]
        tables += [owners.from_column(r[0]) for r in self.db.all(
            "SELECT owners FROM images WHERE part_of=? ORDER BY id", (image_id,))]
        return owners.merged(tables)

    # ---- finding and restoring files ------------------------------------------------------
    def list_entries(self, image_id, path="/"):
        """The entries of one directory of an image as the index's own Entry tuples (path,
        name, kind, mode, uid, gid, size, mtime_ns, offset, length, checksum, link), sorted
        by name bytes: browse() without a dict per entry, for the console's file tree, which
        lists directories of 100,000 entries at once."""
        img = self.image(image_id)
        path = "/" if path in (None, "", "/") else check_abs_path("path", path)
        with self.open_index(img) as idx:
            try:
                return idx.list_dir(path)
            except KeyError:
                raise NotFound(f"{path} is not in image {image_id}") from None

    def images_in_range(self, client=None, policy=None, since=None, until=None):
        """Images (newest first) created in [since, until]; either end may be open."""
        rows = self.images(client=client, policy=policy)
        lo = timeutil.iso(timeutil.parse_iso(since)) if since else None
        hi = timeutil.iso(timeutil.parse_iso(until)) if until else None
        return [r for r in rows if (lo is None or r["created"] >= lo)
                and (hi is None or r["created"] <= hi)]

    def image_clients(self):
        """The clients that have images: name, images, newest (created)."""
        return [{"client": r[0], "images": r[1], "newest": r[2]} for r in self.db.all(
            "SELECT client, COUNT(*), MAX(created) FROM images GROUP BY client "
            "ORDER BY client")]

    def search(self, image_id, pattern, limit=10_000, case_sensitive=False, cancel=None):
        """Files of an image whose name (or path, for a pattern with /) matches a glob;
        see app/search.py. `cancel` is a threading.Event that stops the search early."""
        img = self.image(image_id)
        try:
            with self.open_index(img) as idx:
                found = search_index(idx, pattern, limit=limit, case_sensitive=case_sensitive,
                                     cancel=cancel)
        except ValueError as e:
            if isinstance(e, IndexCorrupt):
                raise
            raise ValidationError(str(e)) from None
        found["image"] = img["id"]
        return found

    def find_versions(self, client, query, limit=1_000, case_sensitive=False, cancel=None):
        """Every version of a file in every image of a client, newest image first: an
        absolute path without wildcards is looked up, anything else searched as a pattern."""
        self.config.host(client)
        query = (query or "").strip()
        if not query:
            raise ValidationError("type a path or a pattern to look for")
        exact = query.startswith("/") and not has_wildcards(query)
        if exact:
            query = check_abs_path("path", query)
        versions, errors, count, cancelled = [], [], 0, False
        for img in self.images(client=client):
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            try:
                if exact:
                    with self.open_index(img) as idx:
                        e = idx.lookup(query)
                    found = [e.to_dict()] if e is not None else []
                    n = len(found)
                else:
                    r = self.search(img["id"], query, limit=max(limit - len(versions), 0),
                                    case_sensitive=case_sensitive, cancel=cancel)
                    found, n, cancelled = r["matches"], r["count"], r["cancelled"]
            except CairnError as e:
                errors.append({"image": img["id"], "message": e.message})
                continue
            count += n
            for f in found[:max(limit - len(versions), 0)]:
                f.update(image=img["id"], created=img["created"], policy=img["policy"],
                         schedule=img["schedule"])
                versions.append(f)
            if cancelled:
                break
        return {"client": client, "query": query, "versions": versions, "count": count,
                "truncated": count > len(versions), "cancelled": cancelled, "errors": errors}


# How many copies an image has (its primary and those a lifecycle's duplications made), and
# until when the last of them is kept (NULL: one is kept forever): the image's own end.
_COPIES = ("(SELECT count(*) FROM image_copies k WHERE k.image_id=images.id) + 1 AS copies, "
           "CASE WHEN expires IS NULL OR EXISTS (SELECT 1 FROM image_copies k WHERE "
           "k.image_id=images.id AND k.expires IS NULL) THEN NULL ELSE max(expires, coalesce("
           "(SELECT max(expires) FROM image_copies k WHERE k.image_id=images.id), expires)) "
           "END AS kept_until")


def _image_dict(row):
    d = dict(row)
    d["selections"] = json.loads(d["selections"])
    d["sources"] = json.loads(d.get("sources") or "[]")
    # The Storage Scale snapshots the image was read from, and how its file list was made.
    d["snapshot"] = json.loads(d["snapshot"]) if d.get("snapshot") else []
    d["scan"] = json.loads(d["scan"]) if d.get("scan") else None
    # On a deduplication pool: what the image added to the pool and its deduplication rate.
    d["dedup"] = json.loads(d["dedup"]) if d.get("dedup") else None
    # An advanced-disk image compressed with zstd: where, at which level, its frames, and
    # its tar stream's bytes beside the bytes stored (image_bytes); None: a plain tar file.
    d["compression"] = json.loads(d["compression"]) if d.get("compression") else None
    # Recorded again from its pool by an import job: what it found (app/jobs/pool_import.py).
    d["imported"] = json.loads(d["imported"]) if d.get("imported") else None
    # The owner names are read with the listings that show them (owner_names), not with
    # every image of a list.
    d.pop("owners", None)
    return d
