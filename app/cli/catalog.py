"""`cairn catalog check`: whether the catalog is sound, without changing it. `cairn catalog
backup`: the master's own state written to a pool (app/jobs/catalog_backup.py). `cairn catalog
recover`: a master recovered from such a backup into an empty home
(app/catalog_backup/recover.py)."""

from app import status as st
from app.cli.output import out
from app.cli.shared import jobs_result, progress_option
from app.errors import CairnError


def catalog_commands(sub, cmd):
    ca = cmd(sub, "catalog", "the catalog itself", handler=_no_action,
             opens_master=False).add_subparsers(dest="sub", metavar="ACTION")
    cmd(ca, "check", "check the catalog: sqlite's integrity check, every image's file index",
        handler=_check, opens_master=False,
        local_only="it reads the catalog's files themselves",
        description="Check the catalog without changing it: sqlite's integrity and foreign "
                    "key checks, the file index of every image (present, readable, every "
                    "block intact), the images each image reads data from, and the image "
                    "files of pools on this machine. No host is contacted. Exits 0 when "
                    "nothing is wrong, else 70 with each problem and its fix.")
    p = cmd(ca, "backup", "back up the catalog, its file indexes, known_hosts and the pool "
                          "keys to a storage unit's pool", handler=_backup,
            description="Queue a catalog backup: a consistent copy of the catalog (taken while "
                        "jobs run), the file indexes of its images, known_hosts and the keys "
                        "of encrypted pools, written as one archive to the folder "
                        "catalog-backups at the pool's path. The pool keys in it are sealed; "
                        "the passphrase opens them at recovery time and is stored nowhere. "
                        "The first catalog backup sets the passphrase; later ones must give "
                        "the same.")
    p.add_argument("--storage-unit", required=True, metavar="STU",
                   help="the storage unit whose pool holds the backup")
    p.add_argument("--passphrase-file", required=True, metavar="F",
                   help="a file whose first line is the passphrase (at least 8 characters)")
    p.add_argument("--retention", metavar="DURATION",
                   help="once written, remove the catalog backups in the same folder made "
                        "more than this long ago (e.g. 4w; the newest is always kept)")
    p.add_argument("--wait", action="store_true", help="wait until the job ends")
    progress_option(p)
    p = cmd(ca, "set-passphrase", "seal the catalog backup key with a new passphrase",
            handler=_set_passphrase,
            description="Change the catalog backups' passphrase: the key that seals the pool "
                        "keys in every catalog backup is sealed anew with the new passphrase. "
                        "Catalog backups made before keep needing the old one (each carries "
                        "the key as sealed on its day); make a new catalog backup at once.")
    p.add_argument("--passphrase-file", required=True, metavar="F",
                   help="a file whose first line is the current passphrase")
    p.add_argument("--new-passphrase-file", required=True, metavar="F",
                   help="a file whose first line is the new passphrase (at least 8 "
                        "characters)")
    p = cmd(ca, "recover", "recover a master into an empty CAIRN_HOME from the newest "
                           "catalog backup under a folder", handler=_recover,
            opens_master=False,
            description="Recover a master on a new machine: the newest complete catalog "
                        "backup under DIR (a pool's path as this machine sees it, or its "
                        "catalog-backups folder) is checked member by member and restored "
                        "into CAIRN_HOME (or --home), which must be empty or not exist yet: "
                        "the catalog, its file indexes, known_hosts and the pool keys. A "
                        "damaged backup or a wrong passphrase leaves the home untouched.")
    p.add_argument("--from", required=True, dest="from_dir", metavar="DIR",
                   help="the pool's path or its catalog-backups folder (on --host if given)")
    p.add_argument("--host", metavar="[USER@]HOST[:PORT]",
                   help="the storage host that holds the pool, reached over SSH; the newest "
                        "catalog backup is copied from it over SFTP")
    p.add_argument("--key", metavar="FILE", help="the SSH private key for --host")
    p.add_argument("--trust-host-key", action="store_true",
                   help="accept --host's key although no known_hosts holds it yet (check its "
                        "fingerprint first); a key that differs from the recovered "
                        "known_hosts' is refused all the same")
    p.add_argument("--passphrase-file", required=True, metavar="F",
                   help="a file whose first line is the catalog backups' passphrase")


def _no_action(args):
    raise CairnError("name what to do with the catalog: cairn catalog check, backup, "
                     "set-passphrase or recover",
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


def _backup(m, args):
    # The escrow's module loads for this command only, as the master does for the others.
    from app.catalog_backup.escrow import read_passphrase
    return jobs_result(m, args, [m.start_catalog_backup(
        args.storage_unit, read_passphrase(args.passphrase_file), retention=args.retention)])


def _set_passphrase(m, args):
    # The escrow's module loads for this command only, as the master does for the others.
    from app.catalog_backup.escrow import read_passphrase
    doc = m.change_catalog_passphrase(read_passphrase(args.passphrase_file),
                                      read_passphrase(args.new_passphrase_file))
    out(args, doc, lambda d: print("the catalog backup passphrase was changed; catalog "
                                   "backups made before still need the old one: make a new "
                                   "catalog backup now"))
    return doc["status"]


def _recover(args):
    """`cairn catalog recover` opens no master: there is no catalog until it is done."""
    # The recovery's modules load for this command only: the others start without them.
    from app.catalog_backup.escrow import read_passphrase
    from app.catalog_backup.recover import recover
    from app.paths import Home
    root = Home(getattr(args, "home", None)).root
    passphrase = read_passphrase(args.passphrase_file)
    if args.host:
        from app.catalog_backup.remote import recover_from_host  # loads SSH for --host only
        doc = recover_from_host(root, args.host, args.from_dir, passphrase, key_file=args.key,
                                trust_host_key=args.trust_host_key)
    else:
        doc = recover(root, args.from_dir, passphrase)
    out(args, doc, _print_recovered)
    return doc["status"]


def _age_text(seconds):
    if seconds is None:
        return "of unknown age"
    for unit, n in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= n:
            k = seconds // n
            return f"{k} {unit}{'' if k == 1 else 's'} old"
    return f"{seconds} seconds old"


def _print_recovered(d):
    print(f"recovered {d['home']} from {d['backup']}"
          + (f" (host key {d['host_key_fingerprint']})" if d.get("host") else ""))
    print(f"  made {d['created']} on {d['master_host']} (Cairn {d['cairn_version']}), "
          f"{_age_text(d['age_s'])}")
    print(f"  {d['images']} image(s), {d['jobs']} job(s), {d['indexes']} file index(es)"
          + (", known_hosts" if d["known_hosts"] else ""))
    print("  pool keys restored: " + (", ".join(d["keys_restored"]) or "none"))
    if d.get("credentials_restored"):
        print("  bucket credentials restored: " + ", ".join(d["credentials_restored"]))
    print("  images written after this catalog backup are not in it")
    if d.get("audit_segment"):
        print(f"  the audit log goes on in a new segment from entry {d['audit_segment']} "
              "(entries written after this catalog backup are not in it)")
