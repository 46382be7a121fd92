"""The alert settings: rows `alerts.NAME` of the catalog's settings table, each checked when
it is set. The SMTP password is never in the catalog: it is kept in the OS keyring (service
"cairn"), under a name made of the SMTP user, server and port."""

import re
import shlex
import socket
from urllib.parse import urlsplit

from app import timeutil
from app.errors import NotFound, ValidationError

PREFIX = "alerts."
KEYRING_SERVICE = "cairn"

# What can be told; "partial" (jobs that skipped files) is off unless chosen.
KINDS = {
    "failed": "a job failed",
    "missed": "a scheduled backup missed its start window",
    "verify-damage": "a verify found damaged images or a pool open to other users",
    "high-water": "a disk pool is at or above its high-water mark",
    "host-unreachable": "a host has been unreachable longer than host_down_after",
    "catalog-overdue": "a catalog backup is overdue",
    "partial": "a job ended partially (files skipped)",
}
DEFAULT_KINDS = "failed,missed,verify-damage,high-water,host-unreachable,catalog-overdue"
TLS_CHOICES = ("starttls", "ssl", "none")
PORTS = {"starttls": 587, "ssl": 465, "none": 25}

# name: (default, about)
SPEC = {
    "interval": ("15m", "the shortest time between two alert messages; what happens in "
                 "between goes into one digest"),
    "host_down_after": ("15m", "how long a host must be unreachable before it is alerted"),
    "kinds": (DEFAULT_KINDS, "what is alerted, comma-separated: " + ", ".join(KINDS)),
    "smtp_host": ("", "the SMTP server that sends alert mail (empty: no mail)"),
    "smtp_port": ("", "its port (empty: 587 for starttls, 465 for ssl, 25 for none)"),
    "smtp_tls": ("starttls", "starttls, ssl (TLS from the first byte) or none"),
    "smtp_user": ("", "the SMTP login (empty: no login); the password is in the OS keyring "
                  "(`cairn alerts password`)"),
    "smtp_ca_file": ("", "a CA certificate file that signs the SMTP server's certificate "
                     "(empty: the system's CAs)"),
    "sender": ("", "the From address (empty: cairn@ this host's name)"),
    "recipients": ("", "who gets alert mail, comma-separated addresses"),
    "syslog": ("off", "on: each alert is also a syslog message (journald reads them)"),
    "syslog_address": ("/dev/log", "the syslog socket, or HOST:PORT for syslog over UDP"),
    "webhook_url": ("", "an http(s) URL that gets each digest as a JSON POST (empty: none)"),
    "webhook_ca_file": ("", "a CA certificate file for an https webhook (empty: the "
                        "system's CAs)"),
    "command": ("", "a command that gets each digest as JSON on its standard input (empty: "
                "none); run without a shell"),
}

_ADDRESS = re.compile(r"^[^@\s,<>]+@[^@\s,<>]+$")


def check(name, value):
    """The value as stored, or ValidationError saying what is wrong with it."""
    v = str(value).strip()
    if name in ("interval", "host_down_after"):
        timeutil.parse_duration(v, what=name)
    elif name == "kinds":
        got = [k.strip() for k in v.split(",") if k.strip()]
        wrong = [k for k in got if k not in KINDS]
        if wrong:
            raise ValidationError(f"unknown alert kind {wrong[0]!r}",
                                  hint="kinds: " + ", ".join(KINDS))
        v = ",".join(dict.fromkeys(got))
    elif name == "smtp_port" and v:
        if not v.isdigit() or not 0 < int(v) < 65536:
            raise ValidationError(f"smtp_port must be a port number, not {v!r}")
    elif name == "smtp_tls" and v not in TLS_CHOICES:
        raise ValidationError(f"smtp_tls must be one of {', '.join(TLS_CHOICES)}, not {v!r}")
    elif name in ("sender",) and v and not _ADDRESS.match(v):
        raise ValidationError(f"{v!r} is not a mail address")
    elif name == "recipients" and v:
        addrs = [a.strip() for a in v.split(",") if a.strip()]
        bad = [a for a in addrs if not _ADDRESS.match(a)]
        if bad:
            raise ValidationError(f"{bad[0]!r} is not a mail address")
        v = ", ".join(addrs)
    elif name == "syslog" and v not in ("on", "off"):
        raise ValidationError(f"syslog must be on or off, not {v!r}")
    elif name == "webhook_url" and v:
        u = urlsplit(v)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValidationError(f"{v!r} is not an http or https URL")
    elif name == "command" and v:
        try:
            shlex.split(v)
        except ValueError as e:
            raise ValidationError(f"the command cannot be split into words: {e}") from None
    elif name == "syslog_address" and not v:
        raise ValidationError("syslog_address must name a socket or HOST:PORT")
    return v


def get(db, name):
    if name not in SPEC:
        raise NotFound(f"there is no alert setting {name!r}", hint="settings: " + ", ".join(SPEC))
    row = db.one("SELECT value FROM settings WHERE key=?", (PREFIX + name,))
    return SPEC[name][0] if row is None else row[0]


def values(db):
    """{name: value} of every alert setting, defaults filled in."""
    stored = dict(db.all("SELECT key, value FROM settings WHERE key LIKE ?", (PREFIX + "%",)))
    return {n: stored.get(PREFIX + n, d) for n, (d, _about) in SPEC.items()}


def put(db, name, value):
    """Sets one setting (an empty value or None puts back its default)."""
    get(db, name)  # an unknown name is refused here
    with db.tx() as c:
        if value is None or str(value).strip() == "":
            c.execute("DELETE FROM settings WHERE key=?", (PREFIX + name,))
            return
        v = check(name, value)
        c.execute("INSERT INTO settings(key, value) VALUES (?,?) ON CONFLICT(key) DO UPDATE "
                  "SET value=excluded.value", (PREFIX + name, v))


def channels(v):
    """The channels the settings turn on, in the order they are tried."""
    out = []
    if v["smtp_host"] and v["recipients"]:
        out.append("email")
    if v["syslog"] == "on":
        out.append("syslog")
    if v["webhook_url"]:
        out.append("webhook")
    if v["command"]:
        out.append("command")
    return out


def problems(v):
    """Settings that stop a channel, said plainly (a server without recipients, ...)."""
    out = []
    if v["smtp_host"] and not v["recipients"]:
        out.append("smtp_host is set but recipients is empty: no mail is sent")
    if v["recipients"] and not v["smtp_host"]:
        out.append("recipients is set but smtp_host is empty: no mail is sent")
    return out


def kinds(v):
    return {k.strip() for k in v["kinds"].split(",") if k.strip()}


def smtp_port(v):
    return int(v["smtp_port"]) if v["smtp_port"] else PORTS[v["smtp_tls"]]


def sender(v):
    return v["sender"] or f"cairn@{socket.getfqdn() or 'localhost'}"


def keyring_username(v):
    return f"smtp:{v['smtp_user']}@{v['smtp_host']}:{smtp_port(v)}"


def store_password(v, password):
    """Keeps the SMTP password in the OS keyring, under the configured user and server."""
    if not v["smtp_host"] or not v["smtp_user"]:
        raise ValidationError("set smtp_host and smtp_user before the password")
    import keyring  # the keyring backends load only for a password
    keyring.set_password(KEYRING_SERVICE, keyring_username(v), password)


def password(v):
    """The SMTP password from the OS keyring, or None."""
    try:
        import keyring
        return keyring.get_password(KEYRING_SERVICE, keyring_username(v))
    except Exception:  # noqa: BLE001 - no usable keyring: the login then says what is missing
        return None
