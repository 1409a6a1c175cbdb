"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
Algorithm 2): Adam's step, with decoupled weight decay added, scaled per parameter tensor by the trust
ratio ``||w|| / ||step||``, so each layer moves by about ``lr`` of its own norm whatever the batch size.

As NVIDIA's BERT runs it (apex's ``FusedLAMB``, NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT
at commit ca5ae20e3d): with Adam's bias correction (``bias_correction``); the trust ratio only on tensors
that decay (``adapt_without_decay=False``: biases and LayerNorm take Adam's step as is; apex's
``use_nvlamb=True`` is ``adapt_without_decay=True``, the paper's rule for every tensor); a ratio of 1 where
either norm is 0. Its global gradient-norm clipping before the step is Lightning's
``trainer.gradient_clip_val`` here. No maintained package ships LAMB for CPUs and GPUs alike
(docs/libraries.md), hence ours: one loop over the tensors, float32 state."""

from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, bias_correction: bool = True, adapt_without_decay: bool = False):
        if lr <= 0 or eps <= 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"optim.optimizer: LAMB needs lr > 0, eps > 0, weight_decay >= 0 and betas in [0, 1) "
                             f"(got lr={lr}, eps={eps}, weight_decay={weight_decay}, betas={tuple(betas)})")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction, adapt_without_decay=adapt_without_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            decay = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("LAMB takes dense gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                grad = p.grad.float()
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["bias_correction"]:
                    t = state["step"]
                    update = (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt_().add_(group["eps"]))
                else:
                    update = m / v.sqrt().add_(group["eps"])
                weights = p.float()
                if decay:
                    update.add_(weights, alpha=decay)
                ratio = 1.0
                if decay or group["adapt_without_decay"]:
                    weight_norm, update_norm = weights.norm(), update.norm()
                    ratio = torch.where((weight_norm > 0) & (update_norm > 0), weight_norm / update_norm, 1.0)
                p.sub_((update * (ratio * group["lr"])).to(p.dtype))
        return loss
