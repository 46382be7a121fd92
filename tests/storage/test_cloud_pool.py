"""Cloud pools against the loopback S3 server (tests/s3server.py), beyond the conformance
suite: what the bucket holds after a backup, a restore with the cache's containers gone, a
cache kept under its limit, a pool imported from its bucket alone into a new master, wrong
credentials and a foreign bucket refused when the server is created, the endpoint down at
the commit (the job fails, nothing is recorded, the next backup works), throttling ridden
out, an expired image leaving the bucket once a reclaim ran, and chunk sizes changed for the
next backups."""

import os
import re
import shutil

import pytest

from app import status as st
from app.errors import CairnError
from app.master import Master
from plugins.storage.cloud.bucket import Bucket
from plugins.storage.dedup.recipe import read_recipe
from storage_sites import log_of
from treegen import assert_trees_equal

MiB = 1 << 20


def creds(s3):
    return {"access_key": s3.access_key, "secret_key": s3.secret_key}


def bucket_of(s3, name):
    return Bucket({"endpoint": s3.endpoint, "bucket": name, **creds(s3), "attempts": 2})


def objects(s3, name):
    return sorted(n for n, _ in bucket_of(s3, name).names())


def make_site(tmp_path, s3, bucket, *, cache="cache", home="home", cache_limit=None,
              attempts=None, files=6, size=3 * MiB, commit_at=None):
    src = tmp_path / "src"
    if not src.exists():
        src.mkdir()
        for i in range(files):
            (src / f"f{i}.bin").write_bytes(os.urandom(size))
    m = Master(str(tmp_path / home))
    m.config.add_host("me", local=True)
    options = {"endpoint": s3.endpoint, "bucket": bucket, "cache_limit": cache_limit,
               "attempts": attempts, "commit_at": commit_at}
    m.create_storage_server("cs", type="cloud", host="me", path=str(tmp_path / cache),
                            options={k: v for k, v in options.items() if v is not None},
                            credentials=creds(s3))
    m.create_disk_pool("cp", server="cs", volumes=[])
    m.create_storage_unit("cu", pool="cp")
    m.config.add_policy("p", storage_unit="cu")
    m.config.add_policy_client("p", "me")
    m.config.add_policy_selection("p", str(src))
    m.config.add_schedule("p", "full", type="full", retention="1w")
    return m, src


def backup(m):
    [job] = m.wait_for(m.start_backup("p"))
    return job


def backed_up(m):
    """The image of a first backup that went well."""
    job = backup(m)
    assert job["status"] == st.OK, log_of(m, job["id"])
    [img] = m.images()
    return img


def restores(m, image_id, src, to, streams=None):
    [r] = m.wait_for([m.start_restore(image_id, [str(src)], str(to), streams=streams)])
    assert r["status"] == st.OK, log_of(m, r["id"])
    assert_trees_equal(str(src), str(to) + str(src))
    return r


def containers_in(cache):
    d = cache / "containers"
    return sorted(n for n in os.listdir(d) if n.endswith(".ctr"))


def test_the_bucket_holds_the_whole_pool_and_a_restore_fetches_what_the_cache_lost(
        tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket)
    try:
        job = backup(m)
        log = log_of(m, job["id"])
        assert job["status"] == st.OK, log
        assert f"bucket {s3_bucket} at {s3_server.endpoint}" in log
        assert "the bucket holds the image" in log
        # the commit says how the uploads it waits for go, apart from the ingest
        assert re.search(r"uploaded to the bucket: (\d+) of \1 container\(s\)", log), log
        names = objects(s3_server, s3_bucket)
        ctrs = [n for n in names if n.endswith(".ctr")]
        assert "pool.json" in names and ctrs
        assert [n[:-4] + ".idx" for n in ctrs] == [n for n in names if n.endswith(".idx")]
        [img] = m.images()
        assert f"images/me/{img['id']}.recipe" in names
        # the cache's containers are byte for byte the bucket's
        cache = tmp_path / "cache"
        b = bucket_of(s3_server, s3_bucket)
        for n in containers_in(cache):
            assert (cache / "containers" / n).read_bytes() == b.get_bytes("containers/" + n)
        # every container gone from the cache: the restore takes them from the bucket
        for n in containers_in(cache):
            os.unlink(cache / "containers" / n)
        restores(m, img["id"], src, tmp_path / "out")
        assert containers_in(cache)  # fetched back into the cache
        verify = m.wait_for([m.start_verify(image=img["id"])])[0]
        assert verify["status"] == st.OK, log_of(m, verify["id"])
    finally:
        m.close()


