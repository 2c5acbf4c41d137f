"""The text a key is indexed and looked up under, for every key a producer can send.

Index files hash `topic#key` as UTF-8 text. A key that is UTF-8 is indexed under its text. Any other key
(binary keys: a long serialised big-endian, a UUID's 16 bytes, an Avro or Protobuf key), and a UTF-8 key whose
text starts with U+FDD0, is indexed under U+FDD0 followed by the key's base64. So every key has a text of its
own: two binary keys never share their entries (they did when undecodable bytes were replaced by U+FFFD), and no
text key shares a binary key's (U+FDD0 is a Unicode noncharacter, reserved for a program's internal use; a key
that starts with it anyway is indexed by its bytes). A lookup asks by the key's bytes (`key_encoding=base64`
over HTTP, `--base64` in the CLI) or by its text, both turned into the indexed text here.

Entries written before this rule (0.3.0) hold a binary key under its bytes decoded with U+FFFD replacements:
`replaced_text` is that text, which a lookup by such a text still matches (`has_index_key`).
"""

from __future__ import annotations

import base64
import binascii

#: what the indexed text of a key that is not UTF-8 starts with (followed by the key's standard base64)
BINARY_PREFIX = "\ufdd0"
_REPLACEMENT = "\ufffd"


def key_text(raw: bytes) -> str:
    """The text `raw` is indexed under: its UTF-8 text, or BINARY_PREFIX + base64 when it is not UTF-8 (or its text
    starts with BINARY_PREFIX)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = BINARY_PREFIX  # not UTF-8: its base64, as a text key spelled with the prefix
    if text.startswith(BINARY_PREFIX):
        return BINARY_PREFIX + base64.b64encode(raw).decode("ascii")
    return text


def asked_text(key: str) -> str:
    """The indexed text of a key a lookup gives as text (the same text, unless it starts with BINARY_PREFIX)."""
    return key_text(key.encode("utf-8")) if key.startswith(BINARY_PREFIX) else key


def key_from_base64(text: str) -> str:
    """The indexed text of a key given as base64 (a lookup's `key_encoding=base64`); ValueError when `text` is not
    base64 or names an empty key."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("is not base64 (standard alphabet, with its = padding; in a URL, + is written %2B)") \
            from None
    if not raw:
        raise ValueError("must not be empty")
    return key_text(raw)


def is_replaced_text(key: str) -> bool:
    """Whether `key` may be a binary key's text as 0.3.0 indexed it (bytes decoded with U+FFFD replacements)."""
    return _REPLACEMENT in key


def replaced_text(raw: bytes) -> str:
    """`raw` decoded as 0.3.0 indexed every key: undecodable bytes replaced by U+FFFD."""
    return raw.decode("utf-8", errors="replace")
