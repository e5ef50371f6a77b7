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
# GOOGLE_APPLICATION_CREDENTIALS; their plurals too).
_ANYWHERE = re.compile(r"PASSWORD|PASSWD|SECRET|CREDENTIAL", re.IGNORECASE)
# The name's last word (after dropping trailing ID / FILE / PATH and a number: AWS_ACCESS_KEY_ID,
# GITHUB_TOKEN_FILE, HF_TOKEN_2) makes it secret: HF_TOKEN, OPENAI_API_KEY, WANDB_KEY,
# HUGGINGFACE_HUB_CREDS, REDIS_PASS, X_AUTH, ..._DSN. A word that only ends in TOKEN counts too
# (GHTOKEN); camelCase is split into words (accessToken, openaiApiKey).
_LAST = frozenset({"TOKEN", "KEY", "APIKEY", "ACCESSKEY", "PASS", "PWD", "CREDS", "CRED", "DSN", "PASSPHRASE",
                   "AUTH", "APIKEYS", "ACCESSKEYS", "PWDS", "DSNS", "PASSPHRASES"})
_TRAILING = frozenset({"ID", "FILE", "PATH"})
# ...unless the word before says it is something else: a count or a time per token
# (--bucket-time-to-first-token, per_token), autotune's own launch key, a cache or sort key, a switch.
_NOT_AFTER = {
    "TOKEN": frozenset({"FIRST", "PER", "NEXT", "LAST", "EACH"}),
    "KEY": frozenset({"LAUNCH", "SORT", "CACHE", "GROUP", "PRIMARY", "FOREIGN", "PARTITION", "HASH", "LOOKUP"}),
    "AUTH": frozenset({"NO", "ENABLE", "DISABLE", "USE", "SKIP", "REQUIRE"}),
}
# The plurals KEYS and TOKENS are mostly counts and lists of names (max_total_tokens, kv_tokens,
# prompt_tokens, sort_keys, GOODPUT_KEYS): secret only after a word that names a credential
# (--api-keys, OPENAI_API_KEYS, HF_TOKENS, ACCESS_TOKENS).
_PLURALS = frozenset({"KEYS", "TOKENS"})
_CREDENTIAL_WORDS = frozenset({
    "API", "ACCESS", "AUTH", "BEARER", "REFRESH", "SESSION", "OAUTH", "CLIENT", "SERVICE", "APP", "BOT", "PAT",
    "JWT", "PRIVATE", "SIGNING", "ENCRYPTION", "SSH", "ADMIN", "MASTER", "HF", "HUB", "HUGGINGFACE", "OPENAI",
    "GITHUB", "GH", "GITLAB", "SLACK", "WANDB", "ANTHROPIC", "AWS", "GCP", "AZURE",
})
_WORDS = re.compile(r"[_\-.\s]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_URL_NAMES = frozenset({"DATABASE_URL", "DB_URL", "DATABASE_URI"})


def is_secret_name(name: str) -> bool:
    """Whether a flag, environment variable or field called ``name`` holds a secret (any case,
    leading dashes ignored)."""
    bare = name.lstrip("-")
    if not bare:
        return False
    if _ANYWHERE.search(bare):
        return True
    upper = _CAMEL.sub("_", bare).upper().replace("-", "_")
    words = [w for w in _WORDS.split(upper) if w]
    while len(words) > 1 and (words[-1] in _TRAILING or words[-1].isdigit()):
        words.pop()
    if not words:
        return False
    last = words[-1].rstrip("0123456789") or words[-1]
    before = words[-2] if len(words) > 1 else ""
    if "_".join([*words[:-1], last]) in _URL_NAMES or "_".join(words[-2:]) in _URL_NAMES:
        return True
    if last in _PLURALS:
        return before in _CREDENTIAL_WORDS
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
# scheme://user:PASSWORD@host: the password is everything up to the last @ of the URL (it may
# hold '/', "'" or '@'; a URL does not span white space). Found by a scan, not a regex: a regex that
# runs to the last @ backtracks over every scheme:// of a long word, quadratic in its length.
_WORD = re.compile(r"\S+")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_SCHEME_LEN = 64
# ?token=VALUE / &api_key=VALUE in a URL's query.
_QUERY_VALUE = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z_][\w.\-]*)=)(?P<val>[^&#\s'\"]*)")
# --flag value / --flag=value in a line of text (a shell line, a log line). A value never starts
# with '-': that is the next flag (--enable-x --api-key KEY).
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])--?[A-Za-z][\w-]*)(?P<sep>=|[ \t]+)(?P<val>'[^']*'|\"[^\"]*\"|(?!-)[^\s'\"]+)"
)
# '--flag', 'value' in a list's repr (an argv in an error line: ['--api-key', 'KEY', '--port']), or
# '--flag': 'value' in a mapping's (JSON, a dict of flags); the value may be cut off by a shortened repr.
_LISTED_FLAG_VALUE = re.compile(
    r"(?P<flag>(?P<q>['\"])--?[A-Za-z][\w-]*(?P=q))(?P<sep>[,:][ \t]*)"
    r"(?P<val>'(?:[^'\\\n]|\\.)*(?:'|$)|\"(?:[^\"\\\n]|\\.)*(?:\"|$))"
)
# name=value, name: value, 'name': 'value', name='value' (SGLang's ServerArgs(...) line, JSON, env lines).
# Not after '?' or '&': a URL's query is _QUERY_VALUE's.
_NAME_VALUE = re.compile(
    r"(?P<name>(?<![\w.\-?&])[A-Za-z_][\w.-]*)(?P<sep>['\"]?[ \t]*[=:][ \t]*)"
    r"(?P<val>'[^'\n]*'|\"[^\"\n]*\"|[^\s,;)}\]'\"]+)"
)
_KEEP = frozenset({"", "None", "null", "none", "''", '""', REDACTED, f"'{REDACTED}'", f'"{REDACTED}"'})


