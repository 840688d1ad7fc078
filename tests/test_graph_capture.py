"""Where serving engines call the op: inside CUDA graphs and torch.compile(mode="reduce-overhead").

A captured call must stay correct when the graph is replayed with new inputs copied into the
captured buffers: nothing derived from input data may be frozen at capture, and split-K scratch
must stay valid across replays. Warm-up always runs outside capture: a shape's first call builds
(and may compile, check and tune) its runner, which syncs with the host.
"""

import pytest
import torch

import mxfp4_mm
import mxfp4_mm.library  # noqa: F401  (registers torch.ops.mxfp4_mm.gemm)
from conftest import GPU_BACKENDS, TinyModel, assert_harness_close, gpu_runner_factory, make_inputs, \
    reference_output

pytestmark = pytest.mark.gpu

SPLIT_K_SHAPE = (16, 2112, 7168)  # every backend's plan splits K here
SHAPES = [SPLIT_K_SHAPE, (4, 2880, 512), (33, 480, 1600), (256, 3072, 1536)]
REPLAYS = 4


def _op(data):
    a, _, b_q, b_shuffle, b_scale_sh = data
    return torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle)


def _capture(call, data, warmups=3):
    """Warm `call(data)` up eagerly, then capture it: (graph, its output tensor)."""
    for _ in range(warmups):
        call(data)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(data)
    return graph, out


def _refill(data, m, n, k, seed):
    """Copy fresh operands into the captured buffers; return the fresh tuple."""
    fresh = make_inputs(m, n, k, seed=seed, device="cuda")
    for captured, new in zip(data, fresh):
        captured.copy_(new)
    return fresh


def _replay_and_check(graph, out, data, shape, seed):
    fresh = _refill(data, *shape, seed)
    graph.replay()
    torch.cuda.synchronize()
    assert_harness_close(out, reference_output(fresh))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_captured_op_replays_correctly_with_new_inputs(shape):
    data = make_inputs(*shape, seed=1, device="cuda")
    graph, out = _capture(_op, data)
    for replay in range(REPLAYS):
        _replay_and_check(graph, out, data, shape, seed=100 + replay)


def test_two_graphs_replay_interleaved_with_eager_calls():
    """Two captured shapes replayed in turns, with eager calls of the same shapes in between:
    neither the graphs nor the eager calls may disturb each other's scratch."""
    graphs = []
    for shape in (SPLIT_K_SHAPE, (4, 2880, 512)):
        data = make_inputs(*shape, seed=2, device="cuda")
        graphs.append((shape, data) + _capture(_op, data))
    for replay in range(REPLAYS):
        for shape, data, graph, out in graphs:
            _replay_and_check(graph, out, data, shape, seed=200 + replay)
            kept = out.clone()
            eager = make_inputs(*shape, seed=300 + replay, device="cuda")
            assert_harness_close(_op(eager), reference_output(eager))
            assert torch.equal(out, kept)


def test_one_graph_holding_several_calls():
    shapes = (SPLIT_K_SHAPE, (4, 2880, 512), SPLIT_K_SHAPE)
    datas = [make_inputs(*shape, seed=3 + i, device="cuda") for i, shape in enumerate(shapes)]
    for data in datas:
        _op(data)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [_op(data) for data in datas]
    for replay in range(REPLAYS):
        fresh = [_refill(data, *shape, 400 + 10 * replay + i) for i, (shape, data) in enumerate(zip(shapes, datas))]
        graph.replay()
        torch.cuda.synchronize()
        for out, new in zip(outs, fresh):
            assert_harness_close(out, reference_output(new))


@pytest.mark.parametrize("name", GPU_BACKENDS)
def test_each_backend_runner_replays_correctly(name):
    """Each backend's runner captured directly on the split-K shape (the op above reaches only the
    dispatcher's pick)."""
    runner = gpu_runner_factory(name, torch.device("cuda"))(*SPLIT_K_SHAPE)

    def call(data):
        a, _, b_q, b_shuffle, b_scale_sh = data
        return runner(a, b_q, b_shuffle, b_scale_sh)

    data = make_inputs(*SPLIT_K_SHAPE, seed=5, device="cuda")
    graph, out = _capture(call, data)
    for replay in range(REPLAYS):
        _replay_and_check(graph, out, data, SPLIT_K_SHAPE, seed=500 + replay)


# ---- torch.compile(mode="reduce-overhead"): inductor's CUDA-graph trees ------------------------

def _graphs_recorded(device_index):
    """How many CUDA graphs inductor's graph-tree manager holds for the device."""
    from torch._inductor import cudagraph_trees
    manager = cudagraph_trees.get_manager(device_index, create_if_none_exists=False)
    return 0 if manager is None else sum(len(nodes) for nodes in manager.roots.values())


@pytest.mark.parametrize("forced", [None, "triton"], ids=["dispatcher", "triton"])
@pytest.mark.parametrize("n, k", [SPLIT_K_SHAPE[1:], (2880, 512)], ids=["2112x7168", "2880x512"])
def test_reduce_overhead_compiled_model_is_correct_on_fresh_inputs(n, k, forced, monkeypatch):
    """Two batch sizes through one compiled layer: inductor's graph trees record a graph per size in
    one shared memory pool and replay them in turns. forced="triton" puts a split-K backend with
    per-queue scratch under the trees (the dispatcher's pick on an H200 keeps no scratch)."""
    from mxfp4_mm import dispatch
    from torch._dynamo.utils import counters
    if forced:
        monkeypatch.setenv(dispatch.FORCE_ENV, forced)
    dispatch.reset()
    torch._dynamo.reset()
    counters.clear()
    _, _, b_q, b_shuffle, b_scale_sh = make_inputs(16, n, k, seed=6, device="cuda")
    model = TinyModel(b_q, b_scale_sh, b_shuffle)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    gen = torch.Generator(device="cuda").manual_seed(7)

    def fresh_x(m):
        return torch.randn((m, k), dtype=torch.bfloat16, device="cuda", generator=gen)

    try:
        with torch.no_grad():
            for m in (16, 4):
                for _ in range(3):  # graph trees: an eager warm-up run, then recording, then replays
                    compiled(fresh_x(m))
            for _ in range(REPLAYS):
                for m in (16, 4):
                    x = fresh_x(m)
                    y = compiled(x).clone()  # the next replay overwrites the graph's output
                    assert_harness_close(y, model.reference(x))
        assert counters["inductor"]["cudagraph_skips"] == 0
        assert _graphs_recorded(torch.cuda.current_device()) >= 2
        if forced:
            assert mxfp4_mm.last_backend_name() == forced
    finally:
        torch._dynamo.reset()
        dispatch.reset()


def test_a_first_call_inside_capture_leaves_the_dispatcher_intact():
    """A shape's first call builds, checks (a host sync) and may tune its runner: inside a capture
    it cannot succeed. It may raise, but it must not mark the device's backends broken: eager calls
    of that shape afterwards are served by the same backend as a warmed-up shape."""
    from mxfp4_mm import dispatch
    dispatch.reset()
    warm = make_inputs(8, 256, 512, seed=8, device="cuda")
    _op(warm)
    expected = mxfp4_mm.last_backend_name()
    cold = make_inputs(24, 272, 576, seed=9, device="cuda")  # a shape no other test uses
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _op(cold)
    except Exception:  # noqa: BLE001  (any error is acceptable here; what follows is the check)
        pass
    torch.cuda.synchronize()
    try:
        assert_harness_close(_op(cold), reference_output(cold))
        assert mxfp4_mm.last_backend_name() == expected
    finally:
        dispatch.reset()
