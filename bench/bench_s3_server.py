"""The S3 test server (scripts/s3-test-server.sh) on loopback: how long it takes to answer after
its start, how fast boto3 moves one large object through it in a multipart PUT and a
multipart GET, and how fast it reads ranges of it (64 KiB and 1 MiB, one after another, as a
restore reading chunks out of a container would). With --minio PATH, a MinIO server binary
runs the same rounds, alternating with versitygw, to compare the two candidates for the test
server; with --obstore, the obstore client (when installed) runs them against versitygw, to
compare S3 clients.

    .venv/bin/python bench/bench_s3_server.py [--size-mib 64] [--rounds 5] [--minio PATH]
                                              [--obstore]

Prints the median and range of each figure over the rounds. The object is random bytes read
from and written to files in a temporary directory (page cache), so the figures are of the
server and the client, not the disk. Nothing is checked against a target: it informs the
choice of server and client."""

import argparse
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from s3server import SCRIPT, S3Server  # noqa: E402

MiB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=30.0):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.005)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


class Binary:
    """A server binary started directly, to time its start alone (the script adds its
    own checks and the bucket creation)."""

    def __init__(self, name, argv, health, env):
        self.name, self.argv, self.health, self.env = name, argv, health, env

    def start_to_ready(self):
        start = time.monotonic()
        proc = subprocess.Popen(self.argv, env={**os.environ, **self.env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(self.health, proc)
            return time.monotonic() - start
        finally:
            proc.terminate()
            proc.wait(10)


def versitygw_binary(work):
    binary = subprocess.run([str(SCRIPT), "build"], check=True, capture_output=True,
                            text=True).stdout.strip()
    port = free_port()
    os.makedirs(os.path.join(work, "vgw-timing"), exist_ok=True)
    return Binary("versitygw", [binary, "--port", f"127.0.0.1:{port}", "--health", "/health",
                                "--quiet", "posix", os.path.join(work, "vgw-timing")],
                  f"http://127.0.0.1:{port}/health",
                  {"ROOT_ACCESS_KEY_ID": "timing", "ROOT_SECRET_ACCESS_KEY": "timing-secret"})


class MinioServer:
    """The same interface as S3Server for a MinIO binary: endpoint, bucket, keys, client()."""

    region = "us-east-1"

    def __init__(self, binary, work):
        self.binary, self.work = binary, work
        self.port = free_port()
        self.access_key = secrets.token_hex(10)
        self.secret_key = secrets.token_hex(20)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {"MINIO_ROOT_USER": self.access_key, "MINIO_ROOT_PASSWORD": self.secret_key,
                    "MINIO_BROWSER": "off"}
        self.proc = None

    def timing_binary(self):
        port = free_port()
        os.makedirs(os.path.join(self.work, "minio-timing"), exist_ok=True)
        return Binary("minio", [self.binary, "server", "--quiet", "--address",
                                f"127.0.0.1:{port}", os.path.join(self.work, "minio-timing")],
                      f"http://127.0.0.1:{port}/minio/health/live", self.env)

    def start(self):
        os.makedirs(os.path.join(self.work, "minio-data"), exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "server", "--quiet", "--address", f"127.0.0.1:{self.port}",
             os.path.join(self.work, "minio-data")], env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(f"{self.endpoint}/minio/health/live", self.proc)
        self.bucket = "bench"
        self.client().create_bucket(Bucket=self.bucket)
        return self

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(10)

    def client(self, **config):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key,
                            config=Config(s3={"addressing_style": "path"}, **config))


def transfer_round(server, src, dst, size, cfg):
    s3 = server.client(max_pool_connections=cfg.max_request_concurrency)
    key = f"obj-{secrets.token_hex(4)}"
    start = time.monotonic()
    s3.upload_file(src, server.bucket, key, Config=cfg)
    put = size / MiB / (time.monotonic() - start)
    start = time.monotonic()
    s3.download_file(server.bucket, key, dst, Config=cfg)
    get = size / MiB / (time.monotonic() - start)
    rates = ranged_round(server, key, size)
    s3.delete_object(Bucket=server.bucket, Key=key)
    os.unlink(dst)
    return put, get, rates


RANGES = ((64 * 1024, 200), (MiB, 32))


def range_offsets(size, length, count):
    # Spread over the object, not in order, so no read-ahead helps.
    return [(i * 7919 * 1024) % (size - length) for i in range(count)]


def ranged_round(server, key, size):
    s3 = server.client()
    rates = {}
    for length, count in RANGES:
        start = time.monotonic()
        for off in range_offsets(size, length, count):
            s3.get_object(Bucket=server.bucket, Key=key,
                          Range=f"bytes={off}-{off + length - 1}")["Body"].read()
        rates[length] = length * count / MiB / (time.monotonic() - start)
    return rates


class ObstoreClient:
    """The same rounds through obstore (Rust's object_store), for the comparison of clients."""

    def __init__(self, server, args):
        import obstore
        from obstore.store import S3Store
        self.obs, self.args = obstore, args
        self.store = S3Store(server.bucket, endpoint=server.endpoint, region=server.region,
                             access_key_id=server.access_key,
                             secret_access_key=server.secret_key,
                             client_options={"allow_http": True},
                             virtual_hosted_style_request=False)

    def transfer_round(self, src, dst, size):
        key = f"obst-{secrets.token_hex(4)}"
        start = time.monotonic()
        with open(src, "rb") as f:
            self.obs.put(self.store, key, f, chunk_size=self.args.part_mib * MiB,
                         max_concurrency=self.args.threads)
        put = size / MiB / (time.monotonic() - start)
        start = time.monotonic()
        with open(dst, "wb") as f:
            for chunk in self.obs.get(self.store, key).stream(min_chunk_size=8 * MiB):
                f.write(chunk)
        get = size / MiB / (time.monotonic() - start)
        rates = {}
        for length, count in RANGES:
            start = time.monotonic()
            for off in range_offsets(size, length, count):
                bytes(self.obs.get_range(self.store, key, start=off, end=off + length))
            rates[length] = length * count / MiB / (time.monotonic() - start)
        self.obs.delete(self.store, key)
        os.unlink(dst)
        return put, get, rates


def summary(values, unit):
    return (f"median {statistics.median(values):7.1f} {unit}  "
            f"(range {min(values):.1f}-{max(values):.1f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--part-mib", type=int, default=8)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--minio", help="a MinIO server binary to compare with")
    ap.add_argument("--obstore", action="store_true",
                    help="also run the rounds through the obstore client")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="bench-s3-")
    servers = []
    try:
        vgw = S3Server(os.path.join(work, "vgw")).start()
        servers.append(("versitygw", vgw, versitygw_binary(work)))
        if args.minio:
            minio = MinioServer(args.minio, work).start()
            servers.append(("minio", minio, minio.timing_binary()))
        size = args.size_mib * MiB
        src = os.path.join(work, "src")
        with open(src, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(MiB))
        cfg = TransferConfig(multipart_threshold=args.part_mib * MiB,
                             multipart_chunksize=args.part_mib * MiB,
                             max_concurrency=args.threads)
        runs = [(name, server, binary) for name, server, binary in servers]
        if args.obstore:
            runs.append(("obstore", ObstoreClient(vgw, args), None))
        figures = {name: {} for name, _, _ in runs}
        dst = os.path.join(work, "dst")
        for _ in range(args.rounds):
            # Alternating rounds, so load from other work on the machine falls on each alike.
            for name, server, binary in runs:
                f = figures[name]
                if binary is not None:
                    f.setdefault("start to ready", []).append(binary.start_to_ready() * 1000)
                    put, get, rates = transfer_round(server, src, dst, size, cfg)
                else:
                    put, get, rates = server.transfer_round(src, dst, size)
                f.setdefault("multipart PUT", []).append(put)
                f.setdefault("whole GET", []).append(get)
                for length, rate in rates.items():
                    f.setdefault(f"{length // 1024} KiB ranges", []).append(rate)
        print(f"{args.size_mib} MiB object, {args.part_mib} MiB parts, {args.threads} threads, "
              f"{args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
        for name, f in figures.items():
            label = f"{name} (versitygw)" if name == "obstore" else f"{name} (boto3)"
            for i, (figure, values) in enumerate(f.items()):
                unit = "ms   " if figure == "start to ready" else "MiB/s"
                print(f"{label if i == 0 else '':20} {figure:16} {summary(values, unit)}")
    finally:
        for _, server, _ in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
