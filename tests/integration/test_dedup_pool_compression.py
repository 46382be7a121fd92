"""Where a deduplicating pool's chunks are compressed (a policy's compression: server, client
or off, with a zstd level), end to end: a real catalog, the local storage agent and a client
reached over the loopback sshd. Each choice restores byte for byte; off stores records
uncompressed; compression on the client sends fewer bytes than off; the level, what
advanced-disk policies take (tests/integration/test_advanced_disk_compression.py for their
images); `policy set` and `policy show --json`."""

import os
import random
import sysconfig

import pytest

from app import status
from app.errors import ValidationError
from app.master import Master
from clihelp import cairn, cairn_json
from plugins.storage.dedup import keys
from plugins.storage.dedup.encoding import CODEC_ENCRYPTED, CODEC_NAMES
from plugins.storage.dedup.store import ChunkStore
from treegen import assert_trees_equal


def write_text_tree(root, seed, nfiles=6, size=300 * 1024):
    """Files of words: compressible, each file different."""
    rnd = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"omega", b"sigma", b"kappa"]
    for i in range(nfiles):
        d = os.path.join(root, f"d{i % 2}")
        os.makedirs(d, exist_ok=True)
        data = b" ".join(rnd.choice(words) + str(rnd.randrange(1000)).encode()
                         for _ in range(size // 8))[:size]
        with open(os.path.join(d, f"f{i}.txt"), "wb") as f:
            f.write(data)


def record_codecs(pool_root, key=None):
    """{codec name: records} of the pool's committed containers."""
    store = ChunkStore(pool_root, key=key)
    found = {}
    for n in store.committed_containers():
        for _, header, error in store._scan(n, decode=True):
            assert error is None, error
            name = CODEC_NAMES[header[2] & ~CODEC_ENCRYPTED]
            found[name] = found.get(name, 0) + 1
    return found


@pytest.fixture
def master(tmp_path):
    m = Master(str(tmp_path / "home"))
    m.config.add_host("me", local=True)
    yield m
    m.close()


def configure(m, tmp_path, name, *, compression=None, level=None, dedup="server",
              encrypted=False):
    pool = str(tmp_path / f"pool-{name}")
    m.create_storage_server(f"dd-{name}", type="dedup", host="me", path=pool,
                            options={"encrypted": True} if encrypted else None)
    m.create_disk_pool(f"ddp-{name}", server=f"dd-{name}", volumes=[])
    m.config.add_storage_unit(f"dstu-{name}", pool=f"ddp-{name}")
    m.create_policy(name, storage_unit=f"dstu-{name}", dedup=dedup, compression=compression,
                    compression_level=level)
    return pool


def backup_and_restore(m, tmp_path, policy, src, client):
    m.config.add_policy_client(policy, client)
    m.config.add_policy_selection(policy, src)
    [jid] = m.start_backup(policy)
    [job] = m.wait_for([jid])
    log = [x["message"] for x in m.jobs.logs(jid)]
    assert job["status"] == status.OK, log
    img = m.image(job["image_id"])
    dst = str(tmp_path / f"restored-{policy}")
    rid = m.start_restore(img["id"], [src], dst, to_host=client)
    [rj] = m.wait_for([rid])
    assert rj["status"] == status.OK, [x["message"] for x in m.jobs.logs(rid)]
    assert_trees_equal(src, dst + src)
    return img, "\n".join(log)


@pytest.mark.ssh
def test_off_server_and_client_compression_over_ssh(tmp_path, master, sshd):
    m = master
    src = str(tmp_path / "src")
    write_text_tree(src, seed=3)
    m.add_host("client1", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    # the chunking accelerator (and zstandard) for the client's python3, as an admin adds it
    m.update_object("host", "client1",
                    agent_env=f"PYTHONPATH={sysconfig.get_paths()['purelib']}")
    pools, imgs, logs = {}, {}, {}
    for at in ("off", "server", "client"):
        pools[at] = configure(m, tmp_path, at, compression=at, level=3, dedup="client")
        imgs[at], logs[at] = backup_and_restore(m, tmp_path, at, src, "client1")

    # off: every record of the pool is stored as it is
    assert set(record_codecs(pools["off"])) == {"none"}
    assert imgs["off"]["dedup"]["compression"] == {"at": "off", "codec": "none",
                                                   "level": None}
    assert "compression: off, new chunks were stored as they are" in logs["off"]
    # server: the storage server compressed at the policy's level
    assert "zstd" in record_codecs(pools["server"])
    assert imgs["server"]["dedup"]["compression"]["at"] == "server"
    assert "compression: on the storage server (zstd level 3)" in logs["server"]
    # client: the client compressed; the storage side kept its bytes
    assert "zstd" in record_codecs(pools["client"])
    assert imgs["client"]["dedup"]["compression"] == {"at": "client", "codec": "zstd",
                                                      "level": 3}
    assert "compression: on the client (level 3) before the chunks cross" in logs["client"]
    assert "compression: on the client (zstd level 3)" in logs["client"]
    sent = {at: imgs[at]["dedup"]["sent_bytes"] for at in imgs}
    assert sent["client"] < 0.6 * sent["off"], sent
    assert sent["server"] == sent["off"], sent
    # what the client compressed is what the pool stores
    assert imgs["client"]["dedup"]["stored_bytes"] <= sent["client"]
    assert imgs["client"]["dedup"]["stored_bytes"] < 0.6 * imgs["off"]["dedup"]["stored_bytes"]


@pytest.mark.ssh
def test_client_compression_with_server_side_dedup_compresses_the_stream_in_transit(
        tmp_path, master, sshd):
    m = master
    src = str(tmp_path / "src")
    write_text_tree(src, seed=4, nfiles=2)
    m.add_host("client1", address=sshd.host, port=sshd.port, user=sshd.user,
               key_file=sshd.key_file, trust_host_key=True)
    m.update_object("host", "client1",  # zstandard for the client's python3
                    agent_env=f"PYTHONPATH={sysconfig.get_paths()['purelib']}")
    pool = configure(m, tmp_path, "p", compression="client", level=5, dedup="server",
                     encrypted=True)
    img, log = backup_and_restore(m, tmp_path, "p", src, "client1")
    assert "the client compresses its stream in transit (level 5)" in log, log
    assert "compression: on the storage server (zstd level 5); the client compressed its " \
           "stream in transit (zstd)" in log, log
    assert img["dedup"]["compression"] == {"at": "server", "codec": "zstd", "level": 5,
                                           "in_transit": "zstd"}
    assert img["dedup"]["sent_bytes"] < 0.6 * img["bytes"], img["dedup"]
    assert "zstd" in record_codecs(pool, key=keys.load(m.home, "dd-p"))


def test_local_client_compression_and_encrypted_pool(tmp_path, master):
    """The client is the storage host: its agent compresses into the pool directly."""
    m = master
    src = str(tmp_path / "src")
    write_text_tree(src, seed=5, nfiles=2)
    configure(m, tmp_path, "loc", compression="client", level=7, dedup="client",
              encrypted=True)
    img, log = backup_and_restore(m, tmp_path, "loc", src, "me")
    assert "the policy asks for the client: the client is the storage host" in log, log
    assert img["dedup"]["compression"] == {"at": "server", "codec": "zstd", "level": 7}


def test_refusals_and_policy_set(tmp_path, master):
    m = master
    configure(m, tmp_path, "d")
    assert m.policy("d")["compression"] == "server" and m.policy("d")["compression_level"] == 1
    vol = tmp_path / "vol"
    vol.mkdir()
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(vol)])
    m.config.add_storage_unit("adstu", pool="adp")
    # advanced-disk compresses too (zstd tar images); its default stays plain tar files
    for at, want in (("client", "client"), ("server", "server"), (True, "client")):
        m.create_policy(f"a-{want}-{at is True}", storage_unit="adstu", compression=at)
        assert m.policy(f"a-{want}-{at is True}")["compression"] == want
    m.create_policy("a", storage_unit="adstu")
    assert m.policy("a")["compression"] == "off"
    m.create_policy("a-off", storage_unit="adstu", compression="off")
    assert m.update_object("policy", "a", compression="client")["compression"] == "client"
    for bad in (0, 20, "x"):
        with pytest.raises(ValidationError, match="outside 1 to 19"):
            m.create_policy("bad", storage_unit="dstu-d", compression_level=bad)
        with pytest.raises(ValidationError, match="outside 1 to 19"):
            m.update_object("policy", "d", compression_level=bad)
    with pytest.raises(ValidationError, match="compression 'gzip' is unknown"):
        m.update_object("policy", "d", compression="gzip")
    p = m.update_object("policy", "d", compression="client", compression_level="9")
    assert p["compression"] == "client" and p["compression_level"] == 9
    # a policy compressing on the client moves to advanced-disk and keeps compressing there
    assert m.update_object("policy", "d", storage_unit="adstu")["storage_unit"] == "adstu"
    assert m.policy("d")["compression"] == "client"


def test_cli_compression_options(tmp_path):
    home = str(tmp_path / "home")
    cairn(home, "host", "add", "me", "--local")
    cairn(home, "storage-server", "create", "dd", "--type", "dedup", "--host", "me",
          "--path", str(tmp_path / "pool"))
    cairn(home, "disk-pool", "create", "ddp", "--server", "dd")
    cairn(home, "storage-unit", "create", "dstu", "--pool", "ddp")
    (tmp_path / "vol").mkdir()
    cairn(home, "storage-server", "create", "ad", "--type", "advanced-disk", "--host", "me")
    cairn(home, "disk-pool", "create", "adp", "--server", "ad", "--volume",
          str(tmp_path / "vol"))
    cairn(home, "storage-unit", "create", "adstu", "--pool", "adp")
    # the contract's form: --compression is compression on the client
    cairn(home, "policy", "create", "p1", "--storage-unit", "dstu", "--compression")
    p1, _ = cairn_json(home, "policy", "show", "p1")
    assert p1["compression"] == "client" and p1["compression_level"] == 1
    cairn(home, "policy", "create", "p2", "--storage-unit", "dstu", "--compression-at", "off",
          "--compression-level", "5")
    p2, _ = cairn_json(home, "policy", "show", "p2")
    assert p2["compression"] == "off" and p2["compression_level"] == 5
    cairn(home, "policy", "set", "p2", "compression", "server")
    cairn(home, "policy", "set", "p2", "compression_level", "12")
    p2, _ = cairn_json(home, "policy", "show", "p2")
    assert p2["compression"] == "server" and p2["compression_level"] == 12
    r = cairn(home, "policy", "create", "p3", "--storage-unit", "dstu",
              "--compression-level", "25", check=False)
    assert r.returncode != 0 and "compression level 25 is outside 1 to 19" in r.stderr
    cairn(home, "policy", "create", "a1", "--storage-unit", "adstu", "--compression")
    a1, _ = cairn_json(home, "policy", "show", "a1")
    assert a1["compression"] == "client"
    cairn(home, "policy", "create", "a2", "--storage-unit", "adstu")
    a2, _ = cairn_json(home, "policy", "show", "a2")
    assert a2["compression"] == "off"  # advanced-disk's default: plain tar files
    r = cairn(home, "policy", "show", "p2")
    assert "compression server (level 12)" in r.stdout


def test_policies_of_an_older_catalog_keep_compressing_on_the_server(tmp_path):
    """Catalog migrations: policies made before the choice existed compress on the storage
    server at level 1, as they did; advanced-disk ones keep making plain tar files (off)."""
    import sqlite3
    home = str(tmp_path / "home")
    m = Master(home)
    m.config.add_host("me", local=True)
    configure(m, tmp_path, "old")
    (tmp_path / "vol").mkdir()
    m.create_storage_server("ad", type="advanced-disk", host="me")
    m.create_disk_pool("adp", server="ad", volumes=[str(tmp_path / "vol")])
    m.config.add_storage_unit("adstu", pool="adp")
    m.create_policy("oldad", storage_unit="adstu")
    path = m.db.path
    m.close()
    with sqlite3.connect(path) as db:  # the catalog as the version before wrote it
        db.execute("ALTER TABLE policies DROP COLUMN compression_at")
        db.execute("ALTER TABLE policies DROP COLUMN compression_level")
        db.execute("ALTER TABLE images DROP COLUMN compression")
        db.execute("ALTER TABLE image_copies DROP COLUMN compression")
        for table in ("user_grants", "user_keys", "users", "audit_log"):
            db.execute(f"DROP TABLE {table}")
        db.execute("PRAGMA user_version=24")
    m = Master(home)
    try:
        p = m.policy("old")
        assert (p["compression"], p["compression_level"]) == ("server", 1)
        assert m.policy("oldad")["compression"] == "off"
        assert os.path.exists(path + ".bak-v24")
    finally:
        m.close()
