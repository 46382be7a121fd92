"""The bucket of a cloud pool, as the storage host's agent reaches it: an S3 client (boto3,
with botocore's retries: adaptive backoff on 5xx answers and throttling), connect and read
timeouts, TLS verified (with a site's own CA file when given), multipart uploads in parallel
and ranged GETs. Every failure becomes a CairnError that says what failed and where, with
the status that fits: a wrong key is an authentication failure, an endpoint that does not
answer an unreachable host, a refused write a storage write failure.

boto3 is not part of the standard library: a storage host of a cloud pool needs it (Debian
and Ubuntu: `apt install python3-boto3`; elsewhere `pip install boto3`); `Bucket` says so
when it is missing."""

import os
import threading

from app import status as st
from app.errors import CairnError

CONNECT_TIMEOUT = 10
READ_TIMEOUT = 60
MAX_ATTEMPTS = 8
PART_SIZE = 16 << 20
UPLOAD_THREADS = 4
# The object that marks a bucket as a Cairn pool's, and names the pool.
MARKER = "cairn-pool.json"
INSTALL_HINT = ("install boto3 on the storage host: `apt install python3-boto3` (Debian, "
                "Ubuntu) or `python3 -m pip install boto3`")


class BucketError(CairnError):
    status = st.STORAGE_WRITE_FAILED


def _boto():
    try:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config
        import botocore.exceptions as exc
    except ImportError:
        raise BucketError("the storage host's python3 has no S3 client (boto3)",
                          hint=INSTALL_HINT, status_code=st.NO_PYTHON) from None
    return boto3, TransferConfig, Config, exc


