"""What every section of the cluster config is made of: a frozen model that refuses a field
it does not know (a misspelt setting is an error at start-up, not a default taken in
silence)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, ValidationInfo


class ConfigModel(BaseModel):
    """A section of the cluster config: frozen, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def more_than_zero(value: timedelta, info: ValidationInfo) -> timedelta:
    """A field validator (`field_validator(name)(more_than_zero)`): a duration above 0s."""
    if value <= timedelta(0):
        raise ValueError(f"{info.field_name} must be more than 0s")
    return value