def is_reference(value: str, name: str | None) -> bool:
    """Whether ``value`` only names the variable ``name`` itself (``HF_TOKEN="$HF_TOKEN"``,
    ``${HF_TOKEN}``): it gives nothing away. autotune does not expand ``$`` in what it hands a
    server, so any other ``$...`` value is the literal secret the server gets."""
    return bool(name) and value in (f"${name}", f"${{{name}}}")


def _hidden(val: str, name: str | None = None) -> str:
    """``val`` replaced, its quotes kept; empty values and a reference to the variable's own name
    (:func:`is_reference`) kept: they give nothing away."""
    quoted = len(val) >= 2 and val[0] == val[-1] and val[0] in "'\""
    bare = val[1:-1] if quoted else val
    if val in _KEEP or is_reference(bare, name):
        return val
    return f"{val[0]}{REDACTED}{val[0]}" if quoted else REDACTED


def redact_url(url: str) -> str:
    """``url`` with the password of its userinfo and the values of secret query parameters hidden:
    ``postgresql://u:***@host/db``, ``https://host/x?token=***``."""
    out = _WORD.sub(lambda m: _url_password_hidden(m.group(0)), url) if "://" in url and "@" in url else url
    return _QUERY_VALUE.sub(
        lambda m: m.group("head") + REDACTED if m.group("val") and is_secret_name(m.group("name")) else m.group(0), out)


def _url_password_hidden(word: str) -> str:
    """``word`` (no white space) with the password of its first ``scheme://user:password@``
    hidden: from the ``:`` after the user to the word's last ``@``. Linear in the word."""
    at = word.rfind("@")
    start = 0
    while at > 0:
        sep = word.find("://", start)
        if sep < 0 or sep > at:
            return word
        begin = sep
        while begin > 0 and sep - begin < _SCHEME_LEN and word[begin - 1] in _SCHEME_CHARS:
            begin -= 1
        user_end = sep + 3
        while user_end < len(word) and word[user_end] not in ":/@'\"":
            user_end += 1
        if any(c.isalpha() for c in word[begin:sep]) and user_end < at and word[user_end] == ":" and at > user_end + 1:
            return word[:user_end + 1] + REDACTED + word[at:]
        start = sep + 3
    return word


def redact_text(text: str) -> str:
    """A line (or lines) of text with every secret hidden: token shapes, URL passwords,
    ``--secret-flag value`` (also as ``'--secret-flag', 'value'`` in a list's repr) and
    ``SECRET_NAME=value`` / ``secret_name: value`` pairs, also inside the value of a name that is
    not secret (``SGLANG_CFG='{"api_key": "..."}'``)."""
    if not text:
        return text
    out = _TOKEN_SHAPES.sub(REDACTED, text)
    out = redact_url(out)
    out = _LISTED_FLAG_VALUE.sub(_listed_flag_value, out)
    out = _FLAG_VALUE.sub(
        lambda m: m.group("flag") + m.group("sep") + _hidden(m.group("val"))
        if is_secret_name(m.group("flag")) else m.group(0),
        out,
    )
    return _NAME_VALUE.sub(_name_value, out)


#: How deep the pairs inside a value are read (``SGLANG_CFG='{"api_key": "..."}'`` is one level):
#: a line of nested ``a:b:c:...`` pairs is read that deep and no deeper, not once per level of it.
_INNER_DEPTH = 4


def _listed_flag_value(m: re.Match[str]) -> str:
    flag, val = m.group("flag")[1:-1], m.group("val")
    if not is_secret_name(flag) or val[1:2] == "-" or val in _KEEP:
        return m.group(0)
    q = val[0]
    return m.group("flag") + m.group("sep") + q + REDACTED + q


