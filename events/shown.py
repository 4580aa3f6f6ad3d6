"""A value quoted for an error message, cut short: a hostile value may be any length and hold any character."""

from __future__ import annotations


def shown(value: object, most: int = 40) -> str:
    """`repr(value)`, cut to `most` characters and '...' when longer."""
    text = repr(value)
    return text if len(text) <= most else text[:most] + "..."
