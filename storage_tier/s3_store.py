"""BlobStore on any S3 endpoint through boto3 (AWS S3, SeaweedFS, MinIO).

boto3's own retries are turned off so that every HTTP attempt passes through our RetryPolicy and is
metered exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import boto3
import botocore.exceptions as bce
from botocore.config import Config

from storage_tier.blob_store import BlobStore, MultipartWriter, resolve_range
from storage_tier.errors import BlobNotFound, InvalidRange, StorageError
from storage_tier.retry import RetryPolicy

MIN_PART = 5 * 1024 * 1024  # S3's smallest part size (all parts but the last)
_TRANSIENT_CODES = {
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed",
    "Throttling", "ThrottlingException", "503", "500", "502", "504",
}


def _status(exc: bce.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _code(exc: bce.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, bce.ClientError):
        return _code(exc) in _TRANSIENT_CODES or _status(exc) >= 500
    # HTTPClientError covers connection refused/reset, timeouts and closed connections
    return isinstance(exc, (bce.HTTPClientError, bce.ConnectionError, ConnectionError, TimeoutError))


def _not_found(exc: BaseException) -> bool:
    return isinstance(exc, bce.ClientError) and (
        _code(exc) in ("NoSuchKey", "404", "NotFound") or _status(exc) == 404
    )


class S3Store(BlobStore):
    name = "s3"

    def __init__(
        self,
        url: str,
        bucket: str,
        prefix: str = "",
        endpoint: str | None = None,
        region: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 2.0,
        read_timeout: float = 20.0,
        create_bucket: bool = False,
        addressing_style: str = "path",
        proxy: str | None = None,
    ) -> None:
        """addressing_style: "path" (endpoint/bucket/key) or "virtual" (bucket.endpoint/key, which Alibaba Cloud
        OSS requires); proxy: an HTTP proxy every request goes through."""
        super().__init__(url, retry)
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        session = boto3.session.Session()
        creds: dict[str, Any] = {}
        if access_key or (endpoint and not session.get_credentials()):
            # S3-compatible servers such as SeaweedFS accept any key pair when auth is off
            creds = {"aws_access_key_id": access_key or "mqindex",
                     "aws_secret_access_key": secret_key or "mqindex"}
        # on virtual-hosted (OSS) endpoints: checksums only where the API requires them, so no aws-chunked
        # uploads, which OSS's S3-compatible API does not accept
        checksums: dict[str, Any] = ({"request_checksum_calculation": "when_required",
                                      "response_checksum_validation": "when_required"}
                                     if addressing_style == "virtual" else {})
        self.client = session.client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            config=Config(
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                s3={"addressing_style": addressing_style},
                max_pool_connections=32,
                proxies={"http": proxy, "https": proxy} if proxy else None,
                **checksums,
            ),
            **creds,
        )
        if create_bucket:
            self.ensure_bucket()

    # -- helpers -----------------------------------------------------------------------------------
    def _k(self, key: str) -> str:
        return self.prefix + key

    def call(self, kind: str, op: str, key: str | None, fn, *, bytes_in: int = 0):  # type: ignore[no-untyped-def]
        def attempt():  # type: ignore[no-untyped-def]
            self.meter.record(kind, bytes_in=bytes_in)
            return fn()

        return self.retry.run(attempt, backend=self.name, key=key, op=op, is_transient=is_transient,
                              bound=self.retry_bound)

    def ensure_bucket(self) -> None:
        def create() -> None:
            try:
                self.client.create_bucket(Bucket=self.bucket)
            except bce.ClientError as exc:
                if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

        self.call("PUT", "create_bucket", None, create)

    # -- primitives --------------------------------------------------------------------------------
    def _put(self, key: str, data: bytes) -> None:
        self.call("PUT", "put", key,
                  lambda: self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data),
                  bytes_in=len(data))

    def _get(self, key: str, start: int, end: int | None) -> bytes:
        if start < 0 or (end is not None and end < start):
            raise InvalidRange(self.name, key, f"bad range [{start}, {end})")
        if end is not None and end == start:
            resolve_range(self.name, key, self._size(key), start, end)
            return b""
        rng = f"bytes={start}-" + ("" if end is None else str(end - 1))

        def fetch() -> bytes:
            try:
                resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key), Range=rng)
                return resp["Body"].read()
            except bce.ClientError as exc:
                if _not_found(exc):
                    raise BlobNotFound(self.name, key) from None
                if _code(exc) == "InvalidRange" or _status(exc) == 416:
                    return None  # type: ignore[return-value]
                raise

        data = self.call("GET", "get", key, fetch)
        if data is None:
            # start at or past the end: the same answer as every other backend
            resolve_range(self.name, key, self._size(key), start, end)
            return b""
        self.meter.add_bytes(bytes_out=len(data))
        return data

    def _size(self, key: str) -> int:
        def head() -> int:
            try:
                return int(self.client.head_object(Bucket=self.bucket, Key=self._k(key))["ContentLength"])
            except bce.ClientError as exc:
                if _not_found(exc):
                    raise BlobNotFound(self.name, key) from None
                raise

        return self.call("HEAD", "size", key, head)

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]

            def remove(chunk: list[str] = chunk) -> None:
                resp = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._k(k)} for k in chunk], "Quiet": True},
                )
                errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
                if errors:
                    e = errors[0]
                    raise StorageError(self.name, e.get("Key"), f"delete failed: {e.get('Code')} {e.get('Message')}")

            self.call("DELETE", "delete", chunk[0], remove)

    def _list(self, prefix: str) -> Iterable[str]:
        out: list[str] = []
        token: str | None = None
        full = self._k(prefix)
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full, "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self.call("LIST", "list", prefix, lambda kwargs=kwargs: self.client.list_objects_v2(**kwargs))
            out.extend(o["Key"][len(self.prefix):] for o in resp.get("Contents", []))
            if not resp.get("IsTruncated"):
                return out
            token = resp["NextContinuationToken"]

    def _multipart(self, key: str) -> MultipartWriter:
        return _S3Multipart(self, key)


class _S3Multipart(MultipartWriter):
    """Parts are buffered to S3's 5 MiB minimum; copy_part is a server-side UploadPartCopy when the
    range is large enough to stand as a part on its own, otherwise a read-and-write."""

    store: S3Store

    def __init__(self, store: S3Store, key: str) -> None:
        super().__init__(store, key)
        self.buffer = bytearray()
        self.parts: list[dict[str, Any]] = []
        resp = store.call("PUT", "create_multipart_upload", key,
                          lambda: store.client.create_multipart_upload(Bucket=store.bucket, Key=store._k(key)))
        self.upload_id: str = resp["UploadId"]

    def _flush(self) -> None:
        if not self.buffer:
            return
        data = bytes(self.buffer)
        self.buffer = bytearray()
        self._upload(data)

    def _upload(self, data: bytes) -> None:
        n = len(self.parts) + 1
        s = self.store
        resp = s.call("PUT", "upload_part", self.key,
                      lambda: s.client.upload_part(Bucket=s.bucket, Key=s._k(self.key), UploadId=self.upload_id,
                                                   PartNumber=n, Body=data),
                      bytes_in=len(data))
        self.parts.append({"PartNumber": n, "ETag": resp["ETag"]})

    def _write_part(self, data: bytes) -> None:
        if not self.buffer and len(data) >= MIN_PART:  # a whole part: uploaded as is, never copied
            self._upload(data)
            return
        self.buffer += data
        if len(self.buffer) >= MIN_PART:
            self._flush()

    def _copy_part(self, src_key: str, start: int, end: int | None) -> None:
        s = self.store
        size = s.size(src_key)
        lo, hi = resolve_range(s.name, src_key, size, start, end)
        if hi - lo < MIN_PART or (self.buffer and len(self.buffer) < MIN_PART):
            self._write_part(s.get(src_key, lo, hi))
            return
        self._flush()
        n = len(self.parts) + 1

        def copy():  # type: ignore[no-untyped-def]
            return s.client.upload_part_copy(
                Bucket=s.bucket, Key=s._k(self.key), UploadId=self.upload_id, PartNumber=n,
                CopySource={"Bucket": s.bucket, "Key": s._k(src_key)},
                CopySourceRange=f"bytes={lo}-{hi - 1}",
            )

        resp = s.call("COPY", "upload_part_copy", self.key, copy)
        self.parts.append({"PartNumber": n, "ETag": resp["CopyPartResult"]["ETag"]})

    def _complete(self) -> None:
        s = self.store
        try:
            if self.buffer or not self.parts:
                self._flush_final()
            s.call("PUT", "complete_multipart_upload", self.key,
                   lambda: s.client.complete_multipart_upload(
                       Bucket=s.bucket, Key=s._k(self.key), UploadId=self.upload_id,
                       MultipartUpload={"Parts": self.parts}))
        except Exception:
            self._abort()
            raise

    def _flush_final(self) -> None:
        if not self.buffer and not self.parts:
            # an empty multipart object: one empty part is allowed as the only (last) part
            self.buffer = bytearray()
            data = b""
            s = self.store
            resp = s.call("PUT", "upload_part", self.key,
                          lambda: s.client.upload_part(Bucket=s.bucket, Key=s._k(self.key),
                                                       UploadId=self.upload_id, PartNumber=1, Body=data))
            self.parts.append({"PartNumber": 1, "ETag": resp["ETag"]})
            return
        self._flush()

    def _abort(self) -> None:
        s = self.store
        s.call("DELETE", "abort_multipart_upload", self.key,
               lambda: s.client.abort_multipart_upload(Bucket=s.bucket, Key=s._k(self.key), UploadId=self.upload_id))
