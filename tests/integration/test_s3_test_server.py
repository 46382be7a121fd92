"""The S3 server the tests of cloud pools run against (scripts/s3-test-server.sh,
tests/s3server.py) speaks the S3 that Cairn uses, through boto3: whole and multipart uploads,
ranged reads, listing and batch deletes, conditional writes, refused keys, and it can be
stopped, throttled and brought back with its data."""

import hashlib
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError, EndpointConnectionError

from s3server import SCRIPT, S3Server

MiB = 1 << 20
NO_RETRIES = {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 2,
              "read_timeout": 10}


def error_code(exc_info):
    return exc_info.value.response["Error"]["Code"]


def test_start_prints_the_settings_and_stop_is_idempotent(tmp_path):
    first = subprocess.run([str(SCRIPT), "start", str(tmp_path)], capture_output=True,
                           text=True, timeout=900)
    try:
        assert first.returncode == 0, first.stderr
        lines = first.stdout.splitlines()
        assert [line.split("=", 1)[0] for line in lines] == [
            "endpoint", "bucket", "access_key", "secret_key"]
        values = dict(line.split("=", 1) for line in lines)
        assert values["endpoint"].startswith("http://127.0.0.1:")
        # A second start while it runs changes nothing.
        again = subprocess.run([str(SCRIPT), "start", str(tmp_path)], capture_output=True,
                               text=True, timeout=60)
        assert again.returncode == 0 and again.stdout == first.stdout
        server = S3Server(tmp_path)
        server.__dict__.update(values)
        s3 = server.client(**NO_RETRIES)
        assert s3.list_objects_v2(Bucket=values["bucket"])["KeyCount"] == 0
        assert (tmp_path / "data" / values["bucket"]).is_dir()
    finally:
        for _ in range(2):
            stop = subprocess.run([str(SCRIPT), "stop", str(tmp_path)], capture_output=True,
                                  text=True, timeout=60)
            assert stop.returncode == 0, stop.stderr
    assert not (tmp_path / "server.pid").exists()
    never_started = subprocess.run([str(SCRIPT), "stop", str(tmp_path / "none")],
                                   capture_output=True, text=True, timeout=60)
    assert never_started.returncode == 0, never_started.stderr


def test_keys_differ_between_servers(s3_server, tmp_path):
    other = S3Server(tmp_path).start()
    try:
        assert other.endpoint != s3_server.endpoint
        assert other.access_key != s3_server.access_key
        assert other.secret_key != s3_server.secret_key
    finally:
        other.stop()


def test_put_and_get_round_trip(s3_server):
    s3 = s3_server.client()
    assert s3.list_objects_v2(Bucket=s3_server.bucket)["KeyCount"] == 0
    body = os.urandom(100_000)
    s3.put_object(Bucket=s3_server.bucket, Key="round/trip", Body=body)
    assert s3.get_object(Bucket=s3_server.bucket, Key="round/trip")["Body"].read() == body
    head = s3.head_object(Bucket=s3_server.bucket, Key="round/trip")
    assert head["ContentLength"] == len(body)
    assert head["ETag"].strip('"') == hashlib.md5(body).hexdigest()
    s3.delete_object(Bucket=s3_server.bucket, Key="round/trip")


def test_each_new_bucket_is_empty(s3_server, s3_bucket):
    s3 = s3_server.client()
    assert s3.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0
    s3.put_object(Bucket=s3_bucket, Key="x", Body=b"x")
    another = s3_server.new_bucket()
    assert another != s3_bucket
    assert s3.list_objects_v2(Bucket=another)["KeyCount"] == 0


def test_multipart_upload_and_ranged_get(s3_server, s3_bucket, tmp_path):
    s3 = s3_server.client()
    body = os.urandom(13 * MiB)
    src = tmp_path / "src"
    src.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB,
                         max_concurrency=3)
    s3.upload_file(str(src), s3_bucket, "big", Config=cfg)
    head = s3.head_object(Bucket=s3_bucket, Key="big")
    assert head["ContentLength"] == len(body)
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
    ranged = s3.get_object(Bucket=s3_bucket, Key="big", Range="bytes=6000000-6000099")
    assert ranged["ContentRange"] == f"bytes 6000000-6000099/{len(body)}"
    assert ranged["Body"].read() == body[6000000:6000100]
    tail = s3.get_object(Bucket=s3_bucket, Key="big", Range="bytes=-10")["Body"].read()
    assert tail == body[-10:]
    dst = tmp_path / "dst"
    s3.download_file(s3_bucket, "big", str(dst), Config=cfg)
    assert dst.read_bytes() == body


def test_an_aborted_multipart_upload_leaves_nothing(s3_server, s3_bucket):
    s3 = s3_server.client()
    up = s3.create_multipart_upload(Bucket=s3_bucket, Key="half")
    s3.upload_part(Bucket=s3_bucket, Key="half", UploadId=up["UploadId"], PartNumber=1,
                   Body=os.urandom(5 * MiB))
    listed = s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert [u["Key"] for u in listed] == ["half"]
    s3.abort_multipart_upload(Bucket=s3_bucket, Key="half", UploadId=up["UploadId"])
    assert s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    assert s3.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0


