"""Where compression happens, over a limited link: a client backs up compressible data into a
deduplicating pool on a storage server whose link is limited (1 Gb/s by default), once per
choice of the policy's compression: off, server, client with client-side deduplication
(compressed chunks, Z) and client with server-side deduplication (the stream compressed in
transit, X). Client and storage server are network namespaces with their own sshd and
address (tests/netbed.py); each run goes into a pool of its own, so that none finds another's
chunks.

    .venv/bin/python bench/bench_compression_link.py                # 256 MiB, about 3 minutes
    .venv/bin/python bench/bench_compression_link.py --mib 64 --rate-mbit 200

For each run: the backup's wall time and rate, what crossed the network (sent_bytes; for
server-side deduplication without compression, the stream itself) and what the pool stored.
Needs root (network namespaces). The data: bytes of a 16-letter alphabet (4 bits each, so
zstd halves them and no chunk repeats)."""

import argparse
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from app import status as st  # noqa: E402
from app.master import Master  # noqa: E402
from netbed import NetBed  # noqa: E402

RUNS = (("off", "client"), ("server", "client"), ("client", "client"), ("server", "server"),
        ("client", "server"))
ALPHABET = bytes.maketrans(bytes(range(256)), b"abcdefghijklmnop" * 16)


def make_tree(d, mib):
    d.mkdir(parents=True)
    for i in range(max(1, mib // 16)):
        (d / f"f{i:03d}.txt").write_bytes(os.urandom(16 << 20).translate(ALPHABET))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="data set size (default 256)")
    ap.add_argument("--rate-mbit", type=int, default=1000, help="each link's limit (1000)")
    ap.add_argument("--level", type=int, default=1, help="zstd level (default 1)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-compression-"))
    bed = NetBed(work / "bed")
    m = None
    try:
        m = Master(str(work / "home"))
        env = f"PYTHONPATH={sysconfig.get_paths()['purelib']}"  # pyfastcdc and zstandard
        for name in ("client", "stor"):
            h = bed.add_host(name, rate_mbit=args.rate_mbit)
            m.add_host(name, address=h.address, port=h.port, user=h.user,
                       key_file=h.key_file, trust_host_key=True)
            m.update_object("host", name, agent_env=env)
            m.hosts.connect(m.config.host(name))
        src = work / "src"
        make_tree(src, args.mib)
        total = sum(f.stat().st_size for f in src.iterdir())
        print(f"{total / 2**20:.0f} MiB, links of {args.rate_mbit} Mbit/s, zstd level "
              f"{args.level}")
        print(f"{'compression':<12} {'dedup':<7} {'seconds':>8} {'MB/s':>7} {'sent MiB':>9} "
              f"{'stored MiB':>11}  where")
        for i, (at, dedup) in enumerate(RUNS):
            name = f"r{i}"
            m.create_storage_server(name, type="dedup", host="stor",
                                    path=str(work / f"pool-{name}"))
            m.create_disk_pool(f"p{name}", server=name, volumes=[])
            m.create_storage_unit(f"u{name}", pool=f"p{name}")
            m.create_policy(name, storage_unit=f"u{name}", dedup=dedup, compression=at,
                            compression_level=args.level, clients=["client"],
                            selections=[str(src)])
            t0 = time.monotonic()
            [job] = m.wait_for(m.start_backup(name))
            took = time.monotonic() - t0
            if job["status"] != st.OK:
                print(f"{at} {dedup}: status {job['status']}")
                continue
            d = m.image(job["image_id"])["dedup"]
            sent = d.get("sent_bytes")
            c = d["compression"]
            where = c["at"] + (" + stream in transit" if c.get("in_transit") else "")
            print(f"{at:<12} {dedup:<7} {took:8.1f} {total / took / 1e6:7.1f} "
                  f"{(sent if sent is not None else total) / 2**20:9.1f} "
                  f"{d['stored_bytes'] / 2**20:11.1f}  {where}")
    finally:
        if m is not None:
            m.close()
        bed.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
