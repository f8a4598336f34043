"""Which checkpoints a directory keeps: small frozen policies the user can
combine. Pure: no files.

>>> policy = KeepLatest(2) | KeepMultiples(10)
>>> policy.retired([5, 10, 15, 20, 25], newest=25)
[5, 15]

* :class:`KeepLatest` ``(n)``, ``keep=n``: the ``n`` newest checkpoints;
* :class:`KeepMultiples` ``(k)``, ``keep_every=k``: every checkpoint whose
  step is a multiple of ``k``;
* :class:`KeepAny` ``(a, b, ...)``, ``a | b``: what any of them keeps.

Whatever the policy, retention only considers the steps up to ``newest``
(the checkpoint just written and verified) and always keeps that one: a
newer file than the one that triggered retention is never touched, a
checkpoint that failed never retires the good ones before it (retention
runs only after a verified write), and there is always a checkpoint to
resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .option_checks import bad_option, combined, whole


class KeepPolicy:
    """Which checkpoint steps stay: a frozen value retention asks after
    every verified write. Combine policies with ``|`` (:class:`KeepAny`)."""

    def keeps(self, steps: list[int]) -> set[int]:
        """Of ``steps`` (ascending, none newer than the one just verified),
        those this policy keeps."""
        raise NotImplementedError

    def kept(self, steps, newest: int) -> list[int]:
        """The steps of ``steps`` that stay once ``newest`` is written and
        verified, ascending: those the policy keeps, ``newest`` itself and
        any newer one."""
        candidates = sorted(s for s in steps if s <= newest)
        keep = self.keeps(candidates) | set(candidates[-1:])
        keep |= {s for s in steps if s > newest}
        return sorted(keep)

    def retired(self, steps, newest: int) -> list[int]:
        """The steps of ``steps`` to delete, ascending."""
        kept = set(self.kept(steps, newest))
        return sorted(s for s in steps if s not in kept)

    def __or__(self, other: KeepPolicy) -> KeepAny:
        return KeepAny(self, other)


@dataclass(frozen=True)
class KeepLatest(KeepPolicy):
    """The ``n`` (>= 1) newest checkpoints."""

    n: int = 3

    def __post_init__(self):
        whole("KeepLatest(n)", self.n, least=1)

    def keeps(self, steps: list[int]) -> set[int]:
        return set(steps[-self.n :])

    def __str__(self) -> str:
        return f"the newest {self.n}"


@dataclass(frozen=True)
class KeepMultiples(KeepPolicy):
    """Every checkpoint whose step is a multiple of ``k`` (>= 1)."""

    k: int

    def __post_init__(self):
        whole("KeepMultiples(k)", self.k, least=1)

    def keeps(self, steps: list[int]) -> set[int]:
        return {s for s in steps if s % self.k == 0}

    def __str__(self) -> str:
        return f"every multiple of {self.k}"


@dataclass(frozen=True, init=False)
class KeepAny(KeepPolicy):
    """What any of ``policies`` keeps."""

    policies: tuple[KeepPolicy, ...] = field()

    def __init__(self, *policies: KeepPolicy):
        expected = "keep policies (KeepLatest, KeepMultiples)"
        object.__setattr__(self, "policies", combined("KeepAny(...)", policies, KeepPolicy, expected))

    def keeps(self, steps: list[int]) -> set[int]:
        return set().union(*(p.keeps(steps) for p in self.policies))

    def __str__(self) -> str:
        return " and ".join(map(str, self.policies))


def parse_keep(keep, keep_every=None) -> KeepPolicy:
    """The Checkpoint's ``keep`` and ``keep_every`` as one policy: ``keep`` a
    :class:`KeepPolicy` or a number of newest checkpoints (>= 1, as
    ``int(keep)``), and with ``keep_every`` (None or 0: none) the
    multiples of it too; ValueError otherwise."""
    if isinstance(keep, KeepPolicy):
        policy = keep
    else:
        try:
            count = int(keep)
        except (TypeError, ValueError):
            raise bad_option("keep", "a number of checkpoints >= 1 or a keep policy", keep) from None
        if count < 1:
            raise bad_option("keep", "a number of checkpoints >= 1 or a keep policy", keep)
        policy = KeepLatest(count)
    if not keep_every:  # None or 0: no multiples kept besides the newest
        return policy
    if isinstance(keep_every, bool) or not isinstance(keep_every, int) or keep_every < 1:
        raise bad_option("keep_every", "an int >= 1 or None", keep_every)
    return policy | KeepMultiples(keep_every)
