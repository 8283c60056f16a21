"""muP, the maximal update parametrisation (Yang & Hu 2021; Tensor Programs V, Yang et al. 2022): learning rates
and initialisations tuned on a narrow model that stay right on a wide one (docs/mup.md).

Built from the model's own parameter shapes, with no list of names: the model is compared with the same
architecture at the base width (its GPTConfig with model_dim = --mup_base_width and num_heads = --mup_base_heads,
built on the meta device), and each parameter's role follows from which of its dimensions grow with the width
(a weight is (..., fan_out, fan_in): nn.Linear's layout; leading dimensions stack matrices, as model.py's qkv_w):

    matrix-like  its fan-in (last dim) and an output dim grow: hidden weights. Adam LR x 1/m and init std x
                 1/sqrt(m) against the base's, m = fan_in / base fan_in
    vector-like  only one side grows: embeddings, the LM head (tied or not), biases, norm weights: as at the base
    scalar-like  nothing grows: as at the base

Muon's hidden-matrix updates are orthogonalised (spectral norm ~1) and scaled by sqrt(max(1, rows/cols)), a
function of the aspect ratio only: at a fixed aspect ratio they move the activations by a width-independent amount
already (the spectral condition of Yang, Simon & Bernstein 2023; nanochat PR #644), so Muon keeps its LR and its
shape factor; the multipliers here are the Adam ones.

The forward's multipliers travel with the checkpoint, so they live in the model module (the hook: GPTConfig fields
mup_base_width and mup_base_heads, None for the standard parametrisation): logits x base_width / model_dim, and the
attention scale c / head_dim with c making it the standard one at the base's head dim. At the base width every
multiplier is 1 and the run is the standard one, bit for bit.
"""
import dataclasses
import math
from typing import NamedTuple

import torch
import torch.utils._device

from gptlab.core.errors import UserError

HOOK_FIELDS = ("mup_base_width", "mup_base_heads")  # the GPTConfig fields a module needs for --mup
# init: a module's own init already follows 1/sqrt(fan_in) (or not at all) when the measured std ratio is within
# this factor of it: the widths differ by 2x or more (--mup_base_width divides --model_dim), so the two cases are
# sqrt(2) = 1.41 or more apart, and the std of a random matrix of >= 64 entries is measured within a few percent
_SAME_STD = 1.12


class Multipliers(NamedTuple):
    role: str  # "matrix", "vector" or "scalar"
    fan_in_mult: float  # fan_in / the base's (1 for vectors and scalars)
    adam_lr: float  # multiplies the parameter's Adam learning rate
    init_std: float  # multiplies the std the module's init gives at the base shape


def add_flags(parser):
    g = parser.add_argument_group("muP (docs/mup.md)")
    g.add_argument("--mup", action="store_true", default=None,
                   help="maximal update parametrisation: learning rates and init tuned at --mup_base_width transfer "
                        "to this width")
    g.add_argument("--mup_base_width", type=int, default=None,
                   help="--mup: the model_dim the hyperparameters were tuned at (divides --model_dim)")
    g.add_argument("--mup_base_heads", type=int, default=None,
                   help="--mup: the base model's attention heads (default: --num_heads; the attention scale's "
                        "reference head dim is mup_base_width / mup_base_heads)")


def multipliers_for(shape, base_shape):
    """The Multipliers of a parameter of `shape` whose base-width counterpart has `base_shape`."""
    shape, base_shape = tuple(shape), tuple(base_shape)
    if len(shape) != len(base_shape):
        raise ValueError(f"a parameter of shape {shape} has shape {base_shape} at the base width")
    grows = [s != b for s, b in zip(shape, base_shape)]
    if not any(grows):
        return Multipliers("scalar", 1.0, 1.0, 1.0)
    if len(shape) >= 2 and grows[-1] and any(grows[:-1]):
        m = shape[-1] / base_shape[-1]
        return Multipliers("matrix", m, 1 / m, m ** -0.5)
    return Multipliers("vector", 1.0, 1.0, 1.0)


def _init_fields(config):
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}


def base_config(config):
    """The base model's GPTConfig: `config` (a muP one) at mup_base_width and mup_base_heads (a head_dim field
    derived again)."""
    fields = dict(_init_fields(config), model_dim=config.mup_base_width, num_heads=config.mup_base_heads)
    if "head_dim" in fields:
        fields["head_dim"] = None
    return type(config)(**fields)


