"""The hub's failures as named errors, for every push and pull (routers: serving.hub; label datasets:
labeling.hub): a repo id the hub would refuse, offline mode, a refusal, a hub that cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tiermem.settings.errors import EXIT_NETWORK, HubError, UnreachableError, UsageError, exit_code


def check_repo_id(repo_id: str) -> str:
    """`org/name` as the hub accepts it (no `..`, spaces, `.git` end, <= 96 characters a part); else exit 2, early."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise UsageError(f"repo_id must be org/name (pass repo_id=...), got {repo_id!r}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise UsageError(f"repo_id {repo_id!r} is not a valid hub repo id: {exc}") from None
    return repo_id


@contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """The hub's failures as named errors: offline mode (HF_HUB_OFFLINE) and a refusal exit 2, an unreachable hub 7."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled

    try:
        yield
    except OfflineModeIsEnabled:
        raise HubError(f"{what}: HF_HUB_OFFLINE is set, so the hub is not contacted; unset HF_HUB_OFFLINE (or set "
                       "it to 0) to reach it") from None
    except HFValidationError as exc:
        raise UsageError(f"{what}: {exc}") from None
    except HfHubHTTPError as exc:
        raise HubError(f"{what} failed: {exc}") from None
    except Exception as exc:
        if exit_code(exc) != EXIT_NETWORK:
            raise
        raise UnreachableError(f"{what}: the hub at {constants.ENDPOINT} (HF_ENDPOINT) cannot be reached: "
                               f"{type(exc).__name__}: {exc}") from None
