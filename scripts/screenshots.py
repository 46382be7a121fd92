"""Renders the README's screenshots (docs/screenshots/*.png) from a demo catalog made with
real backups and a restore on this machine.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--keep DIR]

The demo: this machine as the client and storage server, an AdvancedDisk pool in a scratch
directory, a policy with a nightly schedule, three backups of a generated tree (the tree
grows between them) and one restore to a new directory; beside it an encrypted deduplicating
pool with a policy that deduplicates on the client, two backups of the same tree (the second
finds nearly all its data in the pool) and a verify of that pool. The console sees this machine as a
node of the Storage Scale cluster described in scripts/demo-cluster.json, served by the test
double of the mm commands (tests/scale_double): the Storage Scale page and the disk pool
wizard's GPFS volumes show it."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: the demo's Storage Scale cluster: a test double of the mm commands and what it serves
SCALE_DOUBLE = {"CAIRN_MMFS_BIN": os.path.join(ROOT, "tests", "scale_double", "bin"),
                "CAIRN_SCALE_DOUBLE": os.path.join(ROOT, "scripts", "demo-cluster.json")}

VIEWS = ("dashboard", "getting-started", "hosts", "storage-servers", "disk-pools", "storage-units",
         "clusters", "policies", "activity", "restore", "reports", "wizard:storage-server",
         "wizard:disk-pool", "wizard:storage-unit", "wizard:policy", "dialog:alerts",
         "dialog:policy-properties", "dialog:benchmark", "audit")


def make_tree(root, files, size):
    for i in range(files):
        d = os.path.join(root, "projects", f"run-{i // 40:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"sample-{i:04d}.dat"), "wb") as f:
            f.write(os.urandom(size))
    with open(os.path.join(root, "projects", "README.md"), "w") as f:
        f.write("Instrument runs of the imaging lab.\n")


def demo_catalog(home, scratch):
    from app.master import Master
    m = Master(home)
    host = m.ensure_local_host()["name"]
    vol = os.path.join(scratch, "pool", "vol1")
    os.makedirs(vol)
    src = os.path.join(scratch, "gpfs", "fs1")
    m.create_storage_server("ss-disk1", type="advanced-disk", host=host)
    m.create_disk_pool("dp-fs1", server="ss-disk1", volumes=[vol], high_water=95,
                       low_water=80, max_io_streams=4)
    m.config.add_storage_unit("stu-fs1", pool="dp-fs1", max_concurrent_jobs=2)
    m.config.add_policy("projects-nightly", storage_unit="stu-fs1", priority=10)
    m.config.add_policy_client("projects-nightly", host)
    m.config.add_policy_selection("projects-nightly", os.path.join(src, "projects"))
    m.config.add_schedule("projects-nightly", "weekly", type="full", retention="4w",
                          calendar={"weekdays": [5]},
                          windows=[{"day": 5, "start": "20:00", "hours": 12}])
    m.config.add_schedule("projects-nightly", "nightly", type="differential", retention="2w",
                          windows=[{"day": d, "start": "22:00", "hours": 6} for d in range(5)])
    for round_, files in enumerate((300, 420, 520)):
        make_tree(src, files, 256 * 1024 * (round_ + 1))
        m.wait_for(m.start_backup("projects-nightly",
                                  schedule="weekly" if round_ == 0 else "nightly"))
    img = m.images()[-1]  # the first backup: restore a directory of it to a new place
    job = m.start_restore(img["id"], [os.path.join(src, "projects", "run-001")],
                          os.path.join(scratch, "restored"))
    m.wait_for([job])
    # Test storage performance shows a run of the pool's disks (short steps, small files)
    m.wait_for([m.start_storage_benchmark("ss-disk1", max_pairs=4, step_seconds=2,
                                          file_size=128 << 20)])
    demo_dedup(m, host, scratch, src)
    demo_alerts(m, scratch)
    demo_users(m, home)
    m.close()


def demo_users(m, home, host="fs1"):
    """Users of the demo and what they did from their desktops, for the audit log: logins
    with their keys, a restore-role user's restore refused outside its grant, an operator
    refused a configuration change, an admin changing a user's role."""
    from app.errors import PermissionDenied
    from app.master import Master
    m.add_user("ann", "restore", grants=[f"{host}:/gpfs/fs1/projects/alpha"],
               dest_grants=[f"{host}:/gpfs/fs1/scratch/ann"])
    m.add_user("olga", "operator")
    m.add_user("vic", "viewer")
    for name, addr, fp in (("olga", "10.20.0.14", "SHA256:Zr1ZQnV0uMZ9fB3yq8w3s5Gd0q1J2cK4mVb7xYpLh2E"),
                           ("ann", "10.20.3.41", "SHA256:3xffkv1CzprYOAwkpVBvWBX50xRiqZTg7bs87LXYmvc"),
                           ("vic", "10.20.0.77", "SHA256:q9P0cT1mR5aYk2Wn8s4LdB6eVx3uJh7gZf0oNi1Kc5Q")):
        u = Master(home, user=name, origin=addr)
        try:
            u.audit_login(method="publickey", key_fingerprint=fp)
            if name == "olga":
                try:
                    u.update_object("policy", "projects-nightly", priority=90)
                except PermissionDenied:
                    pass
            if name == "ann":
                img = m.images()[0]
                try:
                    u.start_restore(img["id"], ["/gpfs/fs1/projects/beta"], "/tmp/x")
                except PermissionDenied:
                    pass
            if name == "vic":
                try:
                    u.cancel_job(1)
                except PermissionDenied:
                    pass
        finally:
            u.close()
    m.set_user("vic", role="operator")
    m.set_setting("audit_syslog", "local3")


