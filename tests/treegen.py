"""Test trees holding every kind of entry a backup must keep, and an exact tree comparison.

make_tree(root) builds the tree and returns what it made; assert_trees_equal(a, b) compares
two trees byte for byte and metadata for metadata, naming the first difference.
"""

import errno
import os
import stat

MiB = 1 << 20

# nanosecond parts that a seconds-only or microseconds-only copy would lose
_BASE_NS = 1600000000 * 10 ** 9 + 123456789


def xattrs_supported(path):
    """Whether the file system at `path` (a directory) takes user.* extended attributes."""
    probe = os.path.join(path, ".xattr-probe")
    with open(probe, "wb"):
        pass
    try:
        os.setxattr(probe, "user.probe", b"1")
        return True
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
            return False
        raise
    finally:
        os.unlink(probe)


def _write(path, data, mode=None):
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)


def _pseudo_random(n, seed):
    """Incompressible-looking bytes without os.urandom, so that runs are reproducible."""
    import hashlib
    out = bytearray()
    block = hashlib.sha256(b"%d" % seed).digest()
    while len(out) < n:
        block = hashlib.sha512(block).digest()
        out += block * 8
    return bytes(out[:n])


def make_tree(root):
    """Build a tree under `root` (created if missing) holding every case a backup of a POSIX
    file system meets. Returns a dict describing it; paths in it are relative to root (str,
    surrogate escapes for names that are not UTF-8)."""
    # Long: the one list of every case the tests expect, in the order make_tree builds it;
    # split up, a case would be easy to leave out of the description it returns.
    os.makedirs(root, exist_ok=True)
    r = os.fsencode(root)
    is_root = os.geteuid() == 0
    info = {"root": root, "owners": is_root, "xattrs": xattrs_supported(root)}

    def p(*parts):
        return os.path.join(r, *[os.fsencode(x) for x in parts])

    # regular files
    _write(p("empty"), b"")
    _write(p("small.txt"), b"hello, cairn\n")
    _write(p("big.bin"), _pseudo_random(3 * MiB, 1))
    info["big"] = "big.bin"

    # nested directories
    os.makedirs(p("dir", "sub", "deeper"))
    _write(p("dir", "sub", "deeper", "file.txt"), b"deep\n" * 100)
    _write(p("dir", "top.txt"), b"top\n")
    os.makedirs(p("dir", "emptydir"))

    # restrictive modes
    os.mkdir(p("private"))
    _write(p("private", "secret"), b"secret\n", 0o600)
    os.chmod(p("private"), 0o700)
    os.mkdir(p("readonly"))
    _write(p("readonly", "inside"), b"read only dir content\n", 0o444)
    info["readonly_dir"] = "readonly"

    # symlinks
    os.mkdir(p("links"))
    os.symlink(b"../small.txt", p("links", "relative"))
    os.symlink(b"/etc/hostname", p("links", "absolute"))
    os.symlink(b"does/not/exist", p("links", "dangling"))
    os.symlink(b"../dir", p("links", "to_dir"))

    # hard links: a pair in one directory, one across directories
    os.mkdir(p("hard"))
    _write(p("hard", "a"), b"hard link content\n" * 50)
    os.link(p("hard", "a"), p("hard", "b"))
    _write(p("hard", "c"), b"linked across directories\n")
    os.link(p("hard", "c"), p("dir", "sub", "c_link"))
    info["hardlinks"] = [["hard/a", "hard/b"], ["dir/sub/c_link", "hard/c"]]

    # special files
    os.mkfifo(p("fifo"), 0o640)
    info["fifo"] = "fifo"

    # mode bits
    _write(p("setuid"), b"#!/bin/sh\n", 0o4755)
    _write(p("setgid"), b"#!/bin/sh\n", 0o2711)
    os.mkdir(p("sticky"))
    os.chmod(p("sticky"), 0o1777)

    # foreign owners
    _write(p("owned"), b"owned by 1234:5678\n")
    os.mkdir(p("owned_dir"))
    _write(p("owned_dir", "inner"), b"x\n")
    if is_root:
        os.chown(p("owned"), 1234, 5678)
        os.chown(p("owned_dir"), 1234, 5678)
        os.chown(p("owned_dir", "inner"), 1234, 5678)
        os.lchown(p("links", "relative"), 1234, 5678)

    # extended attributes, a binary value among them
    if info["xattrs"]:
        os.setxattr(p("small.txt"), "user.cairn.comment", b"kept by the backup")
        os.setxattr(p("small.txt"), "user.cairn.binary", bytes(range(256)))
        os.setxattr(p("dir"), "user.cairn.dir", b"\x00\xff\x00 dir value")

    # a sparse file: 64 MiB logical, two data segments, the second at the very end
    sp = p("sparse.img")
    with open(sp, "wb") as f:
        f.truncate(64 * MiB)
        f.seek(5 * MiB)
        f.write(_pseudo_random(256 * 1024, 2))
        f.seek(64 * MiB - 64 * 1024)
        f.write(_pseudo_random(64 * 1024, 3))
    info["sparse"] = "sparse.img"
    # a file that is all hole
    with open(p("hole_only"), "wb") as f:
        f.truncate(8 * MiB)
    info["hole_only"] = "hole_only"

    # names that break naive tools
    os.mkdir(p("names"))
    odd = [b"caf\xe9", b"\xff\xfe", b"new\nline", b"with space", b"-leading-dash",
           b"glob*?[x]", b"n" * 255, b"..foo", b"...", b"-rf", b" leading space",
           b"trailing space ", b"back\\slash", "ünïcødé ✓".encode("utf-8"), b"tab\there"]
    for name in odd:
        _write(os.path.join(p("names"), name), b"name: " + name + b"\n")
    os.mkdir(os.path.join(p("names"), b"dir\xe9"))
    _write(os.path.join(p("names"), b"dir\xe9", b"f\xff"), b"below a non-UTF-8 directory\n")
    info["odd_names"] = [os.fsdecode(b"names/" + n) for n in odd]

    # a path longer than 256 bytes (and than the 100 + 155 bytes ustar can hold)
    long_dir = os.path.join(p("long"), b"a" * 100, b"b" * 100, b"c" * 60)
    os.makedirs(long_dir)
    _write(os.path.join(long_dir, b"f" * 40), b"long path\n")
    os.symlink(b"../" * 3 + b"x" * 150, os.path.join(long_dir, b"long_target_link"))
    info["long_path"] = os.fsdecode(os.path.relpath(os.path.join(long_dir, b"f" * 40), r))

    # times with nanoseconds on everything, deepest first so that directories keep theirs
    i = 0
    for dirpath, dirnames, filenames in os.walk(r, topdown=False):
        for n in filenames + dirnames:
            full = os.path.join(dirpath, n)
            i += 1
            ns = _BASE_NS + i * 1000000007
            os.utime(full, ns=(ns, ns), follow_symlinks=False)
    os.utime(r, ns=(_BASE_NS, _BASE_NS))
    # read-only directory last: its content is complete now
    os.chmod(p("readonly"), 0o555)
    info["count"] = i
    return info


