"""The storage server wizard's page for a type whose pool lives in an S3 bucket (a cloud pool):
the endpoint, the bucket, an optional prefix, region and CA file, the credentials (typed, or
read from a private file) and how much the local cache may keep. The credentials go to the
master, which keeps them in a private file beside the pools' keys, never in the catalog;
creating the server checks the bucket from the storage server's host."""

import os

from PySide6.QtWidgets import QCheckBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, \
    QLineEdit, QPushButton, QSpinBox

from app.errors import ValidationError
from plugins.storage.cloud import keys as cloud_keys
from ui.wizards.common import Page, narrow, note

GiB = 1 << 30


class BucketPage(Page):
    def __init__(self):
        super().__init__("Bucket", "The S3 bucket that holds the pool; backups land in the cache "
                                   "first and are uploaded while they run.")
        self.endpoint = QLineEdit()
        self.endpoint.setPlaceholderText("https://s3.example.org")
        self.bucket = QLineEdit()
        self.bucket.setPlaceholderText("cairn-pool")
        self.prefix = QLineEdit()
        self.prefix.setPlaceholderText("optional, e.g. site1/cairn")
        self.region = QLineEdit()
        self.region.setPlaceholderText("optional (us-east-1)")
        self.ca_file = QLineEdit()
        self.ca_file.setPlaceholderText("optional: a CA certificate file on the storage server")
        self.access_key = QLineEdit()
        self.secret_key = QLineEdit()
        self.secret_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.from_file = QPushButton("Read from a &file…")
        self.from_file.setToolTip("A file only you may read (chmod 600) with access_key=… and "
                                  "secret_key=… lines")
        self.from_file.clicked.connect(self._pick_file)
        self.cache_limit = narrow(QSpinBox(), 160)
        self.cache_limit.setRange(0, 1 << 20)
        self.cache_limit.setSuffix(" GiB")
        self.cache_limit.setSpecialValueText("as space allows")
        keys_row = QHBoxLayout()
        keys_row.addWidget(self.access_key, 1)
        keys_row.addWidget(self.from_file)
        form = QFormLayout()
        form.addRow("&Endpoint:", self.endpoint)
        form.addRow("&Bucket:", self.bucket)
        form.addRow("&Prefix:", self.prefix)
        form.addRow("&Region:", self.region)
        form.addRow("&CA file:", self.ca_file)
        access_label = QLabel("&Access key:")
        access_label.setBuddy(self.access_key)  # a row of two widgets names its own
        form.addRow(access_label, keys_row)
        form.addRow("&Secret key:", self.secret_key)
        form.addRow("", note("The master keeps the keys in a private file beside the pools' "
                             "encryption keys, never in the catalog, and hands them only to "
                             "the storage server's agent. The storage server's host needs "
                             "python3-boto3; creating the server checks the bucket from there: "
                             "it must be empty or hold a Cairn pool already."))
        self.commit_in_cache = QCheckBox("&End a backup once the cache holds it, its upload "
                                         "queued")
        self.commit_in_cache.setToolTip("By default a backup ends once the bucket holds its "
                                        "image. Checked, it ends sooner, and the image is only "
                                        "on the storage server's disk until its upload is done.")
        form.addRow("", self.commit_in_cache)
        form.addRow("Cache &limit:", self.cache_limit)
        form.addRow("", note("The most container data the cache keeps; older containers are "
                             "read back from the bucket when a restore needs them. As space "
                             "allows: trimmed when the cache's file system is 90% full."))
        self.body.addLayout(form)
        self.body.addStretch(1)
        for w in (self.endpoint, self.bucket, self.prefix, self.region, self.ca_file,
                  self.access_key, self.secret_key):
            w.textChanged.connect(self.revalidate)
        self.file_error = None

    def initializePage(self):
        self.revalidate()

    def _pick_file(self):
        path, _ = QFileDialog.getOpenFileName(self, "Credentials file", os.path.expanduser("~"))
        if path:
            self.read_file(path)

    def read_file(self, path):
        """Fills the keys from a credentials file; a file others may read is refused."""
        try:
            creds = cloud_keys.read_file(path)
        except ValidationError as e:
            self.file_error = e.message + (f" ({e.hint})" if e.hint else "")
        else:
            self.file_error = None
            self.access_key.setText(creds["access_key"])
            self.secret_key.setText(creds["secret_key"])
        self.revalidate()

    def options(self):
        o = {"endpoint": self.endpoint.text().strip(), "bucket": self.bucket.text().strip(),
             "prefix": self.prefix.text().strip() or None,
             "region": self.region.text().strip() or None,
             "ca_file": self.ca_file.text().strip() or None,
             "cache_limit": self.cache_limit.value() * GiB or None,
             "commit_at": "cache" if self.commit_in_cache.isChecked() else None}
        return {k: v for k, v in o.items() if v is not None}

    def credentials(self):
        return {"access_key": self.access_key.text().strip(),
                "secret_key": self.secret_key.text().strip()}

    def problem(self):
        if self.file_error:
            return self.file_error[0].upper() + self.file_error[1:] + "."
        wizard = self.wizard()
        if wizard is None:
            return None
        try:
            wizard.storage_type().check_options(wizard.spec()["options"])
        except ValidationError as e:
            text = e.message.replace("--endpoint URL", "an endpoint").replace(
                "--bucket NAME", "a bucket")
            return text[0].upper() + text[1:] + (f": {e.hint}." if e.hint else ".")
        c = self.credentials()
        if not c["access_key"] or not c["secret_key"]:
            return "Give the access key and the secret key, or read them from a file."
        return None


def bucket_summary(options, credentials):
    """The summary page's rows of a server with a bucket; the secret key is never shown."""
    rows = [("Bucket", f"{options['bucket']} at {options['endpoint']}"
             + (f", under {options['prefix']}" if options.get("prefix") else ""))]
    if options.get("region"):
        rows.append(("Region", options["region"]))
    if options.get("ca_file"):
        rows.append(("CA file", options["ca_file"]))
    rows.append(("Access key", f"{credentials['access_key']} (the secret key is kept by the "
                               "master)"))
    rows.append(("A backup ends", "once the cache holds it, its upload queued"
                 if options.get("commit_at") == "cache" else "once the bucket holds it"))
    limit = options.get("cache_limit")
    rows.append(("Cache limit", f"{limit // GiB} GiB" if limit else
                 "as space allows (trimmed at 90% full)"))
    return rows
