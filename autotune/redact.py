"""The one rule for secrets: which values are secret, and how they are hidden wherever autotune
stores or shows a value (docs/security.md lists the places).

A value is secret by where it sits or by its shape:

* the value of a **flag** whose name says so (``--api-key``, ``--admin-api-key``,
  ``--ssl-keyfile-password``, ``--hf-token``; :func:`is_secret_name`);
* the value of an **environment variable** (or of any mapping key, or a ``name=value`` /
  ``name: value`` pair in text) whose name says so: ``HF_TOKEN``, ``OPENAI_API_KEY``,
  ``WANDB_KEY``, ``HUGGINGFACE_HUB_CREDS``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``*_CREDENTIALS``, ``DATABASE_URL``, ``*_PASSWORD``, ``PGPASSWORD``, ``*_PASS``;
* anything **shaped like a token** (``hf_...``, ``sk-...``, ``ghp_...``, ``github_pat_...``,
  ``xox?-...``, ``glpat-...``, ``AKIA...``, ``AIza...``, a JWT), and the password of a URL's
  userinfo (``postgresql://user:PASSWORD@host/db``).

Hiding is deterministic (``***`` in place of the value): two launches that differ only in a
secret look the same, and equal launches stay equal, so anything keyed on a redacted command
(the launch key, reuse of a measured launch) keeps working. The process itself still gets the
clear value: only what autotune writes down or prints is redacted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "***"

# ---- names ---------------------------------------------------------------------------------
# Words that make a name secret wherever they appear in it (PGPASSWORD, MY_SECRET_THING,
# GOOGLE_APPLICATION_CREDENTIALS).
_ANYWHERE = re.compile(r"PASSWORD|PASSWD|SECRET|CREDENTIAL", re.IGNORECASE)
# The name's last word (after dropping trailing ID / FILE / PATH: AWS_ACCESS_KEY_ID,
# GITHUB_TOKEN_FILE) makes it secret: HF_TOKEN, OPENAI_API_KEY, WANDB_KEY, HUGGINGFACE_HUB_CREDS,
# REDIS_PASS, ..._DSN. A word that only ends in TOKEN counts too (GHTOKEN, accessToken).
_LAST = frozenset({"TOKEN", "KEY", "APIKEY", "ACCESSKEY", "PASS", "PWD", "CREDS", "DSN", "PASSPHRASE"})
_TRAILING = frozenset({"ID", "FILE", "PATH"})
# ...unless the word before says it is something else: a count or a time per token
# (--bucket-time-to-first-token, per_token), autotune's own launch key, a cache or sort key.
_NOT_AFTER = {
    "TOKEN": frozenset({"FIRST", "PER", "NEXT", "LAST", "EACH"}),
    "KEY": frozenset({"LAUNCH", "SORT", "CACHE", "GROUP", "PRIMARY", "FOREIGN", "PARTITION", "HASH", "LOOKUP"}),
}
_WORDS = re.compile(r"[_\-.\s]+")
_URL_NAMES = frozenset({"DATABASE_URL", "DB_URL", "DATABASE_URI"})


def is_secret_name(name: str) -> bool:
    """Whether a flag, environment variable or field called ``name`` holds a secret (any case,
    leading dashes ignored)."""
    bare = name.lstrip("-")
    if not bare:
        return False
    if _ANYWHERE.search(bare):
        return True
    upper = bare.upper().replace("-", "_")
    if upper in _URL_NAMES or upper.endswith(tuple("_" + n for n in _URL_NAMES)):
        return True
    words = [w for w in _WORDS.split(upper) if w]
    while len(words) > 1 and words[-1] in _TRAILING:
        words.pop()
    if not words:
        return False
    last = words[-1]
    before = words[-2] if len(words) > 1 else ""
    if last in _NOT_AFTER and before in _NOT_AFTER[last]:
        return False
    return last in _LAST or last.endswith("TOKEN")


# ---- shapes ------------------------------------------------------------------------------
# Token formats of the services a study is likely to hold a key of. Each needs a run of
# characters long enough that a path or a model name does not match by chance.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|sk-[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic (sk-ant-...), many OpenAI-compatible servers
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # a JWT (header.payload.signature)
    r")"
)
# scheme://user:PASSWORD@host: the password (anything up to the last @ before the host part).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*:)(?P<pw>[^\s@/'\"]+)(?=@)")
# --flag value / --flag=value in a line of text (a shell line, a log line).
_FLAG_VALUE = re.compile(r"(?P<flag>(?<![\w-])--?[A-Za-z][\w-]*)(?P<sep>=|[ \t]+)(?P<val>'[^']*'|\"[^\"]*\"|[^\s'\"]+)")
# name=value, name: value, 'name': 'value', name='value' (SGLang's ServerArgs(...) line, JSON, env lines).
_NAME_VALUE = re.compile(
    r"(?P<name>(?<![\w-])[A-Za-z_][\w.-]*)(?P<sep>['\"]?[ \t]*[=:][ \t]*)"
    r"(?P<val>'[^'\n]*'|\"[^\"\n]*\"|[^\s,;)}\]'\"]+)"
)
_KEEP = frozenset({"", "None", "null", "none", "''", '""', REDACTED, f"'{REDACTED}'", f'"{REDACTED}"'})


def _hidden(val: str) -> str:
    """``val`` replaced, its quotes kept; references to a variable (``$HF_TOKEN``) and empty
    values kept: they give nothing away."""
    quoted = len(val) >= 2 and val[0] == val[-1] and val[0] in "'\""
    bare = val[1:-1] if quoted else val
    if val in _KEEP or bare.startswith("$"):
        return val
    return f"{val[0]}{REDACTED}{val[0]}" if quoted else REDACTED


def redact_url(url: str) -> str:
    """``url`` with the password of its userinfo hidden: ``postgresql://u:***@host/db``."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, url)