def test_new_chunk_sizes_cut_the_next_backup_into_the_bucket_and_old_images_still_restore(
        tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=2, size=2 * MiB)
    try:
        first = backed_up(m)
        m.update_object("storage-server", "cs", min_chunk="32K", avg_chunk="128K")
        [job] = m.wait_for(m.start_backup("p", files_cache=False))
        log = log_of(m, job["id"])
        assert job["status"] == st.OK, log
        assert "chunks of 128 KiB on average (32 KiB to 2 MiB)" in log, log
        second = m.image(job["image_id"])
        assert second["dedup"]["chunks"] > 2 * first["dedup"]["chunks"], (first, second)
        assert read_recipe(second["path"]).meta["chunker"]["avg_size"] == 128 << 10
        assert f"images/me/{second['id']}.recipe" in objects(s3_server, s3_bucket)
        restores(m, first["id"], src, tmp_path / "out1")
        restores(m, second["id"], src, tmp_path / "out2")
    finally:
        m.close()


def test_a_cache_limit_trims_uploaded_containers_and_restores_still_work(
        tmp_path, s3_server, s3_bucket):
    # 64 MiB containers: two fulls of 40 MiB each of new data need at least two
    m, src = make_site(tmp_path, s3_server, s3_bucket, cache_limit=1 * MiB, files=5,
                       size=8 * MiB)
    try:
        job = backup(m)
        assert job["status"] == st.OK, log_of(m, job["id"])
        assert "trimmed from it" in log_of(m, job["id"])
        assert containers_in(tmp_path / "cache") == []
        notes = [n for n in os.listdir(tmp_path / "cache" / "containers")
                 if n.endswith(".cloud")]
        assert notes, "the trimmed containers are still noted as the pool's"
        [img] = m.images()
        restores(m, img["id"], src, tmp_path / "out")
        usage = m.pool_usage("cp")
        assert usage["containers"] == len(notes)
        assert usage["cloud"]["cached"] <= len(notes)
    finally:
        m.close()


def test_a_pool_is_imported_from_its_bucket_alone(tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket)
    try:
        job = backup(m)
        assert job["status"] == st.OK, log_of(m, job["id"])
        (src / "later.txt").write_text("a second full\n")
        second = backup(m)
        assert second["status"] == st.OK, log_of(m, second["id"])
        ids = sorted(i["id"] for i in m.images())
        second_tree = tmp_path / "second"
        shutil.copytree(src, second_tree)
    finally:
        m.close()
    # the storage host and the master are both lost: a new master, a new empty cache
    shutil.rmtree(tmp_path / "cache")
    shutil.rmtree(tmp_path / "home")
    m2 = Master(str(tmp_path / "home2"))
    try:
        m2.config.add_host("me", local=True)
        made = m2.create_storage_server(
            "cs", type="cloud", host="me", path=str(tmp_path / "cache2"),
            options={"endpoint": s3_server.endpoint, "bucket": s3_bucket},
            credentials=creds(s3_server))
        assert any("holds a Cairn pool already" in w for w in made["warnings"])
        m2.create_disk_pool("cp", server="cs", volumes=[])
        [imp] = m2.wait_for([m2.start_import("cp")])
        assert imp["status"] == st.OK, log_of(m2, imp["id"])
        assert sorted(i["id"] for i in m2.images()) == ids
        newest = max(m2.images(), key=lambda i: i["created"])
        [r] = m2.wait_for([m2.start_restore(newest["id"], [str(src)], str(tmp_path / "o"))])
        assert r["status"] == st.OK, log_of(m2, r["id"])
        assert_trees_equal(str(second_tree), str(tmp_path / "o") + str(src))
    finally:
        m2.close()


def test_wrong_credentials_a_missing_bucket_and_a_foreign_bucket_are_refused_at_create(
        tmp_path, s3_server, s3_bucket):
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)

        def create(bucket, credentials, name="cs"):
            return m.create_storage_server(
                name, type="cloud", host="me", path=str(tmp_path / "cache"),
                options={"endpoint": s3_server.endpoint, "bucket": bucket, "attempts": 2},
                credentials=credentials)
        with pytest.raises(CairnError) as e:
            create(s3_bucket, {"access_key": s3_server.access_key, "secret_key": "wrong"})
        assert e.value.status == st.AUTH_FAILED and "refused the credentials" in e.value.message
        with pytest.raises(CairnError) as e:
            create("no-such-bucket-here", creds(s3_server))
        assert "no such bucket" in e.value.message
        s3_server.client().put_object(Bucket=s3_bucket, Key="someone-elses/file", Body=b"x")
        with pytest.raises(CairnError) as e:
            create(s3_bucket, creds(s3_server))
        assert "not a Cairn pool's" in e.value.message and "someone-elses/file" in e.value.message
        # nothing was kept of the refused servers
        assert m.storage_servers() == []
        assert not os.path.exists(os.path.join(str(tmp_path / "home"), "keys", "cs.s3"))
        # a prefix of its own makes the same bucket usable
        made = m.create_storage_server(
            "cs", type="cloud", host="me", path=str(tmp_path / "cache"),
            options={"endpoint": s3_server.endpoint, "bucket": s3_bucket, "prefix": "cairn"},
            credentials=creds(s3_server))
        assert made["options"]["prefix"] == "cairn/"
        keyfile = os.path.join(str(tmp_path / "home"), "keys", "cs.s3")
        assert oct(os.stat(keyfile).st_mode & 0o777) == "0o600"
        assert s3_server.secret_key not in str(m.storage_servers())
    finally:
        m.close()