def demo_alerts(m, scratch):
    """Alerts by mail to the site's server and to syslog; one test message went to a syslog
    socket of the demo, so that the alert window has a message to show."""
    import socket
    path = os.path.join(scratch, "syslog.sock")
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(path)
    try:
        m.set_alert_settings({"syslog": "on", "syslog_address": path, "interval": "30m"})
        m.alerts_test()
    finally:
        log.close()
    m.set_alert_settings({"syslog_address": "/dev/log", "smtp_host": "mail.example.org", "smtp_user": "cairn-alerts",
                          "sender": "cairn@backup.example.org",
                          "recipients": "storage-admins@example.org"})


def demo_dedup(m, host, scratch, src):
    """The deduplicating pool of the demo. Named after the AdvancedDisk objects, so that the
    wizards' first choices stay the ones the other screenshots show."""
    m.create_storage_server("ss-fs1-dedup", type="dedup", host=host,
                            path=os.path.join(scratch, "gpfs", "fs1", "cairn-dedup"),
                            options={"encrypted": True})
    m.create_disk_pool("dp-fs1-dedup", server="ss-fs1-dedup", volumes=[], high_water=95,
                       low_water=80)
    m.config.add_storage_unit("stu-fs1-dedup", pool="dp-fs1-dedup", max_concurrent_jobs=2)
    m.config.add_policy("projects-dedup", storage_unit="stu-fs1-dedup", priority=5,
                        dedup="client")
    m.config.add_policy_client("projects-dedup", host)
    m.config.add_policy_selection("projects-dedup", os.path.join(src, "projects"))
    m.config.add_schedule("projects-dedup", "daily", type="full", retention="2w",
                          windows=[{"day": d, "start": "21:00", "hours": 8} for d in range(7)])
    jobs = []
    for _ in range(2):
        jobs += m.wait_for(m.start_backup("projects-dedup", schedule="daily"))
    jobs += m.wait_for([m.start_verify(pool="dp-fs1-dedup")])
    failed = [j for j in jobs if j["status"] not in (0, 1)]
    if failed:
        raise SystemExit("the demo's deduplicating pool did not work: " + "; ".join(
            f"{j['type']} job {j['id']}: {j['status_text']}" for j in failed))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    ap.add_argument("--keep", help="make the demo catalog here and keep it")
    args = ap.parse_args()
    scratch = args.keep or tempfile.mkdtemp(prefix="cairn-demo-")
    home = os.path.join(scratch, "home")
    os.makedirs(args.out, exist_ok=True)
    try:
        if not os.path.exists(os.path.join(home, "catalog.db")):
            demo_catalog(home, scratch)
        # The local host's agent, a subprocess of the console, inherits the double.
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=ROOT,
                   XDG_CONFIG_HOME=os.path.join(scratch, "settings"), **SCALE_DOUBLE)
        failed = 0
        for view in VIEWS:
            out = os.path.join(args.out, view.replace(":", "-") + ".png")
            p = subprocess.run([sys.executable, "-m", "app", "--home", home, "console",
                                "--screenshot", out, "--view", view], env=env)
            print(f"{view}: {'ok' if p.returncode == 0 else 'FAILED'} -> {out}")
            failed += p.returncode != 0
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
