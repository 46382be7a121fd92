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
