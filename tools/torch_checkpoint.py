#!/usr/bin/env python3
"""Reads and writes stepjit checkpoints (safetensors) from PyTorch.

A stepjit checkpoint (stepjit::SaveCheckpoint, docs/checkpoints.md) is one
safetensors file:

  model.<name>                   the model's state_dict() (PyTorch's names)
  optimizer.state.<i>.<slot>     optimizer state of parameter i (its index in
                                 model.parameters()): step, exp_avg,
                                 exp_avg_sq (AdamW) or momentum_buffer (SGD)
  scaler.scale, scaler._growth_tracker
                                 0-d f32 tensors of the GradScaler
  __metadata__: format="pt", optimizer.type ("AdamW" | "SGD"),
      optimizer.param_groups (JSON: PyTorch's param_groups, "params" holding
      parameter indices), scaler.growth_factor, scaler.backoff_factor,
      scaler.growth_interval (numbers as text)

  from torch_checkpoint import load_checkpoint, save_checkpoint
  load_checkpoint("run.safetensors", model, optimizer, scaler)   # into torch
  save_checkpoint("run.safetensors", model, optimizer, scaler)   # for stepjit

Needs torch and safetensors.
"""
import json

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def read(path):
    """(tensors, metadata) of a safetensors file."""
    with safe_open(path, framework="pt", device="cpu") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


def _part(tensors, metadata, prefix):
    n = len(prefix)
    return ({k[n:]: v for k, v in tensors.items() if k.startswith(prefix)},
            {k[n:]: v for k, v in metadata.items() if k.startswith(prefix)})


def optimizer_state_dict(optimizer, tensors, metadata):
    """A torch optimizer state dict from the "optimizer." part of a file."""
    saved_groups = json.loads(metadata["param_groups"])
    sd = optimizer.state_dict()
    if len(saved_groups) != len(sd["param_groups"]):
        raise ValueError(f"the file has {len(saved_groups)} param groups, "
                         f"the optimizer {len(sd['param_groups'])}")
    for group, saved in zip(sd["param_groups"], saved_groups):
        if group["params"] != saved["params"]:
            raise ValueError(f"param group params {saved['params']} in the file, "
                             f"{group['params']} in the optimizer")
        for key, value in saved.items():
            if key != "params":
                group[key] = tuple(value) if key == "betas" else value
    state = {}
    for name, t in tensors.items():
        _, index, slot = name.split(".")
        state.setdefault(int(index), {})[slot] = t
    sd["state"] = state
    return sd


def load_checkpoint(path, model, optimizer=None, scaler=None):
    """Loads a stepjit checkpoint into torch objects (strict)."""
    tensors, metadata = read(path)
    model.load_state_dict(_part(tensors, metadata, "model.")[0])
    if optimizer is not None:
        t, m = _part(tensors, metadata, "optimizer.")
        if m.get("type", type(optimizer).__name__) != type(optimizer).__name__:
            raise ValueError(f"the file holds {m['type']} state, the optimizer is "
                             f"{type(optimizer).__name__}")
        optimizer.load_state_dict(optimizer_state_dict(optimizer, t, m))
    if scaler is not None:
        t, m = _part(tensors, metadata, "scaler.")
        scaler.load_state_dict({
            "scale": float(t["scale"]),
            "_growth_tracker": int(t["_growth_tracker"]),
            "growth_factor": float(m["growth_factor"]),
            "backoff_factor": float(m["backoff_factor"]),
            "growth_interval": int(m["growth_interval"]),
        })


def save_checkpoint(path, model, optimizer=None, scaler=None):
    """Writes torch objects as a stepjit checkpoint."""
    tensors = {f"model.{k}": v.detach().contiguous().cpu()
               for k, v in model.state_dict().items()}
    metadata = {"format": "pt"}
    if optimizer is not None:
        sd = optimizer.state_dict()
        for index, slots in sd["state"].items():
            for slot, value in slots.items():
                if value is None:
                    continue
                value = torch.as_tensor(value, dtype=torch.float32) if slot == "step" else value
                tensors[f"optimizer.state.{index}.{slot}"] = value.detach().contiguous().cpu()
        metadata["optimizer.type"] = type(optimizer).__name__
        metadata["optimizer.param_groups"] = json.dumps(sd["param_groups"])
    if scaler is not None and scaler.is_enabled():
        sd = scaler.state_dict()
        tensors["scaler.scale"] = torch.tensor(float(sd["scale"]), dtype=torch.float32)
        tensors["scaler._growth_tracker"] = torch.tensor(float(sd["_growth_tracker"]),
                                                         dtype=torch.float32)
        for key in ("growth_factor", "backoff_factor", "growth_interval"):
            metadata[f"scaler.{key}"] = repr(sd[key])
    save_file(tensors, path, metadata=metadata)
