"""The rows a backup spools for its index member are the JSON json.dumps writes, whatever the
names hold: surrogate escapes of names that are not UTF-8, quotes, backslashes, brackets."""

import json

from app.agent.archiver.index import _encode_row


def test_rows_are_encoded_as_json_dumps_encodes_them():
    rows = [
        ["/data/caf\u00e9 \udcff\"quoted\" back\\slash ]{[,", "f", 0o644, 1000, 1000, 12,
         1795770843123456789, 512, 1536, "crc32:0badf00d", "", 1795770843123456789, 42],
        ["/data/link", "l", 0o777, 0, 0, 0, 0, -1, 0, None, "../t\u00e0rget\n", 0, 7],
        [1.5, True, False, None, -3, "\x00\x1f\u2028"],
    ]
    for row in rows:
        assert _encode_row(row) == json.dumps(row, separators=(",", ":"))
        assert json.loads(_encode_row(row)) == row
