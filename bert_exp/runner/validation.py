"""Finding the config tree, and checking a composed config before any work is done.

Hydra already rejects an override of a key that does not exist. This adds the rest: a required value
left as ``???``, a key that the ``_target_`` it configures does not accept (a typo), and a value of
the wrong type for the target's annotated parameter. Each error names the full key.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from ..errors import ConfigError  # noqa: F401  (defined with the other user errors; imported from here too)
from .cpu_allocator import CHOICES as CPU_ALLOCATOR_CHOICES


# keys under ``trainer`` that the runner takes out before it instantiates Lightning's Trainer
RUNNER_TRAINER_KEYS = ("budget", "batch_ramp", "detect_nonfinite")


def _matches(value, annotation) -> bool:
    if annotation is inspect.Parameter.empty or annotation is typing.Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if value is None:
        return False
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (str, bool):
        return isinstance(value, annotation)
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (list, tuple) or annotation in (list, tuple):
        return isinstance(value, (list, tuple, ListConfig))
    if origin is dict or annotation is dict:
        return isinstance(value, (dict, DictConfig))
    if inspect.isclass(annotation):  # a config value (a primitive) cannot be, e.g., a Tensor
        return isinstance(value, annotation)
    return True  # callables, type variables...: left to the target itself


def unknown_key(full: str, siblings, owner: str | None = None) -> str:
    """The line for ``full``, a key the config (or the target ``owner`` it configures) does not have,
    with the nearest of ``siblings`` (the keys it could have been)."""
    parent, _, name = full.rpartition(".")
    close = difflib.get_close_matches(name, list(siblings), n=1)
    hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else ""
    return f"{full}: unknown key" + (f" (not a parameter of {owner})" if owner else "") + hint


def target_parameters(target_name: str) -> list[str] | None:
    """The parameters of the ``_target_`` named; None when it cannot be imported or read, or takes any
    keyword (``**kwargs``)."""
    try:
        target = get_object(target_name)
        params = inspect.signature(target.__init__ if inspect.isclass(target) else target).parameters
    except Exception:  # noqa: BLE001  reported by the checks of the composed config
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return list(params)


def _check_target(node: DictConfig, key: str, errors: list[str]) -> None:
    target_name = node.get("_target_")
    try:
        target = get_object(target_name)
    except Exception:
        errors.append(f"{key}._target_: cannot import {target_name!r}")
        return
    init = target.__init__ if inspect.isclass(target) else target
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):
        return
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # unresolvable forward references: use the annotations that are objects
        hints = {n: p.annotation for n, p in signature.parameters.items() if not isinstance(p.annotation, str)}
    params = signature.parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name in node:
        if name.startswith("_") and name.endswith("_"):
            continue
        if key == "trainer" and name in RUNNER_TRAINER_KEYS:
            continue
        if key == "trainer" and name == "precision" and OmegaConf.select(node, name) == "auto":
            continue  # resolved for the device before the Trainer is built (placement.resolve_precision)
        full = f"{key}.{name}" if key else name
        if name not in params:
            if not accepts_any:
                errors.append(unknown_key(full, params, target_name))
            continue
        value = OmegaConf.select(node, name)  # resolved
        if isinstance(value, DictConfig) and "_target_" in value:
            continue
        expected = hints.get(name, inspect.Parameter.empty)
        if not _matches(value, expected):
            source = ""
            if OmegaConf.is_interpolation(node, name):  # the key the user set is the one it refers to
                source = f" (from {node._get_node(name)._value()})"
            errors.append(f"{full}={value!r}{source}: wrong type, {target_name} expects {expected}")


def validate_config(cfg: DictConfig) -> None:
    """Raises ConfigError naming every offending key, before any work is done."""
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        raise ConfigError(f"{err.full_key}: required value is missing (set it on the command line)") from None
    except InterpolationResolutionError as err:
        # OmegaConf wraps a resolver's exception in a one-line summary: keep the resolver's words
        message = str(err).splitlines()[0].split("raised while resolving interpolation: ", 1)[-1]
        raise ConfigError(message if message.startswith(err.full_key) else f"{err.full_key}: {message}") from None
    errors: list[str] = []

    def walk(node, key: str) -> None:
        if isinstance(node, DictConfig):
            if "_target_" in node:
                _check_target(node, key, errors)
            for name in node:
                walk(node._get_node(name), f"{key}.{name}" if key else str(name))
        elif isinstance(node, ListConfig):
            for i, item in enumerate(node):
                walk(item, f"{key}[{i}]")

    walk(cfg, "")
    errors += value_problems(cfg)
    if errors:
        raise invalid_config(errors)


def invalid_config(problems: list[str]) -> ConfigError:
    """One problem on one line; several, a line each."""
    if len(problems) == 1:
        return ConfigError(f"invalid config: {problems[0]}")
    return ConfigError("invalid config:\n  " + "\n  ".join(problems))


def _select(cfg: DictConfig, key: str):
    """The configured value, else the default of the parameter in the ``_target_`` it configures."""
    value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    if value is not None or "." not in key:
        return value
    parent, name = key.rsplit(".", 1)
    target = OmegaConf.select(cfg, f"{parent}._target_", default=None)
    try:
        parameter = inspect.signature(get_object(target)).parameters.get(name) if target else None
    except Exception:  # noqa: BLE001  an unimportable target is reported by the key checks
        return None
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


def value_problems(cfg: DictConfig) -> list[str]:
    """Values of the right type that still cannot work, each naming its key (and the one it clashes with)."""
    problems = []
    for key, kind, nullable in (("global_batch_size", int, False), ("device_batch_size", int, True),
                                ("seed", int, False), ("resume_in_place", bool, False)):
        value = OmegaConf.select(cfg, key, default=None)
        if key not in cfg or (value is None and nullable):
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{key}={value!r}: wrong type, expected {kind.__name__}")
    if problems:  # the checks below do arithmetic on these
        return problems
    # pre-training's length is an instance setting; the fine-tuning data have their own
    seq_key = "data.instances.max_seq_length" if OmegaConf.select(cfg, "data.instances", default=None) is not None \
        else "data.max_seq_length"
    seq, positions = _select(cfg, seq_key), _select(cfg, "model.max_position_embeddings")
    if isinstance(seq, int) and isinstance(positions, int) and seq > positions:
        problems.append(f"{seq_key}={seq} is larger than model.max_position_embeddings={positions}: "
                        f"the model has no position embedding beyond that; lower {seq_key}")
    for key in ("global_batch_size", "device_batch_size", "data.loader.batch_size", "data.loader.eval_batch_size",
                "trainer.accumulate_grad_batches"):
        value = _select(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            problems.append(f"{key}={value}: must be a positive number")
    for key in ("model.hidden_size", "model.num_hidden_layers", "model.num_attention_heads",
                "model.intermediate_size", "model.max_position_embeddings", "data.max_seq_length",
                "data.instances.max_seq_length", "data.doc_stride", "data.max_query_length",
                "data.masking.max_predictions_per_seq",
                "data.tokenizer.vocab_size", "trainer.log_every_n_steps"):
        value = _select(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            problems.append(f"{key}={value}: must be a positive number")
    nodes = _select(cfg, "trainer.num_nodes")
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1):
        problems.append(f"trainer.num_nodes={nodes!r}: a number of machines, 1 or more")
    for key in ("optim.scheduler.warmup_steps", "optim.optimizer.weight_decay", "trainer.gradient_clip_val"):
        value = _select(cfg, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            problems.append(f"{key}={value}: must not be negative")
    for key in ("model.hidden_dropout_prob", "model.attention_probs_dropout_prob"):
        value = _select(cfg, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value < 1:
            problems.append(f"{key}={value}: a dropout probability is in [0, 1)")
    budget = _select(cfg, "trainer.budget")
    if budget is not None:
        from .budget import BudgetError, parse_budget

        try:
            parse_budget(budget)
        except BudgetError as err:
            problems.append(str(err))  # a budget that does not parse is all there is to say about it
        else:
            if _select(cfg, "optim.scheduler.warmup_steps") is not None:
                problems.append(f"trainer.budget={budget} lays the schedule over the budget, not over steps: set "
                                "optim.scheduler.warmup_steps=null and give optim.scheduler.warmup_ratio")
    allocator = _select(cfg, "cpu_allocator")
    if "cpu_allocator" in cfg and allocator not in CPU_ALLOCATOR_CHOICES:
        problems.append(f"cpu_allocator={allocator!r}: expected one of {', '.join(CPU_ALLOCATOR_CHOICES)}")
    patience = _select(cfg, "trainer.detect_nonfinite")
    if patience is not None and not isinstance(patience, bool) and (not isinstance(patience, int) or patience < 0):
        problems.append(f"trainer.detect_nonfinite={patience!r}: a number of steps (0 or false: off)")
    lr = _select(cfg, "optim.optimizer.lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr <= 0:
        problems.append(f"optim.optimizer.lr={lr}: the learning rate must be positive")
    problems += _task_problems(cfg)
    return problems


def _task_problems(cfg: DictConfig) -> list[str]:
    """Options that cannot work for the configured task."""
    problems = []
    task = OmegaConf.select(cfg, "task.name", default=None)
    limit = OmegaConf.select(cfg, "trainer.limit_val_batches", default=None)
    if task == "squad" and limit is not None and not (isinstance(limit, float) and limit == 1.0):
        problems.append(f"trainer.limit_val_batches={limit}: question answering scores whole questions, whose "
                        "windows span batches, so validation needs every batch; to validate on fewer questions "
                        "set +data.limit_val_examples=N instead")
    return problems
