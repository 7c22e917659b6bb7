"""File checksums as STAC's file extension writes them (`file:checksum`: a multihash, hex) and checks them.

A multihash is the hash function's code and the digest's length (each an unsigned varint) before the digest. The
archives use SHA2-256 (`1220…`); SHA2-512, SHA1, MD5 and BLAKE2b-256 are read too. eoscale records SHA2-256.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

# multihash code -> hashlib constructor (https://github.com/multiformats/multicodec/blob/master/table.csv)
FUNCTIONS: dict[int, Callable[[], Any]] = {
    0x11: hashlib.sha1,
    0x12: hashlib.sha256,
    0x13: hashlib.sha512,
    0xD5: hashlib.md5,
    0xB220: lambda: hashlib.blake2b(digest_size=32),
}
SHA256 = 0x12


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError("the multihash ends inside a varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def parse(multihash: str) -> tuple[int, bytes]:
    """(hash function code, digest) of a hex multihash; ValueError for one eoscale cannot check."""
    try:
        data = bytes.fromhex(multihash)
    except ValueError:
        raise ValueError(f"file:checksum {multihash!r} is not hexadecimal") from None
    code, at = _varint(data, 0)
    length, at = _varint(data, at)
    digest = data[at:]
    if code not in FUNCTIONS:
        raise ValueError(f"file:checksum {multihash!r} uses hash function 0x{code:x}, which eoscale does not know "
                         f"(it checks {', '.join(f'0x{c:x}' for c in FUNCTIONS)})")
    if len(digest) != length:
        raise ValueError(f"file:checksum {multihash!r} holds a digest of {len(digest)} bytes, not the {length} it states")
    return code, digest


def hasher(code: int = SHA256) -> Any:
    """A fresh hash object of multihash function `code`."""
    return FUNCTIONS[code]()


def _encode(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def multihash(code: int, digest: bytes) -> str:
    """The hex multihash of `digest`."""
    return (_encode(code) + _encode(len(digest)) + digest).hex()


def file_multihash(path: str, code: int = SHA256, *, chunk: int = 1 << 20) -> str:
    """The hex multihash of the file at `path`, read in chunks (memory stays flat)."""
    h = hasher(code)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return multihash(code, h.digest())
