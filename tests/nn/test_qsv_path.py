"""The execution-path decision of QSVConv (quest_geometric.nn._qsv_path.choose_path), on
hand-made facts: each rule of the decision, and the paths the layer takes on real calls."""
import pytest
import torch

from quest_geometric.nn import _qsv_native as native
from quest_geometric.nn import qsv_conv as qsv_module
from quest_geometric.nn._qsv_path import Layout, Path, PathFacts, Plan, choose_path
from quest_geometric.testing.qsv import knn_edges, make_qsv_conv

#: A training call on the CPU in float32 over a graph found dense, kernels available.
TRAIN = PathFacts(layout=Layout.DENSE, native=True, fused=True, needs_grad=True,
                  autocast=False, learned=True, dropout=False, masked=False,
                  feature_quaternions=True, transport=True)
#: The same call without gradients (inference).
INFER = TRAIN._replace(needs_grad=False)


@pytest.mark.parametrize("facts, expected", [
    # training: the native kernel, no forward-only prologue or epilogue
    (TRAIN, Plan(False, Path.DENSE_NATIVE, False)),
    # inference: the fused prologue and the kernel with the output rotation
    (INFER, Plan(True, Path.DENSE_EPILOGUE, False)),
    # inference with node quaternions: no prologue, the epilogue still
    (INFER._replace(feature_quaternions=False), Plan(False, Path.DENSE_EPILOGUE, False)),
    # inference without transport: nothing to rotate, so neither forward-only form
    (INFER._replace(transport=False), Plan(False, Path.DENSE_NATIVE, False)),
    # under autocast: never the forward-only forms (they would run in full precision)
    (INFER._replace(autocast=True), Plan(False, Path.DENSE_NATIVE, False)),
    # no kernels (another device or dtype, not built, switched off)
    (TRAIN._replace(native=False), Plan(False, Path.DENSE_FUSED, False)),
    (INFER._replace(native=False), Plan(False, Path.DENSE_FUSED, False)),
    # fused=False (or a dtype the fused product does not take): the gather reference
    (TRAIN._replace(fused=False), Plan(False, Path.DENSE_GATHER, False)),
    (TRAIN._replace(native=False, fused=False), Plan(False, Path.DENSE_GATHER, False)),
    # the kernel computes learned weights without dropout only
    (TRAIN._replace(learned=False), Plan(False, Path.DENSE_FUSED, False)),
    (TRAIN._replace(dropout=True), Plan(False, Path.DENSE_FUSED, False)),
    # an explain mask keeps the PyTorch dense forms
    (TRAIN._replace(masked=True), Plan(False, Path.DENSE_FUSED, False)),
    # a graph not dense (or dense=False, explaining, hooks): the scatter path
    (TRAIN._replace(layout=Layout.SCATTER), Plan(False, Path.SCATTER, False)),
    (INFER._replace(layout=Layout.SCATTER), Plan(True, Path.SCATTER, False)),
    # compiled with dense=None: the layout found at run time
    (TRAIN._replace(layout=Layout.RUN_TIME), Plan(False, Path.GRAPH, False)),
    (INFER._replace(layout=Layout.RUN_TIME), Plan(True, Path.GRAPH_ROTATE, False)),
    (TRAIN._replace(layout=Layout.RUN_TIME, native=False), Plan(False, Path.COND, False)),
    # compiled with dense=True: the dense path checks the targets itself
    (TRAIN._replace(layout=Layout.ASSUMED_DENSE), Plan(False, Path.DENSE_NATIVE, True)),
    (INFER._replace(layout=Layout.ASSUMED_DENSE), Plan(True, Path.DENSE_EPILOGUE, True)),
    (TRAIN._replace(layout=Layout.ASSUMED_DENSE, native=False),
     Plan(False, Path.DENSE_FUSED, True)),
])
def test_choose_path_on_hand_made_facts(facts, expected):
    assert choose_path(facts) == expected


def test_every_path_has_its_method():
    conv = make_qsv_conv()
    for path in Path:
        assert callable(getattr(conv, "_path_" + path.value)), path


def _taken(monkeypatch, conv, *args, **kwargs) -> list:
    plans = []
    real = qsv_module.choose_path
    monkeypatch.setattr(qsv_module, "choose_path",
                        lambda facts: plans.append(real(facts)) or plans[-1])
    conv(*args, **kwargs)
    return plans


@pytest.mark.parametrize("grad", [True, False])
def test_the_layer_takes_the_decided_path(monkeypatch, grad):
    """Real calls: the facts the layer fills give the path the rules above predict.  With
    ``dense=None`` the layout is left to the native kernel (one decision); without the
    kernel the eager layer reads it on the host and decides again."""
    conv = make_qsv_conv(16, heads=2)
    x = torch.randn(20, 16, dtype=torch.float64)
    ei = knn_edges(20, 4)
    kernel = native.qsv_native_available() and native.qsv_native_enabled()
    graph = Path.GRAPH if grad else Path.GRAPH_ROTATE
    with torch.set_grad_enabled(grad):
        plans = _taken(monkeypatch, conv, x, ei)
        if kernel:
            assert plans == [Plan(not grad, graph, False)]
        else:
            assert [p.path for p in plans] == [Path.COND, Path.DENSE_FUSED]
        (plan,) = _taken(monkeypatch, conv, x, ei, dense=True)
        dense = (Path.DENSE_NATIVE if grad else Path.DENSE_EPILOGUE) if kernel \
            else Path.DENSE_FUSED
        assert plan == Plan(kernel and not grad, dense, False)
        (plan,) = _taken(monkeypatch, conv, x, ei, dense=False)
        assert plan.path is Path.SCATTER
        plans = _taken(monkeypatch, make_qsv_conv(16, heads=2, fused=False), x, ei)
        assert [p.path for p in plans] == [Path.COND, Path.DENSE_GATHER]
        plans = _taken(monkeypatch, conv, x, ei[:, torch.randperm(ei.size(1))])
        assert plans[-1].path is (graph if kernel else Path.SCATTER)
        (plan,) = _taken(monkeypatch, conv, x, ei[:, 1:])  # sizes rule the layout out
        assert plan.path is Path.SCATTER
