"""Delivering a digest (app/alerts/digest.py): by email through the site's SMTP server, as
syslog messages, as a JSON POST to a webhook, and as JSON on a command's standard input.
Each channel either delivers or raises DeliveryError with a sentence that says what failed
and where; one failing channel never stops the others.

The mail, TLS, HTTP and socket modules are imported lazily, by the channel that sends: every
`cairn` command opens the master, which loads this module, and most never send a thing."""

import json
import os
import shlex
import subprocess

from app.alerts import settings as cfg
from app.errors import CairnError

TIMEOUT = 20.0
COMMAND_TIMEOUT = 60.0
SYSLOG_FACILITY = 3     # daemon
SYSLOG_LEVEL = {"error": 3, "warning": 4, "info": 6}


class DeliveryError(CairnError):
    pass


def _tls(cafile):
    import ssl
    try:
        return ssl.create_default_context(cafile=cafile or None)
    except (OSError, ssl.SSLError) as e:
        raise DeliveryError(f"the CA file {cafile} cannot be read: {e}") from None


def email(v, digest):
    host, port, tls = v["smtp_host"], cfg.smtp_port(v), v["smtp_tls"]
    where = f"mail through {host}:{port}"
    import smtplib
    import ssl
    from email.message import EmailMessage
    from email.utils import formatdate, make_msgid
    msg = EmailMessage()
    msg["Subject"] = digest["subject"]
    msg["From"] = cfg.sender(v)
    msg["To"] = v["recipients"]
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain=cfg.sender(v).rpartition("@")[2])
    msg.set_content(digest["text"])
    ctx = _tls(v["smtp_ca_file"]) if tls != "none" else None
    try:
        if tls == "ssl":
            server = smtplib.SMTP_SSL(host, port, timeout=TIMEOUT, context=ctx)
        else:
            server = smtplib.SMTP(host, port, timeout=TIMEOUT)
        with server:
            server.ehlo()
            if tls == "starttls":
                if not server.has_extn("starttls"):
                    raise DeliveryError(f"{where}: the server does not offer STARTTLS",
                                        hint="set smtp_tls to ssl or none if that is meant")
                server.starttls(context=ctx)
                server.ehlo()
            if v["smtp_user"]:
                pw = cfg.password(v)
                if pw is None:
                    raise DeliveryError(f"{where}: no password for {v['smtp_user']} in the OS "
                                        "keyring", hint="`cairn alerts password` keeps it there")
                server.login(v["smtp_user"], pw)
            refused = server.send_message(msg, to_addrs=[
                a.strip() for a in v["recipients"].split(",") if a.strip()])
    except smtplib.SMTPAuthenticationError as e:
        raise DeliveryError(f"{where}: the server refused the login of {v['smtp_user']} "
                            f"({e.smtp_code})") from None
    except smtplib.SMTPRecipientsRefused as e:
        raise DeliveryError(f"{where}: every recipient was refused: "
                            f"{', '.join(e.recipients)}") from None
    except ssl.SSLError as e:
        raise DeliveryError(f"{where}: TLS failed ({e.reason or e})",
                            hint="smtp_ca_file names the CA of a site's own certificates") from None
    except (OSError, smtplib.SMTPException) as e:
        raise DeliveryError(f"{where}: {e or type(e).__name__}") from None
    if refused:
        return f"sent; refused by the server: {', '.join(refused)}"
    return "sent"


def _syslog_socket(address):
    """A connected datagram socket to a syslog socket path or HOST:PORT (UDP)."""
    import socket
    if address.startswith("/"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        target = address
    else:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise DeliveryError(f"syslog_address {address!r} is neither a socket path nor "
                                "HOST:PORT")
        target = (host.strip("[]"), int(port))
        s = socket.socket(socket.getaddrinfo(target[0], target[1], type=socket.SOCK_DGRAM)
                          [0][0], socket.SOCK_DGRAM)
    s.settimeout(TIMEOUT)
    s.connect(target)
    return s


def syslog_lines(digest):
    """[(level, text)]: one line per event and resolved condition (a test: one line)."""
    d = digest["json"]
    if d["test"]:
        return [("info", f"test message from Cairn master {d['master']}")]
    out = [(e["severity"], f"{e['kind']}: {e['message']}") for e in d["events"]]
    out += [("info", f"resolved: {e['message']}") for e in d["resolved"]]
    return out


def syslog(v, digest):
    address = v["syslog_address"]
    try:
        with _syslog_socket(address) as s:
            for level, text in syslog_lines(digest):
                pri = SYSLOG_FACILITY * 8 + SYSLOG_LEVEL.get(level, 6)
                line = " ".join(text.split())   # one record per message: no newlines in it
                s.send(f"<{pri}>cairn[{os.getpid()}]: {line}".encode("utf-8", "replace"))
    except OSError as e:
        raise DeliveryError(f"syslog at {address}: {e.strerror or e}") from None
    return f"{len(syslog_lines(digest))} message(s) to {address}"


def webhook(v, digest):
    url = v["webhook_url"]
    import urllib.error
    import urllib.request
    body = json.dumps(digest["json"]).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "cairn-alerts"})
    ctx = _tls(v["webhook_ca_file"]) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT, context=ctx) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        raise DeliveryError(f"webhook {url}: the server answered {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise DeliveryError(f"webhook {url}: {e.reason}") from None
    except OSError as e:
        raise DeliveryError(f"webhook {url}: {e}") from None
    return f"posted ({code})"


def command(v, digest):
    argv = shlex.split(v["command"])
    env = dict(os.environ, CAIRN_ALERT_SUBJECT=digest["subject"])
    try:
        r = subprocess.run(argv, input=json.dumps(digest["json"]).encode(), env=env,
                           capture_output=True, timeout=COMMAND_TIMEOUT)
    except FileNotFoundError:
        raise DeliveryError(f"command {argv[0]}: not found") from None
    except PermissionError:
        raise DeliveryError(f"command {argv[0]}: not executable") from None
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"command {argv[0]}: still running after "
                            f"{COMMAND_TIMEOUT:.0f} s, stopped") from None
    if r.returncode != 0:
        said = r.stderr.decode("utf-8", "replace").strip().splitlines()
        raise DeliveryError(f"command {argv[0]} exited with {r.returncode}"
                            + (f": {said[-1]}" if said else ""))
    return "ran"


SENDERS = {"email": email, "syslog": syslog, "webhook": webhook, "command": command}


def deliver(v, digest, only=None):
    """{channel: {"ok": bool, "text"}} for each channel turned on (or those in `only`)."""
    out = {}
    for name in cfg.channels(v):
        if only and name not in only:
            continue
        try:
            out[name] = {"ok": True, "text": SENDERS[name](v, digest)}
        except CairnError as e:
            out[name] = {"ok": False, "text": e.message + (f" ({e.hint})" if e.hint else "")}
        except Exception as e:  # noqa: BLE001 - a channel's failure is its result, never a crash
            out[name] = {"ok": False, "text": f"{name}: {e or type(e).__name__}"}
    return out
