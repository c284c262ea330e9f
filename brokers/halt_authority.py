"""Who may pull and who may release the halt switch (docs/design.md §8): holder kinds and their ranks.

Owns the authority rules of the halt switch of both modes (brokers/halt.py, cluster/halt.py); the
stores apply them inside the transaction that changes the row, so a check and its change cannot be
separated.  Every halt records its *holder*: a kind and a name (``halted_by``).

=============  ===================================  ====  ===========  ==========================
kind           who                                  rank  lifts        cancel-open cancels
=============  ===================================  ====  ===========  ==========================
``operator``   ``chartgen trading`` (``cli:<user>``),  3  any halt     every principal's orders
               the dashboard (``dashboard:<user>``)
``protection`` an automatic protection               3  its own      every principal's orders
               (``protection:<name>``)
``admin``      an MCP token with ``admin``           2  any halt     every principal's orders
               (``mcp:<principal>``)
``principal``  an MCP token with ``trade``           1  its own      its own orders and lists
               (``mcp:<principal>``)
=============  ===================================  ====  ===========  ==========================

- **Halting** is always allowed to anyone with ``trade``: pulling the brake never needs rank.
- **Lifting** (resume): the halt's setter (same name), or an authority that lifts any halt (the
  operator, an admin token).  So a halt of the operator or a protection is lifted only by the
  operator or an admin token; a principal's only by that principal, an admin or the operator.
  A refusal is :class:`HaltRefused`, naming the holder and how to lift its halt.
- **A halt while halted** takes the holder over only when the new authority ranks at least as high
  as the holder *and* could lift the holder's halt (:meth:`HaltAuthority.takes_over`); otherwise the
  holder (and its reason) stays and the new halt changes nothing but its own cancel-open.  So no
  one gains a lift by halting over another's halt (principal B cannot take over A's halt, then
  resume it), and an admin halting over the operator's halt leaves the operator as the holder.
- A holder kind read from the database that this code does not know (a newer version's) is
  treated as the operator's: only the operator or an admin token lifts that halt (fails closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class HolderKind(StrEnum):
    """The kinds of authority that set or lift a halt (stored as ``holder_kind``)."""

    OPERATOR = "operator"
    PROTECTION = "protection"
    ADMIN = "admin"
    PRINCIPAL = "principal"


RANK: dict[HolderKind, int] = {
    HolderKind.PRINCIPAL: 1,
    HolderKind.ADMIN: 2,
    HolderKind.OPERATOR: 3,
    HolderKind.PROTECTION: 3,
}
LIFTS_ANY = frozenset({HolderKind.OPERATOR, HolderKind.ADMIN})
"""Kinds that may lift any halt (everyone else lifts only its own)."""
CANCELS_EVERYONES = frozenset({HolderKind.OPERATOR, HolderKind.ADMIN, HolderKind.PROTECTION})
"""Kinds whose cancel-open cancels every principal's open orders (a principal's cancels its own)."""

OPERATOR_RESUME = "the operator (`chartgen trading resume` on a single node, or Resume on the dashboard)"
ADMIN_RESUME = 'an admin token (halt_trading {"resume": true})'


@dataclass(frozen=True, slots=True)
class HaltAuthority:
    """Who halts or resumes: a :class:`HolderKind` and the name recorded as ``halted_by``.

    ``principal`` is the MCP principal of a token authority (whose orders its cancel-open cancels)."""

    kind: HolderKind
    name: str
    principal: str | None = None

    @classmethod
    def operator(cls, via: str, user: str | None = None) -> HaltAuthority:
        """The operator through ``via`` (``cli``, ``dashboard``), as ``<via>:<user>``."""
        return cls(HolderKind.OPERATOR, f"{via}:{user}" if user else via)

    @classmethod
    def token(cls, principal: str, *, admin: bool) -> HaltAuthority:
        """An MCP client: ``admin`` when its token has the ``admin`` scope, else a principal."""
        return cls(HolderKind.ADMIN if admin else HolderKind.PRINCIPAL, f"mcp:{principal}", principal)

    @classmethod
    def protection(cls, name: str) -> HaltAuthority:
        """An automatic protection (e.g. ``max_drawdown``), with the operator's rank."""
        return cls(HolderKind.PROTECTION, f"protection:{name}")

    @classmethod
    def holder(cls, kind: str | None, name: str | None) -> HaltAuthority:
        """The holder recorded in a halt row.  A kind this code does not know (or none, on a row
        halted before holders were recorded and not backfilled) ranks as the operator."""
        try:
            known = HolderKind(kind) if kind is not None else HolderKind.OPERATOR
        except ValueError:
            known = HolderKind.OPERATOR
        principal = name[4:] if name and name.startswith("mcp:") else None
        return cls(known, name or "?", principal)

    @property
    def rank(self) -> int:
        return RANK[self.kind]

    @property
    def cancel_owner(self) -> str | None:
        """Whose open orders this authority's cancel-open cancels: None for everyone's, else its
        principal.  A token authority without a principal cannot be built here (fail closed)."""
        if self.kind in CANCELS_EVERYONES:
            return None
        if self.principal is None:
            raise ValueError(f"{self.name}: a principal's cancel-open needs its principal")
        return self.principal

    def may_lift(self, holder: HaltAuthority) -> bool:
        """Whether this authority may resume a halt held by ``holder``."""
        return self.kind in LIFTS_ANY or self.name == holder.name

    def takes_over(self, holder: HaltAuthority) -> bool:
        """Whether a halt by this authority replaces ``holder`` as the holder of a halt in force."""
        return self.name == holder.name or (self.rank >= holder.rank and self.may_lift(holder))

    def describe(self) -> str:
        """The holder in words, e.g. ``the operator (cli:alice)``, ``token mcp:tok_a``."""
        if self.kind is HolderKind.OPERATOR:
            return f"the operator ({self.name})"
        if self.kind is HolderKind.PROTECTION:
            return f"a protection with the operator's authority ({self.name})"
        return f"{'admin token' if self.kind is HolderKind.ADMIN else 'token'} {self.name}"

    def lifted_by(self) -> str:
        """Who may lift a halt this authority holds, in words (the refusal's fix)."""
        if self.kind in (HolderKind.OPERATOR, HolderKind.PROTECTION):
            return f"only {OPERATOR_RESUME} or {ADMIN_RESUME} lifts it"
        if self.kind is HolderKind.ADMIN:
            return f"{self.name} itself, another {ADMIN_RESUME} or {OPERATOR_RESUME} lifts it"
        return f'{self.name} itself (halt_trading {{"resume": true}}), {ADMIN_RESUME} or {OPERATOR_RESUME} lifts it'


class HaltRefused(Exception):
    """A resume refused: ``by`` may not lift the halt ``holder`` holds (nothing was changed)."""

    def __init__(self, holder: HaltAuthority, by: HaltAuthority) -> None:
        self.holder = holder
        self.by = by
        super().__init__(
            f"trading stays halted: it was halted by {holder.describe()}, and {by.name} may lift only a halt"
            f" it set itself; {holder.lifted_by()}"
        )