def test_the_endpoint_down_at_the_commit_fails_the_job_and_records_nothing(
        tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket, attempts=2)
    try:
        s3_server.stop()
        try:
            job = backup(m)
        finally:
            s3_server.start()
        log = log_of(m, job["id"])
        assert job["status"] == st.HOST_UNREACHABLE, log
        assert "does not answer" in log
        assert m.images() == []
        assert not [n for n in objects(s3_server, s3_bucket) if n.startswith("images/")]
        # the endpoint back: the next backup takes what the cache kept and commits
        img = backed_up(m)
        assert f"images/me/{img['id']}.recipe" in objects(s3_server, s3_bucket)
        restores(m, img["id"], src, tmp_path / "out")
    finally:
        m.close()


def test_throttling_is_ridden_out(tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=5, size=8 * MiB)
    try:
        with s3_server.throttled(1):
            img = backed_up(m)
        restores(m, img["id"], src, tmp_path / "out")
    finally:
        m.close()


def test_an_expired_image_leaves_the_bucket_and_reclaim_deletes_its_containers(
        tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket)
    try:
        img = backed_up(m)
        before = objects(s3_server, s3_bucket)
        assert any(n.endswith(".ctr") for n in before)
        m.expire_image(img["id"])
        assert f"images/me/{img['id']}.recipe" not in objects(s3_server, s3_bucket)
        [r] = m.wait_for([m.start_reclaim("cp")])
        assert r["status"] == st.OK, log_of(m, r["id"])
        after = objects(s3_server, s3_bucket)
        assert not [n for n in after if n.startswith("containers/")], after
        assert os.listdir(tmp_path / "cache" / "containers") == []
    finally:
        m.close()


def test_a_catalog_backup_keeps_the_bucket_credentials_sealed_and_recovers_them(
        tmp_path, s3_server, s3_bucket):
    from clihelp import cairn_json
    from app.errors import ValidationError
    m, src = make_site(tmp_path, s3_server, s3_bucket)
    try:
        img = backed_up(m)
        with pytest.raises(ValidationError, match="keeps its data in a bucket"):
            m.start_catalog_backup("cu", b"catalog-passphrase-1")
        (tmp_path / "adv").mkdir()
        m.create_storage_server("adv", type="advanced-disk", host="me")
        m.create_disk_pool("advp", server="adv", volumes=[str(tmp_path / "adv")])
        m.create_storage_unit("advu", pool="advp")
        [cb] = m.wait_for([m.start_catalog_backup("advu", b"catalog-passphrase-1")])
        assert cb["status"] == st.OK, log_of(m, cb["id"])
        assert "1 bucket credential(s)" in log_of(m, cb["id"])
    finally:
        m.close()
    for d, _, files in os.walk(tmp_path / "adv"):
        for f in files:
            data = open(os.path.join(d, f), "rb").read()
            assert s3_server.secret_key.encode() not in data, "sealed, never in clear"
    shutil.rmtree(tmp_path / "home")  # the master's disk is lost
    pp = tmp_path / "pass"
    pp.write_bytes(b"catalog-passphrase-1\n")
    doc, _ = cairn_json(tmp_path / "home", "catalog", "recover", "--from", tmp_path / "adv",
                        "--passphrase-file", pp)
    assert doc["status"] == st.OK and doc["credentials_restored"] == ["cs"], doc
    kept = tmp_path / "home" / "keys" / "cs.s3"
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert f"secret_key={s3_server.secret_key}" in kept.read_text()
    m = Master(str(tmp_path / "home"))
    try:
        for n in containers_in(tmp_path / "cache"):
            os.unlink(tmp_path / "cache" / "containers" / n)
        restores(m, img["id"], src, tmp_path / "out")
    finally:
        m.close()


