"""The bucket of a cloud pool (plugins/storage/cloud/bucket.py) against the real S3 server the
tests start on loopback: uploads in parts, ranged reads, listing and deleting; and each
failure said as what it is (wrong keys, a bucket that is not there, a server that is down,
throttling ridden out by retries)."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from app import status as st
from plugins.storage.cloud.bucket import Bucket, BucketError

MIB = 1 << 20


def spec(server, bucket, **more):
    s = {"endpoint": server.endpoint, "bucket": bucket, "access_key": server.access_key,
         "secret_key": server.secret_key, "region": server.region}
    s.update(more)
    return s


def test_files_in_parts_ranges_listing_and_deleting(s3_server, s3_bucket, tmp_path):
    b = Bucket(spec(s3_server, s3_bucket, prefix="pool1/"), threads=4)
    b.check()
    data = os.urandom(37 * MIB + 123)
    src = tmp_path / "00000001.ctr"
    src.write_bytes(data)
    b.put_file("containers/00000001.ctr", str(src))        # 16 MiB parts: three of them
    b.put_bytes("images/c1/img1.recipe", b"recipe bytes")
    assert b.size("containers/00000001.ctr") == len(data)
    assert b.size("containers/00000002.ctr") is None
    assert b.get_bytes("containers/00000001.ctr", 20 * MIB - 7, 100) == \
        data[20 * MIB - 7:20 * MIB + 93]
    assert b.get_bytes("images/c1/img1.recipe") == b"recipe bytes"
    back = tmp_path / "back.ctr"
    b.get_file("containers/00000001.ctr", str(back))
    assert back.read_bytes() == data and not (tmp_path / "back.ctr.download").exists()
    assert b.names() == [("containers/00000001.ctr", len(data)),
                         ("images/c1/img1.recipe", 12)]
    assert b.names("images/") == [("images/c1/img1.recipe", 12)]
    # the prefix keeps the pool's objects apart from anything else in the bucket
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == ["pool1/containers/00000001.ctr", "pool1/images/c1/img1.recipe"]
    b.delete([n for n, _ in b.names()] + ["containers/gone.ctr"])
    assert b.names() == []


def test_streams_up_and_through_and_unfinished_uploads_aborted(s3_server, s3_bucket):
    import io
    b = Bucket(spec(s3_server, s3_bucket, prefix="pool1/"))
    data = os.urandom(17 * MIB + 5)
    b.put_fileobj("containers/2.ctr", io.BytesIO(data))     # two parts of 16 MiB
    etag = s3_server.client().head_object(Bucket=s3_bucket, Key="pool1/containers/2.ctr")
    assert etag["ETag"].strip('"').endswith("-2")
    chunks = []
    assert b.read_through("containers/2.ctr", chunks.append, chunk=4 * MIB) == len(data)
    assert b"".join(chunks) == data and max(len(c) for c in chunks) <= 4 * MIB

    class Enough(Exception):
        pass

    def stop_at_two(c):
        chunks.append(c)
        if len(chunks) == 2:
            raise Enough()
    chunks.clear()
    with pytest.raises(Enough):
        b.read_through("containers/2.ctr", stop_at_two, chunk=MIB)
    assert len(chunks) == 2
    c = s3_server.client()
    u = c.create_multipart_upload(Bucket=s3_bucket, Key="pool1/containers/3.ctr")
    c.upload_part(Bucket=s3_bucket, Key="pool1/containers/3.ctr", UploadId=u["UploadId"],
                  PartNumber=1, Body=b"z" * (5 * MIB))
    c.create_multipart_upload(Bucket=s3_bucket, Key="elsewhere/1")
    assert b.uploads() == [("containers/3.ctr", u["UploadId"])]
    b.abort(b.uploads() + [("containers/4.ctr", "no-such-upload")])
    assert b.uploads() == []
    assert [x["Key"] for x in c.list_multipart_uploads(Bucket=s3_bucket)["Uploads"]] == \
        ["elsewhere/1"]
    assert b.names() == [("containers/2.ctr", len(data))]


def test_wrong_keys_a_missing_bucket_and_a_missing_object_are_said_plainly(
        s3_server, s3_bucket):
    wrong_secret = Bucket(spec(s3_server, s3_bucket, secret_key="x" * 40))
    with pytest.raises(BucketError) as e:
        wrong_secret.put_bytes("a", b"1")
    assert e.value.status == st.AUTH_FAILED and "refused the credentials" in e.value.message
    unknown_key = Bucket(spec(s3_server, s3_bucket, access_key="NOSUCHKEY0000000"))
    with pytest.raises(BucketError) as e:
        unknown_key.check()
    assert e.value.status == st.AUTH_FAILED, e.value.message
    with pytest.raises(BucketError) as e:
        Bucket(spec(s3_server, "no-such-bucket-here")).check()
    assert e.value.status == st.VOLUME_UNAVAILABLE and "no such bucket" in e.value.message
    with pytest.raises(BucketError) as e:
        Bucket(spec(s3_server, s3_bucket)).get_bytes("images/none.recipe")
    assert e.value.status == st.IMAGE_DAMAGED and "not in the bucket" in e.value.message


def test_a_server_that_is_down_is_unreachable_and_throttling_is_ridden_out(
        s3_server, s3_bucket, tmp_path):
    b = Bucket(spec(s3_server, s3_bucket, attempts=2), threads=4)
    with s3_server.stopped():
        with pytest.raises(BucketError) as e:
            b.put_bytes("a", b"1")
    assert e.value.status == st.HOST_UNREACHABLE and "does not answer" in e.value.message
    body = os.urandom(8 * MIB)
    b = Bucket(spec(s3_server, s3_bucket), threads=8)
    with s3_server.throttled(1):
        # many uploads at once against one request allowed: those past it are answered
        # 503 SlowDown and tried again, with backoff, until they pass
        with ThreadPoolExecutor(8) as pool:
            for round_ in range(12):
                list(pool.map(lambda i: b.put_bytes(f"o{round_}-{i}", body), range(16)))
                if b.retried:
                    break
    assert b.retried > 0
    assert len(b.names()) == 16 * (round_ + 1)
    assert b.get_bytes("o0-7") == body



@pytest.mark.parametrize("sign", [True, False])
def test_bodies_go_signed_or_not_and_arrive_whole_either_way(s3_server, s3_bucket, tmp_path,
                                                            sign):
    b = Bucket(spec(s3_server, s3_bucket, sign_payload=sign), threads=2)
    sent = []
    b.client.meta.events.register(
        "before-send.s3", lambda request=None, **_: sent.append(
            request.headers.get("x-amz-content-sha256")))
    data = os.urandom(17 * MIB + 5)
    src = tmp_path / "obj"
    src.write_bytes(data)
    b.put_file("o", str(src))
    b.put_bytes("small", b"x" * 1000)
    assert b.get_bytes("o") == data and b.get_bytes("small") == b"x" * 1000
    uploads = [h for h in sent if h is not None and h != b"e3b0c44298fc1c149afbf4c8996fb924"
               b"27ae41e4649b934ca495991b7852b855"]
    assert uploads
    unsigned = {h in (b"UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD") for h in uploads}
    assert unsigned == {not sign}


def test_unfinished_uploads_are_listed_by_when_they_began(s3_server, s3_bucket):
    import time
    b = Bucket(spec(s3_server, s3_bucket))
    started = b.client.create_multipart_upload(Bucket=s3_bucket, Key="containers/00000009.ctr")
    left = ("containers/00000009.ctr", started["UploadId"])
    assert left in b.uploads(begun_before=time.time() + 60)
    assert left not in b.uploads(begun_before=time.time() - 3600)  # too young for a reclaim
    b.abort([left])
    assert b.uploads() == []