def redact_text(text: str) -> str:
    """A line (or lines) of text with every secret hidden: token shapes, URL passwords,
    ``--secret-flag value`` and ``SECRET_NAME=value`` / ``secret_name: value`` pairs."""
    if not text:
        return text
    out = _TOKEN_SHAPES.sub(REDACTED, text)
    out = redact_url(out)
    out = _FLAG_VALUE.sub(
        lambda m: m.group("flag") + m.group("sep") + _hidden(m.group("val"))
        if is_secret_name(m.group("flag")) and not m.group("val").startswith("-") else m.group(0),
        out,
    )
    return _NAME_VALUE.sub(_name_value, out)


def _name_value(m: re.Match[str]) -> str:
    """``name=value`` of a secret name, hidden; ``name: value`` only when quoted (JSON, a repr):
    ``server.env.HF_TOKEN: must not ...`` is an error line about the field, not its value."""
    name, sep, val = m.group("name"), m.group("sep"), m.group("val")
    if name.startswith("-") or not is_secret_name(name):
        return m.group(0)
    if ":" in sep and not (sep[0] in "'\"" or val[:1] in ("'", '"')):
        return m.group(0)
    return name + sep + _hidden(val)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of ``argv`` with the values of secret flags (``--api-key X``, ``--api-key=X``) and
    anything shaped like a secret hidden. Another flag right after a secret flag is not a
    value (argparse would not take it as one) and stays."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _value = arg.partition("=")
        if flag.startswith("-") and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(_TOKEN_SHAPES.sub(REDACTED, redact_url(arg)))
    return out


def redact_env(env: Mapping[str, Any]) -> dict[str, str]:
    """A copy of ``env`` with the value of every secret name, and every secret-shaped value, hidden."""
    return {k: (REDACTED if is_secret_name(k) and str(v) else _TOKEN_SHAPES.sub(REDACTED, redact_url(str(v))))
            for k, v in env.items()}


def _is_argv(items: Sequence[Any]) -> bool:
    return all(isinstance(a, str) for a in items) and any(a.startswith("-") for a in items)


def redact_value(value: Any) -> Any:
    """A JSON-like value (what optuna stores: dicts, lists, strings, numbers) with every secret
    hidden: a mapping's secret names, a list that reads as an argv, and any string's secrets."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int, float))
                    and not isinstance(v, bool) and str(v) and not str(v).startswith("$")
                    else redact_value(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if _is_argv(value):
            return [redact_text(a) for a in redact_argv(value)]
        return [redact_value(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that hides secrets in every record it passes (a storage URL's password
    in a driver's error, a token a library logged): installed on the CLI's log handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report, as it is
            return True
        shown = redact_text(text)
        if shown != text:
            record.msg, record.args = shown, None
        return True


__all__ = ["REDACTED", "RedactingFilter", "is_secret_name", "redact_argv", "redact_env", "redact_text",
           "redact_url", "redact_value"]
