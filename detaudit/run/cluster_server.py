"""The Ray job server of ``record --cluster`` / ``verify --cluster``: connecting, authenticating,
and every request bounded in time, every failure one line.

An explicit address is used as given: ``RAY_ADDRESS`` in this environment does not redirect it
(Ray's client would); ``auto`` finds the cluster the way Ray does. A server that uses Ray's token
authentication (``/api/authentication_mode`` says ``token``) gets the token the way Ray's own
clients find it (``RAY_AUTH_TOKEN``, else the file named by ``RAY_AUTH_TOKEN_PATH``, else
``~/.ray/auth_token``); which one was used is reported. ray and requests are imported inside
functions only: the tool starts without them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from detaudit.data.card import Card
from detaudit.errors import InputError

# Each request to the job server: a server that accepts and never answers must not hold a
# command forever. Short cards get short requests (never under the floor).
REQUEST_TIMEOUT_S = 30.0
MIN_REQUEST_TIMEOUT_S = 5.0
# Variables through which Ray's job client picks a server itself, overriding the address given.
ADDRESS_ENVS = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
TOKEN_ENV, TOKEN_PATH_ENV = "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


class JobServerError(InputError):
    """A request to the job server failed (one line); ``transient``: it did not answer at all."""

    def __init__(self, address: str, message: str, transient: bool = False) -> None:
        super().__init__(address, message)
        self.transient = transient

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return (JobServerError, (self.path, self.message, self.transient))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _no_answer(exc: BaseException) -> bool:
    """The server did not answer (refused, reset, timed out), as opposed to answering an error."""
    try:
        import requests
    except ImportError:  # pragma: no cover - ray[default] brings requests
        return isinstance(exc, (ConnectionError, TimeoutError))
    return isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                            ConnectionError, TimeoutError))


def request_timeout(card: Card) -> float:
    """Seconds one request to the job server may take for this card."""
    return min(REQUEST_TIMEOUT_S, max(MIN_REQUEST_TIMEOUT_S, card.timeout_s))


@contextmanager
def _address_as_given(address: str) -> Iterator[None]:
    """Inside: Ray's job client uses ``address``, not one that ``RAY_ADDRESS`` (or
    ``RAY_API_SERVER_ADDRESS``) names; ``auto`` still finds the cluster the way Ray does."""
    saved = {} if address == "auto" else {k: os.environ.pop(k) for k in ADDRESS_ENVS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def token_source() -> str:
    """Where Ray's token loader takes the token from, in its order of precedence."""
    if os.environ.get(TOKEN_ENV):
        return f"${TOKEN_ENV}"
    if os.environ.get(TOKEN_PATH_ENV):
        return f"${TOKEN_PATH_ENV} ({os.environ[TOKEN_PATH_ENV]})"
    return str(Path.home() / ".ray" / "auth_token")


def _server_auth_mode(url: str, address: str, timeout_s: float) -> str | None:
    """What the job server says of its authentication ("token", "disabled"); None when it does not say."""
    import requests

    try:
        answer = requests.get(url.rstrip("/") + "/api/authentication_mode", timeout=timeout_s)
    except Exception as exc:
        why = f"no answer within {timeout_s:g}s" if isinstance(exc, requests.exceptions.Timeout) else _first_line(exc)
        raise JobServerError(address, f"cannot reach a Ray job server: {why}", transient=True) from None
    if answer.status_code != 200:
        return None  # an older Ray: its client finds the token itself when RAY_AUTH_MODE=token
    try:
        mode = answer.json().get("authentication_mode")
    except (ValueError, AttributeError):
        return None
    return mode if isinstance(mode, str) else None


def _token_header(address: str) -> tuple[dict[str, str], str]:
    """The token as Ray's clients send it, and where it came from; ``InputError`` when there is none."""
    try:
        # Compiled; ray/_raylet.pyi leaves this class out.
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
        from ray.exceptions import AuthenticationError
    except ImportError as exc:
        raise InputError(address, f"the Ray job server wants a token and this Ray cannot load one ({exc})") from None
    source = token_source()
    loader = AuthenticationTokenLoader.instance()
    loader.reset_cache()  # the environment may have changed since the loader last looked
    try:
        found = loader.has_token(ignore_auth_mode=True)
        header = loader.get_token_for_http_header(ignore_auth_mode=True) if found else {}
    except AuthenticationError as exc:
        raise InputError(address, f"the Ray job server uses token authentication and the token in {source} "
                                  f"cannot be read: {_first_line(exc)}") from None
    if not header:
        raise InputError(address, f"the Ray job server uses token authentication and no token was found "
                                  f"(${TOKEN_ENV}, ${TOKEN_PATH_ENV} or {source}): set one of them to the "
                                  "cluster's token (`ray get-auth-token` on the head)")
    return dict(header), source


def _bounded_client_class(base: type, timeout_s: float) -> type:
    """``base`` (Ray's ``JobSubmissionClient``) with a timeout on every HTTP request it makes."""
    if not callable(getattr(base, "_do_request", None)):
        raise InputError(None, "this Ray's job client has no request method detaudit can put a timeout on; "
                               "install a Ray with the job client of Ray 2.x (ray[default])")

    class BoundedJobClient(base):
        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return BoundedJobClient


class JobServer:
    """Ray's job server at one address: every request bounded in time, every failure one line."""

    def __init__(self, address: str, timeout_s: float) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.token_source: str | None = None  # set when the server uses token authentication
        self.client = self._connect()

    def _connect(self) -> Any:
        try:
            from ray.dashboard.utils import get_address_for_submission_client
            from ray.job_submission import JobSubmissionClient
        except ImportError as exc:
            raise InputError(self.address, f"--cluster needs ray[default] installed here ({exc})") from None
        # Ray logs each package upload at INFO on stderr; detaudit prints its own progress.
        for name in ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging"):
            logging.getLogger(name).setLevel(logging.WARNING)
        client_class = _bounded_client_class(JobSubmissionClient, self.timeout_s)
        with _address_as_given(self.address):
            try:
                url = get_address_for_submission_client(self.address)
            except Exception as exc:  # "auto" with no cluster here, a malformed address
                raise InputError(self.address, f"cannot reach a Ray job server: {_first_line(exc)}") from None
            headers = None
            if _server_auth_mode(url, self.address, self.timeout_s) == "token":
                headers, self.token_source = _token_header(self.address)
            try:
                return client_class(url, headers=headers)
            except Exception as exc:  # ConnectionError, a timeout, RuntimeError, an authentication error
                why = _first_line(exc)
                if self.token_source is not None:
                    why += f" (token from {self.token_source})"
                raise InputError(self.address, f"cannot reach a Ray job server: {why}") from None

    def call(self, what: str, request: Callable[[], Any]) -> Any:
        """``request()``; any failure becomes a ``JobServerError`` saying ``what`` was asked."""
        try:
            return request()
        except Exception as exc:
            why = f"no answer within {self.timeout_s:g}s" if "timed out" in str(exc).lower() else _first_line(exc)
            raise JobServerError(self.address, f"the Ray job server failed to {what}: {why}",
                                 transient=_no_answer(exc)) from None

    def info(self, job_id: str) -> Any:
        return self.call(f"report job {job_id}", lambda: self.client.get_job_info(job_id))

    def logs(self, job_id: str) -> str:
        return self.call(f"send the log of job {job_id}", lambda: self.client.get_job_logs(job_id))

    def stop(self, job_id: str) -> Any:
        return self.call(f"stop job {job_id}", lambda: self.client.stop_job(job_id))
