"""Several hosts on this one machine, for tests and benchmarks that need real addresses: each
host is a network namespace with its own address and its own OpenSSH server, joined to the
others by a bridge in a namespace of its own. The test process (the master) reaches the bridge
through one veth pair, so every packet stays inside namespaces made here; nothing is routed
off the machine (no namespace has a default route).

    bed = NetBed(tmp_path)
    a = bed.add_host("stor-a", rate_mbit=800)   # its link limited to 100 MB/s each way
    master.add_host("stor-a", address=a.address, port=a.port, user=a.user,
                    key_file=a.key_file, trust_host_key=True)
    a.power_off()                                # every process in it killed, its link down
    bed.cleanup()

The hosts share this machine's file system (a namespace separates the network only), so a
test gives each host its own directories. Creating namespaces needs root."""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from sshd import SSHServer

PREFIX = "cairnbed-"


class NetBedUnavailable(RuntimeError):
    pass


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetBedUnavailable(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def _in_ns(ns, *args, check=True):
    r = subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetBedUnavailable(f"{' '.join(args)} in {ns}: {r.stderr.strip()}")
    return r.stdout


def _kill_all_in(ns):
    """SIGKILLs every process in the namespace, as a power cut would stop them."""
    for _ in range(20):
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale():
    """Removes namespaces of earlier runs whose test process is gone (a run that was killed
    leaves them behind)."""
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX):].split("-")[0]
        if owner.isdigit() and not _alive(int(owner)):
            _kill_all_in(name)
            _ip("netns", "del", name, check=False)


def _free_subnet():
    """A /24 in 10.231.0.0/16 that no interface of this machine uses."""
    used = []
    for line in _ip("-o", "-4", "addr", "show", check=False).splitlines():
        parts = line.split()
        if "inet" in parts:
            used.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    start = os.getpid() % 200
    for k in range(200):
        net = ipaddress.ip_network(f"10.231.{20 + (start + k) % 200}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetBedUnavailable("no free /24 in 10.231.0.0/16 for the test hosts")


class NetHost(SSHServer):
    """One host of the bed: name, ns, address, port (22), user, key_file, host key lines as
    tests/sshd.py's SSHServer has them."""

    def __init__(self, bed, name, index, address, workdir):
        Path(workdir).mkdir(parents=True, exist_ok=True)
        super().__init__(workdir)
        self.bed, self.name, self.index = bed, name, index
        self.host = self.address = address
        self.ns = f"{bed.ns_prefix}-{name}"
        self.link = f"{bed.if_prefix}h{index}"      # this host's end, in its namespace
        self.port_link = f"{bed.if_prefix}p{index}"  # the bridge's end, in the switch
        self.rate_mbit = None

    def _pick_port(self):
        return 22

    def _command(self, config):
        return ["ip", "netns", "exec", self.ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(config)]

    def run(self, *args, check=True):
        """Runs a command inside this host's namespace; its stdout."""
        return _in_ns(self.ns, *args, check=check)

    def limit(self, rate_mbit=None, delay_ms=None):
        """Limits the link both ways (tbf at each end of the veth pair), or lifts the limit
        with no arguments."""
        self.rate_mbit = rate_mbit
        for ns, dev in ((self.ns, self.link), (self.bed.switch, self.port_link)):
            _in_ns(ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if rate_mbit and delay_ms:
                _in_ns(ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay",
                       f"{delay_ms}ms", "rate", f"{rate_mbit}mbit")
            elif delay_ms:
                _in_ns(ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay",
                       f"{delay_ms}ms")
            elif rate_mbit:
                # A burst of about 4 ms at the rate, at least 64 KiB: enough for TCP to reach
                # the rate, small enough that the limit holds over short runs.
                burst = max(64 << 10, rate_mbit * 1000 * 1000 // 8 // 250)
                _in_ns(ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                       f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms")

    def power_off(self):
        """The host is gone as a crashed machine is: every process in it (its sshd, the agents
        it started) is killed, and its link goes down, so peers get no reset, only
        silence."""
        _ip("-n", self.ns, "link", "set", self.link, "down", check=False)
        _kill_all_in(self.ns)
        self.proc = None

    def power_on(self):
        """The host is back: its link up and its sshd started again, with the same keys."""
        _ip("-n", self.ns, "link", "set", self.link, "up")
        self.start()

    def stop(self):
        super().stop()


class NetBed:
    """The bridge, the master's link to it, and the hosts added. cleanup() removes all."""

    def __init__(self, workdir):
        if os.geteuid() != 0:
            raise NetBedUnavailable("the multi-host test bed makes network namespaces, which "
                                    "needs root")
        if shutil.which("ip") is None or shutil.which("tc") is None:
            raise NetBedUnavailable("the multi-host test bed needs ip and tc (iproute2): run "
                                    "scripts/test.sh, which installs them")
        sweep_stale()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        stamp = f"{os.getpid()}-{time.monotonic_ns() % 100000}"
        self.ns_prefix = PREFIX + stamp
        # Interface names are at most 15 characters.
        self.if_prefix = f"cb{(os.getpid() * 7 + time.monotonic_ns()) % 100000:05d}"
        self.switch = f"{self.ns_prefix}-switch"
        self.hosts = {}
        self.net = _free_subnet()
        hosts = list(self.net.hosts())
        self.master_address = str(hosts[0])
        self._free = hosts[9:]
        self.master_link = f"{self.if_prefix}m"
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            _ip("link", "add", self.master_link, "type", "veth", "peer", "name", "mport",
                "netns", self.switch)
            _ip("-n", self.switch, "link", "set", "mport", "master", "br0")
            _ip("-n", self.switch, "link", "set", "mport", "up")
            _ip("addr", "add", f"{self.master_address}/{self.net.prefixlen}", "dev",
                self.master_link)
            _ip("link", "set", self.master_link, "up")
        except NetBedUnavailable:
            self.cleanup()
            raise

    def add_host(self, name, rate_mbit=None, delay_ms=None):
        index = len(self.hosts) + 1
        address = str(self._free.pop(0))
        host = NetHost(self, name, index, address, self.workdir / name)
        ns = host.ns
        _ip("netns", "add", ns)
        self.hosts[name] = host
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", host.link, "netns", ns, "type", "veth", "peer", "name",
            host.port_link, "netns", self.switch)
        _ip("-n", ns, "addr", "add", f"{address}/{self.net.prefixlen}", "dev", host.link)
        _ip("-n", ns, "link", "set", host.link, "up")
        _ip("-n", self.switch, "link", "set", host.port_link, "master", "br0")
        _ip("-n", self.switch, "link", "set", host.port_link, "up")
        if rate_mbit or delay_ms:
            host.limit(rate_mbit, delay_ms)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        host.start()
        return host

    def cleanup(self):
        for host in self.hosts.values():
            _kill_all_in(host.ns)
            _ip("netns", "del", host.ns, check=False)
        _kill_all_in(self.switch)
        _ip("netns", "del", self.switch, check=False)
        _ip("link", "del", self.master_link, check=False)
        self.hosts = {}
