"""Argument types for the commands' numbers: a value out of its range is refused by argparse with one line
(exit 2), before anything runs on it."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path


def within(kind: type, low: float, high: float | None = None, low_included: bool = False):
    """An argparse type: a finite number of `kind` above `low` (or from it, with `low_included`), at most `high`."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if value < low or (value == low and not low_included) or (
                high is not None and value > high):
            bounds = f"{'at least' if low_included else 'more than'} {low:g}" + (
                f" and at most {high:g}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"{text} is not {bounds}")
        return value
    return parse


#: The usual ranges.
positive_int = within(int, 0)
count = within(int, 0, low_included=True)
non_negative = within(float, 0, low_included=True)


def output_file(text: str) -> Path:
    """An argparse type: a file the command will write (it need not exist yet), not a directory."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file to write")
    if path.parent.is_dir() and not os.access(path.parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: cannot write in {path.parent}")
    return path


def output_dir(text: str) -> Path:
    """An argparse type: a directory the command will write into (made if missing), not a file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return path
