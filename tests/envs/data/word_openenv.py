"""A plain OpenEnv server (openenv-core's own `Environment`, `Action`, `Observation` and
`create_fastapi_app`; nothing of masdsl's), for tests/envs/test_openenv.py: guess a five-letter
word. Run as a script it serves on a free loopback port and prints its URL; imported by a
workflow it registers `first_word`, the parser that workflow's role uses."""

from __future__ import annotations

import socket
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app

from masdsl.envs.registry import parser

WORDS = ("apple", "grape", "lemon", "melon")


@parser("first_word", returns="str", empty="")
def first_word(output: str) -> str | None:
    words = output.split()
    return words[0] if words else None


class GuessAction(Action):
    guess: str


class WordObservation(Observation):
    hint: str = ""
    length: int = 5


class WordEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.word, self._state = WORDS[0], State()

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> WordObservation:
        self.word = WORDS[(seed or 0) % len(WORDS)]
        self._state = State(episode_id=episode_id, step_count=0)
        return WordObservation(hint=f"it starts with {self.word[0]}")

    def step(self, action: GuessAction, timeout_s: Optional[float] = None, **kwargs: Any) -> WordObservation:
        self._state.step_count += 1
        same = sum(a == b for a, b in zip(action.guess, self.word)) / len(self.word)
        return WordObservation(hint=f"{same:.0%} of the letters are in place", reward=1.0 if action.guess == self.word else same,
                               done=action.guess == self.word)

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    import uvicorn

    sock = socket.create_server(("127.0.0.1", 0))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    app = create_fastapi_app(WordEnv, GuessAction, WordObservation, max_concurrent_envs=64)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
