"""NATS subject rules as the simulated server applies them (matching, overlap, literals)."""

from __future__ import annotations


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` is one or more tokens."""
    p_tokens = pattern.split(".")
    s_tokens = subject.split(".")
    for i, p in enumerate(p_tokens):
        if p == ">":
            return len(s_tokens) > i
        if i >= len(s_tokens) or (p != "*" and p != s_tokens[i]):
            return False
    return len(p_tokens) == len(s_tokens)


def subjects_overlap(a: str, b: str) -> bool:
    """Whether some subject matches both patterns."""
    a_tokens = a.split(".")
    b_tokens = b.split(".")
    for i in range(max(len(a_tokens), len(b_tokens))):
        if i >= len(a_tokens) or i >= len(b_tokens):
            return False
        x, y = a_tokens[i], b_tokens[i]
        if x == ">" or y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return True


def is_pattern(subject: str) -> bool:
    """Whether ``subject`` holds a wildcard token."""
    return any(t in ("*", ">") for t in subject.split("."))


def check_publish_subject(subject: str) -> None:
    """ValueError unless ``subject`` is a literal subject one may publish to."""
    if not subject or is_pattern(subject) or "" in subject.split(".") or " " in subject:
        raise ValueError(f"cannot publish to {subject!r}: not a literal NATS subject")
