"""The env-over-HTTP protocol, version 1: what `masdsl serve-env` (`env_server.py`) answers and
`env http(...)` (`http_env.py`) asks. Both ends import this module, so they cannot drift apart;
docs/data.md ("Environments over HTTP") describes it for servers written in other languages.

Every body is one JSON object. `GET /v1/info` is the handshake; the others are POSTs:

    /v1/info     -> {"protocol": 1, "env": NAME, "fields": [FIELD, ...]}
    /v1/reset    {"task", "request"}                            -> {"session", "state", "view"}
    /v1/apply    {"session", "state", "role", "fields", "request"} -> {"session", "state", "view"}
    /v1/observe  {"session", "state"}                           -> {"view"}
    /v1/success  {"session", "state"}                           -> {"success"}
    /v1/call     {"session", "state", "function", "args", "kwargs"} -> {"value"}
    /v1/close    {"session"}                                    -> {"closed"}

`call` computes a function bound to the served env (`step_reward()`, `solved()`) on a state, so a
workflow's reward and flow lines that read the env's state work over HTTP as in process.
A failed request answers a 4xx/5xx status with {"error": MESSAGE} (422: the function raised).

>>> need({"state": "s1"}, "state", str, "/v1/apply")
's1'
>>> need({"state": 3}, "state", str, "/v1/apply")
Traceback (most recent call last):
...
masdsl.envs.env_protocol.ProtocolError: the reply to /v1/apply: field `state` is a number, expected a string
"""

from __future__ import annotations

import json
from typing import Any, Mapping

PROTOCOL = 1
PREFIX = f"/v{PROTOCOL}"
ENDPOINTS = ("info", "reset", "apply", "observe", "success", "call", "close")

_KIND = {str: "a string", dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number",
         type(None): "null"}


class ProtocolError(Exception):
    """A request or reply that does not follow the protocol; the message names the field."""


def kind(value: Any) -> str:
    """The JSON kind of a decoded value, as messages name it.

    >>> kind([1]), kind(2.5), kind(True)
    ('a list', 'a number', 'a boolean')
    """
    return _KIND.get(type(value), type(value).__name__)


def need(body: Any, name: str, typ: type | tuple[type, ...], where: str) -> Any:
    """`body[name]`, checked to be of JSON type `typ`; else a `ProtocolError` naming the field."""
    if not isinstance(body, dict):
        raise ProtocolError(f"the reply to {where} is {kind(body)}, not a JSON object")
    if name not in body:
        raise ProtocolError(f"the reply to {where}: field `{name}` is missing")
    value = body[name]
    types = typ if isinstance(typ, tuple) else (typ,)
    # a JSON boolean is not a number here, though Python's bool is an int
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        expected = " or ".join(dict.fromkeys(_KIND.get(t, t.__name__) for t in types))
        raise ProtocolError(f"the reply to {where}: field `{name}` is {kind(value)}, expected {expected}")
    return value


def jsonable(value: Any) -> Any:
    """A JSON-serialisable copy: tuples become lists, other objects their repr (what a parsed
    field or an env's view may hold that JSON cannot).

    >>> jsonable({"a": (1, 2), "b": {3}, 4: None})
    {'a': [1, 2], 'b': '{3}', '4': None}
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(jsonable(body)).encode("utf-8")