def test_list_pages_and_batch_delete(s3_server, s3_bucket):
    s3 = s3_server.client()
    keys = [f"containers/{i:04d}" for i in range(25)] + ["index/chunks"]
    for key in keys:
        s3.put_object(Bucket=s3_bucket, Key=key, Body=key.encode())
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=s3_bucket, Prefix="containers/", PaginationConfig={"PageSize": 10})
    listed = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert listed == keys[:25]
    top = s3.list_objects_v2(Bucket=s3_bucket, Delimiter="/")
    assert sorted(p["Prefix"] for p in top["CommonPrefixes"]) == ["containers/", "index/"]
    gone = s3.delete_objects(Bucket=s3_bucket, Delete={
        "Objects": [{"Key": k} for k in keys[:20]], "Quiet": False})
    assert sorted(d["Key"] for d in gone["Deleted"]) == keys[:20]
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert left == keys[20:]
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=s3_bucket, Key=keys[0])
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_conditional_writes_and_reads(s3_server, s3_bucket):
    s3 = s3_server.client(**NO_RETRIES)
    etag = s3.put_object(Bucket=s3_bucket, Key="recipe", Body=b"v1", IfNoneMatch="*")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=s3_bucket, Key="recipe", Body=b"v2", IfNoneMatch="*")
    assert error_code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=s3_bucket, Key="recipe", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    assert s3.get_object(Bucket=s3_bucket, Key="recipe")["Body"].read() == b"v1"


@pytest.mark.parametrize("which", ["access_key", "secret_key"])
def test_wrong_credentials_are_refused(s3_server, which):
    wrong = {which: "WRONG" + getattr(s3_server, which)[5:]}
    s3 = s3_server.client(**wrong, **NO_RETRIES)
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=s3_server.bucket)
    # AWS answers 403 InvalidAccessKeyId to an unknown key; this server 404
    # XAdminUserNotFound, so a pool has to take both as refused credentials.
    expected = {"access_key": ("InvalidAccessKeyId", "XAdminUserNotFound"),
                "secret_key": ("SignatureDoesNotMatch",)}[which]
    assert error_code(e) in expected, e.value.response["Error"]
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] in (403, 404)


def test_a_stopped_server_refuses_connections_and_comes_back_with_its_data(s3_server,
                                                                          s3_bucket):
    s3 = s3_server.client(**NO_RETRIES)
    s3.put_object(Bucket=s3_bucket, Key="kept", Body=b"still here")
    endpoint = s3_server.endpoint
    with s3_server.stopped():
        with pytest.raises(EndpointConnectionError):
            s3.get_object(Bucket=s3_bucket, Key="kept")
    assert s3_server.endpoint == endpoint
    assert s3.get_object(Bucket=s3_bucket, Key="kept")["Body"].read() == b"still here"


def test_stopping_mid_upload_fails_the_upload_and_keeps_no_object(s3_server, s3_bucket):
    s3 = s3_server.client(**NO_RETRIES)
    up = s3.create_multipart_upload(Bucket=s3_bucket, Key="cut")
    part = {"Bucket": s3_bucket, "Key": "cut", "UploadId": up["UploadId"]}
    first = s3.upload_part(PartNumber=1, Body=os.urandom(5 * MiB), **part)
    with s3_server.stopped():
        with pytest.raises(EndpointConnectionError):
            s3.upload_part(PartNumber=2, Body=os.urandom(MiB), **part)
    # Back up: the object was never completed, the upload and its first part are still there
    # to be finished or aborted.
    assert s3.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0
    parts = s3.list_parts(**part)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in parts] == [(1, first["ETag"])]
    second = s3.upload_part(PartNumber=2, Body=b"end", **part)
    s3.complete_multipart_upload(MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 2, "ETag": second["ETag"]}]},
        **part)
    assert s3.head_object(Bucket=s3_bucket, Key="cut")["ContentLength"] == 5 * MiB + 3


def test_a_server_killed_while_a_part_is_sent_fails_the_upload(s3_server, s3_bucket,
                                                                tmp_path):
    src = tmp_path / "src"
    src.write_bytes(os.urandom(24 * MiB))
    s3 = s3_server.client(**NO_RETRIES)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB,
                         max_concurrency=1)
    sending = threading.Event()
    outcome = {}

    def upload():
        try:
            s3.upload_file(str(src), s3_bucket, "cut", Config=cfg,
                           Callback=lambda sent: sending.set())
            outcome["done"] = True
        except Exception as e:  # what the upload ends with is what the test looks at
            outcome["error"] = e

    t = threading.Thread(target=upload)
    t.start()
    # The transfer's callback runs as body bytes go out, not while they are hashed.
    assert sending.wait(60)
    s3_server.kill()
    t.join(60)
    s3_server.start()
    assert "error" in outcome, outcome
    assert s3.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0
    # The client could not abort its upload while the server was down: it is left to clean up.
    for up in s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=s3_bucket, Key=up["Key"], UploadId=up["UploadId"])
    assert s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_a_throttled_server_answers_slow_down(s3_server, s3_bucket):
    # The limit counts requests whose handler runs: the server takes a whole body before its
    # handler starts, so only the writing of it overlaps. Bodies large enough that writing
    # them takes a while, and rounds until two overlap.
    body = os.urandom(8 * MiB)
    with s3_server.throttled(max_requests=1):
        s3 = s3_server.client(max_pool_connections=16, **NO_RETRIES)

        def put(i):
            try:
                s3.put_object(Bucket=s3_bucket, Key=f"obj{i}", Body=body)
                return "ok"
            except ClientError as e:
                return (e.response["ResponseMetadata"]["HTTPStatusCode"],
                        e.response["Error"]["Code"])

        results = []
        with ThreadPoolExecutor(8) as pool:
            for _ in range(5):
                results += pool.map(put, range(32))
                if (503, "SlowDown") in results:
                    break
    assert (503, "SlowDown") in results, results
    assert "ok" in results
    assert set(results) <= {"ok", (503, "SlowDown")}, results
    # Without the limit again, everything goes through.
    s3 = s3_server.client(max_pool_connections=16, **NO_RETRIES)
    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(put, range(16))) == {"ok"}
