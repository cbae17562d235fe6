"""What `ctxprec score` says about an input's keys: which aliases it read, which names of one field
clashed, which keys it does not know. Each is said once per name, at the first line that shows it,
so a file of a million rows with an extra column gives one line on stderr, not a million."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable

from ctxprec.scorer.events import ALIAS_OF, EVENT_FIELDS, KeyNotes

PREFIX = "ctxprec score"


@dataclass
class KeyWarnings:
    write: Callable[[str], None]
    noun: str = "key"  # "column" for CSV
    _said: set[tuple[str, ...]] = field(default_factory=set)

    def __call__(self, line_no: int, notes: KeyNotes) -> None:
        for alias, name in notes.aliases:
            self._once(("alias", alias), f"{PREFIX}: reading {self.noun} '{alias}' as '{name}' (from line {line_no})")
        for conflict in notes.conflicts:
            self._once(
                ("conflict", conflict.event_field, conflict.used, *conflict.ignored),
                f"{PREFIX}: warning: line {line_no}: {conflict.describe()}; using '{conflict.used}' "
                "(said once; --strict makes it an error)",
            )
        for key in notes.unknown:
            guess = difflib.get_close_matches(key, [*EVENT_FIELDS, *ALIAS_OF], n=1, cutoff=0.75)
            hint = f"; did you mean '{guess[0]}'?" if guess else ""
            self._once(
                ("unknown", key),
                f"{PREFIX}: warning: line {line_no}: unknown {self.noun} '{key}' ignored{hint} "
                "(said once per name; --strict makes it an error)",
            )

    def note(self, text: str) -> None:
        """A remark about the file as a whole (its header), said as it comes."""
        self.write(f"{PREFIX}: warning: {text}\n")

    def _once(self, key: tuple[str, ...], text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.write(text + "\n")
