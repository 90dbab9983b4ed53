"""What the stages of one mover share: its nodes, gates, settings, progress and budget.

A `Mover` builds one `MoveParts` and hands it to each of its stages (`verification.Verifier`,
`sync.ChangeSync`, `steps.MoveSteps`); a stage subclasses `MoveStage`, which reads the parts
as its own attributes, and takes in its constructor only what it alone needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dag_common.store_api import NodeStore
from mrs_client.body_budget import BodyBudget
from mrs_client.end_calls import EndCalls
from mrs_client.gates import Gates
from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import MoveSettings


@dataclass(frozen=True)
class MoveParts:
    """One mover's parts, as its stages use them."""

    nodes: NodeStore
    gates: Gates
    calls: EndCalls
    settings: MoveSettings
    max_item_size: Callable[[str], int]  # database -> its max_item_size (the config's)
    progress: Callable[[MoveRecord, str], None]
    budget: BodyBudget


class MoveStage:
    """A stage of a mover, over the mover's parts."""

    def __init__(self, parts: MoveParts) -> None:
        self.nodes = parts.nodes
        self.gates = parts.gates
        self._calls = parts.calls
        self._call = parts.calls.call
        self.settings = parts.settings
        self.max_item_size = parts.max_item_size
        self._progress = parts.progress
        self.budget = parts.budget
