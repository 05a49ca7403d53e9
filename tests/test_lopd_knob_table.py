"""The knob table in ``lopd_train/algorithms/lopd.py``'s docstring says, per option, the reference's value and
ours; "ours" must be the option's actual default, or the table tells a reader the wrong thing (it did: the
sampling and bank rows still described study v1 after the defaults moved to the reference's)."""

from __future__ import annotations

import dataclasses
import re

from lopd_train.algorithms import lopd
from lopd_train.config import TrainConfig


def rows() -> list[tuple[str, str]]:
    lines = lopd.__doc__.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("====="))
    ours_at = [m.start() for m in re.finditer(r"=+", lines[rule])][2]
    out = []
    for line in lines[rule + 1:]:
        if line.startswith("=====") and out:
            break
        m = re.match(r"``--([a-z0-9-]+)``", line)
        if m:
            out.append((m.group(1), line[ours_at:].split()[0].strip(",`")))
    return out


def test_every_options_ours_column_is_its_default():
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    checked = 0
    for option, ours in rows():
        name = option.replace("-", "_")
        if name not in defaults:
            continue
        default = defaults[name]
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            assert float(ours) == float(default), (option, ours, default)
        else:
            assert ours == str(default), (option, ours, default)
        checked += 1
    assert checked >= 15
