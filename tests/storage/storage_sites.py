"""How the conformance suite makes a pool of any storage type, and looks at it, without asking
which type it is: what a type needs comes from its StorageType (plugins/storage/base.py).

A type whose servers need options to work at all in a test (a cloud pool's bucket, say) adds
them to SERVER_OPTIONS; one whose image data cannot be found on the storage host's disk (kept
elsewhere) adds a function to DAMAGE that damages a file's data in its pool."""

import os
import time

from plugins.storage import registry

TYPE_NAMES = sorted(registry.TYPES)

# Storage server options a type needs in these tests: {type name: options}.
SERVER_OPTIONS = {}

# {type name: site() -> (options, credentials)} for a type whose servers each need a service
# of their own (a cloud pool: a new bucket of the loopback S3 server); conftest.py sets it.
SITES = {}

# {type name: damage(master, image, data)}: flips a byte of a file's data where the pool
# keeps it; by default the pool's files are searched for the data (see damage_data).
DAMAGE = {}


def where(storage_type, directory):
    """(create_storage_server arguments, create_disk_pool volumes) of a pool of the type kept
    in `directory`, made here unless the type makes its storage path itself (private)."""
    if not storage_type.makes_path:
        os.makedirs(directory, exist_ok=True)
    server = {"type": storage_type.name, "options": SERVER_OPTIONS.get(storage_type.name)}
    site = SITES.get(storage_type.name)
    if site is not None:
        server["options"], server["credentials"] = site()
    if storage_type.needs_path:
        server["path"] = str(directory)
    volumes = [] if storage_type.capabilities.one_pool else [str(directory)]
    return server, volumes


def make_pool(m, storage_type, directory, *, server="ss1", pool="dp1", host="me", **pool_kw):
    """A storage server and its disk pool, through the master API."""
    server_kw, volumes = where(storage_type, directory)
    m.create_storage_server(server, host=host, **server_kw)
    m.create_disk_pool(pool, server=server, volumes=volumes, **pool_kw)


def cli_pool(cairn, home, storage_type, directory, *, host="me"):
    """A storage server ss1 and its disk pool dp1, through the CLI."""
    server_kw, volumes = where(storage_type, directory)
    args = ["storage-server", "create", "ss1", "--type", storage_type.name, "--host", host]
    if "path" in server_kw:
        args += ["--path", server_kw["path"]]
    if server_kw.get("credentials"):
        creds = os.path.join(os.path.dirname(str(directory)), "bucket.credentials")
        fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in server_kw["credentials"].items()))
        args += ["--credentials-file", creds]
        options = dict(server_kw["options"])
        args += ["--endpoint", options.pop("endpoint"), "--bucket", options.pop("bucket")]
        server_kw["options"] = options
    assert not server_kw["options"], "cli_pool takes no other server options"
    cairn(home, *args)
    cairn(home, "disk-pool", "create", "dp1", "--server", "ss1",
          *[a for v in volumes for a in ("--volume", v)])


def image_files(m, pool="dp1"):
    """Every file in the image folders of the pool's volumes: committed images and partial
    ones."""
    dp = m.config.disk_pool(pool)
    storage_type = registry.of_server(m.config.storage_server(dp["server"]))
    out = []
    for vol in dp["volumes"]:
        for d, _, files in os.walk(os.path.join(vol, storage_type.image_dir)):
            out += [os.path.join(d, f) for f in files]
    return sorted(out)


def pool_files(m, pool="dp1"):
    """Every file below the pool's volumes."""
    out = []
    for vol in m.config.disk_pool(pool)["volumes"]:
        for d, _, files in os.walk(vol):
            out += [os.path.join(d, f) for f in files]
    return sorted(out)


def damage_data(m, image, data):
    """Flips one byte in the middle of `data` (a file's contents, incompressible and unique)
    where the image's pool keeps it; returns the file it changed."""
    storage_type = registry.of_server(m.config.storage_server(
        m.config.disk_pool(image["pool"])["server"]))
    own = DAMAGE.get(storage_type.name)
    if own is not None:
        return own(m, image, data)
    mid = len(data) // 2
    needle = data[mid:mid + 64]
    for path in pool_files(m, image["pool"]):
        with open(path, "r+b") as f:
            content = f.read()
            at = content.find(needle)
            if at >= 0:
                f.seek(at)
                f.write(bytes([content[at] ^ 0xFF]))
                return path
    raise AssertionError(f"the data is nowhere in pool {image['pool']}: add the type's way "
                         "to damage it to DAMAGE")


def log_of(m, job_id):
    return "\n".join(x["message"] for x in m.jobs.logs(job_id))


def wait_until(condition, timeout=30.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not come within {timeout:.0f} s"
        time.sleep(0.1)