def test_a_restore_in_several_processes_fetches_with_a_client_of_each_its_own(
        tmp_path, s3_server, s3_bucket):
    # the agent's client has pooled connections from the backup's uploads: a forked part
    # that used them would write HTTP into whatever file took their descriptors' numbers
    # three containers of 64 MiB, so that the parts fetch them (not the parent, before)
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=6, size=24 * MiB)
    try:
        img = backed_up(m)
        # one stream first: the agent itself fetches, its client keeps pooled connections
        for round_, streams in enumerate((1, 2, 2)):
            for n in containers_in(tmp_path / "cache"):
                os.unlink(tmp_path / "cache" / "containers" / n)
            r = restores(m, img["id"], src, tmp_path / f"out{round_}", streams=streams)
            if streams > 1:
                assert "2 parallel streams" in log_of(m, r["id"])
    finally:
        m.close()


def test_a_pool_verify_checks_the_bucket_and_mends_it_from_the_cache(
        tmp_path, s3_server, s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=3, size=2 * MiB)
    try:
        img = backed_up(m)
        [ctr] = containers_in(tmp_path / "cache")
        client = s3_server.client()
        client.delete_object(Bucket=s3_bucket, Key="containers/" + ctr)
        [v] = m.wait_for([m.start_verify(pool="cp")])
        log = log_of(m, v["id"])
        assert v["status"] == st.OK, log
        assert f"container containers/{ctr} is missing from the bucket: uploaded again" in log
        assert "containers/" + ctr in objects(s3_server, s3_bucket)
        # gone from the bucket and from the cache: the images that use it are named
        os.unlink(tmp_path / "cache" / "containers" / ctr)
        client.delete_object(Bucket=s3_bucket, Key="containers/" + ctr)
        [v] = m.wait_for([m.start_verify(pool="cp")])
        log = log_of(m, v["id"])
        assert v["status"] in (st.CHECKSUM_MISMATCH, st.IMAGE_DAMAGED), log
        assert "the cache does not hold it: its chunks are lost" in log
        assert f"image {img['id']}" in log
    finally:
        m.close()


def test_a_pool_that_commits_in_the_cache_queues_its_uploads_and_says_so(
        tmp_path, s3_server, s3_bucket):
    from storage_sites import wait_until
    m, src = make_site(tmp_path, s3_server, s3_bucket, commit_at="cache", attempts=1)
    try:
        job = backup(m)
        log = log_of(m, job["id"])
        assert job["status"] == st.OK, log
        assert "committed in the cache, not yet in the bucket" in log
        [img] = m.images()
        recipe = f"images/me/{img['id']}.recipe"
        wait_until(lambda: recipe in objects(s3_server, s3_bucket), 60, "the queued upload")
        wait_until(lambda: m.pool_usage("cp")["cloud"]["waiting_recipes"] == 0, 30,
                   "the queue to empty")
        # the endpoint down: the backup still ends, its upload waits
        (src / "new.bin").write_bytes(os.urandom(2 * MiB))
        s3_server.stop()
        try:
            second = backup(m)
            assert second["status"] == st.OK, log_of(m, second["id"])
            usage = m.pool_usage("cp")["cloud"]
            assert usage["waiting"] >= 1 and usage["waiting_recipes"] == 1, usage
        finally:
            s3_server.start()
        # the next backup uploads what waited, before its own recipe
        (src / "newer.bin").write_bytes(os.urandom(2 * MiB))
        third = backup(m)
        assert third["status"] == st.OK, log_of(m, third["id"])
        wanted = {f"images/me/{i['id']}.recipe" for i in m.images()}
        wait_until(lambda: wanted <= set(objects(s3_server, s3_bucket)), 60,
                   "every recipe in the bucket")
        wait_until(lambda: m.pool_usage("cp")["cloud"]["waiting"] == 0, 30, "the containers")
        for n in containers_in(tmp_path / "cache"):
            os.unlink(tmp_path / "cache" / "containers" / n)
        restores(m, third["image_id"], src, tmp_path / "out")  # new.bin went up late
    finally:
        m.close()


def test_a_restore_of_one_file_reads_its_chunks_with_ranged_gets(tmp_path, s3_server,
                                                                   s3_bucket):
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=4, size=6 * MiB)
    try:
        (src / "small.txt").write_bytes(os.urandom(3000))
        img = backed_up(m)
        for n in containers_in(tmp_path / "cache"):
            os.unlink(tmp_path / "cache" / "containers" / n)
        [r] = m.wait_for([m.start_restore(img["id"], [str(src / "small.txt")],
                                          str(tmp_path / "one"))])
        assert r["status"] == st.OK, log_of(m, r["id"])
        assert (tmp_path / "one" / str(src)[1:] / "small.txt").read_bytes() == \
            (src / "small.txt").read_bytes()
        assert containers_in(tmp_path / "cache") == [], "no container fetched whole"
        restores(m, img["id"], src, tmp_path / "all")  # the rest: fetched whole
        assert containers_in(tmp_path / "cache")
    finally:
        m.close()


