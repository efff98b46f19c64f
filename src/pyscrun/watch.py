"""Selector registrations kept to what a descriptor is wanted for right now."""

from __future__ import annotations

import selectors
import socket


def watch(selector: selectors.BaseSelector, fileobj: socket.socket | int, events: int,
          data: object) -> None:
    """Watch fileobj for events (none: not at all), registering, changing or dropping
    its registration as needed."""
    key = selector.get_map().get(fileobj)
    if key is None:
        if events:
            selector.register(fileobj, events, data)
    elif not events:
        selector.unregister(fileobj)
    elif key.events != events or key.data is not data:
        selector.modify(fileobj, events, data)
