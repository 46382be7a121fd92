"""The catalog file index: one file per backup image (CAIRN_HOME/indexes/) from which any
directory of the image can be listed, any entry looked up and any subtree walked for a restore,
without reading the image itself.

The parts, one module each: layout.py (the file layout, described in its docstring, and the
format's constants), block.py (one directory's block, encoded and decoded), writer.py
(IndexWriter, build_index), reader.py (IndexReader and its Entry), check.py (check_index) and
errors.py (IndexCorrupt and the command that rebuilds an index). Callers use the names below,
from this package.
"""

from app.catalog_index.check import check_index
from app.catalog_index.errors import IndexCorrupt, rebuild_command, rebuild_hint
from app.catalog_index.layout import FORMAT_VERSION, MAGIC, READABLE_VERSIONS, TRAILER_MAGIC
from app.catalog_index.reader import Entry, IndexReader, tree_order
from app.catalog_index.writer import IndexWriter, build_index

__all__ = ["FORMAT_VERSION", "MAGIC", "READABLE_VERSIONS", "TRAILER_MAGIC", "Entry", "tree_order",
           "IndexCorrupt", "IndexReader", "IndexWriter", "build_index", "check_index",
           "rebuild_command", "rebuild_hint"]
