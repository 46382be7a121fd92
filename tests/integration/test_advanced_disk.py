"""What is AdvancedDisk's own (the conformance suite in tests/storage/ holds it to what every
storage type does): an image is one plain pax tar file, as large as the catalog says and
larger than the data it holds, that standard tools read."""

import os
import subprocess

from app import status as st
from app.master import Master
from treegen import make_tree


def test_an_image_is_a_plain_tar_file_larger_than_its_data(tmp_path):
    src, vol = str(tmp_path / "src"), tmp_path / "vol"
    vol.mkdir()
    make_tree(src)
    m = Master(str(tmp_path / "home"))
    try:
        m.config.add_host("me", local=True)
        m.create_storage_server("ss1", type="advanced-disk", host="me")
        m.create_disk_pool("dp1", server="ss1", volumes=[str(vol)])
        m.config.add_storage_unit("stu1", pool="dp1")
        m.config.add_policy("p1", storage_unit="stu1")
        m.config.add_policy_client("p1", "me")
        m.config.add_policy_selection("p1", src)
        [job] = m.wait_for(m.start_backup("p1"))
        assert job["status"] == st.OK
        img = m.image(job["image_id"])
        assert img["path"].startswith(str(vol / "cairn-images" / "me")) and \
            img["path"].endswith(".tar")
        assert img["image_bytes"] == os.path.getsize(img["path"]) > img["bytes"]
        listing = subprocess.run(["tar", "-tf", img["path"]], capture_output=True,
                                 check=True).stdout.decode("utf-8", "replace")
        assert ".cairn/image.json" in listing and "small.txt" in listing
    finally:
        m.close()
