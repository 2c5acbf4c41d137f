"""Where a store URL keeps its objects: to tell whether one store lies inside another (a shared WAL inside the
object store's prefix would mix its objects with the store's), and the check of an S3 endpoint URL."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from storage_tier.errors import UnsupportedStoreURL
from storage_tier.store_url import check_endpoint, sqlite_path


@dataclass(frozen=True)
class Location:
    """Two URLs share keys only when their `root` is equal; `prefix` is where the keys go inside it
    ('/'-separated, no leading or trailing '/'; empty: the whole root)."""

    root: tuple[str, ...]
    prefix: str

    def contains(self, other: Location) -> bool:
        """Whether every key of `other` lies inside this location (equal locations included)."""
        return self.root == other.root and (
            not self.prefix or other.prefix == self.prefix or other.prefix.startswith(self.prefix + "/"))


def location(url: str) -> Location:
    """The Location of a store URL (UnsupportedStoreURL when it cannot be one)."""
    parts = urlsplit(url)
    params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    scheme = parts.scheme.lower()
    if scheme in ("s3", "oss"):
        endpoint = params.get("endpoint", "")
        if scheme == "oss" and endpoint and "://" not in endpoint:
            endpoint = "https://" + endpoint
        server = check_endpoint(url, endpoint) if endpoint else f"aws:{params.get('region', 'us-east-1')}"
        return Location(("s3", server, parts.netloc), parts.path.strip("/"))
    if scheme == "file":
        path = parts.netloc + parts.path if parts.netloc in (".", "..") else parts.path
        return Location(("file",), str(Path(path).resolve()).strip("/"))
    if scheme == "sqlite":
        return Location(("sqlite", str(Path(sqlite_path(url)).resolve())), "")
    if scheme in ("postgresql", "postgres"):
        db = parts.path.strip("/") or (parts.username or "")
        return Location(("postgresql", (parts.hostname or "").lower(), str(parts.port or 5432), db,
                         params.get("schema", "public")), "")
    raise UnsupportedStoreURL(f"unsupported store URL {url!r}")
