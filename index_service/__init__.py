"""index_service: the tiered message index embedded in the broker and served over HTTP.

IndexService keeps index files in a time-ordered map through WRITING -> SEALED -> COMPACTED ->
UPLOADED -> EXPIRED, with a writer thread, a query pool and a background thread, state folders
and crash recovery. See docs/INDEX_SERVICE.md.
"""

from index_file import IndexEntry, IndexHit
from index_service.config import ServiceConfig
from index_service.model import FileInfo, FileState
from index_service.service import IndexService
from index_service.writer import IndexOutOfSpace

__all__ = ["FileInfo", "FileState", "IndexEntry", "IndexHit", "IndexOutOfSpace", "IndexService", "ServiceConfig"]
