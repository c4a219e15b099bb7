"""The one gate between input files and generated launch files: refusal, shell quoting, Kubernetes names.

Every string a plan, workload, hardware or model file supplies (names, Hugging Face repository ids,
environment values) reaches a script or manifest through this module:
- `text` refuses control characters (a newline would end a `# comment` and start a command; a
  carriage return or escape would hide text on a terminal); what passes is inert inside a comment;
- `sh` quotes shell words (shlex.quote), except the generator's own "$VAR" expansions;
- `assign` writes `VAR=value` overridable from the environment with the value single-quoted, so a
  `$(...)` in it is never expanded;
- `dns_label` / `label_value` turn any text into a valid Kubernetes object name / label value,
  cut with a short hash of the whole text so names stay unique and stable.
YAML manifests are written by yaml.safe_dump, which quotes whatever needs it.
"""
from __future__ import annotations

import hashlib
import re
import shlex
import unicodedata

from rackplan.specs import SpecError

DNS_LABEL_MAX = 63  # RFC 1123 label, Kubernetes metadata.name of most kinds and label values
HASH_CHARS = 8  # hex digits of sha256 kept when a name is cut (2^32 names before a likely clash)
# Hugging Face repository ids: owner/name of letters, digits, '-', '_', '.' (huggingface_hub
# validate_repo_id: [\w\-.]{1,96} per part, no '--' or '..'); a local path is passed via $MODEL instead.
HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
# the generator's own double-quoted words: plain characters and $VAR / ${VAR} expansions, nothing that
# runs a command ($(...), backquotes) or ends the quotes
QUOTED = re.compile(r'^"(?:[A-Za-z0-9_:/.@=,+-]|\$\{?[A-Z_][A-Z0-9_]*\}?)*"$')


def text(value: str, field: str, where: str = "") -> str:
    """`value` unchanged if it has no control or line-separator characters; a SpecError otherwise."""
    bad = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if bad:
        raise SpecError(where, field, "text without control characters (newline, tab, escape, ...)", value)
    return value


def hf_repo(value: str, field: str, where: str = "") -> str:
    """A Hugging Face repository id (owner/name), checked before it reaches a script or manifest."""
    if not HF_REPO.match(value) or "--" in value or ".." in value:
        raise SpecError(where, field, "a Hugging Face repository id such as deepseek-ai/DeepSeek-V3", value)
    return value


def word(arg: str) -> str:
    """One shell word: the generator's own quoted expansion ("$X", "http://$X:1") as is, else shlex.quote."""
    return arg if QUOTED.match(arg) else shlex.quote(arg)


def sh(args: list[str]) -> str:
    """Shell words joined by spaces, each through `word`."""
    return " ".join(word(a) for a in args)


def assign(var: str, default: str, export: bool = False) -> str:
    """`VAR=...` keeping a value already in the environment, else `default` (single-quoted: inert)."""
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", var):
        raise SpecError("", "env", "a variable name of capitals, digits and '_'", var)
    line = f'{var}="${{{var}:-}}"; [ -n "${var}" ] || {var}={shlex.quote(default)}'
    return line + (f"; export {var}" if export else "")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:HASH_CHARS]


def dns_label(value: str, limit: int = DNS_LABEL_MAX) -> str:
    """A valid DNS-1123 label for `value` (and DNS-1035: it starts with a letter, as Service names
    must): lower-case alphanumerics and '-', at most `limit` characters. Text that had to change or
    be cut ends in '-' + a hash of the whole input, so two inputs that read alike never share a name
    and the same input always gets the same one."""
    clean = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", value.lower())).strip("-")
    if clean == value and len(clean) <= limit and clean[:1].isalpha():
        return clean
    head = clean[:limit - HASH_CHARS - 1].rstrip("-")
    head = head if head[:1].isalpha() else ("r" + head)[:limit - HASH_CHARS - 1].rstrip("-")
    return f"{head}-{_digest(value)}"


def label_value(value: str) -> str:
    """A valid Kubernetes label value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends (hash
    suffix when changed or cut, as `dns_label`)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]", "-", value).strip("-_.")
    if clean == value and len(clean) <= DNS_LABEL_MAX:
        return clean
    head = clean[:DNS_LABEL_MAX - HASH_CHARS - 1].rstrip("-_.")
    return f"{head}-{_digest(value)}" if head else _digest(value)


def check_inputs(cx) -> None:
    """Refuse, before any file is built, input text a launch file would carry (a Context's plan,
    workload, hardware and model names, the model's repository id and environment)."""
    for field, value in (("plan name", cx.plan.name), ("workload name", cx.workload.name),
                         ("hardware name", cx.hw.name), ("model name", cx.model.name)):
        text(value, field)
    hf_repo(cx.family.hf_id, "model repository")
    for k, v in cx.family.env:
        text(v, f"env {k}")
