"""ctypes runtime: compile, disk cache, launch on the current queue. GPU-only but the header walk."""

import pytest
import torch

from mxfp4_mm import runtime

KERNEL = r'''
#include "add_one_helper.h"
extern "C" __global__ void add_one(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = plus_one(x[i]);
}
'''
HELPER = "__device__ inline float plus_one(float v) { return v + 1.0f; }\n"


def test_headers_are_collected_transitively(monkeypatch):
    files = {"a.h": '#include "b.h"\nint a;', "b.h": "int b;"}
    monkeypatch.setattr(runtime, "read_source", files.__getitem__)
    assert runtime._headers_of('#include "a.h"\n', {}) == files


def test_compile_target_defaults_to_the_device_and_can_be_overridden(monkeypatch):
    """load_module compiles for kernel_arch(device) unless `arch` names another target (sm_90a for
    wgmma); the driver parts are stubbed, so this runs without a GPU."""
    built = []
    monkeypatch.setattr(runtime, "kernel_arch", lambda device: "sm_90")
    monkeypatch.setattr(runtime, "api_for", lambda device: None)
    monkeypatch.setattr(runtime, "_code_object", lambda api, src, headers, options, arch: built.append((options, arch)))
    monkeypatch.setattr(runtime, "Module", lambda api, device, code: object())
    monkeypatch.setattr(runtime, "_modules", {})
    monkeypatch.setattr(torch.version, "hip", None)
    device = torch.device("cuda", 0)
    runtime.load_module("int x;", device, ("-DX=1",))
    runtime.load_module("int x;", device, ("-DX=1",), arch="sm_90a")
    assert built == [(("--gpu-architecture=sm_90", "-std=c++17", "-default-device", "-DX=1"), "sm_90"),
                     (("--gpu-architecture=sm_90a", "-std=c++17", "-default-device", "-DX=1"), "sm_90a")]


