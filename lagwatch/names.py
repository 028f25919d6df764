"""Names the configuration gives things (clusters, webhooks): as the environment and the secrets directory see them."""

from __future__ import annotations

from typing import Any


def differ_not_only_in_case(mapping: Any) -> Any:
    """A mapping of names, checked: none two differ only in case. The environment and the secrets directory give
    names in lowercase, so a secret for cluster `Prod` made a second cluster `prod`, reported only as missing its
    bootstrap servers. For a `mode="before"` validator: returns the mapping as it was."""
    if not isinstance(mapping, dict):
        return mapping
    lowered: dict[str, str] = {}
    for name in mapping:
        if isinstance(name, str):
            other = lowered.setdefault(name.lower(), name)
            if other != name:
                raise ValueError(
                    f"{other!r} and {name!r} differ only in case: names set from the environment or the secrets "
                    "directory are lowercase, so name it in lowercase everywhere"
                )
    return mapping
