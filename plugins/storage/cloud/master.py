"""Cloud, the master half: a deduplicating pool (plugins/storage/dedup/master.py) whose
containers, container indexes, recipes and pool description are also kept in an S3 bucket;
the storage server's path is the local cache on its host. Everything a dedup pool does, a
cloud pool does, with the bucket as the place that holds the pool: an image is committed once
the bucket holds all of it, and a pool is imported from its bucket alone.

The bucket's credentials are given as a private file (keys.py) and kept by the master in
CAIRN_HOME/keys/SERVER.s3, never in the catalog; the storage host's agent gets them in the
storage spec, over the SSH channel of the job that needs them."""

import re
from urllib.parse import urlsplit

from app.errors import ValidationError
from plugins.storage.base import Capabilities
from plugins.storage.cloud import keys as cloud_keys
from plugins.storage.dedup import master as dedup

TYPE = "cloud"
DESCRIPTION = ("A deduplicating pool whose containers live in an S3 bucket behind a local "
               "cache on the storage server: backups land in the cache and are uploaded as "
               "they run; the bucket holds the whole pool.")
BUCKET_OPTIONS = ("endpoint", "bucket", "region", "prefix", "ca_file", "cache_limit",
                  "attempts", "sign_payload", "commit_at")
COMMIT_AT = ("bucket", "cache")
MAX_ATTEMPTS = 20
DEFAULT_CACHE = "/var/cache/cairn/cloud"
# S3's bucket names: 3 to 63 lower-case letters, digits, dots and hyphens.
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def check_bucket_options(options):
    """The bucket's options completed and checked."""
    out = {k: options.get(k) for k in BUCKET_OPTIONS}
    endpoint = out["endpoint"]
    if not endpoint:
        raise ValidationError("a cloud storage server needs --endpoint URL",
                              hint="the S3 service's address, e.g. https://s3.example.org")
    url = urlsplit(endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValidationError(f"endpoint {endpoint!r} is not an http or https URL",
                              hint="e.g. https://s3.example.org or http://10.0.0.5:9000")
    if not out["bucket"]:
        raise ValidationError("a cloud storage server needs --bucket NAME")
    if not BUCKET_NAME.match(out["bucket"]):
        raise ValidationError(f"bucket name {out['bucket']!r} is not valid",
                              hint="3 to 63 lower-case letters, digits, dots and hyphens")
    prefix = (out["prefix"] or "").strip("/")
    if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
        raise ValidationError(f"prefix {out['prefix']!r} is not valid",
                              hint="names separated by /, e.g. cairn/site1")
    out["prefix"] = prefix + "/" if prefix else ""
    if out["ca_file"] is not None and not str(out["ca_file"]).startswith("/"):
        raise ValidationError(f"CA file {out['ca_file']!r} is not an absolute path",
                              hint="the CA certificate file on the storage server")
    limit = out["cache_limit"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 0):
        raise ValidationError(f"cache limit {limit!r} is not a number of bytes")
    if out["sign_payload"] is not None and not isinstance(out["sign_payload"], bool):
        raise ValidationError(f"sign_payload {out['sign_payload']!r} is not true or false",
                              hint="true: every request's body is signed (SHA-256); false: "
                                   "not; left out: signed over http only")
    if out["commit_at"] is None:
        out["commit_at"] = "bucket"
    if out["commit_at"] not in COMMIT_AT:
        raise ValidationError(f"commit_at {out['commit_at']!r} is not bucket or cache",
                              hint="bucket: a backup ends once the bucket holds its image; "
                                   "cache: once the cache does, its upload queued")
    attempts = out["attempts"]
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)
                                 or not 1 <= attempts <= MAX_ATTEMPTS):
        raise ValidationError(f"attempts {attempts!r} is not a number from 1 to "
                              f"{MAX_ATTEMPTS}", hint="how often a request to the bucket is "
                                                      "tried before it fails (default 8)")
    return out


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


