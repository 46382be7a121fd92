"""`cairn catalog check`: whether the catalog is sound, without changing it."""

from app import status as st
from app.cli.output import out
from app.errors import CairnError


def catalog_commands(sub, cmd):
    ca = cmd(sub, "catalog", "the catalog itself", handler=_no_action,
             opens_master=False).add_subparsers(dest="sub", metavar="ACTION")
    cmd(ca, "check", "check the catalog: sqlite's integrity check, every image's file index",
        handler=_check, opens_master=False,
        description="Check the catalog without changing it: sqlite's integrity and foreign "
                    "key checks, the file index of every image (present, readable, every "
                    "block intact), the images each image reads data from, and the image "
                    "files of pools on this machine. No host is contacted. Exits 0 when "
                    "nothing is wrong, else 70 with each problem and its fix.")


def _no_action(args):
    raise CairnError("name what to do with the catalog: cairn catalog check",
                     status_code=st.INVALID_REQUEST)


def _check(args):
    """`cairn catalog check` opens the catalog on its own, without the master: it must also
    report on a catalog the master refuses."""
    # The catalog's modules load for this command only: the others start without them.
    from app.catalog_check import check_catalog
    from app.paths import Home
    doc = check_catalog(Home(getattr(args, "home", None)))
    doc["status"] = st.OK if doc["ok"] else st.CATALOG_FAILED
    out(args, doc, _print_catalog_check)
    return doc["status"]


def _print_catalog_check(d):
    for p in d["problems"]:
        print(f"problem: {p['problem']}")
        print(f"  fix: {p['fix']}")
    for n in d["notes"]:
        print(f"note: {n['note']}" + (f"\n  fix: {n['fix']}" if n["fix"] else ""))
    def n(count, one, many):
        return f"{count} {one if count == 1 else many}"

    c = d["checked"]
    done = (["sqlite integrity"] if c["sqlite_integrity"] else []) \
        + (["foreign keys"] if c["foreign_keys"] else []) \
        + [n(c["images"], "image", "images"),
           n(c["indexes"], "file index", "file indexes")
           + f" ({n(c['index_entries'], 'entry', 'entries')})",
           n(c["image_files"], "image file", "image files") + " on this machine"]
    verdict = "no problems" if d["ok"] else n(len(d["problems"]), "problem", "problems")
    print(f"catalog {d['catalog']}: {verdict}; checked {', '.join(done)}")
