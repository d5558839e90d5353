"""The flat Focus modules of before the ``quest_geometric.nn.focus`` subpackage still work: every
old public name is the very object of its new home, the deprecated ``logcumsumexp`` gives the
same values as :func:`torch.logcumsumexp`, and a model pickled under the old module names loads.

This is the only test that imports the old paths (everything else imports the new ones)."""
import importlib
import io
import pickle

import pytest
import torch
from torch import nn

from quest_geometric.models.char_gpt import CharGPT, GPTConfig
from quest_geometric.nn.focus import compose_focus

# old module -> {name: new module holding the same object}
MOVED = {
    "quest_geometric.nn.focus_router": {
        "FocusRouter": "router", "RouterOutput": "router", "group_balance": "router",
        "sinkhorn_log": "router", "topk_groups": "router", "TIE_RTOL": "router",
        "LCSE_TINY": "router", "check_batch": "_checks", "check_real": "_checks",
        "check_features": "_checks",
    },
    "quest_geometric.nn.focus_edge_index": {
        "focus_edge_index": "edge_index", "smallest_shared_group": "edge_index",
    },
    "quest_geometric.nn.focus_flex": {
        "FLEX_AVAILABLE": "flex", "focus_block_mask": "flex", "focus_flex_attention": "flex",
        "MAX_FLEX_GROUPS": "flex", "CUDA_BLOCK_MULTIPLE": "flex", "EAGER_MAX_PAIRS": "flex",
    },
    "quest_geometric.nn.focus_decode": {
        "FocusDecodeState": "decode", "sinkhorn_prefix_state": "decode",
        "sinkhorn_step": "decode", "route_step": "decode", "focus_decode_attention": "decode",
    },
    "quest_geometric.nn.focus_attention": {
        "FocusAttention": "module", "BACKENDS": "module", "GATES": "module",
        "FocusEdgeAttention": "edges", "focus_dense_attention": "dense",
        "focus_soft_attention": "dense", "full_attention": "dense",
        "focus_blocks_attention": "blocks", "focus_blocks_reference": "blocks",
        "BAND_BLOCK": "blocks", "PAD_RATIO": "blocks", "FocusRouter": "router",
        "RouterOutput": "router",
    },
    "quest_geometric.nn.compose_focus": {
        "compose_focus": "compose", "decompose": "compose", "FocusComposed": "compose",
        "set_focus_enabled": "compose", "focus_disabled": "compose",
        "set_focus_options": "compose", "focus_layers": "compose",
        "router_parameters": "compose", "save_routers": "compose", "load_routers": "compose",
        "SUPPORTED_ATTENTION": "compose", "ROUTERS_FILE": "compose",
    },
}


@pytest.mark.parametrize("old", list(MOVED))
def test_old_names_are_the_new_objects(old):
    mod = importlib.import_module(old)
    assert "moved to :mod:`quest_geometric.nn.focus" in mod.__doc__.lower()
    for name, new in MOVED[old].items():
        target = importlib.import_module(f"quest_geometric.nn.focus.{new}")
        assert getattr(mod, name) is getattr(target, name), f"{old}.{name}"
    # every name the old module declared public still resolves
    for name in mod.__all__:
        assert hasattr(mod, name), f"{old}.{name}"


def test_deprecated_logcumsumexp_keeps_working_but_is_not_public():
    import quest_geometric.nn as qnn
    from quest_geometric.nn.focus.router import _logcumsumexp
    from quest_geometric.nn.focus_router import logcumsumexp

    assert "logcumsumexp" not in qnn.__all__
    assert qnn.logcumsumexp is logcumsumexp  # the old package-level name, served lazily
    assert "deprecated" in logcumsumexp.__doc__
    x = torch.randn(50, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 9
    torch.testing.assert_close(logcumsumexp(x, 0), torch.logcumsumexp(x, 0), rtol=1e-12,
                               atol=1e-12)
    assert torch.equal(logcumsumexp(x, 1), _logcumsumexp(x, 1))
    with pytest.raises(AttributeError, match="no_such_name"):
        qnn.no_such_name  # noqa: B018


# new module -> the flat module that held its names before the move
OLD_HOME = {
    "quest_geometric.nn.focus.router": "quest_geometric.nn.focus_router",
    "quest_geometric.nn.focus.edge_index": "quest_geometric.nn.focus_edge_index",
    "quest_geometric.nn.focus.flex": "quest_geometric.nn.focus_flex",
    "quest_geometric.nn.focus.decode": "quest_geometric.nn.focus_decode",
    "quest_geometric.nn.focus.module": "quest_geometric.nn.focus_attention",
    "quest_geometric.nn.focus.edges": "quest_geometric.nn.focus_attention",
    "quest_geometric.nn.focus.compose": "quest_geometric.nn.compose_focus",
}


class _AsBeforeTheMove(pickle.Unpickler):
    """Loads a pickle as if it had been written before the move: every global of the Focus
    subpackage is looked up in the flat module that held it then."""

    seen: set

    def find_class(self, module, name):
        if module.startswith("quest_geometric.nn.focus."):
            assert module in OLD_HOME, f"a pickle refers to {module}.{name}: add its old home"
            module = OLD_HOME[module]
            self.seen.add(module)
        return super().find_class(module, name)


class _MHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, h):
        return self.attn(h, h, h, need_weights=False)[0]


def test_models_pickled_under_the_old_module_names_load():
    torch.manual_seed(0)
    from quest_geometric.nn.focus import FocusAttention

    fa = FocusAttention(16, 2, num_groups=4, top_k=2, window=3).eval()
    gpt = compose_focus(CharGPT(GPTConfig(vocab_size=11, block_size=32, n_layer=1, n_head=2,
                                          n_embd=16)), num_groups=4, top_k=1, window=2).eval()
    mha = compose_focus(_MHA(), causal=False, window=1, num_groups=4, top_k=1).eval()
    x, tok = torch.randn(1, 20, 16), torch.randint(0, 11, (1, 20))
    for model, inp in ((fa, x), (gpt, tok), (mha, x)):
        un = _AsBeforeTheMove(io.BytesIO(pickle.dumps(model)))
        un.seen = set()
        again = un.load()
        assert un.seen  # the pickle did refer to the old modules
        assert list(again.state_dict()) == list(model.state_dict())  # keys unchanged
        with torch.no_grad():
            out, ref = again(inp), model(inp)
        if isinstance(ref, tuple):  # CharGPT: (logits, loss)
            out, ref = out[0], ref[0]
        assert torch.equal(out, ref)
