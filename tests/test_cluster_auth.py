"""--cluster against a Ray head with token authentication (a real `ray start --head` with RAY_AUTH_MODE=token).

Ray turns token authentication on for `ray start` whenever a token exists (~/.ray/auth_token,
RAY_AUTH_TOKEN), so a user's cluster may want one while their shell says nothing about it.
detaudit asks the job server whether it wants a token and, if so, takes it the way Ray's own
clients find it: $RAY_AUTH_TOKEN, else the file named by $RAY_AUTH_TOKEN_PATH, else
~/.ray/auth_token; the job lines say which one.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Iterator

import pytest
from conftest import RayHead, ray_head, run_cli, write_card

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # a real Ray head for the module
TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def head() -> Iterator[RayHead]:
    with ray_head(token=TOKEN) as started:
        yield started


def client_env(tmp_path: Path, **extra: str) -> dict[str, str | None]:
    """An environment with no token of its own: an empty HOME, no RAY_AUTH_* variables."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": None, **extra}


def test_the_token_comes_from_where_ray_finds_it_and_is_named(head: RayHead, tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", name="toyauth")
    missing = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor", "--cluster", head.dashboard,
                      env=client_env(tmp_path))
    assert missing.code == 2, missing.text
    assert missing.err.startswith(f"detaudit: error: {head.dashboard}: the Ray job server uses token authentication "
                                  "and no token was found")
    assert missing.err.count("\n") == 1
    # $RAY_AUTH_TOKEN, as `ray start` on the head was given it.
    from_env = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor", "--cluster", head.dashboard,
                       "--workdir", str(tmp_path / "env"), env=client_env(tmp_path, RAY_AUTH_TOKEN=TOKEN))
    assert from_env.code == 0, from_env.text
    assert "(job server token from $RAY_AUTH_TOKEN)" in from_env.err
    # ~/.ray/auth_token, where `ray get-auth-token` puts it (and where Ray's ray.init writes one).
    home_token = tmp_path / "home" / ".ray" / "auth_token"
    home_token.parent.mkdir(parents=True)
    home_token.write_text(TOKEN)
    from_home = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor", "--cluster", head.dashboard,
                        "--workdir", str(tmp_path / "home-runs"), env=client_env(tmp_path))
    assert from_home.code == 0, from_home.text
    assert f"(job server token from {home_token})" in from_home.err
    # A token that is not the cluster's: one line, exit 2, saying which token was refused.
    wrong = tmp_path / "wrong_token"
    wrong.write_text(secrets.token_hex(16))
    refused = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor", "--cluster", head.dashboard,
                      env=client_env(tmp_path, RAY_AUTH_TOKEN_PATH=str(wrong)))
    assert refused.code == 2, refused.text
    assert f"(token from $RAY_AUTH_TOKEN_PATH ({wrong}))" in refused.err and refused.err.count("\n") == 1
    assert "Traceback" not in missing.err + refused.err