def test_load_module_builds_each_key_once_and_different_keys_concurrently(monkeypatch):
    """Threads asking for one module share one build; threads asking for different modules build
    at the same time (a barrier inside the stubbed compiler needs all four at once)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    together = threading.Barrier(4, timeout=10)
    builds = []

    def build(api, source, headers, options, arch):
        builds.append(options[-1])
        if options[-1] != "-DSAME":
            together.wait()
        return b""

    monkeypatch.setattr(runtime, "kernel_arch", lambda device: "sm_90")
    monkeypatch.setattr(runtime, "api_for", lambda device: None)
    monkeypatch.setattr(runtime, "_code_object", build)
    monkeypatch.setattr(runtime, "Module", lambda api, device, code: object())
    monkeypatch.setattr(runtime, "_modules", {})
    monkeypatch.setattr(torch.version, "hip", None)
    device = torch.device("cuda", 0)
    loaded = runtime.stats["loaded"]
    with ThreadPoolExecutor(8) as pool:
        same = list(pool.map(lambda _: runtime.load_module("int x;", device, ("-DSAME",)), range(8)))
    assert builds == ["-DSAME"] and all(m is same[0] for m in same)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: runtime.load_module("int x;", device, (f"-DK{i}",)), range(4)))
    assert sorted(builds[1:]) == ["-DK0", "-DK1", "-DK2", "-DK3"]
    assert runtime.stats["loaded"] - loaded == 5


@pytest.mark.gpu
def test_compile_launch_and_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(runtime.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(runtime, "read_source", {"add_one_helper.h": HELPER}.__getitem__)
    device = torch.device("cuda")
    x = torch.randn(1000, device=device)
    out = torch.empty_like(x)
    launch = runtime.load_module(KERNEL, device).function("add_one").launcher("ppi")
    launch((4, 1, 1), (256, 1, 1), 0, out, x, x.numel())
    torch.testing.assert_close(out, x + 1)
    assert len(list(tmp_path.iterdir())) == 1

    # A fresh process would load the cached code object without compiling.
    monkeypatch.setattr(runtime, "_modules", {})
    monkeypatch.setattr(runtime, "_compile", lambda *a: pytest.fail("recompiled despite the disk cache"))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        launch = runtime.load_module(KERNEL, device).function("add_one").launcher("ppi")
        out2 = torch.empty_like(x)
        launch((4, 1, 1), (256, 1, 1), 0, out2, out, x.numel())
    side.synchronize()
    torch.testing.assert_close(out2, x + 2)


@pytest.mark.gpu
def test_compile_error_names_the_problem(monkeypatch, tmp_path):
    monkeypatch.setenv(runtime.CACHE_ENV, str(tmp_path))
    with pytest.raises(runtime.CompileError, match="kernel compile failed"):
        runtime.load_module("extern \"C\" __global__ void broken( { }", torch.device("cuda"))


class _FakeLibrary:
    """Any symbol is a callable that records its name and returns 0 (CUDA_SUCCESS / hipSuccess)."""

    def __init__(self):
        self.bound = []

    def __getattr__(self, symbol):
        def call(*args):
            return 0
        call.symbol = symbol
        self.bound.append(symbol)
        return call


@pytest.mark.parametrize("vendor, expected", [
    ("nvidia", {"rtc_create": "nvrtcCreateProgram", "rtc_code_size": "nvrtcGetCUBINSize",
                "rtc_code": "nvrtcGetCUBIN", "module_load": "cuModuleLoadData", "launch": "cuLaunchKernel"}),
    ("amd", {"rtc_create": "hiprtcCreateProgram", "rtc_code_size": "hiprtcGetCodeSize",
             "rtc_code": "hiprtcGetCode", "module_load": "hipModuleLoadData", "launch": "hipModuleLaunchKernel"}),
])
def test_api_binds_each_vendors_symbols(monkeypatch, vendor, expected):
    searched = []
    monkeypatch.setattr(runtime, "_find_library", lambda names, patterns, patterns_first=False:
                        searched.append((patterns, patterns_first)) or _FakeLibrary())
    api = runtime._Api(vendor)
    if vendor == "amd":  # torch's own HIP libraries before the system's: one HIP runtime in the process
        assert all(first and "torch" in patterns[0] for patterns, first in searched), searched
    for attr, symbol in expected.items():
        assert getattr(api, attr).symbol == symbol, attr
    for attr in ("rtc_compile", "rtc_log_size", "rtc_log", "rtc_destroy", "module_function"):
        assert callable(getattr(api, attr)), attr
    assert api.rtc_version.startswith("nvrtc-" if vendor == "nvidia" else "hiprtc-")
    assert ("cuInit" in api.drv.bound) == (vendor == "nvidia")


# ---- tensor maps ----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, rule", [
    ({"element_bytes": 3}, "element_bytes"),
    ({"address": 0x1008}, "16-byte aligned"),
    ({"row_stride_bytes": 1000}, "row_stride_bytes"),
    ({"box_rows": 257}, "box_rows"),
    ({"box_elements": 0}, "box_rows and box_elements"),
    ({"box_elements": 12}, "multiple of 16 bytes"),
    ({"rows": 0}, "rows and row_elements"),
])
def test_tensor_map_rules_name_the_argument(change, rule):
    args = dict(address=0x1000, element_bytes=1, rows=64, row_elements=1024, row_stride_bytes=1024, box_rows=64,
                box_elements=64)
    runtime.check_tensor_map_2d(**args)
    with pytest.raises(ValueError, match=rule):
        runtime.check_tensor_map_2d(**{**args, **change})


def test_tensor_map_argument_slots_copy_the_whole_map():
    import ctypes
    tensor_map = runtime.TensorMap()
    assert tensor_map.address % 64 == 0
    ctypes.memmove(tensor_map.address, bytes(range(128)), 128)
    slot = runtime._ARG_TYPES["T"]()
    slot.value = tensor_map
    assert ctypes.sizeof(slot) == runtime.TENSOR_MAP_BYTES and bytes(slot) == tensor_map.raw() == bytes(range(128))


TMA_KERNEL = r'''
typedef unsigned long long u64;
struct alignas(64) TensorMap { u64 opaque[16]; };
// One box at (x, y) of a 2-D uint16 tensor into shared memory through its map, then out to `out`.
extern "C" __global__ void copy_box(const __grid_constant__ TensorMap map, unsigned short* out, int x, int y) {
    __shared__ __align__(128) unsigned short box[BOX_ROWS * BOX_COLS];
    __shared__ u64 bar;
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar), dst = (unsigned)__cvta_generic_to_shared(box);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "n"(BOX_ROWS * BOX_COLS * 2) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(dst), "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(b) : "memory");
    }
    __syncthreads();
    asm volatile("{\n.reg .pred done;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra wait_%=;\n}\n" :: "r"(b) : "memory");
    for (int i = threadIdx.x; i < BOX_ROWS * BOX_COLS; i += blockDim.x) out[i] = box[i];
}
'''


@pytest.mark.gpu
@pytest.mark.parametrize("x, y", [(0, 0), (40, 24), (96, 40)])  # inside; inside; past both edges (zeros)
def test_tensor_map_copies_a_box_and_zero_fills_outside(x, y):
    if torch.version.hip or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor maps need an NVIDIA sm_90+ GPU")
    device = torch.device("cuda")
    rows, cols, box_rows, box_cols = 48, 120, 16, 32  # rows padded to a 128-element (256-byte) stride
    storage = torch.randint(0, 2**15, (rows, 128), dtype=torch.int16, device=device)
    launch = runtime.load_module(TMA_KERNEL, device, (f"-DBOX_ROWS={box_rows}", f"-DBOX_COLS={box_cols}")).function(
        "copy_box").launcher("Tpii")
    tensor_map = runtime.tensor_map_2d(device, storage.data_ptr(), 2, rows, cols, 256, box_rows, box_cols)
    out = torch.full((box_rows, box_cols), -1, dtype=torch.int16, device=device)
    launch((1, 1, 1), (128, 1, 1), 0, tensor_map, out, x, y)
    expected = torch.zeros_like(out)
    inside = storage[y:min(y + box_rows, rows), x:min(x + box_cols, cols)]
    expected[:inside.shape[0], :inside.shape[1]] = inside
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
