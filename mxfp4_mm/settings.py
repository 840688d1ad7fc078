"""Settings read from the environment: one parser for durations, so every variable reports a bad
value the same way (the variable, what it got, the rule)."""

import math
import os


def seconds(name: str, default: float, text: str = None, positive: bool = False) -> float:
    """Seconds from `text` (default: the environment variable `name`); `default` when empty. The
    value must be >= 0 (> 0 where `positive`); "inf" means no limit. Else ValueError."""
    text = (os.environ.get(name, "") if text is None else text).strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 if positive else value >= 0):  # also nan
        rule = "> 0" if positive else ">= 0"
        raise ValueError(f"{name}={text!r}: must be a number of seconds {rule} (inf: no limit)")
    return value