def test_hostile_names_in_the_bucket_write_nothing_outside_the_cache(tmp_path, s3_server,
                                                                      s3_bucket):
    # whoever else may write to the bucket plants names that climb out of the cache
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=2, size=1 * MiB)
    try:
        backed_up(m)
    finally:
        m.close()
    import botocore.exceptions
    client = s3_server.client()
    planted = []
    for key in ("images/../../escaped.recipe", "images/me/../../escaped2.recipe",
                "images/../outside/x.recipe", "images/.hidden/x.recipe",
                "images/me/.x.recipe", "containers/../../escaped.ctr", "containers/123.ctr",
                "images/me/x.txt"):
        try:
            client.put_object(Bucket=s3_bucket, Key=key, Body=b"planted")
            planted.append(key)
        except botocore.exceptions.ClientError:
            pass  # a name this server refuses itself (those that climb with "..")
    assert len(planted) >= 4, planted
    shutil.rmtree(tmp_path / "cache")
    shutil.rmtree(tmp_path / "home")
    m2 = Master(str(tmp_path / "home2"))
    try:
        m2.config.add_host("me", local=True)
        m2.create_storage_server(
            "cs", type="cloud", host="me", path=str(tmp_path / "cache2"),
            options={"endpoint": s3_server.endpoint, "bucket": s3_bucket},
            credentials=creds(s3_server))
        m2.create_disk_pool("cp", server="cs", volumes=[])
        [imp] = m2.wait_for([m2.start_import("cp")])
        assert imp["status"] == st.OK, log_of(m2, imp["id"])
        assert len(m2.images()) == 1
    finally:
        m2.close()
    planted = [os.path.join(d, f) for d, _, files in os.walk(tmp_path) for f in files
               if "escaped" in f or f in ("x.recipe", ".x.recipe", "x.txt", "123.ctr")]
    assert planted == [], planted


def test_the_client_side_of_a_backup_never_gets_the_bucket_or_its_keys(tmp_path, s3_server,
                                                                        s3_bucket):
    from plugins.storage import registry
    m, src = make_site(tmp_path, s3_server, s3_bucket, files=1, size=1024)
    try:
        srv = m.config.storage_server("cs")
        side = registry.of_server(srv).backup_side(
            server=srv, pool=m.config.disk_pool("cp"), home=m.home, volume=srv["path"],
            image_id="me_1_1", policy={"dedup": "client"}, client_host={"dedup": "policy"})
        told = repr(side.client_spec())
        for secret in (s3_server.secret_key, s3_server.access_key, s3_bucket,
                       s3_server.endpoint):
            assert secret not in told
        assert s3_server.secret_key in repr(side.storage_spec())  # the storage host's only
    finally:
        m.close()


def test_a_cloud_pool_stores_chunks_uncompressed_with_compression_off_and_at_the_level(
        tmp_path, s3_server, s3_bucket):
    src = tmp_path / "src"
    src.mkdir()
    words = b" ".join(b"alpha%d beta gamma" % i for i in range(200_000))
    (src / "words.txt").write_bytes(words)
    m, _ = make_site(tmp_path, s3_server, s3_bucket)
    try:
        m.update_object("policy", "p", compression="off")
        img = backed_up(m)
        assert img["dedup"]["compression"] == {"at": "off", "codec": "none", "level": None}
        assert img["dedup"]["stored_bytes"] == img["dedup"]["new_bytes"] > len(words)
        assert "compression: off, new chunks were stored as they are" in log_of(m, img["job_id"])
        restores(m, img["id"], src, tmp_path / "r1")
        m.update_object("policy", "p", compression="server", compression_level=6)
        (src / "more.txt").write_bytes(words.replace(b"beta", b"BETA"))
        job = backup(m)
        assert job["status"] == st.OK, log_of(m, job["id"])
        second = m.image(job["image_id"])
        assert second["dedup"]["compression"]["at"] == "server"
        assert second["dedup"]["compression"]["level"] == 6
        assert second["dedup"]["stored_bytes"] < second["dedup"]["new_bytes"] // 3
        restores(m, second["id"], src, tmp_path / "r2")
    finally:
        m.close()
