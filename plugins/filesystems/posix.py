"""POSIX file system provider: the mounted file systems of a host, read from the kernel's
mount table, with size and free space. Runs inside the agent: standard library only."""

import os

# File systems that hold no user data; listing them only hides the real volumes.
PSEUDO = {
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "pstore",
    "debugfs", "tracefs", "configfs", "fusectl", "mqueue", "hugetlbfs", "bpf", "autofs",
    "binfmt_misc", "rpc_pipefs", "nsfs", "efivarfs", "selinuxfs", "ramfs", "squashfs",
}
NETWORK = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "ceph", "glusterfs"}
PARALLEL = {"gpfs", "lustre", "beegfs", "fuse.beegfs", "orangefs", "pvfs2", "cephfs"}


def _unescape(field):
    # The mount table escapes space, tab, newline and backslash as \ooo octal.
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 3 < len(field) + 1 and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_mount_table(path="/proc/self/mounts"):
    """[(device, mount point, fstype, options)] in mount order."""
    entries = []
    try:
        with open(path, "r", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 4:
                    continue
                entries.append((_unescape(parts[0]), _unescape(parts[1]), parts[2], parts[3]))
    except OSError:
        pass
    return entries


def classify(fstype):
    if fstype in PARALLEL:
        return "parallel"
    if fstype in NETWORK or fstype.startswith("nfs"):
        return "network"
    return "local"


def filesystems(include_pseudo=False):
    """The mounted file systems: mount point, type, device, size, free, class."""
    seen = {}
    for device, mnt, fstype, opts in read_mount_table():
        if not include_pseudo and (fstype in PSEUDO or fstype == "tmpfs" and mnt.startswith(("/dev", "/run", "/sys"))):
            continue
        # a later mount on the same point hides the earlier one
        seen[mnt] = (device, fstype, opts)
    result = []
    for mnt, (device, fstype, opts) in seen.items():
        entry = {"mount_point": mnt, "type": fstype, "device": device,
                 "read_only": "ro" in opts.split(","), "class": classify(fstype)}
        try:
            st = os.statvfs(mnt)
            entry["size"] = st.f_blocks * st.f_frsize
            entry["free"] = st.f_bavail * st.f_frsize
        except OSError as e:
            entry["size"] = entry["free"] = None
            entry["error"] = e.strerror
        result.append(entry)
    result.sort(key=lambda e: e["mount_point"])
    return result


def filesystem_of(path):
    """The mount table entry holding path (longest matching mount point), or None."""
    path = os.path.realpath(path)
    best = None
    for device, mnt, fstype, opts in read_mount_table():
        if path == mnt or path.startswith(mnt.rstrip("/") + "/") or mnt == "/":
            if best is None or len(mnt) >= len(best[1]):
                best = (device, mnt, fstype, opts)
    if best is None:
        return None
    return {"device": best[0], "mount_point": best[1], "type": best[2],
            "class": classify(best[2])}