def _name_value(m: re.Match[str], depth: int = 0) -> str:
    """``name=value`` of a secret name, hidden; ``name: value`` only when quoted (JSON, a repr):
    ``server.env.HF_TOKEN: must not ...`` is an error line about the field, not its value. The
    value of any other name is read for pairs of its own (a JSON text in a variable), down to
    :data:`_INNER_DEPTH` levels."""
    name, sep, val = m.group("name"), m.group("sep"), m.group("val")
    if name.startswith("-") or not is_secret_name(name):
        if depth >= _INNER_DEPTH:
            return m.group(0)
        return name + sep + _NAME_VALUE.sub(lambda inner: _name_value(inner, depth + 1), val)
    if ":" in sep and not (sep[0] in "'\"" or val[:1] in ("'", '"')):
        return m.group(0)
    return name + sep + _hidden(val, name)


# SGLang's flags that carry a secret (every release autotune has a table for; a test keeps this
# true), and its flags that are a prefix of one but a flag of their own (argparse takes an exact
# name first).
SECRET_FLAGS = ("--admin-api-key", "--api-key", "--ssl-keyfile-password")
_PREFIX_FLAGS = frozenset({"--ssl-keyfile"})


def abbreviated_secret_flags(flag: str) -> list[str]:
    """The secret flags that ``flag`` (``--name`` or ``--name=value``) abbreviates: SGLang's
    parser (``allow_abbrev``) takes ``--api-ke KEY`` for ``--api-key KEY``. Empty for a flag
    written out, or for another flag."""
    name = flag.partition("=")[0]
    if not name.startswith("--") or len(name) < 3 or name in _PREFIX_FLAGS or is_secret_name(name):
        return []
    return [s for s in SECRET_FLAGS if s.startswith(name) and s != name]


def _secret_flag(flag: str) -> bool:
    return flag.startswith("-") and (is_secret_name(flag) or bool(abbreviated_secret_flags(flag)))


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of ``argv`` with the values of secret flags (``--api-key X``, ``--api-key=X``, also
    abbreviated: ``--api-ke X``) hidden, and every other argument's secrets (a token shape, a URL
    password, a pair in a JSON value: :func:`redact_text`). Another flag right after a secret
    flag is not a value (argparse would not take it as one) and stays."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next and not arg.startswith("-"):
            out.append(arg if arg in _KEEP else REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _value = arg.partition("=")
        if _secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def secret_argv_positions(argv: Sequence[str]) -> set[int]:
    """The indexes of ``argv`` that hold a secret, as :func:`redact_argv` hides them (the value
    after a secret flag, ``--api-key=KEY``): what an error about one argument must not echo."""
    shown = redact_argv(argv)
    return {i for i, (a, b) in enumerate(zip(argv, shown, strict=True)) if str(a) != b}


def redact_env(env: Mapping[str, Any]) -> dict[str, str]:
    """A copy of ``env`` with the value of every secret name (unless it only names the variable
    itself: ``"$HF_TOKEN"``) hidden, and every other value's secrets (:func:`redact_text`)."""
    return {k: _env_value(k, str(v)) for k, v in env.items()}


def _env_value(name: str, value: str) -> str:
    if is_secret_name(name):
        return value if value in ("", REDACTED) or is_reference(value, name) else REDACTED
    return redact_text(value)


def _is_argv(items: Sequence[Any]) -> bool:
    return all(isinstance(a, str) for a in items) and any(a.startswith("-") for a in items)


def redact_value(value: Any) -> Any:
    """A JSON-like value (what optuna stores: dicts, lists, strings, numbers) with every secret
    hidden: a mapping's secret names (whatever they hold: a text, a number, a list), a list that
    reads as an argv, and any string's secrets."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: (_secret_value(k, v) if isinstance(k, str) and is_secret_name(k) else redact_value(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if _is_argv(value):
            return redact_argv(value)
        return [redact_value(v) for v in value]
    return value


def _secret_value(name: str, value: Any) -> Any:
    """The value of a secret name: hidden, unless it gives nothing away (empty, None, a flag's
    True/False, a reference to the variable itself, already hidden)."""
    if value is None or isinstance(value, bool) or value in ("", REDACTED):
        return value
    if isinstance(value, str) and is_reference(value, name):
        return value
    if isinstance(value, (list, tuple, Mapping)) and not value:
        return value
    return REDACTED


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


__all__ = ["REDACTED", "SECRET_FLAGS", "RedactingFilter", "abbreviated_secret_flags", "is_reference",
           "is_secret_name", "redact_argv", "redact_env", "redact_text", "redact_url", "redact_value",
           "secret_argv_positions"]
