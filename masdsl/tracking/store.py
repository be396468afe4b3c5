"""Where runs go: the tracking URI, whether a server answers, and how to open the dashboard.

Resolution order: `tracking.uri` in the config, then `$MLFLOW_TRACKING_URI`, then MLflow's own
default, a SQLite file `mlflow.db` in the working directory. Relative SQLite paths are made
absolute so the printed `mlflow ui` command works from any folder.

>>> resolve_uri("sqlite:///runs.db", env={}, cwd=Path("/w"))
'sqlite:////w/runs.db'
>>> resolve_uri(None, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000/"}, cwd=Path("/w"))
'http://127.0.0.1:5000'
>>> resolve_uri(None, env={}, cwd=Path("/w"))
'sqlite:////w/mlflow.db'
"""

from __future__ import annotations

import logging
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping

from masdsl.errors import UserError

DEFAULT_DB = "mlflow.db"
SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "file", "databricks")

# MLflow's HTTP client retries 7 times with exponential backoff (minutes) and waits 120 s per
# request by default (mlflow.environment_variables). During an outage that would stall a
# training step; our own buffer retries instead, so MLflow's retries are kept short.
HTTP_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
    # MLflow prints "View run ... at: URL" for every run it ends; we print one line ourselves.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}


class TrackingError(UserError):
    """A tracking setting the user can fix (a malformed `tracking.uri`)."""


def resolve_uri(uri: str | None, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """The tracking URI to use; raises TrackingError for an unknown scheme.

    >>> resolve_uri("htp://host:5000", env={})
    Traceback (most recent call last):
    ...
    masdsl.tracking.store.TrackingError: `tracking.uri` has an unknown scheme `htp` in `htp://host:5000` (use sqlite:///PATH, http://HOST:PORT or https://...)
    """
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    chosen = uri or env.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB}"
    scheme = chosen.split(":", 1)[0].split("+", 1)[0].lower() if ":" in chosen else ""
    if scheme not in SCHEMES:
        hint = (f"did you mean `sqlite:///{chosen}`?" if chosen.endswith((".db", ".sqlite")) and not scheme
                else "use sqlite:///PATH, http://HOST:PORT or https://...")
        raise TrackingError(f"`tracking.uri` has an unknown scheme `{scheme or chosen}` in `{chosen}` ({hint})")
    if scheme == "sqlite":
        path = chosen[len("sqlite:///") :]
        if path and not path.startswith("/") and path != ":memory:":
            return f"sqlite:///{cwd / path}"
    if is_http(chosen):
        return chosen.rstrip("/")
    return chosen


def is_http(uri: str) -> bool:
    """Whether the store is a tracking server reached over HTTP(S).

    >>> is_http("https://mlflow.example"), is_http("sqlite:///x.db")
    (True, False)
    """
    return uri.startswith(("http://", "https://"))


def apply_http_defaults(env: dict[str, str] | os._Environ = os.environ) -> dict[str, str]:
    """Shorten MLflow's HTTP retries (and quiet it) unless the user set them; returns what was set.

    >>> apply_http_defaults({"MLFLOW_HTTP_REQUEST_TIMEOUT": "60"})["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    '1'
    """
    set_now = {}
    for name, value in HTTP_ENV_DEFAULTS.items():
        if name not in env:
            env[name] = value
            set_now[name] = value
    return set_now


def reachable(uri: str, timeout_s: float = 2.0) -> bool:
    """Whether a tracking server answers its `/health` endpoint. Non-HTTP stores: True.

    False only when nothing answers (refused, timed out, unknown host, 5xx from a proxy).

    >>> reachable("sqlite:////tmp/x.db"), reachable("http://127.0.0.1:9", timeout_s=0.5)
    (True, False)
    """
    if not is_http(uri):
        return True
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=timeout_s) as resp:
            return 200 <= resp.status < 500
    except urllib.error.HTTPError as exc:  # an answer, even 401/403, means it is up
        return exc.code < 500
    except urllib.error.URLError as exc:  # a TLS complaint is an answer too (MLflow may accept it)
        return isinstance(exc.reason, ssl.SSLError)
    except (OSError, ValueError):
        return False


def ui_command(uri: str, experiment_id: str | None = None, run_id: str | None = None) -> str:
    """The one command that opens the dashboard on this store.

    >>> ui_command("sqlite:////w/mlflow.db")
    'mlflow ui --backend-store-uri sqlite:////w/mlflow.db'
    >>> ui_command("http://127.0.0.1:5000", "3", "abc")
    'python -m webbrowser "http://127.0.0.1:5000/#/experiments/3/runs/abc?workflowType=machine_learning"'
    """
    if is_http(uri):  # MLflow 3's UI opens in its GenAI layout unless asked for model training
        page = (f'"{uri}/#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"'
                if experiment_id and run_id else uri)
        return f"python -m webbrowser {page}"
    return f"mlflow ui --backend-store-uri {uri}"


STORE_ERROR_LOGGER = "mlflow.store.db.utils"  # MLflow's SQL store, which logs a traceback per failed write
_STORE_ERROR = "SQLAlchemy database error"


class _HandledStoreErrors(logging.Filter):
    """Drops MLflow's own report of a failed database write (a whole traceback on stderr, e.g.
    SQLite's "database is locked" under load): MLflow raises it on to masdsl's outbox, which
    retries the call and, where it keeps failing, says so in one line and keeps it for `resend`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_STORE_ERROR)


def quiet_handled_store_errors() -> None:
    """Install `_HandledStoreErrors` on MLflow's store logger (once per process).

    >>> quiet_handled_store_errors(); quiet_handled_store_errors()
    >>> logger = logging.getLogger(STORE_ERROR_LOGGER)
    >>> sum(isinstance(f, _HandledStoreErrors) for f in logger.filters)
    1
    >>> make = lambda msg: logging.LogRecord(STORE_ERROR_LOGGER, logging.ERROR, "", 0, msg, (), None)
    >>> bool(logger.filter(make(_STORE_ERROR + ". The following exception is caught.\\n%s"))), bool(logger.filter(make("other")))
    (False, True)
    """
    logger = logging.getLogger(STORE_ERROR_LOGGER)
    if not any(isinstance(f, _HandledStoreErrors) for f in logger.filters):
        logger.addFilter(_HandledStoreErrors())
