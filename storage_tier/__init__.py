"""Object storage tier: one BlobStore contract over local disk, S3 and databases."""

from storage_tier.blob_store import BlobStore, MultipartWriter
from storage_tier.errors import (
    BlobNotFound,
    InvalidKey,
    InvalidRange,
    OutOfSpace,
    StorageError,
    StorageUnavailable,
    UnsupportedStoreURL,
)
from storage_tier.metering import Meter, MeterSnapshot
from storage_tier.retry import RetryPolicy
from storage_tier.store_url import open_store

__all__ = [
    "BlobNotFound", "BlobStore", "InvalidKey", "InvalidRange", "Meter", "MeterSnapshot", "MultipartWriter",
    "OutOfSpace",
    "RetryPolicy", "StorageError", "StorageUnavailable", "UnsupportedStoreURL", "open_store",
]
