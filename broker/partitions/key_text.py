"""The text a key is indexed and looked up under, for every key a producer can send.

Index files hash `topic#key` as UTF-8 text. A key that is UTF-8 is indexed under its text. A key that is not
(binary keys: a long serialised big-endian, a UUID's 16 bytes, an Avro or Protobuf key) is indexed under
U+FDD0 followed by the key's base64: one text per key, so two binary keys never share their entries (they did
when undecodable bytes were replaced by U+FFFD), and a lookup can ask for any key by its bytes
(`key_encoding=base64` over HTTP, `--base64` in the CLI). U+FDD0 is a Unicode noncharacter, reserved for a
program's internal use, so no key a producer means as text starts with it; a lookup still checks each hit's
record against the key asked (key_lookup), so even such a text key never returns another key's records.
"""

from __future__ import annotations

import base64
import binascii

#: what the indexed text of a key that is not UTF-8 starts with (followed by the key's standard base64)
BINARY_PREFIX = "\ufdd0"


def key_text(raw: bytes) -> str:
    """The text `raw` is indexed under: its UTF-8 text, or BINARY_PREFIX + base64 when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return BINARY_PREFIX + base64.b64encode(raw).decode("ascii")


def key_from_base64(text: str) -> str:
    """The indexed text of a key given as base64 (a lookup's `key_encoding=base64`); ValueError when `text` is not
    base64 or names an empty key."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("is not base64 (standard alphabet, with its = padding)") from None
    if not raw:
        raise ValueError("must not be empty")
    return key_text(raw)
