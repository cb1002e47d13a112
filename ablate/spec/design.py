"""A sweep's `design:`: which cells of its grid run (`ablate.planning.designs` chooses them).

    design: full                                  # every cell (the default)
    design: {fractional: {resolution: 4}}         # the smallest regular two-level fraction of that resolution
    design: {one-at-a-time: {from: full}}         # a reference cell and each axis switched alone away from it
    design: {screening: plackett-burman}          # main effects of many two-level switches
    design: {fractional: {resolution: 4, reference_seeds: 4}}   # and the reference cell at 4 seeds: pure error

Every design's cells are cells of the full grid, with the same trial keys: a design completed later (a
fold-over, a higher resolution, `full`) trains only the cells it lacks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ablate.components import Strict

Assignment = dict[str, Any]


class Crossed(Strict):
    """What every design shares: the axes it leaves whole."""

    crossed: list[str] = []
    """Axes kept full (a backbone, a dataset): the design is run at each of their values, and analysed there."""


class TwoLevel(Crossed):
    """What a fractional and a screening design share: how the report measures seed noise."""

    reference_seeds: int | None = Field(None, ge=2)
    """For a design of one seed: the reference cell (the baseline) runs at this many seeds, the sweep's and the
    first unused ones; every other cell at the sweep's one. Their spread is pure error: each effect is tested
    against it (a t-test on its degrees of freedom, reference_seeds - 1) instead of by Lenth's effect sparsity,
    which a one-seed design otherwise needs. The extra trials are the full grid's at those seeds (their keys)."""


class Fractional(TwoLevel):
    """A regular two-level fractional factorial over the grid's axes (pyDOE's `fracfact_by_res`)."""

    resolution: Literal[3, 4, 5] = 4
    """3: main effects clear of each other (confounded with two-factor interactions); 4: main effects clear of
    two-factor interactions too (those confounded in pairs); 5: two-factor interactions clear of each other."""
    foldover: bool = False
    """Add the fraction's mirror image (every switch reversed): a resolution 3 fraction becomes 4."""


class OneAtATime(Crossed):
    """A reference cell and each axis moved alone to each of its other values, as papers' ablation tables are."""

    reference: Literal["full", "baseline"] | Assignment = Field("baseline", alias="from")
    """`full`: every boolean switch at `true`, every other axis at its last listed value (list a knob's levels
    up to the full model's: the design removes one component at a time); `baseline`: the sweep's baseline (each
    component added alone); or an assignment naming one cell of the grid."""


class Screening(TwoLevel):
    """A screening design for many two-level switches: main effects only, in few cells."""

    method: Literal["plackett-burman"] = "plackett-burman"
    """Plackett-Burman (pyDOE's `pbdesign`): n switches in the multiple of 4 above n cells; each main effect is
    partly confounded with two-factor interactions of the other switches."""


class Design(Strict):
    """The `design:` mapping: one of its keys."""

    fractional: Fractional | None = None
    one_at_a_time: OneAtATime | None = Field(None, alias="one-at-a-time")
    screening: Screening | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """`screening: plackett-burman` is `screening: {method: plackett-burman}`."""
        if isinstance(value, dict) and isinstance(value.get("screening"), str):
            return {**value, "screening": {"method": value["screening"]}}
        return value

    @model_validator(mode="after")
    def _one(self) -> Design:
        given = [k for k in ("fractional", "one-at-a-time", "screening") if self.chosen_of(k) is not None]
        if len(given) != 1:
            raise ValueError(f"expected one of fractional, one-at-a-time, screening (or `design: full`); got {given}")
        return self

    def chosen_of(self, kind: str) -> Fractional | OneAtATime | Screening | None:
        return {"fractional": self.fractional, "one-at-a-time": self.one_at_a_time, "screening": self.screening}[kind]

    @property
    def kind(self) -> str:
        """fractional, one-at-a-time or screening."""
        return next(k for k in ("fractional", "one-at-a-time", "screening") if self.chosen_of(k) is not None)

    @property
    def chosen(self) -> Fractional | OneAtATime | Screening:
        found = self.chosen_of(self.kind)
        assert found is not None
        return found
