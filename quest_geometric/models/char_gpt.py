"""A small, readable character-level GPT (nanoGPT style) whose attention has *separate*
query, key, value and output projections, so the query/key geometry of every head can be read
and controlled; the attention is full causal SDPA or
:class:`quest_geometric.nn.focus.module.FocusAttention`.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from quest_geometric._utils.checks import (
    check_choice, check_int, check_positive_float, check_real, fail,
)
from quest_geometric._utils.untrusted import refused
from quest_geometric.adapters import (
    AttentionAdapter, AttentionCall, HeadLayout, QKView, register_attention_adapter,
)

__all__ = ["GPTConfig", "CausalSelfAttention", "CausalSelfAttentionAdapter", "MLP", "Block",
           "CharGPT"]

_ATTENTIONS = ("full", "focus")
_QK_INITS = ("independent", "tied", "orthogonal")


@dataclass
class GPTConfig:
    """Hyper-parameters of :class:`CharGPT` (stored in checkpoints as a plain dict).

    Args:
        vocab_size (int): number of token ids. (default: ``104``, the embedded corpus)
        block_size (int): maximum context length. (default: ``256``)
        n_layer (int): number of transformer blocks. (default: ``4``)
        n_head (int): attention heads per block. (default: ``4``)
        n_embd (int): model width; must be divisible by ``n_head``. (default: ``128``)
        dropout (float): dropout on attention, residual branches and embeddings. (default: ``0.0``)
        bias (bool): biases in the linear layers and layer norms. (default: :obj:`True`)
        attention (str): ``'full'`` (causal SDPA) or ``'focus'`` (FocusAttention).
            (default: ``'full'``)
        focus (dict): keyword arguments of ``FocusAttention`` (``bias`` defaults to
            :attr:`bias`; no dropout inside it). (default: ``{}``)
        qk_init (str): ``'independent'``, ``'tied'`` or ``'orthogonal'`` (see
            :class:`CharGPT`). (default: ``'independent'``)
        init_std (float): standard deviation of the weight initialisation. (default: ``0.02``)
    """

    vocab_size: int = 104
    block_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    attention: str = "full"
    focus: dict = field(default_factory=dict)
    qk_init: str = "independent"
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            check_int(getattr(self, name), name, 1, where="GPTConfig")
        if self.n_embd % self.n_head != 0:
            raise fail(ValueError, "GPTConfig", "n_embd", f"divisible by n_head={self.n_head}",
                       self.n_embd)
        if not 0.0 <= check_real(self.dropout, "dropout", where="GPTConfig") < 1.0:
            raise fail(ValueError, "GPTConfig", "dropout", "in [0, 1)", self.dropout)
        check_choice(self.attention, "attention", _ATTENTIONS, where="GPTConfig")
        check_choice(self.qk_init, "qk_init", _QK_INITS, where="GPTConfig")
        if not isinstance(self.focus, dict):
            raise fail(TypeError, "GPTConfig", "focus", "a dict of FocusAttention kwargs",
                       self.focus)
        check_positive_float(self.init_std, "init_std", where="GPTConfig")

    @property
    def head_dim(self) -> int:
        """Per-head width ``n_embd // n_head``."""
        return self.n_embd // self.n_head

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (for checkpoints and JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GPTConfig":
        """Build a config from :meth:`to_dict` output; unknown keys raise a :class:`ValueError`."""
        if not isinstance(d, dict):
            raise fail(TypeError, "GPTConfig.from_dict", "d", "a dict", d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise fail(ValueError, "GPTConfig.from_dict", "d", f"a dict with keys among "
                       f"{sorted(known)}", got_text=f"unknown keys {unknown}")
        return cls(**d)


class CausalSelfAttention(nn.Module):
    r"""Multi-head causal self-attention with separate query, key, value and output projections.

    .. math::
        Q_h = X W_Q^{h\top}, \quad K_h = X W_K^{h\top}, \quad V_h = X W_V^{h\top}, \qquad
        \mathrm{out} = \Big\Vert_{h} \mathrm{softmax}\!\Big(\frac{Q_h K_h^\top}{\sqrt{d}}
        + M\Big) V_h \; W_O^\top,

    with :math:`M_{ij} = -\infty` for :math:`j > i`; head ``h`` owns rows ``h*d .. (h+1)*d - 1``
    of ``q_proj.weight`` (:math:`W_Q^h`), and likewise for keys.

    Probe points: :meth:`queries`, :meth:`keys` and :meth:`values` return per-head tensors
    ``[B, H, T, d]``; in :meth:`forward` they pass through the identity modules ``hook_q``,
    ``hook_k`` and ``hook_v``, so a forward hook on them sees (and may replace) exactly the
    tensors the attention uses.

    Args:
        config (GPTConfig): the model configuration.

    Shapes: input and output ``[B, T, n_embd]``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_embd = C = config.n_embd
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.dropout = float(config.dropout)
        self.q_proj = nn.Linear(C, C, bias=config.bias)
        self.k_proj = nn.Linear(C, C, bias=config.bias)
        self.v_proj = nn.Linear(C, C, bias=config.bias)
        self.out_proj = nn.Linear(C, C, bias=config.bias)
        self.resid_dropout = nn.Dropout(self.dropout)
        self.hook_q, self.hook_k, self.hook_v = nn.Identity(), nn.Identity(), nn.Identity()

    def _heads(self, t: Tensor) -> Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_head, self.head_dim).transpose(1, 2)

    def _check(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise fail(TypeError, "CausalSelfAttention", "x", f"a [B, T, {self.n_embd}] "
                       "tensor", x)
        if x.dim() != 3 or x.size(-1) != self.n_embd:
            raise fail(ValueError, "CausalSelfAttention", "x", f"of shape [B, T, "
                       f"{self.n_embd}]", x)

    def queries(self, x: Tensor) -> Tensor:
        """Per-head queries ``[B, H, T, d]`` of the block input ``x`` ``[B, T, C]``."""
        self._check(x)
        return self._heads(self.q_proj(x))

    def keys(self, x: Tensor) -> Tensor:
        """Per-head keys ``[B, H, T, d]`` of ``x``."""
        self._check(x)
        return self._heads(self.k_proj(x))

    def values(self, x: Tensor) -> Tensor:
        """Per-head values ``[B, H, T, d]`` of ``x``."""
        self._check(x)
        return self._heads(self.v_proj(x))

    def attention_weights(self, x: Tensor) -> Tensor:
        """Explicit causal attention probabilities ``[B, H, T, T]`` computed densely (no
        dropout), for probes and tests; :meth:`forward` uses the fused kernel instead."""
        q, k = self.queries(x), self.keys(x)
        T = x.size(1)
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        return logits.masked_fill(~causal, float("-inf")).softmax(dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        B, T, C = x.shape
        q = self.hook_q(self._heads(self.q_proj(x)))
        k = self.hook_k(self._heads(self.k_proj(x)))
        v = self.hook_v(self._heads(self.v_proj(x)))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.out_proj(y))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.n_embd}, heads={self.n_head})"


class CausalSelfAttentionAdapter(AttentionAdapter):
    """The attention adapter of :class:`CausalSelfAttention`: projections through the probe
    hooks ``hook_q``/``hook_k``/``hook_v`` (so a hook that replaces q, k or v acts on the Focus
    path too), then ``out_proj`` and residual dropout."""

    def heads(self, module: nn.Module) -> HeadLayout:
        return HeadLayout(module.n_embd, module.n_head, module.n_head, module.head_dim)

    def parse(self, module: nn.Module, args: tuple, kwargs: dict) -> AttentionCall:
        x = args[0] if args else kwargs["x"]
        module._check(x)
        return AttentionCall(hidden=x)

    def project(self, module: nn.Module, call: AttentionCall):
        x = call.hidden
        return (module.hook_q(module._heads(module.q_proj(x))),
                module.hook_k(module._heads(module.k_proj(x))),
                module.hook_v(module._heads(module.v_proj(x))))

    def output(self, module: nn.Module, o: Tensor) -> Tensor:
        return module.resid_dropout(module.out_proj(o))

    def finish(self, module: nn.Module, out: Tensor, call: AttentionCall) -> Tensor:
        return out

    def qk_view(self, module: nn.Module, args: tuple, kwargs: dict) -> QKView:
        x = args[0] if args else kwargs["x"]
        return QKView(module.queries(x), module.keys(x), 1.0 / math.sqrt(module.head_dim),
                      causal=True)


register_attention_adapter(CausalSelfAttention, CausalSelfAttentionAdapter(), builtin=True)


class MLP(nn.Module):
    """The position-wise feed-forward network ``Linear(C, 4C) -> GELU -> Linear(4C, C)``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    r"""Pre-LN transformer block: :math:`x + \mathrm{Attn}(\mathrm{LN}(x))`, then
    :math:`x + \mathrm{MLP}(\mathrm{LN}(x))`.

    Args:
        config (GPTConfig): the model configuration.

    Shapes: input and output ``[B, T, n_embd]``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        if config.attention == "full":
            self.attn: nn.Module = CausalSelfAttention(config)
        else:
            from quest_geometric.nn.focus import FocusAttention

            kwargs = {"bias": config.bias, **config.focus}
            self.attn = FocusAttention(config.n_embd, config.n_head, **kwargs)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CharGPT(nn.Module):
    r"""A small GPT for character-level language modelling (nanoGPT style).

    Token and learned position embeddings, ``n_layer`` pre-LN :class:`Block` s, a final
    layer norm and a head tied to the token embedding; the loss is the mean next-token
    cross-entropy (nats):

    .. math::
        \mathcal{L} = -\frac{1}{BT} \sum_{b,t} \log
        \mathrm{softmax}(\mathrm{logits}_{b,t})_{y_{b,t}}.

    Initialisation: weights :math:`\sim \mathcal{N}(0, \sigma^2)`, :math:`\sigma =`
    ``init_std``, biases zero, residual output projections scaled by :math:`1/\sqrt{2 L}`
    (GPT-2). The query/key projections then follow ``qk_init``:

    * ``'independent'``: :math:`W_Q` and :math:`W_K` drawn independently (standard);
    * ``'tied'``: :math:`W_K \leftarrow W_Q` at initialisation (separate parameters), so each
      head starts with a symmetric positive semi-definite kernel :math:`W_Q^{h\top} W_K^h`;
    * ``'orthogonal'``: per head, the row spaces of :math:`W_Q^h` and :math:`W_K^h` are
      orthogonal, so the kernel :math:`W_Q^{h\top} W_K^h` is traceless: with a random
      orthonormal basis :math:`U` of :math:`\mathbb{R}^C` and :math:`m = \max(d, \lfloor C/2
      \rfloor)`, :math:`W_Q^h = \sqrt{C/m}\, G_Q U_{:, :m} U_{:, :m}^\top` and
      :math:`W_K^h = \sqrt{C/m}\, G_K U_{:, C-m:} U_{:, C-m:}^\top` with Gaussian :math:`G`
      of the standard scale (the standard expected Frobenius norm). Exact when :math:`2d \le
      C`; with one head the subspaces share :math:`2m - C` dimensions and a warning is issued.

    Args:
        config (GPTConfig or dict): the configuration (or its checkpoint dict).

    Shapes:
        - **idx:** ``[B, T]`` long, ``T <= block_size``
        - **targets:** ``[B, T]`` long (optional)
        - **output:** ``(logits [B, T, vocab_size], loss [] or None)``
    """

    def __init__(self, config: Union[GPTConfig, dict[str, Any]]) -> None:
        super().__init__()
        if isinstance(config, dict):
            config = GPTConfig.from_dict(config)
        if not isinstance(config, GPTConfig):
            raise fail(TypeError, "CharGPT", "config", "a GPTConfig or a dict", config)
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Re-initialise every weight (class docstring)."""
        std = float(self.config.init_std)
        resid_std = std / math.sqrt(2 * self.config.n_layer)

        def normal_(m: nn.Module, s: float) -> None:
            nn.init.normal_(m.weight, 0.0, s)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

        normal_(self.wte, std)
        normal_(self.wpe, std)
        self.ln_f.reset_parameters()
        for block in self.blocks:
            block.ln_1.reset_parameters()
            block.ln_2.reset_parameters()
            normal_(block.mlp.fc, std)
            normal_(block.mlp.proj, resid_std)
            attn = block.attn
            if not isinstance(attn, CausalSelfAttention) and hasattr(attn, "reset_parameters"):
                attn.reset_parameters()  # e.g. FocusAttention's router keeps its own init
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                lin = getattr(attn, name, None)
                if isinstance(lin, nn.Linear):
                    normal_(lin, resid_std if name == "out_proj" else std)
        if self.config.qk_init != "independent":
            for block in self.blocks:
                q, k = getattr(block.attn, "q_proj", None), getattr(block.attn, "k_proj", None)
                if not (isinstance(q, nn.Linear) and isinstance(k, nn.Linear)):
                    raise ValueError(
                        f"CharGPT: qk_init={self.config.qk_init!r} needs attention modules with "
                        f"q_proj and k_proj Linear layers; {type(block.attn).__name__} has none")
                if self.config.qk_init == "tied":
                    k.weight.copy_(q.weight)
                    if k.bias is not None and q.bias is not None:
                        k.bias.copy_(q.bias)
                else:
                    self._orthogonal_qk_(q.weight, k.weight, self.config.n_head, std)

    @staticmethod
    @torch.no_grad()
    def _orthogonal_qk_(wq: Tensor, wk: Tensor, n_head: int, std: float) -> None:
        out, C = wq.shape
        if out % n_head != 0 or wk.shape != wq.shape:
            raise ValueError("CharGPT: q_proj/k_proj shapes do not split into heads")
        d = out // n_head
        m = max(d, C // 2)
        if 2 * d > C:
            warnings.warn(
                f"CharGPT: qk_init='orthogonal' with head_dim={d} > n_embd/2={C / 2}: the query "
                f"and key row spaces of a head cannot be orthogonal; they share {2 * m - C} "
                "dimensions (the minimum possible)",
                stacklevel=3)
        scale = math.sqrt(C / m)
        for h in range(n_head):
            g = torch.randn(C, C, dtype=torch.float64)
            u, r = torch.linalg.qr(g)
            u = u * torch.sign(torch.diagonal(r))  # Haar-distributed basis
            uq, uk = u[:, :m], u[:, C - m:]
            gq = torch.randn(d, C, dtype=torch.float64) * std
            gk = torch.randn(d, C, dtype=torch.float64) * std
            rows = slice(h * d, (h + 1) * d)
            wq[rows] = (scale * gq @ uq @ uq.T).to(wq.dtype)
            wk[rows] = (scale * gk @ uk @ uk.T).to(wk.dtype)

    def forward(self, idx: Tensor, targets: Optional[Tensor] = None) -> tuple[Tensor,
                                                                              Optional[Tensor]]:
        """Next-token logits and, when ``targets`` are given, the mean cross-entropy (nats).

        Args:
            idx (Tensor): token ids ``[B, T]``, ``T <= block_size``.
            targets (Tensor, optional): next-token ids ``[B, T]``; entries ``-1`` are ignored.
                (default: :obj:`None`)

        Returns:
            (Tensor, Tensor or None): logits ``[B, T, vocab_size]`` and the loss.
        """
        if not isinstance(idx, Tensor) or idx.dtype not in (torch.long, torch.int):
            raise fail(TypeError, "CharGPT", "idx", "a long or int32 [B, T] tensor", idx)
        if idx.dim() != 2:
            raise fail(ValueError, "CharGPT", "idx", "of shape [B, T]", idx)
        B, T = idx.shape
        if T == 0 or T > self.config.block_size:
            raise fail(ValueError, "CharGPT", "idx", f"of length T in "
                       f"1..block_size={self.config.block_size}", idx)
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            if not isinstance(targets, Tensor):
                raise fail(TypeError, "CharGPT", "targets", "a tensor of the shape of 'idx'",
                           targets)
            if targets.shape != idx.shape:
                raise fail(ValueError, "CharGPT", "targets", f"of the shape of 'idx' "
                           f"{list(idx.shape)}", targets)
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), targets.reshape(-1).long(), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> Tensor:
        """Sample ``max_new_tokens`` continuations autoregressively: ids
        ``[B, T0 + max_new_tokens]``.

        Args:
            idx (Tensor): prompt ids ``[B, T0]`` (cropped to the last ``block_size`` ids).
            max_new_tokens (int): tokens to append.
            temperature (float): softmax temperature (> 0). (default: ``1.0``)
            top_k (int, optional): keep the ``top_k`` most likely tokens. (default: :obj:`None`)
            generator (torch.Generator, optional): for reproducible sampling.
                (default: :obj:`None`)
        """
        where = "CharGPT.generate"
        check_int(max_new_tokens, "max_new_tokens", 0, where=where)
        check_positive_float(temperature, "temperature", where=where)
        if top_k is not None:
            check_int(top_k, "top_k (or None)", 1, where=where, maximum=self.config.vocab_size)

        for _ in range(max_new_tokens):
            ctx = idx[:, -self.config.block_size:]
            logits, _ = self(ctx)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits = logits.masked_fill(logits < v[:, [-1]], float("-inf"))
            probs = logits.softmax(dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx

    def num_parameters(self, non_embedding: bool = False) -> int:
        """Number of parameters (tied weights counted once).

        Args:
            non_embedding (bool): subtract the position embedding, as nanoGPT reports.
                (default: :obj:`False`)
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wpe.weight.numel()
        return n

    def attention_layers(self) -> list[nn.Module]:
        """The attention module of every block, in depth order."""
        return [block.attn for block in self.blocks]

    def checkpoint(self) -> dict[str, Any]:
        """A self-describing checkpoint: ``{'config': dict, 'model': state_dict}``."""
        return {"config": self.config.to_dict(), "model": self.state_dict()}

    @classmethod
    def from_checkpoint(cls, checkpoint: Union[dict[str, Any], str, os.PathLike],
                        map_location: Any = "cpu") -> "CharGPT":
        """Rebuild a model from :meth:`checkpoint` output or a file saved with :func:`torch.save`.

        Args:
            checkpoint (dict or path): the checkpoint.
            map_location: passed to :func:`torch.load`. (default: ``'cpu'``)
        """
        where = "checkpoint"
        if isinstance(checkpoint, (str, os.PathLike)):
            where = os.fspath(checkpoint)
            if not os.path.isfile(where):
                raise FileNotFoundError(f"CharGPT.from_checkpoint: no file {where!r}")
            try:
                checkpoint = torch.load(where, map_location=map_location, weights_only=True)
            except BaseException as e:  # not a torch file, or not plain data
                raise refused(
                    "CharGPT.from_checkpoint", where, "it does not hold a CharGPT checkpoint "
                    "of tensors and plain containers (a file that could run code is never "
                    "unpickled)", e,
                ) from e
        if not (isinstance(checkpoint, dict) and "config" in checkpoint
                and "model" in checkpoint):
            keys = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
            raise ValueError(
                f"CharGPT.from_checkpoint: {where!r} does not hold a CharGPT (expected keys "
                f"'config' and 'model', found {keys})")
        model = cls(checkpoint["config"])
        model.load_state_dict(checkpoint["model"])
        return model

    def __repr__(self) -> str:
        c = self.config
        return (f"{self.__class__.__name__}(vocab_size={c.vocab_size}, "
                f"block_size={c.block_size}, n_layer={c.n_layer}, n_head={c.n_head}, "
                f"n_embd={c.n_embd}, attention={c.attention!r}, qk_init={c.qk_init!r})")
