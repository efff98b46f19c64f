"""Proving, on every connection, that both ends hold the container's secret.

The listener sends a fresh random challenge; the dialer answers with a nonce of its own
and an HMAC over both; the listener answers with an HMAC over them in the other order.
The secret never travels, and a recorded exchange is worth nothing on another
connection: its challenge is different.
"""

from __future__ import annotations

import os

NONCE = 32
_DIGEST = 32  # SHA-256's
_DIALER = b"pyscrun-channel dialer"
_LISTENER = b"pyscrun-channel listener"


def challenge() -> bytes:
    return os.urandom(NONCE)


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    # Imported when first needed: loading OpenSSL costs create milliseconds, where the
    # anchor that imports this module has nothing to prove yet.
    import hmac

    return hmac.digest(secret, role + first + second, "sha256")


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
    import hmac

    return hmac.compare_digest(a, b)
