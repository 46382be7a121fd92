"""A cloud pool's bucket credentials (plugins/storage/cloud/keys.py): read from an admin's
file only when nobody else may read it, kept by the master as a private file of its own,
never in the catalog."""

import os

import pytest

from app.errors import ValidationError
from app.paths import Home
from plugins.storage.cloud import keys


def write(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_a_private_file_is_read_and_kept_privately(tmp_path):
    f = write(tmp_path / "creds", "# the backup bucket\naccess_key = AKIA1\n\nsecret_key=s/3+x=\n")
    creds = keys.read_file(f)
    assert creds == {"access_key": "AKIA1", "secret_key": "s/3+x="}
    home = Home(str(tmp_path / "home")).ensure()
    keys.store(home, "cloud1", creds)
    kept = keys.path(home, "cloud1")
    assert os.stat(kept).st_mode & 0o777 == 0o600
    assert keys.load(home, "cloud1") == creds
    keys.store(home, "cloud1", {"access_key": "AKIA2", "secret_key": "t"})
    assert keys.load(home, "cloud1")["access_key"] == "AKIA2"
    assert not os.path.exists(kept + ".new")
    keys.remove(home, "cloud1")
    with pytest.raises(keys.CredentialsMissing, match="are missing"):
        keys.load(home, "cloud1")


@pytest.mark.parametrize("text,mode,says", [
    ("access_key=a\nsecret_key=b\n", 0o644, "may be read by others (mode 0644)"),
    ("access_key=a\nsecret_key=b\n", 0o640, "may be read by others"),
    ("access_key=a\n", 0o600, "has no secret_key"),
    ("secret_key=b\n", 0o600, "has no access_key"),
    ("access_key=a\naccess_key=c\nsecret_key=b\n", 0o600, "line 2: access_key is given twice"),
    ("access_key=a\nsecret_key=\n", 0o600, "line 2: secret_key is empty"),
    ("user=a\n", 0o600, "line 1: expected access_key"),
])
def test_a_file_others_may_read_or_that_lacks_a_key_is_refused(tmp_path, text, mode, says):
    with pytest.raises(ValidationError) as e:
        keys.read_file(write(tmp_path / "creds", text, mode))
    assert says in str(e.value)


def test_a_link_or_a_missing_file_is_refused(tmp_path):
    real = write(tmp_path / "real", "access_key=a\nsecret_key=b\n")
    os.symlink(real, tmp_path / "link")
    with pytest.raises(ValidationError, match="cannot be read"):
        keys.read_file(str(tmp_path / "link"))
    with pytest.raises(ValidationError, match="does not exist"):
        keys.read_file(str(tmp_path / "none"))