class Bucket:
    """spec: {"endpoint", "bucket", "region", "access_key", "secret_key", "ca_file",
    "prefix", "attempts", "sign_payload"} (the storage spec's "bucket" part; the keys never reach a client).
    attempts: how often a request is tried before it fails (8: about a minute of backoff)."""

    def __init__(self, spec, threads=UPLOAD_THREADS):
        boto3, TransferConfig, Config, self._exc = _boto()
        self.name = spec["bucket"]
        self.endpoint = spec["endpoint"]
        self.prefix = spec.get("prefix") or ""
        verify = spec.get("ca_file") or True
        if verify is not True and not os.path.isfile(verify):
            raise BucketError(f"the CA file {verify} for {self.endpoint} does not exist",
                              status_code=st.INVALID_REQUEST)
        sign = spec.get("sign_payload")
        if sign is None:
            # a SHA-256 of every byte sent (on both ends) is most of an upload's CPU time;
            # over TLS the channel already keeps the data from being changed on the way
            sign = not self.endpoint.lower().startswith("https:")
        settings = dict(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                        retries={"mode": "adaptive",
                                 "max_attempts": int(spec.get("attempts") or MAX_ATTEMPTS)},
                        max_pool_connections=max(10, threads * 2),
                        s3={"addressing_style": "path", "payload_signing_enabled": bool(sign)})
        try:
            # checksums only where the service asks for them: not every S3 service takes the
            # newer default ones (botocore before 1.36 sends none and knows no such setting)
            config = Config(request_checksum_calculation="when_required",
                            response_checksum_validation="when_required", **settings)
        except TypeError:
            config = Config(**settings)
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=spec.get("region") or "us-east-1",
            aws_access_key_id=spec["access_key"], aws_secret_access_key=spec["secret_key"],
            verify=verify, config=config)
        # answers that were tried again (throttling, 5xx), for the job log
        self.retried = 0
        self.client.meta.events.register("needs-retry.s3", self._count_retryable)
        self.transfer = TransferConfig(multipart_threshold=PART_SIZE,
                                       multipart_chunksize=PART_SIZE,
                                       max_concurrency=threads, use_threads=threads > 1)

    def _count_retryable(self, response=None, **_):
        # each attempt's answer passes here before botocore decides to try again
        code = response[0].status_code if response else None
        if code is not None and (code >= 500 or code == 429):
            self.retried += 1

    def key(self, name):
        return self.prefix + name

    # ---- errors ---------------------------------------------------------------------------
    def _error(self, e, what):
        """The CairnError of a failed request `what` ("uploading X")."""
        exc = self._exc
        where = f"{what} in bucket {self.name} at {self.endpoint}"
        if isinstance(e, exc.ClientError):
            code = e.response.get("Error", {}).get("Code", "")
            http = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            msg = e.response.get("Error", {}).get("Message") or code
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                        "InvalidToken", "ExpiredToken", "XAdminUserNotFound") or \
                    http in (401, 403):
                return BucketError(f"{where}: the service refused the credentials ({code})",
                                   hint="check the credentials file's access_key and "
                                        "secret_key, and the key's rights on the bucket",
                                   status_code=st.AUTH_FAILED)
            if code in ("NoSuchBucket",):
                return BucketError(f"{where}: there is no such bucket",
                                   hint="create it first, or name an existing one",
                                   status_code=st.VOLUME_UNAVAILABLE)
            if code in ("NoSuchKey", "404"):
                return BucketError(f"{where}: the object is not in the bucket",
                                   status_code=st.IMAGE_DAMAGED)
            return BucketError(f"{where}: {msg} (HTTP {http})")
        if isinstance(e, (exc.EndpointConnectionError, exc.ConnectTimeoutError,
                          exc.ReadTimeoutError, exc.ConnectionClosedError)):
            return BucketError(f"{where}: the endpoint does not answer ({e})",
                               status_code=st.HOST_UNREACHABLE)
        if isinstance(e, exc.SSLError):
            return BucketError(f"{where}: TLS failed ({e})",
                               hint="a site's own CA: give its certificate file (--ca-file)",
                               status_code=st.HOST_UNREACHABLE)
        if isinstance(e, exc.BotoCoreError):
            return BucketError(f"{where}: {e}")
        if isinstance(e, OSError):
            return BucketError(f"{where}: {e.strerror or e}")
        return None

    def _call(self, what, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - turned into what the admin reads, or raised
            err = self._error(e, what)
            if err is None:
                raise
            raise err from None

    # ---- objects --------------------------------------------------------------------------
    def check(self):
        """That the bucket exists and the credentials may use it; raises what is wrong. A
        listing, not HeadBucket: a HEAD answer has no body, so an unknown key and a missing
        bucket both come back as a bare 404 from some services."""
        self._call("reaching the bucket", self.client.list_objects_v2, Bucket=self.name,
                   MaxKeys=1)

    def put_file(self, name, path):
        """Uploads a file, in parallel parts when it is large."""
        self._call(f"uploading {name}", self.client.upload_file, path, self.name,
                   self.key(name), Config=self.transfer)

    def put_fileobj(self, name, fileobj):
        """Uploads from an open binary file object (a file, a buffer), in parts when it is
        large, as put_file does."""
        self._call(f"uploading {name}", self.client.upload_fileobj, fileobj, self.name,
                   self.key(name), Config=self.transfer)

    def put_bytes(self, name, data):
        self._call(f"uploading {name}", self.client.put_object, Bucket=self.name,
                   Key=self.key(name), Body=bytes(data))

    def get_bytes(self, name, start=None, length=None):
        """The object, or `length` bytes of it from `start` (a ranged GET)."""
        kw = {}
        if start is not None:
            kw["Range"] = f"bytes={start}-{start + length - 1}"

        def get():
            r = self.client.get_object(Bucket=self.name, Key=self.key(name), **kw)
            with r["Body"] as body:
                return body.read()
        data = self._call(f"reading {name}", get)
        if length is not None and len(data) != length:
            raise BucketError(f"reading {name} in bucket {self.name}: {len(data)} bytes came "
                              f"back of {length} asked for", status_code=st.IMAGE_DAMAGED)
        return data

    def read_through(self, name, write, chunk=1 << 20):
        """Reads an object through, handing it to write(bytes) a chunk at a time (a count, a
        hash, a file), so that no more than a chunk of it is held; returns its size. What
        write raises ends the read and is raised again."""
        def get():
            r = self.client.get_object(Bucket=self.name, Key=self.key(name))
            body, n = r["Body"], 0
            try:
                for data in body.iter_chunks(chunk):
                    write(data)
                    n += len(data)
            finally:
                body.close()
            return n
        return self._call(f"reading {name}", get)

    def get_file(self, name, path):
        """Downloads an object to `path` (written beside it under a name of this process and
        thread, then renamed: two processes may fetch the same object at once)."""
        part = f"{path}.{os.getpid()}-{threading.get_ident()}.download"
        try:
            self._call(f"reading {name}", self.client.download_file, self.name,
                       self.key(name), part, Config=self.transfer)
            os.chmod(part, 0o600)  # pool files are private, whatever the umask
            os.replace(part, path)
        finally:
            if os.path.exists(part):
                os.unlink(part)

    def size(self, name):
        """The object's size, or None when it is not there."""
        try:
            r = self.client.head_object(Bucket=self.name, Key=self.key(name))
        except Exception as e:  # noqa: BLE001
            err = self._error(e, f"looking at {name}")
            if err is not None and err.status == st.IMAGE_DAMAGED:
                return None
            if err is None:
                raise
            raise err from None
        return r["ContentLength"]

    def names(self, prefix=""):
        """[(name, size)] of the objects under prefix, in key order."""
        out = []
        paginator = self.client.get_paginator("list_objects_v2")

        def walk():
            for page in paginator.paginate(Bucket=self.name, Prefix=self.key(prefix)):
                for o in page.get("Contents") or []:
                    out.append((o["Key"][len(self.prefix):], o["Size"]))
        self._call(f"listing {prefix or 'the objects'}", walk)
        return out

    def delete(self, names):
        """Deletes objects, a thousand a request; an object already gone is no error."""
        names = list(names)
        for i in range(0, len(names), 1000):
            batch = [{"Key": self.key(n)} for n in names[i:i + 1000]]
            r = self._call("deleting objects", self.client.delete_objects, Bucket=self.name,
                           Delete={"Objects": batch, "Quiet": True})
            errors = [e for e in r.get("Errors") or [] if e.get("Code") != "NoSuchKey"]
            if errors:
                e = errors[0]
                raise BucketError(f"deleting {e.get('Key')} in bucket {self.name}: "
                                  f"{e.get('Message') or e.get('Code')}")

    def uploads(self, prefix="", begun_before=None):
        """[(name, upload id)] of the multipart uploads under prefix that were begun and
        neither completed nor aborted: their parts take space that no listing of objects
        shows (an uploader killed halfway leaves them). begun_before: only those begun
        before that time (seconds since the epoch)."""
        out = []
        paginator = self.client.get_paginator("list_multipart_uploads")

        def walk():
            for page in paginator.paginate(Bucket=self.name, Prefix=self.key(prefix)):
                for u in page.get("Uploads") or []:
                    begun = u.get("Initiated")
                    if begun_before is not None and begun is not None and \
                            begun.timestamp() >= begun_before:
                        continue
                    out.append((u["Key"][len(self.prefix):], u["UploadId"]))
        self._call(f"listing the unfinished uploads of {prefix or 'the bucket'}", walk)
        return out

    def abort(self, uploads):
        """Aborts unfinished multipart uploads [(name, upload id)], freeing their parts; one
        already gone is no error."""
        for name, upload_id in uploads:
            try:
                self.client.abort_multipart_upload(Bucket=self.name, Key=self.key(name),
                                                   UploadId=upload_id)
            except self._exc.ClientError as e:
                if e.response.get("Error", {}).get("Code") != "NoSuchUpload":
                    raise self._error(e, f"aborting the upload of {name}") from None
            except Exception as e:  # noqa: BLE001 - turned into what the admin reads
                err = self._error(e, f"aborting the upload of {name}")
                if err is None:
                    raise
                raise err from None
