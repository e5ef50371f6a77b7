"""Which environment variables and flags hold secrets, and how to hide them.

Used by the launch artifacts (env.json, command.sh) and by every log line the
launcher writes, so that a token never reaches disk or a log through autotune.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "***"

_SECRET_ENV = re.compile(r"^HF_TOKEN$|_API_KEY$|^API_KEY$|TOKEN|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
# Flags whose value is a secret: --api-key, --admin-api-key, --hf-token, --*-secret, --*-password.
# Only a trailing "-token" counts, so --max-total-tokens and --tokenizer-path stay visible.
_SECRET_FLAG = re.compile(r"^--?[\w-]*(api-key|-token|secret|password)$", re.IGNORECASE)


def is_secret_env(name: str) -> bool:
    """True for HF_TOKEN, *_API_KEY, *TOKEN*, *SECRET*, *PASSWORD* (any case)."""
    return bool(_SECRET_ENV.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with every secret value replaced by ``***``."""
    return {k: (REDACTED if is_secret_env(k) else str(v)) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of ``argv`` with the values of secret flags (``--api-key X``, ``--api-key=X``) hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out
