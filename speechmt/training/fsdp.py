"""FSDP (PyTorch's `fully_shard`, FSDP2) as a training strategy: each rank holds 1/N of the weights, gradients and
Adam state, and gathers a layer's weights only while that layer runs; for models whose weights and optimiser state
do not fit one GPU under DDP (docs/memory.md). Checkpoints stay one safetensors file: the state is gathered whole
on save (tensor by tensor, kept on rank 0 only) and each rank takes its shard of it on resume."""

from __future__ import annotations

from typing import Any, Collection

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from speechmt.ranks import is_main


def shard_units(root: nn.Module) -> list[nn.Module]:
    """The modules sharded apart from the root: every item of an nn.ModuleList (encoder and decoder layers, a
    Hugging Face model's layers) that holds parameters and is not inside another such item. Each gathers its
    weights for its own forward and frees them after."""
    units: list[nn.Module] = []
    taken: set[int] = set()
    for module in root.modules():
        if id(module) in taken or not isinstance(module, nn.ModuleList):
            continue
        for layer in module:
            if any(True for _ in layer.parameters()):
                units.append(layer)
                taken.update(id(m) for m in layer.modules())
    return units


def shard(module: nn.Module, device: torch.device) -> nn.Module:
    """`module` sharded in place over the default process group: its layers (shard_units) each a unit, the rest
    (embeddings, heads, norms) with the root, which reshards nothing after forward (it runs again at once)."""
    module.to(device)
    for unit in shard_units(module):
        fully_shard(unit)
    fully_shard(module, reshard_after_forward=False)
    return module


def reshard_all(root: nn.Module) -> None:
    """Frees every unit's gathered weights (a forward without backward, as in validation, leaves the root's
    gathered), so that the module's state dict holds the shards."""
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _whole(value: Any) -> Any:
    """A DTensor gathered whole (a collective: every rank calls it), kept on rank 0's CPU; anything else as is."""
    if isinstance(value, DTensor):
        full = value.full_tensor()
        return full.cpu() if is_main() else None
    return value


def full_state(model: nn.Module, keys: Collection[str] | None = None) -> dict[str, torch.Tensor]:
    """The model's state dict gathered whole (`keys` only, when given), on rank 0 (the other ranks get Nones)."""
    return {k: _whole(v) for k, v in model.state_dict().items() if keys is None or k in keys}


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """optimizer.state_dict() with every sharded state gathered whole: the format a DDP run saves, so either
    strategy resumes the other's checkpoints."""
    state = optimizer.state_dict()
    gathered = {i: {k: _whole(v) for k, v in s.items()} for i, s in state["state"].items()}
    return {**state, "state": gathered}


def _like(full: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """`full` laid out as `reference` is: its shard of this rank when `reference` is a DTensor (every rank holds
    `full`, so nothing is sent)."""
    if isinstance(reference, DTensor):
        return distribute_tensor(
            full.to(reference.device, reference.dtype), reference.device_mesh, reference.placements, src_data_rank=None
        )
    return full.to(reference.device)


def load_full_state(model: nn.Module, state: dict[str, torch.Tensor], strict: bool = True) -> None:
    """Loads a whole state dict (a checkpoint's) into a sharded model: each rank copies its shards."""
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state)) if strict else []
    if unknown or missing:
        raise ValueError(f"checkpoint does not fit the model: unexpected {unknown[:3]}, missing {missing[:3]}")
    with torch.no_grad():
        for k, v in state.items():
            target = own[k]
            local = target.to_local() if isinstance(target, DTensor) else target
            local.copy_(_like(v, target).to_local() if isinstance(target, DTensor) else v)


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Loads full_optimizer_state's form into an optimiser over sharded parameters: each per-parameter tensor of
    the parameter's shape is cut to this rank's shard."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded = {
        i: {
            k: _like(v, params[int(i)]) if torch.is_tensor(v) and v.shape == params[int(i)].shape else v
            for k, v in s.items()
        }
        for i, s in state["state"].items()
    }
    optimizer.load_state_dict({**state, "state": sharded})
