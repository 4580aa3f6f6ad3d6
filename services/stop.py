"""A stop asked by SIGTERM or SIGINT, heard from the moment a service starts: a stop that comes while the service
is still starting (its producer waiting for the transaction coordinator, its store opening) ends it cleanly at the
first chance instead of killing it."""

from __future__ import annotations

import signal


class StopRequest:
    """Set once SIGTERM or SIGINT arrives; loops check `asked` between batches."""

    def __init__(self) -> None:
        self.asked = False

    @classmethod
    def listen(cls) -> StopRequest:
        request = cls()
        signal.signal(signal.SIGTERM, request.ask)
        signal.signal(signal.SIGINT, request.ask)
        return request

    def ask(self, *_: object) -> None:
        self.asked = True
