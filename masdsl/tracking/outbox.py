"""An ordered queue of tracking calls that survives a tracking-server outage.

Every call to the store (create a run, log a batch, upload a file, end a run) becomes an `Op`
put in the outbox, which sends ops strictly in order. When one fails and the server does not
answer its health check, the outbox goes *down*: it reports the outage once, keeps every later
op, and tries again at most every `retry_every_s` seconds, so a training step never waits on a
dead server. When the server answers again the queue is sent in order, so buffered metrics keep
their original steps and timestamps. An op that fails while the server is up (a bad request)
is retried on the next calls and dropped after `max_attempts`, with a warning; nothing raises
into the caller.

>>> up = [False]
>>> sent, said = [], []
>>> def send(i):
...     def go():
...         if not up[0]:
...             raise ConnectionError("refused")
...         sent.append(i)
...     return Op(f"op{i}", go)
>>> box = Outbox(lambda: up[0], say=said.append, retry_every_s=0.0)
>>> box.put(send(1)), box.put(send(2)), box.down, len(box)
(False, False, True, 2)
>>> up[0] = True
>>> box.put(send(3)), sent, box.down
(True, [1, 2, 3], False)
>>> said  # doctest: +ELLIPSIS
['tracking server unreachable (op1: ConnectionError: refused); training goes on...', 'tracking server is back: sent 3 buffered tracking calls']
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable


@dataclass
class Op:
    label: str  # for messages: "metrics step 3"
    send: Callable[[], None]
    attempts: int = 0
    essential: bool = False  # dropping it makes every later op pointless (creating a run)


class Outbox:
    def __init__(
        self,
        probe: Callable[[], bool],
        *,
        say: Callable[[str], None],
        retry_every_s: float = 5.0,
        max_attempts: int = 3,
        where: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.probe = probe  # True when the store answers (a health check)
        self.say = say
        self.retry_every_s = retry_every_s
        self.max_attempts = max_attempts
        self.where = where  # "; metrics are kept in runs/x/metrics.jsonl"
        self.clock = clock
        self.queue: deque[Op] = deque()
        self.down = False
        self.outages = 0
        self.dropped: list[str] = []
        self.broken = False  # an essential op was dropped: the run cannot be recorded
        self._next_try = 0.0
        self._sent_while_down = 0

    def __len__(self) -> int:
        return len(self.queue)

    def put(self, op: Op) -> bool:
        """Queue `op` and send what can be sent; True when nothing is left waiting."""
        if self.broken:
            return True
        self.queue.append(op)
        return self.pump()

    def pump(self, force: bool = False) -> bool:
        """Send queued ops in order; True when the queue is empty. `force` skips the wait."""
        if self.down:
            if not force and self.clock() < self._next_try:
                return False
            if not self.probe():
                self._next_try = self.clock() + self.retry_every_s
                return False
        while self.queue:
            op = self.queue[0]
            try:
                op.send()
            except Exception as exc:  # noqa: BLE001 - nothing may raise into training
                if not self.handle_failure(op, exc):
                    return False
                continue
            self.queue.popleft()
            self._sent_while_down += 1
        if self.down:
            self.down = False
            self.say(f"tracking server is back: sent {self._sent_while_down} buffered tracking calls")
        self._sent_while_down = 0
        return True

    def handle_failure(self, op: Op, exc: Exception) -> bool:
        """Decide after a failed send; True when the op was dropped and sending may go on."""
        if not self.probe():
            if not self.down:
                self.down = True
                self.outages += 1
                self.say(
                    f"tracking server unreachable ({op.label}: {short(exc, 120)}); training goes on, "
                    f"tracking calls are buffered and sent when it returns{self.where}"
                )
            self._next_try = self.clock() + self.retry_every_s
            return False
        op.attempts += 1
        if op.attempts < self.max_attempts:
            return False
        self.queue.popleft()
        self.dropped.append(op.label)
        self.say(f"tracking call `{op.label}` failed {op.attempts} times and was dropped: {short(exc)}")
        if op.essential:
            self.broken = True
            self.queue.clear()
            self.say("tracking is off for the rest of this run")
            return False
        return True


def short(exc: BaseException, limit: int = 200) -> str:
    """One line describing `exc`.

    >>> short(ValueError("bad\\nthing"))
    'ValueError: bad thing'
    """
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
