"""Running the real `cairn` command in tests, as an admin's script would."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cairn(home, *args, check=True, timeout=600):
    env = dict(os.environ, CAIRN_HOME=str(home))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "app", *map(str, args)], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and p.returncode != 0:
        raise AssertionError(f"cairn {' '.join(map(str, args))} exited {p.returncode}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def cairn_json(home, *args, check=True, timeout=600):
    p = cairn(home, *args, "--json", check=check, timeout=timeout)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"not one JSON document: {p.stdout!r} (stderr {p.stderr!r})")
    return doc, p


def local_dedup_policy(home, src, pool, policy="p", agent_path=None):
    """The embedded local host, a dedup storage server with its pool and unit, and a policy
    that backs up `src` from it, made with the CLI. agent_path: a PYTHONPATH for the host's
    agent (a sitecustomize that changes what it does)."""
    cairn(home, "host", "add", "me", "--local")
    if agent_path is not None:
        cairn(home, "host", "set", "me", "agent_env", f"PYTHONPATH={agent_path}")
    cairn(home, "storage-server", "create", "dd", "--type", "dedup", "--host", "me",
          "--path", pool)
    cairn(home, "disk-pool", "create", "ddp", "--server", "dd")
    cairn(home, "storage-unit", "create", "dstu", "--pool", "ddp")
    cairn(home, "policy", "create", policy, "--storage-unit", "dstu")
    cairn(home, "policy", "add-client", policy, "me")
    cairn(home, "policy", "add-selection", policy, src)
