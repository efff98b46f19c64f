"""Proving, on every connection, that both ends hold the container's secret.

The listener sends a fresh random challenge; the dialer answers with a nonce of its own
and an HMAC over both; the listener answers with an HMAC over them in the other order.
The secret never travels, and a recorded exchange is worth nothing on another
connection: its challenge is different.
"""

from __future__ import annotations

import os
from _operator import _compare_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hashlib import sha256
else:
    # CPython's own SHA-256: hashlib (and hmac) would load OpenSSL, milliseconds on the
    # start-up path of every agent, and of the anchor as its first agent dials.
    try:
        from _sha2 import sha256  # 3.12 on
    except ImportError:
        try:
            from _sha256 import sha256  # 3.11
        except ImportError:
            from hashlib import sha256

NONCE = 32
_DIGEST = 32  # SHA-256's
_BLOCK = 64  # SHA-256's block size, HMAC's key length
_DIALER = b"pyscrun-channel dialer"
_LISTENER = b"pyscrun-channel listener"


def challenge() -> bytes:
    return os.urandom(NONCE)


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac_sha256(secret, role + first + second)


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104), as hmac.digest(key, message, "sha256") gives it."""
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(bytes(byte ^ 0x36 for byte in key) + message).digest()
    return sha256(bytes(byte ^ 0x5C for byte in key) + inner).digest()


def answer(secret: bytes, challenge: bytes) -> bytes:
    """The dialer's answer to a challenge: its own nonce and its proof."""
    nonce = os.urandom(NONCE)
    return nonce + _mac(secret, _DIALER, challenge, nonce)


def check_answer(secret: bytes, challenge: bytes, answer: bytes) -> bytes | None:
    """The listener's proof for the dialer if the answer is right, else None."""
    if len(answer) != NONCE + _DIGEST:
        return None
    nonce, proof = answer[:NONCE], answer[NONCE:]
    if not _same(proof, _mac(secret, _DIALER, challenge, nonce)):
        return None
    return _mac(secret, _LISTENER, nonce, challenge)


def check_proof(secret: bytes, challenge: bytes, answer: bytes, proof: bytes) -> bool:
    """Whether the listener's proof shows it holds the secret too."""
    return _same(proof, _mac(secret, _LISTENER, answer[:NONCE], challenge))


def _same(a: bytes, b: bytes) -> bool:
    """Compared in constant time: the time taken says nothing of where they differ."""
    return _compare_digest(a, b)
