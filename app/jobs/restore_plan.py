"""A restore's plan, from the image's catalog index: which members, in image order, with
their checksums, and where each lands under the target directory.

The chosen paths and the relocation (app/relocate.py) are checked by one function,
chosen_paths, twice: when the restore is queued (Master.start_restore, on the chosen paths)
and when the job builds its plan (on everything below them), since the image's index may have
changed in between. The whole plan is mapped and checked before anything is read, so a rename
that would put two files on one target fails the job with nothing written."""

from app.errors import ValidationError
from app.formats import entry as E
from app.relocate import plan_targets


def chosen_paths(index, paths, relocation, *, missing, below=True):
    """What a restore of `paths` (absolute; "/" is the whole image) takes from an image's
    index, checked: ({path: entry}, {path: its relocated target} or None without a
    relocation). A path the image does not hold raises `missing(path)`; a relocation that
    would put two paths on one target, or a file where a directory must be, raises
    RelocationError.

    below=True takes every entry below the chosen paths (a restore job's plan); below=False
    the chosen paths alone, "/" without an entry (None, counted as a directory): what
    queueing a restore checks without reading the whole index."""
    chosen = {}
    for p in paths:
        if p == "/":
            if not below:
                chosen.setdefault(p, None)
                continue
            for top in index.list_dir("/"):
                for e in index.walk(top.path):
                    chosen.setdefault(e.path, e)
            continue
        e = index.lookup(p)
        if e is None:
            raise missing(p)
        if not below:
            chosen.setdefault(p, e)
            continue
        for d in index.walk(p):
            chosen.setdefault(d.path, d)
    targets = None
    if relocation:
        targets = plan_targets(relocation, ((p, e.kind if e is not None else E.KIND_DIR)
                                            for p, e in chosen.items()))
    return chosen, targets


def _not_in_image(path):
    return ValidationError(f"{path} is not in the image",
                           hint="browse the image with `cairn browse IMAGE` to see its paths")


def _plain(path):
    return path.startswith("/") and ".." not in path.split("/")


def build_plan(index, paths, relocation=None):
    """(plan, extents, files, bytes) for the chosen paths of an image, each item with its
    relocated target ("to") when a relocation is given."""
    chosen, targets = chosen_paths(index, paths, relocation, missing=_not_in_image)
    # Directories the index made up (no member in the image: length 0) have nothing to read;
    # the agent creates missing parents by itself.
    entries = [e for e in chosen.values() if e.length > 0
               # a directory mapped onto the target itself is merged into it
               and not (targets and targets[e.path] == "/")]
    items = []
    # A hard link group whose first link is not restored: its first chosen link becomes the
    # file (below), the others link to that one, so that the group stays one file.
    holders = {}
    for e in entries:
        # "member" (the tar member to read) is left out where it is the path's own
        # (E.member_name), and "link" where there is none: the agent takes them as such, and
        # the plan of a restore of many files is that much quicker to send and to read.
        item = {"path": e.path, "kind": e.kind, "checksum": e.checksum, "size": e.size}
        if e.link:
            item["link"] = e.link
        if targets is not None:
            item["to"] = targets[e.path]
        # The third field names the image file that holds the member: 0 this image, k its
        # k-th source (an incremental lists unchanged entries held by earlier images).
        extent = [e.offset, e.length, e.src]
        if e.kind == E.KIND_HARDLINK and e.link not in chosen:
            holder = holders.get(e.link)
            if holder is not None:
                # the member still names the group's first link; "link_to" is where the
                # restore finds the group's file
                item["link_to"] = holder
            else:
                # The link's target is not restored: restore the link as a file of its own,
                # from the target's member.
                target = index.lookup(e.link) if _plain(e.link) else None
                if target is not None and target.kind == E.KIND_FILE:
                    item.update(kind=E.KIND_FILE, checksum=target.checksum,
                                member=E.member_name(target.path), size=target.size)
                    extent = [target.offset, target.length, target.src]
                    holders[e.link] = e.path
                # else: a link to nothing the image holds; the agent refuses and logs it.
        items.append((item, extent))
    # Image by image in image order: each file is read front to back. Directory metadata is
    # applied at the end by the agent, so the order of images does not matter for it. Links
    # to a group's file made above come after every file.
    items.sort(key=lambda ie: ("link_to" in ie[0], ie[1][2], ie[1][0]))
    plan, extents = [], []
    nbytes = nfiles = 0
    for item, extent in items:
        plan.append(item)
        extents.append(extent)
        if item["kind"] != E.KIND_DIR:
            nfiles += 1
        # Stored bytes (the member's length), as the restore counts them: a sparse file
        # moves only its data.
        nbytes += extent[1] if item["kind"] == E.KIND_FILE else 0
    return plan, extents, nfiles, nbytes
