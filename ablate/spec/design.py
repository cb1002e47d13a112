"""A sweep's `design:`: which cells of its grid run (`ablate.planning.designs` chooses them).

    design: full                                  # every cell (the default)
    design: {fractional: {resolution: 4}}         # the best two-level fraction of the fewest cells reaching IV
    design: {fractional: {cells: 16}}             # the best two-level fraction of 16 cells
    design: {one-at-a-time: {from: full}}         # a reference cell and each axis switched alone away from it
    design: {screening: plackett-burman}          # main effects of many two-level switches
    design: {fractional: {resolution: 3}, follow-up: {foldover: [attention.kind]}}   # cells added after it ran
    design: {fractional: {resolution: 4, reference_seeds: 4}}   # and the reference cell at 4 seeds: pure error

Every design's cells are cells of the full grid, with the same trial keys: a design completed later (a
fold-over, a higher resolution, `full`) trains only the cells it lacks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

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
    """A regular two-level fractional factorial over the grid's axes: the minimum-aberration design for the budget
    (`ablate.planning.fractions`). Neither `resolution` nor `cells` given: at least resolution 4."""

    resolution: Literal[3, 4, 5] | None = None
    """At least this resolution: among the fewest cells that reach it, the highest resolution, and among those the
    design of minimum aberration. 3: main effects clear of each other (confounded with two-factor interactions);
    4: main effects clear of two-factor interactions too (those confounded with each other); 5: two-factor
    interactions clear of each other. With `cells`, the resolution the design of that size must reach."""
    cells: PositiveInt | None = None
    """The best design of this many cells (a power of two): its highest resolution, then minimum aberration."""
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
    """Plackett-Burman (pyDOE's `pbdesign`): n switches in the multiple of 4 above n cells, main effects only; the
    unused columns are dummy contrasts that measure the error, and each main effect is partly confounded with
    two-factor interactions of the other switches (`ablate.planning.screens`)."""


class FollowUp(Strict):
    """Cells added to a fractional or screening design after it ran (`ablate.planning.followup`): one of its keys.
    They are cells of the full grid, so a launch trains only those the design lacks, and the report reads the
    design and its follow-up as one design."""

    foldover: Literal["all"] | list[str] | None = None
    """The design's mirror image: `all` reverses every switch (main effects clear of two-factor interactions);
    a list of axes reverses those only (each clear of every interaction, its two-factor ones included)."""
    fractional: Fractional | None = None
    """Another fraction of the grid (a higher resolution), its cells added to the design's."""

    @model_validator(mode="after")
    def _one(self) -> FollowUp:
        if (self.foldover is None) == (self.fractional is None):
            raise ValueError("expected one of foldover (all, or a list of axes), fractional")
        if isinstance(self.foldover, list) and not self.foldover:
            raise ValueError("foldover: expected `all` or at least one axis")
        return self


class Design(Strict):
    """The `design:` mapping: one of its keys, and a two-level design's `follow-up`."""

    fractional: Fractional | None = None
    one_at_a_time: OneAtATime | None = Field(None, alias="one-at-a-time")
    screening: Screening | None = None
    follow_up: list[FollowUp] = Field([], alias="follow-up")
    """Follow-ups, in the order they were added (one mapping is a list of one): each adds its cells to the
    design's and the earlier follow-ups' (a fold-over folds all of them)."""

    @field_validator("follow_up", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

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
        if self.follow_up and self.one_at_a_time is not None:
            raise ValueError("follow-up: adds cells to a fractional or screening design; a one-at-a-time design is "
                             "followed up by `design: full` or a fraction")  # fmt: skip
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