class CloudBackup(dedup.DedupBackup):
    """A backup into a cloud pool: a dedup backup whose commit waits for the bucket."""

    # the commit waits until the bucket holds every container, however far the uploads fell
    # behind the backup (a slow link): each request has its own timeouts and retries, and a
    # lost agent ends the call
    commit_timeout = None

    def placed_text(self):
        b = self.access["bucket"]
        return (f"image {self.image_id} goes to cloud pool {self.pool['name']} (cache "
                f"{self.volume}, bucket {b['bucket']} at {b['endpoint']})"
                + (", encrypted at rest" if self.access.get("key") else "")
                + f", chunks of {dedup.chunk_text(self.access['params'])}")

    def committed_texts(self, committed):
        c = committed.get("cloud")
        if not c:
            return []
        if c.get("queued"):
            text = (f"the image is committed in the cache, not yet in the bucket: "
                    f"{c['waiting']} container(s) ({_mib(c['waiting_bytes'])}) and "
                    f"{c['waiting_recipes']} recipe(s) of the pool are queued for upload; "
                    f"the cache keeps {c['cached']} container(s) "
                    f"({_mib(c['cached_bytes'])})")
        else:
            text = (f"the bucket holds the image and all {c['containers']} container(s) of "
                    f"the pool; the cache keeps {c['cached']} ({_mib(c['cached_bytes'])})")
        if c.get("trimmed"):
            text += (f", {c['trimmed']} older container(s) ({_mib(c['trimmed_bytes'])}) "
                     "trimmed from it")
        if c.get("retried"):
            text += f"; {c['retried']} request(s) to the bucket were tried again"
        return [text]


class Cloud(dedup.Dedup):
    name = TYPE
    description = DESCRIPTION
    capabilities = Capabilities(dedup=True, encryption=True, reclaim=True, files_cache=True,
                                one_pool=True, import_images=True, bucket=True)

    def default_options(self):
        return dict(dedup.default_options(), **{k: None for k in BUCKET_OPTIONS})

    def check_options(self, options):
        options = dict(options or {})
        bucket = check_bucket_options(options)
        out = dedup.check_options({k: v for k, v in options.items()
                                   if k not in BUCKET_OPTIONS})
        out.update(bucket)
        return out

    def default_path(self, server_name):
        return f"{DEFAULT_CACHE}/{server_name}"

    def create_key(self, home, server_name, options, credentials=None):
        if credentials is None:
            raise ValidationError("a cloud storage server needs the bucket's credentials",
                                  hint="--credentials-file F: a file only you may read "
                                       "(chmod 600) with access_key=... and secret_key=... "
                                       "lines")
        creds = cloud_keys.parse("".join(f"{k}={credentials.get(k) or ''}\n"
                                         for k in cloud_keys.FIELDS), "the credentials")
        cloud_keys.store(home, server_name, creds)
        try:
            super().create_key(home, server_name, options)
        except BaseException:
            cloud_keys.remove(home, server_name)
            raise

    def remove_key(self, home, server_name, options):
        super().remove_key(home, server_name, options)
        cloud_keys.remove(home, server_name)

    def access_without_key(self, server, home):
        opts = self.check_options(server.get("options"))
        creds = cloud_keys.load(home, server["name"])
        bucket = {k: opts[k] for k in ("endpoint", "bucket", "region", "prefix", "ca_file",
                                       "attempts", "sign_payload")}
        bucket.update(creds)
        return dict(super().access_without_key(server, home), bucket=bucket,
                    cache_limit=opts["cache_limit"], commit_at=opts["commit_at"])

    def backup_side(self, *, server, pool, home, volume, image_id, policy, client_host):
        return CloudBackup(self, self.access(server, home), pool=pool, volume=volume,
                           image_id=image_id,
                           mode=dedup.effective_mode(policy.get("dedup"),
                                                     client_host.get("dedup")),
                           compression=dedup.compression_of(policy))

    def duplicate_side(self, *, server, pool, home, volume, image_id, source=None):
        return CloudBackup(self, self.access(server, home), pool=pool, volume=volume,
                           image_id=image_id, mode="server")

    def check_server(self, call, server, home):
        found = call("check_storage", {"storage": self.access_without_key(server, home)})
        if found.get("holds_pool"):
            return ["the bucket holds a Cairn pool already: its images are recorded with "
                    "`cairn disk-pool import POOL` once the disk pool is created"]
        return []


CLOUD = Cloud()
