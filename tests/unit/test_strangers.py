"""The connections both ports hold until they prove themselves (sockets.Strangers): at
most MAX_STRANGERS, the oldest pushed out by a new one, the late refused, the proven
no longer held."""

from __future__ import annotations

import time

from pyscrun import sockets


class Port:
    """What a port does with the strangers it is handed back: refuses them."""

    def __init__(self, timeout: float) -> None:
        self.refused: list[tuple[str, str]] = []
        self.strangers: sockets.Strangers[str] = sockets.Strangers(timeout, self.refuse)

    def refuse(self, link: str, why: str) -> None:
        self.refused.append((link, why))
        self.strangers.discard(link)


def test_a_stranger_beyond_the_cap_pushes_out_the_oldest() -> None:
    port = Port(60.0)
    for n in range(sockets.MAX_STRANGERS):
        port.strangers.add(lambda n=n: f"c{n}")
    assert port.refused == []
    port.strangers.add(lambda: "new")
    port.strangers.add(lambda: "newer")
    assert port.refused == [("c0", "too many connections are waiting to say hello"),
                            ("c1", "too many connections are waiting to say hello")]
    held = list(port.strangers)
    assert len(held) == sockets.MAX_STRANGERS and held[0] == "c2" and held[-2:] == ["new", "newer"]

    def challenged() -> str:
        # Made (its peer challenged) only once the oldest is gone: never one too many.
        assert [link for link, _ in port.refused][-1] == "c2"
        return "newest"

    assert port.strangers.add(challenged) == "newest"


def test_the_late_are_refused_and_the_others_kept() -> None:
    port = Port(5.0)
    port.strangers.add(lambda: "early")
    first = port.strangers.deadlines()
    time.sleep(0.01)
    port.strangers.add(lambda: "later")
    assert first == port.strangers.deadlines() and time.monotonic() + 4.9 < first[0]
    port.strangers.expire(first[0] - 0.001)
    assert port.refused == [] and list(port.strangers) == ["early", "later"]
    port.strangers.expire(first[0])
    assert port.refused == [("early", "it did not say hello in time")]
    assert list(port.strangers) == ["later"]
    assert port.strangers.deadlines()[0] > first[0]
    port.strangers.expire(time.monotonic() + 10)
    assert port.refused[-1] == ("later", "it did not say hello in time")
    assert list(port.strangers) == [] and port.strangers.deadlines() == []


def test_one_proven_or_dropped_is_neither_refused_nor_counted() -> None:
    port = Port(5.0)
    for n in range(sockets.MAX_STRANGERS):
        port.strangers.add(lambda n=n: f"c{n}")
    port.strangers.discard("c0")
    port.strangers.discard("c0")
    port.strangers.add(lambda: "new")
    assert port.refused == []
    port.strangers.expire(time.monotonic() + 10)
    assert "c0" not in [link for link, _ in port.refused]
    assert len(port.refused) == sockets.MAX_STRANGERS
