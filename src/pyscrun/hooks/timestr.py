"""slurm.time_str2mins: Slurm's time_str2mins (src/common/parse_time.c), result for result.

Scripts compare what this returns with what Slurm itself computes (time limits), so the
C code's quirks are kept on purpose: its validity check, sscanf's left-to-right
matching, seconds rounded up to a whole minute with C's truncating division, and the
sentinels INFINITE and NO_VAL seen through a C int (-1 and -2).
"""

from __future__ import annotations

INFINITE = -1  # 0xffffffff as the C int Slurm returns
NO_VAL = -2  # 0xfffffffe likewise: the string is not a time


def _int32(value: int) -> int:
    """value wrapped to a C int, as the C arithmetic overflows on this machine."""
    return (value + 2**31) % 2**32 - 2**31


def _valid_timespec(text: str) -> bool:
    """_is_valid_timespec: digits, at most one '-' (before any ':') and two ':'."""
    digit = dash = colon = 0
    in_digits = False
    for char in text:
        if "0" <= char <= "9":
            if not in_digits:
                digit += 1
                in_digits = True
        elif char == "-":
            in_digits = False
            dash += 1
            if colon:
                return False
        elif char == ":":
            in_digits = False
            colon += 1
        else:
            return False
    if not digit or dash > 1 or colon > 2:
        return False
    # Enough numbers for the separators: "1-2:3" needs 3, "1:2:3" needs 3, and so on.
    needed = {1: 2, 2: 3} if not dash else {1: 3, 2: 4}
    return digit >= needed.get(colon, 0)


def _sscanf_ints(text: str, separators: str) -> list[int]:
    """sscanf(text, "%d<s0>%d<s1>%d..."): the integers matched before the first mismatch."""
    values: list[int] = []
    pos = 0
    for index in range(len(separators) + 1):
        if index:
            if pos >= len(text) or text[pos] != separators[index - 1]:
                break
            pos += 1
        start = pos
        if pos < len(text) and text[pos] in "+-":
            pos += 1
        digits_start = pos
        while pos < len(text) and "0" <= text[pos] <= "9":
            pos += 1
        if pos == digits_start:
            break
        number = int(text[start:pos])
        # strtol clamps to a 64-bit long, which sscanf then stores into an int.
        number = max(-(2**63), min(2**63 - 1, number))
        values.append(_int32(number))
    return values


def time_str2secs(text: str | None) -> int:
    if not text:
        return NO_VAL
    if text.lower() in ("-1", "infinite", "unlimited"):
        return INFINITE
    if not _valid_timespec(text):
        return NO_VAL
    days = hours = minutes = seconds = 0
    if "-" in text:
        # days-[hours[:minutes[:seconds]]]
        found = _sscanf_ints(text, "-::")
        days, hours, minutes, seconds = found + [0] * (4 - len(found))
        days, hours, minutes = _int32(days * 86400), _int32(hours * 3600), _int32(minutes * 60)
    else:
        found = _sscanf_ints(text, "::")
        if len(found) == 3:
            hours, minutes, seconds = _int32(found[0] * 3600), _int32(found[1] * 60), found[2]
        else:
            # minutes[:seconds]
            found += [0] * (2 - len(found))
            minutes, seconds = _int32(found[0] * 60), found[1]
    return _int32(days + hours + minutes + seconds)


def time_str2mins(text: str | None) -> int:
    """Minutes in text, seconds rounded up; INFINITE (-1) or NO_VAL (-2) as Slurm gives."""
    secs = time_str2secs(text)
    if secs in (INFINITE, NO_VAL):
        return secs
    # ROUNDUP(secs, 60) in C: (secs + 59) / 60, the division truncating toward zero.
    total = _int32(secs + 59)
    return int(total / 60) if total >= 0 else -((-total) // 60)