def resolve(args, module):
    """Check the muP flags against the architecture (after its fields have their values); --mup_base_heads
    defaults to --num_heads. One UserError for bad input."""
    if not args.mup:
        given = [f"--{n}" for n in ("mup_base_width", "mup_base_heads") if getattr(args, n, None) is not None]
        if given:
            raise UserError(f"{' and '.join(given)} only mean something with --mup; add --mup or drop them")
        return
    names = {f.name for f in dataclasses.fields(module.GPTConfig)}
    missing = [n for n in (*HOOK_FIELDS, "model_dim", "num_heads") if n not in names]
    if missing:
        raise UserError(f"--arch {args.arch}'s GPTConfig has no {', '.join(missing)}: its module has no muP hook "
                        "(docs/mup.md says what to add); drop --mup")
    if args.mup_base_width is None:
        raise UserError("--mup needs --mup_base_width: the model_dim the hyperparameters were tuned at (e.g. the "
                        "--model_dim of your small run)")
    width, base = args.model_dim, args.mup_base_width
    if base <= 0 or base > width or width % base:
        raise UserError(f"--mup_base_width {base} does not divide --model_dim {width}; use a divisor of it (the "
                        "base width, at most model_dim, so every width-sized dim scales by a whole factor)")
    if args.mup_base_heads is None:
        args.mup_base_heads = args.num_heads
    if args.mup_base_heads <= 0:
        raise UserError(f"--mup_base_heads must be a positive integer, got {args.mup_base_heads}")
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(module.GPTConfig)
              if f.init and getattr(args, f.name, None) is not None}
    fields.update(vocab_size=fields.get("vocab_size") or 1, mup_base_width=base, mup_base_heads=args.mup_base_heads)
    try:
        base_config(module.GPTConfig(**fields))
    except ValueError as err:
        raise UserError(f"the muP base model (--mup_base_width {base}, --mup_base_heads {args.mup_base_heads}) is "
                        f"not a model: {err}") from None


def model_config(cfg, config, module):
    """The model config (a dict) with the run's muP fields: unchanged without --mup."""
    if not getattr(cfg, "mup", None):
        return config
    return dataclasses.asdict(module.GPTConfig(**dict(config, mup_base_width=cfg.mup_base_width,
                                                      mup_base_heads=cfg.mup_base_heads)))


def is_mup(model):
    return getattr(model.config, "mup_base_width", None) is not None


def _base_model(model, device="meta"):
    # torch caches the functions a device context redirects (gptlab.train.config.parameter_count says why)
    getattr(torch.utils._device._device_constructors, "cache_clear", lambda: None)()
    with torch.device(device):
        return type(model)(base_config(model.config))


def parameter_multipliers(model):
    """{name: Multipliers} of the model's parameters (named_parameters: a tied weight once); {} when not muP."""
    if not is_mup(model):
        return {}
    base = dict(_base_model(model).named_parameters())
    out = {}
    for name, p in model.named_parameters():
        if name not in base:
            raise ValueError(f"parameter {name} has no counterpart at the muP base width")
        out[name] = multipliers_for(p.shape, base[name].shape)
    return out


@torch.no_grad()
def init_(model):
    """Rescale the matrix-like parameters' init to the base's std x 1/sqrt(m): the module's init is compared with
    its init at the base shape (a base model built under a forked RNG: the run's random stream is untouched).
    A module whose init already scales so (model.py's 1/sqrt(fan_in)) is left as it is; a zero or constant init
    (zero readouts) stays. Returns {name: factor applied}."""
    mults = parameter_multipliers(model)
    if not any(m.role == "matrix" for m in mults.values()):
        return {}
    with torch.random.fork_rng(devices=[]):
        base = dict(_base_model(model, "cpu").named_parameters())
    factors = {}
    for name, p in model.named_parameters():
        m = mults[name]
        if m.role != "matrix":
            continue
        have, at_base = p.detach().float().std().item(), base[name].float().std().item()
        if have == 0 or at_base == 0:
            continue
        ratio = have / at_base  # the module's own width scaling of this init
        if abs(math.log(ratio / m.init_std)) < math.log(_SAME_STD):
            continue  # already muP's
        factor = m.init_std if abs(math.log(ratio)) < math.log(_SAME_STD) else m.init_std / ratio
        p.mul_(factor)
        factors[name] = factor
    return factors


def split_groups(groups, model, lr=None):
    """Optimizer group dicts with each group split by its parameters' Adam LR multiplier, the LR multiplied
    (`lr`: the optimizer's default, for groups that name none). Unchanged when not muP or all multipliers are 1."""
    mults = parameter_multipliers(model)
    if not mults:
        return groups
    by_id = {id(p): mults[n].adam_lr for n, p in model.named_parameters()}
    out = []
    for group in groups:
        buckets = {}
        for p in group["params"]:
            buckets.setdefault(by_id[id(p)], []).append(p)
        for mult, params in buckets.items():
            if mult == 1:
                out.append(dict(group, params=params))
                continue
            base_lr = group.get("lr", lr)
            out.append(dict(group, params=params, lr=base_lr * mult,
                            name=f"{group.get('name', 'group')} (muP lr x{mult:.4g})"))
    return out
