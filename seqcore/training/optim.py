"""The optimiser of a training run: torch's Adam/AdamW, or the same update with a correctly
rounded square root under the portable CPU kernel profile (issue 49).

torch's CPU ``sqrt`` of a contiguous float32 tensor is MKL VML's ``vsSqrt``, which is not
correctly rounded and picks its code by the CPU: measured 2026-12-04, 13,062 of 65,536 float32
inputs differ from IEEE ``sqrt`` on an AMD EPYC, under every ``MKL_CBWR`` branch and ATen level,
and qemu's Intel Haswell model gives other bytes than the AMD host from the first Adam step.
The square root of a float32 taken in float64 and rounded back is the correctly rounded
float32 square root (float64 carries more than twice float32's 24 significant bits plus two,
and no float32 square root lies on a float32 rounding midpoint; Figueroa, "When is double
rounding innocuous?", 1995), whichever float64 kernel computes it to within an ulp. Every other
op of the update (``lerp_``, ``mul_``, ``addcmul_``, division, ``addcdiv_``) is one IEEE
operation per element, or an FMA of ATen's pinned AVX2 build.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from seqcore.config_rules import FUSED_ON_PORTABLE
from seqcore.errors import OneLineError


def ieee_sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root of float32 ``x`` (any shape), the same bytes on every
    CPU (module docstring)."""
    return x.double().sqrt().to(x.dtype)


class PortableAdam(torch.optim.Adam):
    """torch's single-tensor Adam (and, with ``decoupled_weight_decay``, AdamW) with the
    denominator's square root correctly rounded; state and ``state_dict`` are torch's, so a
    checkpoint holds the same fields either way. No amsgrad, maximize or closure."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float],
                 eps: float, weight_decay: float, decoupled_weight_decay: bool) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         decoupled_weight_decay=decoupled_weight_decay)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override] (no closure)
        """One update of every parameter that has a gradient (torch's order of operations)."""
        if closure is not None:
            raise ValueError("PortableAdam takes no closure")
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param,
                                                           memory_format=torch.preserve_format)
                grad = param.grad
                state["step"] += 1
                if decay != 0 and group["decoupled_weight_decay"]:
                    param.mul_(1 - lr * decay)
                elif decay != 0:
                    grad = grad.add(param, alpha=decay)
                state["exp_avg"].lerp_(grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = state["step"].item()
                bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
                denom = (ieee_sqrt(state["exp_avg_sq"]) / bias_correction2_sqrt).add_(eps)
                param.addcdiv_(state["exp_avg"], denom, value=-(lr / (1 - beta1 ** step)))


def build_optimizer(params: Iterable[torch.Tensor], optimizer: str, betas: tuple[float, float],
                    eps: float, weight_decay: float, portable: bool,
                    kernel: str = "unfused", capturable: bool = False) -> torch.optim.Optimizer:
    """Adam or AdamW (``optimizer``) at lr 0 (the schedule sets it each step); ``portable``:
    the correctly rounded :class:`PortableAdam` (CPU training under ``train.cpu_kernels:
    portable``), else torch's own, unfused or fused (``kernel``: ``train.optimizer_kernel``
    resolved by ``TrainConfig.optimizer_kernel_on``); ``capturable``: its step can be
    captured in a CUDA graph (seqcore.training.graphs)."""
    decoupled = optimizer == "adamw"
    if portable:
        if kernel == "fused":  # train.device: auto that resolved to the CPU (one line)
            raise OneLineError(f"train.optimizer_kernel = 'fused': {FUSED_ON_PORTABLE}")
        return PortableAdam(params, 0.0, betas, eps, weight_decay, decoupled)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    return cls(params, lr=0.0, betas=betas, eps=eps, weight_decay=weight_decay,
               fused=kernel == "fused" or None, capturable=capturable)


def clip_global_norm(model: nn.Module, clip_norm: float) -> torch.Tensor:
    """Clip every gradient of ``model`` by their global L2 norm (``train.clip_norm``; 0: no
    clipping); returns the pre-clip norm, left on the device (nothing read back)."""
    params = [p for p in model.parameters() if p.grad is not None]
    max_norm = clip_norm if clip_norm > 0 else math.inf
    return torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False)


def fused_step(opt: torch.optim.Optimizer, norm: torch.Tensor) -> None:
    """The fused optimiser's step, skipped on the device when ``norm`` is not finite (its
    ``found_inf``, as a GradScaler passes it): the host reads nothing back (issue 53)."""
    found_inf = (~norm.isfinite()).float()
    # the attributes a GradScaler sets and torch's fused step reads
    opt.grad_scale, opt.found_inf = None, found_inf  # type: ignore[attr-defined] (see above)
    opt.step()
