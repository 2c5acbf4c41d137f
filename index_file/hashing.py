"""Key hashing for both formats.

- RocketMQ: Java `String.hashCode` of `topic + "#" + key` (over UTF-16 code units, int32
  arithmetic), made non-negative the way RocketMQ does it (`h < 0 ? -h : h`, so Integer.MIN_VALUE
  stays negative, exactly as in Java).
- Native: 64-bit xxh3 of the UTF-8 bytes of `topic#key`: the fingerprint the native format stores
  and compares. Topic names never contain '#' (Kafka and RocketMQ forbid it), so `topic#key` is
  unambiguous.
"""

from __future__ import annotations

import xxhash

_xxh3 = xxhash.xxh3_64_intdigest

_INT_MIN = -(1 << 31)


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def java_string_hash(s: str) -> int:
    """Java's String.hashCode as a signed int32."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be")  # Java hashes UTF-16 code units, surrogate pairs included
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def rocketmq_hash(topic: str, key: str) -> int:
    """The hash RocketMQ's tiered index stores: |hashCode(topic#key)| with Java int semantics."""
    h = java_string_hash(build_key(topic, key))
    if h < 0 and h != _INT_MIN:
        h = -h
    return h


def rocketmq_slot(hash_code: int, slot_count: int) -> int:
    """Slot of a stored hash. Java's `%` keeps the dividend's sign; the only negative hash is
    Integer.MIN_VALUE, which RocketMQ itself cannot place, so we take the absolute remainder."""
    return abs(hash_code) % slot_count


def fingerprint(topic: str, key: str) -> int:
    """64-bit xxh3 fingerprint of `topic#key` (UTF-8), as an unsigned int."""
    return _xxh3(f"{topic}#{key}".encode())
