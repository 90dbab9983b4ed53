"""What every section of the cluster config is made of: a frozen model that refuses a field
it does not know (a misspelt setting is an error at start-up, not a default taken in
silence)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """A section of the cluster config: frozen, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
