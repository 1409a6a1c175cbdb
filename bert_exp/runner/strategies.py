"""Lightning strategies that need Python objects a YAML file cannot name."""

from __future__ import annotations

from typing import Literal

from lightning.pytorch.strategies import FSDPStrategy

from ..model.modeling import BertLayer


def fsdp(sharding_strategy: str = "FULL_SHARD", activation_checkpointing: bool = False,
         state_dict_type: Literal["full", "sharded"] = "full", cpu_offload: bool = False) -> FSDPStrategy:
    """FSDP with each encoder layer as one shard unit (the unit that is gathered, run and freed)."""
    return FSDPStrategy(
        auto_wrap_policy={BertLayer},
        activation_checkpointing_policy={BertLayer} if activation_checkpointing else None,
        sharding_strategy=sharding_strategy,
        state_dict_type=state_dict_type,
        cpu_offload=cpu_offload,
    )
