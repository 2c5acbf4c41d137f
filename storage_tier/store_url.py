"""open_store(url): map a store URL to its backend.

    file:///abs/dir  file://./rel/dir                  local directory
    s3://bucket/prefix?endpoint=http://127.0.0.1:8333 S3 (also region, access_key, secret_key, create_bucket=1)
    oss://bucket/prefix?endpoint=oss-cn-hangzhou.aliyuncs.com
                                                      Alibaba Cloud OSS through its S3-compatible API, virtual-hosted
                                                      (also region, access_key, secret_key, create_bucket=1, proxy)
    sqlite:///path/db.sqlite                          SQLite database
    postgresql://user@host:5432/db?schema=name        PostgreSQL database (schema optional)

Every URL takes `retry_seconds=N` (the bound on retrying transient faults) and database URLs take
`chunk_size=BYTES`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from storage_tier.blob_store import BlobStore
from storage_tier.errors import UnsupportedStoreURL
from storage_tier.retry import RetryPolicy


def _params(query: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}


def _int(url: str, params: dict[str, str], name: str, default: int) -> int:
    try:
        return int(params.pop(name, default))
    except ValueError:
        raise UnsupportedStoreURL(f"{url}: {name} must be an integer") from None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def check_endpoint(url: str, endpoint: str) -> str:
    """`endpoint` (the endpoint= of an s3 or oss URL) normalized as scheme://host:port; UnsupportedStoreURL unless it
    is http(s)://HOST[:PORT] with a numeric port and nothing after it."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
        ok = parts.scheme.lower() in _DEFAULT_PORTS and bool(parts.hostname) and parts.path in ("", "/") \
            and not parts.query and not parts.fragment
    except ValueError:
        ok = False
    if not ok:
        raise UnsupportedStoreURL(f"{url}: endpoint {endpoint!r} is not http(s)://HOST[:PORT] (a numeric port, "
                                  "nothing after it)")
    scheme = parts.scheme.lower()
    return f"{scheme}://{(parts.hostname or '').lower()}:{port or _DEFAULT_PORTS[scheme]}"


def sqlite_path(url: str) -> str:
    """The file of a `sqlite:///abs/path` or `sqlite://./rel/path` URL."""
    parts = urlsplit(url)
    path = parts.path
    if parts.netloc in (".", ".."):
        path = parts.netloc + path
    elif path.startswith("//"):
        path = path[1:]
    if not path or path == "/":
        raise UnsupportedStoreURL(f"{url}: a sqlite URL needs a file path (sqlite:///path/db.sqlite)")
    return path


def open_store(url: str) -> BlobStore:
    parts = urlsplit(url)
    params = _params(parts.query)
    try:
        retry = RetryPolicy(deadline_s=float(params.pop("retry_seconds", 30)))
    except ValueError:
        raise UnsupportedStoreURL(f"{url}: retry_seconds must be a number") from None
    scheme = parts.scheme.lower()

    if scheme == "file":
        from storage_tier.local_store import LocalStore

        path = parts.netloc + parts.path if parts.netloc in (".", "..") else parts.path
        if not path:
            raise UnsupportedStoreURL(f"{url}: a file URL needs a directory (file:///abs/dir or file://./rel)")
        _reject_unknown(url, params)
        return LocalStore(url, path, retry)

    if scheme == "s3":
        from storage_tier.s3_store import S3Store

        if not parts.netloc:
            raise UnsupportedStoreURL(f"{url}: an s3 URL needs a bucket (s3://bucket/prefix)")
        endpoint = params.pop("endpoint", None)
        if endpoint:
            check_endpoint(url, endpoint)
        store = S3Store(
            url,
            bucket=parts.netloc,
            prefix=parts.path.lstrip("/"),
            endpoint=endpoint,
            region=params.pop("region", "us-east-1"),
            access_key=params.pop("access_key", None),
            secret_key=params.pop("secret_key", None),
            retry=retry,
            create_bucket=params.pop("create_bucket", "0") in ("1", "true", "yes"),
        )
        _reject_unknown(url, params)
        return store

    if scheme == "oss":
        return _oss_store(url, parts.netloc, parts.path, params, retry)

    if scheme == "sqlite":
        from storage_tier.db_store import DEFAULT_CHUNK, sqlite_store

        chunk = _int(url, params, "chunk_size", DEFAULT_CHUNK)
        path = sqlite_path(url)
        _reject_unknown(url, params)
        return sqlite_store(url, path, chunk, retry)

    if scheme in ("postgresql", "postgres"):
        from storage_tier.db_store import DEFAULT_CHUNK, postgres_store

        chunk = _int(url, params, "chunk_size", DEFAULT_CHUNK)
        schema = params.pop("schema", None)
        dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(params), ""))
        return postgres_store(url, dsn, schema, chunk, retry)

    raise UnsupportedStoreURL(
        f"unsupported store URL {url!r}: use file:///dir, s3://bucket/prefix?endpoint=..., "
        "oss://bucket/prefix?endpoint=oss-REGION.aliyuncs.com, sqlite:///path or postgresql://user@host:port/db"
    )


def _reject_unknown(url: str, params: dict[str, str]) -> None:
    if params:
        raise UnsupportedStoreURL(f"{url}: unknown parameter(s) {', '.join(sorted(params))}")


# oss-cn-hangzhou.aliyuncs.com, s3.oss-cn-hangzhou.aliyuncs.com, oss-cn-hangzhou-internal.aliyuncs.com
_OSS_HOST = re.compile(r"^(?:s3\.)?oss-(?P<region>[a-z0-9-]+?)(?:-internal)?\.aliyuncs\.com$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")  # OSS bucket names: they become a host name label


def _oss_store(url: str, bucket: str, path: str, params: dict[str, str], retry: RetryPolicy) -> BlobStore:
    """OSS speaks the S3 API but only virtual-hosted: requests go to https://BUCKET.ENDPOINT/KEY."""
    from storage_tier.s3_store import S3Store

    if not _BUCKET.match(bucket):
        raise UnsupportedStoreURL(f"{url}: an oss URL needs a bucket name of 3-63 lowercase letters, digits and "
                                  "hyphens (oss://bucket/prefix?endpoint=oss-REGION.aliyuncs.com)")
    endpoint = params.pop("endpoint", "")
    if not endpoint:
        raise UnsupportedStoreURL(f"{url}: an oss URL needs endpoint=oss-REGION.aliyuncs.com")
    if "://" not in endpoint:
        endpoint = "https://" + endpoint
    check_endpoint(url, endpoint)
    host = urlsplit(endpoint).hostname or ""
    known = _OSS_HOST.match(host)
    region = params.pop("region", None) or (known.group("region") if known else None)
    if region is None:
        raise UnsupportedStoreURL(f"{url}: endpoint {host!r} is not oss-REGION.aliyuncs.com: give region=")
    store = S3Store(
        url, bucket=bucket, prefix=path.lstrip("/"), endpoint=endpoint, region=region,
        access_key=params.pop("access_key", None), secret_key=params.pop("secret_key", None), retry=retry,
        create_bucket=params.pop("create_bucket", "0") in ("1", "true", "yes"),
        addressing_style="virtual", proxy=params.pop("proxy", None),
    )
    store.name = "oss"
    _reject_unknown(url, params)
    return store
