"""Whether text is a decimal number as int() reads it and Slurm's tools write it: ASCII
digits only. str.isdigit() also says yes to '²' and the other digits of Unicode, which
int() refuses: a check by it lets a ValueError through where one line was meant."""

from __future__ import annotations


def only_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()
