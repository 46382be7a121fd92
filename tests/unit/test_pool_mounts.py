"""The warnings on a pool's volumes (app/pool_mounts.py), on file system rows as a host's
probe gives them: a GPFS file system not mounted on the storage server's node, and a shared
file system that other storage servers' pools use but that is not mounted on this host."""

from app import pool_mounts, scale_view as sv

ROOT = {"mount_point": "/", "type": "ext4", "class": "local", "device": "/dev/sda1"}
NFS = {"mount_point": "/nfs/backup", "type": "nfs4", "class": "network",
       "device": "filer:/export/backup"}


def test_a_shared_file_system_the_others_use_and_this_host_lacks():
    others = [{"path": "/nfs/backup/media-1", "pool": "dp1", "server": "ss1",
               "host": "media-1", "rows": [ROOT, NFS]},
              {"path": "/srv/local", "pool": "dp9", "server": "ss9", "host": "media-9",
               "rows": [ROOT]}]
    expected = pool_mounts.expected_mounts(others)
    assert [(e["mount_point"], e["pool"]) for e in expected] == [("/nfs/backup", "dp1")]
    # this host has the NFS mount too: fine; a nested mount below it is fine too
    assert pool_mounts.volume_warnings(["/nfs/backup/media-2"], "media-2", [ROOT, NFS],
                                       expected) == []
    nested = dict(NFS, mount_point="/nfs/backup/media-2")
    assert pool_mounts.volume_warnings(["/nfs/backup/media-2"], "media-2",
                                       [ROOT, NFS, nested], expected) == []
    # it does not: the directory is on its root file system
    assert pool_mounts.volume_warnings(["/nfs/backup/media-2", "/srv/x"], "media-2", [ROOT],
                                       expected) == [
        "volume /nfs/backup/media-2 on host media-2 is on / (ext4), not on the nfs4 file "
        "system mounted at /nfs/backup, which disk pool 'dp1' uses on host media-1 (storage "
        "server 'ss1'): mount it on host media-2 before using the volume for backups, or "
        "backups fill the host's own disk."]
    # another's pool on its own local disk expects nothing of this host
    assert pool_mounts.expected_mounts([dict(others[0], rows=[ROOT])]) == []
    assert pool_mounts.on_shared("/nfs/backup/media-2", [ROOT, NFS])
    assert not pool_mounts.on_shared("/srv/x", [ROOT, NFS])


def test_a_gpfs_file_system_not_mounted_on_the_node_warns_as_the_wizard_does():
    scale = {"cluster_name": "c", "local_node": "gpfs-2.example.com",
             "nodes": [{"name": "gpfs-1.example.com"}, {"name": "gpfs-2.example.com"}],
             "filesystems": [{"device": "fs1", "mount_point": "/gpfs/fs1",
                              "mounted_on": [{"node": "gpfs-1"}]}]}
    rows = sv.mark_volumes([ROOT], scale, "gpfs-2.example.com")
    assert pool_mounts.on_shared("/gpfs/fs1/cairn", rows), "a GPFS path, mounted yet or not"
    w = pool_mounts.volume_warnings(["/gpfs/fs1/cairn/a", "/gpfs/fs1/cairn/b"], "h2", rows)
    assert w == [sv.volume_warning(sv.mount_of("/gpfs/fs1/cairn/a", rows), "h2")] == [
        "fs1 is not mounted on gpfs-2 (the storage server's node): mount it there "
        "(mmmount fs1 -N gpfs-2) before using it for backups."]
    mounted = dict(scale, filesystems=[dict(scale["filesystems"][0], mounted_on=[
        {"node": "gpfs-1"}, {"node": "gpfs-2"}])])
    assert pool_mounts.volume_warnings(["/gpfs/fs1/cairn/a"], "h2",
                                       sv.mark_volumes([ROOT], mounted, None)) == []


def test_a_deduplicating_servers_path_names_the_server():
    others = [{"path": "/nfs/backup/dd", "pool": None, "server": "dd", "host": "media-1",
               "rows": [ROOT, NFS]}]
    [w] = pool_mounts.volume_warnings(["/nfs/backup/media-2"], "media-2", [ROOT],
                                      pool_mounts.expected_mounts(others))
    assert "which storage server 'dd' uses on host media-1: mount it on host media-2" in w
