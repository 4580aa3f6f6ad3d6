"""The decision stream's hub: the projector's thread publishes each written batch's items, and every open
server-sent-events connection (an asyncio task) gets them in order through its own bounded queue. A listener
that falls more than `capacity` items behind is told to reload instead of silently missing some."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

RESET = {"type": "reset"}  # the listener missed items: it should reload what it shows


@dataclass
class Subscription:
    queue: asyncio.Queue
    overflowed: bool = False


@dataclass
class StreamHub:
    loop: asyncio.AbstractEventLoop | None = None
    capacity: int = 5000
    _subscriptions: list[Subscription] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the connections run on (set when the server starts)."""
        self.loop = loop

    def subscribe(self) -> Subscription:
        subscription = Subscription(asyncio.Queue(self.capacity))
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

    def publish(self, cell: str, offset: int, items: list[dict[str, Any]]) -> None:
        """From any thread: a batch of `cell` was written up to `offset`, with these stream items."""
        if self.loop is None or self.loop.is_closed():
            return
        batch = [*items, {"type": "progress", "cell": cell, "offset": offset}]
        try:
            self.loop.call_soon_threadsafe(self._deliver, batch)
        except RuntimeError:  # the loop closed meanwhile: nobody is listening
            pass

    def _deliver(self, batch: list[dict[str, Any]]) -> None:
        with self._lock:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            if subscription.overflowed:
                continue
            for item in batch:
                if subscription.queue.full():
                    subscription.overflowed = True
                    while not subscription.queue.empty():
                        subscription.queue.get_nowait()
                    subscription.queue.put_nowait(RESET)
                    break
                subscription.queue.put_nowait(item)
