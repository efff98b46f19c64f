"""Proving, on every connection, that both ends hold the container's secret.

The listener sends a fresh random challenge; the dialer answers with a nonce of its own
and an HMAC over both; the listener answers with an HMAC over them in the other order.
The secret never travels, and a recorded exchange is worth nothing on another
connection: its challenge is different.
"""

from __future__ import annotations

import hashlib
import hmac
import os

NONCE = 32
_DIGEST = hashlib.sha256().digest_size
_DIALER = b"pyscrun-channel dialer"
_LISTENER = b"pyscrun-channel listener"


def challenge() -> bytes:
    return os.urandom(NONCE)


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


def answer(secret: bytes, challenge: bytes) -> bytes:
    """The dialer's answer to a challenge: its own nonce and its proof."""
    nonce = os.urandom(NONCE)
    return nonce + _mac(secret, _DIALER, challenge, nonce)


def check_answer(secret: bytes, challenge: bytes, answer: bytes) -> bytes | None:
    """The listener's proof for the dialer if the answer is right, else None."""
    if len(answer) != NONCE + _DIGEST:
        return None
    nonce, proof = answer[:NONCE], answer[NONCE:]
    if not hmac.compare_digest(proof, _mac(secret, _DIALER, challenge, nonce)):
        return None
    return _mac(secret, _LISTENER, nonce, challenge)


def check_proof(secret: bytes, challenge: bytes, answer: bytes, proof: bytes) -> bool:
    """Whether the listener's proof shows it holds the secret too."""
    return hmac.compare_digest(proof, _mac(secret, _LISTENER, answer[:NONCE], challenge))