def _xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise
    out = {}
    for n in names:
        try:
            out[n] = os.getxattr(path, n, follow_symlinks=False)
        except OSError as e:
            if e.errno in (errno.ENODATA, errno.EPERM):
                continue
            raise
    return out


def _same_content(a, b, size):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x = fa.read(MiB)
            y = fb.read(MiB)
            if x != y:
                return False
            if not x:
                return True


def _walk(top):
    """Every entry below top as {relative bytes path: lstat result}."""
    out = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        full = os.path.join(top, rel) if rel else top
        for name in os.listdir(full):
            r = os.path.join(rel, name) if rel else name
            st = os.lstat(os.path.join(top, r))
            out[r] = st
            if stat.S_ISDIR(st.st_mode):
                stack.append(r)
    return out


def assert_trees_equal(a, b, *, check_owner=True):
    """Compare the trees below directories a and b (not a and b themselves): names as bytes,
    types, content, permission bits, owners, mtime_ns, extended attributes, symlink targets,
    devices, hard-link groups and sparseness. Raises AssertionError naming the first
    difference."""
    ta = os.fsencode(a)
    tb = os.fsencode(b)
    ea = _walk(ta)
    eb = _walk(tb)
    only_a = sorted(set(ea) - set(eb))
    only_b = sorted(set(eb) - set(ea))
    if only_a:
        raise AssertionError("only in %s: %r" % (a, only_a[0]))
    if only_b:
        raise AssertionError("only in %s: %r" % (b, only_b[0]))
    groups_a = {}
    groups_b = {}
    for rel in sorted(ea):
        sa = ea[rel]
        sb = eb[rel]
        where = os.fsdecode(rel)
        pa = os.path.join(ta, rel)
        pb = os.path.join(tb, rel)
        if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode):
            raise AssertionError("%s: type %o != %o" % (where, stat.S_IFMT(sa.st_mode),
                                                          stat.S_IFMT(sb.st_mode)))
        if stat.S_ISLNK(sa.st_mode):
            if os.readlink(pa) != os.readlink(pb):
                raise AssertionError("%s: symlink target %r != %r"
                                     % (where, os.readlink(pa), os.readlink(pb)))
        elif stat.S_IMODE(sa.st_mode) != stat.S_IMODE(sb.st_mode):
            raise AssertionError("%s: mode %o != %o" % (where, stat.S_IMODE(sa.st_mode),
                                                          stat.S_IMODE(sb.st_mode)))
        if check_owner and (sa.st_uid, sa.st_gid) != (sb.st_uid, sb.st_gid):
            raise AssertionError("%s: owner %d:%d != %d:%d" % (where, sa.st_uid, sa.st_gid,
                                                                sb.st_uid, sb.st_gid))
        if sa.st_mtime_ns != sb.st_mtime_ns:
            raise AssertionError("%s: mtime_ns %d != %d" % (where, sa.st_mtime_ns,
                                                              sb.st_mtime_ns))
        if stat.S_ISREG(sa.st_mode):
            if sa.st_size != sb.st_size:
                raise AssertionError("%s: size %d != %d" % (where, sa.st_size, sb.st_size))
            if not _same_content(pa, pb, sa.st_size):
                raise AssertionError("%s: content differs" % where)
            if sa.st_size >= MiB and sa.st_blocks * 512 < sa.st_size // 2:
                if sb.st_blocks * 512 >= sb.st_size // 2:
                    raise AssertionError("%s: no longer sparse (%d of %d bytes allocated)"
                                         % (where, sb.st_blocks * 512, sb.st_size))
        if stat.S_ISCHR(sa.st_mode) or stat.S_ISBLK(sa.st_mode):
            if sa.st_rdev != sb.st_rdev:
                raise AssertionError("%s: device %x != %x" % (where, sa.st_rdev, sb.st_rdev))
        xa = _xattrs(pa)
        xb = _xattrs(pb)
        if xa != xb:
            raise AssertionError("%s: extended attributes %r != %r" % (where, xa, xb))
        if not stat.S_ISDIR(sa.st_mode) and sa.st_nlink > 1:
            groups_a.setdefault((sa.st_dev, sa.st_ino), set()).add(rel)
        if not stat.S_ISDIR(sb.st_mode) and sb.st_nlink > 1:
            groups_b.setdefault((sb.st_dev, sb.st_ino), set()).add(rel)
    ga = sorted(sorted(g) for g in groups_a.values() if len(g) > 1)
    gb = sorted(sorted(g) for g in groups_b.values() if len(g) > 1)
    if ga != gb:
        raise AssertionError("hard-link groups differ: %r != %r" % (ga, gb))
