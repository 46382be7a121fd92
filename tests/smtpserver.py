"""A real SMTP server on loopback for the tests (aiosmtpd): STARTTLS with a certificate of
its own (the CA file a client must be given to trust it), optionally a login, and the
messages it accepted, parsed."""

import datetime
import email
import email.policy
import ipaddress
import ssl
import threading
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sshd import free_port


def self_signed(dirpath, host="127.0.0.1"):
    """(certificate file, key file) for `host`, valid for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cairn-test-smtp")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = dirpath / "smtp-cert.pem", dirpath / "smtp-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class _Handler:
    def __init__(self, server):
        self.server = server

    async def handle_DATA(self, smtp, session, envelope):
        msg = email.message_from_bytes(envelope.original_content or envelope.content,
                                       policy=email.policy.default)
        with self.server.lock:
            self.server.messages.append({"from": envelope.mail_from,
                                         "to": list(envelope.rcpt_tos), "message": msg,
                                         "tls": session.ssl is not None,
                                         "login": getattr(session, "login_data", None)})
        return "250 OK"


class SMTPServer:
    """start() listens on 127.0.0.1; tls: offer STARTTLS (and require it); users: {login:
    password} that must log in (over TLS) before sending."""

    def __init__(self, dirpath, tls=True, users=None):
        self.host, self.port = "127.0.0.1", free_port()
        self.messages, self.lock = [], threading.Lock()
        self.users = users or {}
        self.ca_file = None
        kw = {}
        if tls:
            self.ca_file, key_file = self_signed(dirpath)
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(self.ca_file, key_file)
            kw.update(tls_context=ctx, require_starttls=True)
        if self.users:
            kw.update(authenticator=self._login, auth_required=True, auth_require_tls=tls)
        self.controller = Controller(_Handler(self), hostname=self.host, port=self.port, **kw)

    def _login(self, smtp, session, envelope, mechanism, data):
        ok = (data is not None and hasattr(data, "login")
              and self.users.get(data.login.decode()) == data.password.decode())
        return AuthResult(success=ok, handled=False)

    def start(self):
        self.controller.start()
        return self

    def stop(self):
        self.controller.stop()

    def wait_for(self, n=1, timeout=30.0):
        """The first n messages, once they arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.messages) >= n:
                    return list(self.messages[:n])
            time.sleep(0.05)
        raise AssertionError(f"{n} message(s) expected at the test SMTP server, "
                             f"{len(self.messages)} arrived in {timeout:.0f} s")
