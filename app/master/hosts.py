"""Hosts: registering them (with their SSH host keys), reaching and probing them. Part of the
master API (app/master/__init__.py)."""

import os

from app import health
from app.config import NAME_RE, check_name
from app.errors import HostKeyChanged, HostKeyUnknown, ValidationError
from app.transport import hostkeys


class HostsAPI:
    # ---- hosts ----------------------------------------------------------------------------
    def host_list(self):
        """Every registered host, by name (dicts as Config.host gives them). Not `hosts`:
        that is the master's pool of agent connections (app/hosts.py)."""
        return self.config.hosts()

    def add_host(self, name, *, local=False, address=None, port=22, user=None, key_file=None,
                 trust_host_key=False, data_address=None, check=True):
        """Registers a host. An SSH host is connected once first (unless check=False), so
        that a wrong address, a refused key or an untrusted host key is reported now, not
        in the middle of the first backup."""
        if check and not local:
            probe_host = {"name": name, "kind": "ssh", "address": address, "port": port,
                          "user": user, "key_file": key_file and os.path.abspath(
                              os.path.expanduser(key_file))}
            t = self.hosts.transport(probe_host, trust_unknown_key=trust_host_key)
            try:
                check_name("host", name)
                if key_file and not os.path.isfile(os.path.expanduser(key_file)):
                    raise ValidationError(f"key file {key_file} does not exist")
                proc = t.start_agent()
                proc.close()
            finally:
                t.close()
        return self.config.add_host(name, local=local, address=address, port=port, user=user,
                                    key_file=key_file, data_address=data_address)

    def trust_host_key(self, name, fingerprint=None, replace=False):
        """Trusts the key a registered SSH host presents now: exactly the key seen, and only
        if it matches `fingerprint` when one is given. `replace` drops the keys trusted
        before (after a host was reinstalled)."""
        host = self.config.host(name)
        if host["kind"] != "ssh":
            raise ValidationError(f"host {name!r} is reached without SSH; it has no host key")
        port = host["port"] or 22
        if replace:
            hostkeys.remove(self.home.known_hosts, host["address"], port)
        t = self.hosts.transport(host)
        try:
            t.connect()
        except HostKeyUnknown as e:
            if fingerprint and fingerprint != e.fingerprint:
                raise ValidationError(
                    f"host {name} presents {e.key_type} {e.fingerprint}, not {fingerprint}; "
                    "nothing was trusted",
                    hint="check the fingerprint with the host's administrator") from None
            hostkeys.add(self.home.known_hosts, host["address"], port, e.pkey)
            return {"host": name, "trusted": True, "key_type": e.key_type,
                    "fingerprint": e.fingerprint}
        except HostKeyChanged as e:
            raise HostKeyChanged(e.message, hint=f"if the host was reinstalled, check the new "
                                 f"fingerprint and run: cairn host trust {name} --replace "
                                 f"--fingerprint {e.fingerprint}") from None
        finally:
            t.close()
        return {"host": name, "trusted": False, "already_trusted": True}

    def ensure_local_host(self):
        """The embedded default: this machine is a host from the start."""
        h = self.config.local_host()
        if h is None:
            import socket
            name = socket.gethostname().split(".")[0] or "localhost"
            if not NAME_RE.match(name) or self.db.one("SELECT 1 FROM hosts WHERE name=?",
                                                      (name,)):
                name = "localhost"
            h = self.config.add_host(name, local=True)
        return h

    def host_reachability(self, timeout=15):
        """Each host with whether its agent answers now (connecting it if needed), for the
        console's status bar: [{"name", "reachable", "error"}]. The hosts are asked side by
        side (app/health.py): hosts that are down cost one timeout, not one each."""
        hosts = self.config.hosts()
        answers = health.ask_hosts(self, hosts, {}, timeout)
        return [{"name": h["name"], "reachable": answers[h["name"]]["reachable"],
                 "error": answers[h["name"]]["error"]} for h in hosts]

    def probe_host(self, name):
        host = self.config.host(name)
        conn = self.hosts.connect(host)
        info = conn.call("probe", timeout=120)
        info["host"] = name
        info["agent"] = conn.info
        return info

    def list_host_dir(self, name, path):
        host = self.config.host(name)
        return self.hosts.connect(host).call("list_dir", {"path": path}, timeout=60)

    def host_volumes(self, name):
        """The file systems a host reports (mount point, type, class, size, free, read-only),
        for picking the volumes of a disk pool. Every entry comes from the host's mount
        table, so `mounted` is True; `error` says why one could not be measured."""
        fss = self.probe_host(name).get("filesystems") or []
        for fs in fss:
            fs.setdefault("mounted", True)
        return fss

    def add_host_trusting_key(self, name, fingerprint, *, address, port=22, user=None,
                              key_file=None, data_address=None):
        """add_host for an SSH host whose unknown key the admin accepted after seeing its
        fingerprint: exactly that key is trusted, and a host that presents another one is
        refused, so a key swapped between showing and accepting is never trusted."""
        check_name("host", name)
        t = self.hosts.transport({"name": name, "kind": "ssh", "address": address,
                                  "port": port, "user": user,
                                  "key_file": key_file and os.path.abspath(
                                      os.path.expanduser(key_file))})
        try:
            t.connect()
        except HostKeyUnknown as e:
            if e.fingerprint != fingerprint:
                raise ValidationError(
                    f"host {address} now presents {e.key_type} {e.fingerprint}, not the key "
                    f"{fingerprint} that was accepted; nothing was trusted",
                    hint="check the fingerprint with the host's administrator") from None
            hostkeys.add(self.home.known_hosts, address, port, e.pkey)
        finally:
            t.close()
        return self.add_host(name, address=address, port=port, user=user, key_file=key_file,
                             data_address=data_address, check=True)
