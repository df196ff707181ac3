"""The confidence scores that can pick a row's teacher: one list for options, help texts and errors."""

from __future__ import annotations

import typing
from typing import Literal

Score = Literal["auto", "mc-dropout", "entropy", "max-prob", "energy", "rmd", "prototype", "rmd+prototype"]
SCORES: tuple[str, ...] = typing.get_args(Score)
PROTOTYPE_SCORES = ("prototype", "rmd+prototype")  # need labelled text for every label (kamalcli/probe/prototypes.py)
RMD_SCORES = ("rmd", "rmd+prototype")  # read the teachers' RMD fits
