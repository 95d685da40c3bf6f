"""The continue commits one journal client stored: what lets its next claim skip the tail read.

A worker that commits iteration ``i - 1`` of a step with ``step.continue`` knows what the commit
is and at which sequence the server stored it: the server's ack said so (its fenced writer
tells this memory, ``_fencing``).
The engine's next task for that step names the same sequence (``journal_seq``), so when the
same client is handed iteration ``i`` it already knows the record a tail read would most likely
return. ``_open`` then claims fenced on that sequence without reading first (the *predicted
claim*, argued there); this module only remembers.

What is remembered is a fact that never changes: the message stored at a sequence of a subject
is immutable, so an entry cannot go stale, it can only stop being the tail (and then the claim
fenced on it is refused, which is safe). Bounded by :data:`KNOWN_COMMITS_MAX_SUBJECTS`, the
oldest dropped first; owned by one client (no global state), used from one Trio thread.
"""

from __future__ import annotations

from typing import Final, final

from dagnats_trio.protocol import CommitAction, CommitRecord

from ._replay import Entry

#: Journal subjects whose last continue commit one client remembers. A hit needs the entry of a
#: step the client committed last, so this covers that many agent runs in flight per worker
#: (well above a worker's usual concurrency); a miss costs only the tail read it would have
#: made anyway. Each entry holds one commit's state, which the handler held anyway while its
#: iteration ran.
KNOWN_COMMITS_MAX_SUBJECTS: Final = 256


@final
class KnownCommits:
    """The last continue commit this client stored on each journal subject, by subject."""

    def __init__(self, max_subjects: int = KNOWN_COMMITS_MAX_SUBJECTS) -> None:
        if isinstance(max_subjects, bool) or not isinstance(max_subjects, int) or max_subjects < 1:
            raise ValueError(f"max_subjects must be an integer >= 1, got {max_subjects!r}")
        self._max = max_subjects
        self._by_subject: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._by_subject)

    def stored(self, subject: str, seq: int, commit: CommitRecord) -> None:
        """The server stored ``commit`` at ``seq`` of ``subject`` (its ack said so). Only a
        continue commit is the base of a next iteration; any other commit ends what this client
        knows of the subject."""
        self._by_subject.pop(subject, None)
        if commit.action is not CommitAction.CONTINUE:
            return
        self._by_subject[subject] = (seq, commit)
        if len(self._by_subject) > self._max:
            del self._by_subject[next(iter(self._by_subject))]

    def commit_at(self, subject: str, seq: int) -> Entry | None:
        """The continue commit this client stored at ``seq`` of ``subject``, if it remembers
        one there."""
        entry = self._by_subject.get(subject)
        return entry if entry is not None and entry[0] == seq else None

    def knows(self, subject: str) -> bool:
        """True when this client stored a continue commit on ``subject`` (so it is not empty)."""
        return subject in self._by_subject
