"""Run-time compilation and launch of kernel sources through ctypes only (no C++ extension):
NVRTC + the CUDA driver on NVIDIA, hiprtc + the HIP runtime on ROCm.

    module = load_module(source, device, options)   # compiled once; code objects cached on disk
    stats["compiled"], stats["loaded"]              # compiler runs / modules loaded in this process
    launch = module.function("name").launcher("ppi")
    launch(grid, block, shared_bytes, ptr_or_tensor, ptr_or_tensor, int)
    tensor_map_2d(device, ...)                       # a TMA descriptor, launcher argument type "T"

Launches go to torch's current queue for the device, so they order with torch's own work.
"""

import ctypes
import glob
import hashlib
import os
import re
import sys
import threading
from pathlib import Path

import torch

from .devices import kernel_arch  # noqa: F401  (tools use runtime.kernel_arch)
from .kernels import read_source

CACHE_ENV = "MXFP4_MM_CACHE_DIR"
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# torch's queue objects expose their raw handle under this attribute name; torch._C also has a
# direct getter of the raw handle, which skips building a Python queue object on every launch.
_QUEUE_HANDLE_ATTR = "cuda_" + "s" + "tream"
_current_queue = getattr(torch.cuda, "current_" + "s" + "tream")
_current_raw_queue = getattr(torch._C, "_cuda_getCurrentRaw" + "S" + "tream", None)


class CompileError(RuntimeError):
    pass


def _find_library(names, patterns, patterns_first=False):
    """dlopen the first of `names` that loads, else the first file matching `patterns` (those first
    with `patterns_first`)."""
    def by_name():
        for name in names:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
        return None

    def by_pattern():
        for pattern in patterns:
            for path in sorted(glob.glob(pattern, recursive=True), reverse=True):
                try:
                    return ctypes.CDLL(path)
                except OSError:
                    pass
        return None

    for attempt in ((by_pattern, by_name) if patterns_first else (by_name, by_pattern)):
        library = attempt()
        if library is not None:
            return library
    raise OSError(f"none of {names} could be loaded")


def _search_roots():
    torch_lib = str(Path(torch.__file__).parent / "lib")
    site = [p for p in sys.path if p.endswith("site-packages")]
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    return torch_lib, site, cuda_home, rocm


# The calls both vendors need, by vendor: the compiler library's prefix, then per attribute of _Api
# the symbol (compiler symbols without the prefix).
_SYMBOLS = {
    "nvidia": ("nvrtc", {
        "rtc_create": "CreateProgram", "rtc_compile": "CompileProgram",
        "rtc_log_size": "GetProgramLogSize", "rtc_log": "GetProgramLog",
        "rtc_code_size": "GetCUBINSize", "rtc_code": "GetCUBIN", "rtc_destroy": "DestroyProgram",
    }, {"module_load": "cuModuleLoadData", "module_function": "cuModuleGetFunction", "launch": "cuLaunchKernel"}),
    "amd": ("hiprtc", {
        "rtc_create": "CreateProgram", "rtc_compile": "CompileProgram",
        "rtc_log_size": "GetProgramLogSize", "rtc_log": "GetProgramLog",
        "rtc_code_size": "GetCodeSize", "rtc_code": "GetCode", "rtc_destroy": "DestroyProgram",
    }, {"module_load": "hipModuleLoadData", "module_function": "hipModuleGetFunction",
        "launch": "hipModuleLaunchKernel"}),
}


class _Api:
    """The handful of calls both vendors need, bound to one vendor's libraries."""

    def __init__(self, vendor):
        torch_lib, site, cuda_home, rocm = _search_roots()
        self.vendor = vendor
        if vendor == "nvidia":
            self.rtc = _find_library(
                ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"],
                [f"{s}/nvidia/**/libnvrtc.so*" for s in site] + [f"{cuda_home}/lib64/libnvrtc.so*"])
            self.drv = _find_library(["libcuda.so.1", "libcuda.so"], [])
        else:
            # torch's own copies first: a second HIP runtime in the process (the system's, first on
            # LD_LIBRARY_PATH) would not see torch's queues or memory.
            self.rtc = _find_library(
                ["libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6"],
                [f"{torch_lib}/libhiprtc.so*", f"{rocm}/lib/libhiprtc.so*"], patterns_first=True)
            self.drv = _find_library(
                ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"],
                [f"{torch_lib}/libamdhip64.so*", f"{rocm}/lib/libamdhip64.so*"], patterns_first=True)
        prefix, rtc_symbols, drv_symbols = _SYMBOLS[vendor]
        for attr, symbol in rtc_symbols.items():
            setattr(self, attr, getattr(self.rtc, prefix + symbol))
        for attr, symbol in drv_symbols.items():
            setattr(self, attr, getattr(self.drv, symbol))
        if vendor == "nvidia":
            self.drv.cuInit(0)
        self.launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        major, minor = ctypes.c_int(), ctypes.c_int()
        getattr(self.rtc, prefix + "Version")(ctypes.byref(major), ctypes.byref(minor))
        self.rtc_version = f"{prefix}-{major.value}.{minor.value}"

    def check(self, code, what):
        if code != 0:
            if self.vendor == "amd":
                # ROCm keeps a failed call's error pending until read: an unread one would surface
                # later in an unrelated torch launch.
                self.drv.hipGetLastError()
            raise RuntimeError(f"{what} failed with {self.vendor} error {code}")


_apis = {}
_api_lock = threading.Lock()


def api_for(device: torch.device) -> _Api:
    vendor = "amd" if torch.version.hip else "nvidia"
    with _api_lock:
        if vendor not in _apis:
            _apis[vendor] = _Api(vendor)
    return _apis[vendor]


def is_available(device: torch.device) -> bool:
    """True when run-time compilation and launch can work for this device."""
    if device.type != "cuda":
        return False
    try:
        api_for(device)
        return True
    except (OSError, AttributeError):
        return False


def _headers_of(source: str, headers: dict) -> dict:
    """Every quoted #include reachable from source, as {name: text} (read from the package)."""
    for name in _INCLUDE.findall(source):
        if name not in headers:
            headers[name] = read_source(name)
            _headers_of(headers[name], headers)
    return headers


def _cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "mxfp4_mm")


def _compile(api: _Api, source: str, headers: dict, options: tuple) -> bytes:
    _count("compiled")
    prog = ctypes.c_void_p()
    names = [n.encode() for n in headers]
    texts = [headers[n].encode() for n in headers]
    arr = ctypes.c_char_p * max(len(headers), 1)
    api.check(api.rtc_create(ctypes.byref(prog), source.encode(), b"kernel.cu", len(headers),
                             arr(*texts), arr(*names)), "program create")
    opts = (ctypes.c_char_p * max(len(options), 1))(*[o.encode() for o in options])
    status = api.rtc_compile(prog, len(options), opts)
    log_size = ctypes.c_size_t()
    api.rtc_log_size(prog, ctypes.byref(log_size))
    log = ctypes.create_string_buffer(log_size.value + 1)
    api.rtc_log(prog, log)
    if status != 0:
        api.rtc_destroy(ctypes.byref(prog))
        raise CompileError(f"kernel compile failed ({api.rtc_version}, {' '.join(options)}):\n"
                           f"{log.value.decode(errors='replace')}")
    size = ctypes.c_size_t()
    api.check(api.rtc_code_size(prog, ctypes.byref(size)), "code size")
    code = ctypes.create_string_buffer(size.value)
    api.check(api.rtc_code(prog, code), "get code")
    api.rtc_destroy(ctypes.byref(prog))
    return code.raw


def _code_object(api, source, headers, options, arch) -> bytes:
    """Compiled code for (source, headers, options, arch, compiler); from the disk cache if there."""
    digest = hashlib.sha256()
    for part in (source, repr(sorted(headers.items())), repr(options), arch, api.rtc_version):
        digest.update(part.encode())
    path = _cache_dir() / f"{digest.hexdigest()[:32]}.{arch}.bin"
    if path.exists():
        return path.read_bytes()
    code = _compile(api, source, headers, options)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(code)
        os.replace(tmp, path)  # atomic: concurrent processes never see a partial file
    except OSError:
        pass  # a read-only home only costs a recompile next time
    return code


def default_options(device: torch.device, arch: str = None) -> tuple:
    """Compiler options for `device`; `arch` overrides the target (e.g. "sm_90a" for wgmma)."""
    arch = arch or kernel_arch(device)
    if torch.version.hip:
        return (f"--offload-arch={arch}", "-O3", "-std=c++17")
    return (f"--gpu-architecture={arch}", "-std=c++17", "-default-device")


def _make_primary_context_current(api, device):
    """torch's primary context is normally current already; make sure before a driver call."""
    ctx = ctypes.c_void_p()
    api.check(api.drv.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        dev = ctypes.c_int()
        api.check(api.drv.cuDeviceGet(ctypes.byref(dev), device.index), "cuDeviceGet")
        api.check(api.drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        api.check(api.drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def normalize_device(device) -> torch.device:
    """torch.device with an explicit index (cuda -> cuda:current)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class Module:
    def __init__(self, api, device, code):
        self.api, self.device = api, device
        self.handle = ctypes.c_void_p()
        self._code = ctypes.create_string_buffer(code, len(code))  # must outlive the load call
        with torch.cuda.device(device):
            torch.cuda.init()
            if api.vendor == "nvidia":
                _make_primary_context_current(api, device)
            api.check(api.module_load(ctypes.byref(self.handle), self._code), "module load")

    def function(self, name: str) -> "Function":
        handle = ctypes.c_void_p()
        self.api.check(self.api.module_function(ctypes.byref(handle), self.handle, name.encode()),
                       f"get function {name}")
        return Function(self, name, handle)


# ---- tensor maps (NVIDIA sm_90+): the descriptors `cp.async.bulk.tensor` copies through -----------

TENSOR_MAP_BYTES = 128
_TENSOR_MAP_ELEMENT_TYPES = {1: 0, 2: 1, 4: 2, 8: 4}  # element bytes -> CU_TENSOR_MAP_DATA_TYPE_UINT8/16/32/64


class TensorMap:
    """A 2-D tensor map (CUtensorMap, 128 bytes, 64-byte aligned) for a kernel argument of type "T":
    the kernel takes it by value as `const __grid_constant__`, so nothing is copied to the device."""

    def __init__(self):
        self._buffer = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + 64))()
        self.address = (ctypes.addressof(self._buffer) + 63) // 64 * 64

    def raw(self) -> bytes:
        return ctypes.string_at(self.address, TENSOR_MAP_BYTES)


SWIZZLE_128B = 3  # CUtensorMapSwizzle: 16-byte unit u of a 128-byte box row r lands at unit u ^ (r % 8)


def check_tensor_map_2d(address, element_bytes, rows, row_elements, row_stride_bytes, box_rows, box_elements,
                        swizzle=0):
    """The driver's rules for a 2-D tiled map without interleave (swizzle: 0 or SWIZZLE_128B), as
    ValueErrors naming the argument (cuTensorMapEncodeTiled only returns an error code)."""
    if swizzle not in (0, SWIZZLE_128B):
        raise ValueError(f"swizzle must be 0 (none) or SWIZZLE_128B ({SWIZZLE_128B}), got {swizzle}")
    if swizzle and box_elements * element_bytes > 128:
        raise ValueError(f"a 128-byte swizzled box row must be at most 128 bytes, got {box_elements * element_bytes}")
    if element_bytes not in _TENSOR_MAP_ELEMENT_TYPES:
        raise ValueError(f"element_bytes must be 1, 2, 4 or 8, got {element_bytes}")
    if address % 16:
        raise ValueError(f"the tensor's address must be 16-byte aligned, got {address:#x}")
    if not (0 < rows <= 2**32 and 0 < row_elements <= 2**32):
        raise ValueError(f"rows and row_elements must be in 1..2^32, got {rows}, {row_elements}")
    if row_stride_bytes % 16 or not 0 < row_stride_bytes < 2**40:
        raise ValueError(f"row_stride_bytes must be a positive multiple of 16 below 2^40, got {row_stride_bytes}")
    if not (0 < box_rows <= 256 and 0 < box_elements <= 256):
        raise ValueError(f"box_rows and box_elements must be in 1..256, got {box_rows}, {box_elements}")
    if box_elements * element_bytes % 16:
        raise ValueError(f"a box row must be a multiple of 16 bytes, got {box_elements} x {element_bytes} bytes")


def tensor_map_2d(device, address, element_bytes, rows, row_elements, row_stride_bytes, box_rows, box_elements,
                  out: TensorMap = None, swizzle: int = 0) -> TensorMap:
    """Encode (into `out`, or a new TensorMap) the map of a row-major [rows, row_elements] tensor
    read in boxes of [box_rows, box_elements]; elements outside the tensor read as zeros. swizzle
    SWIZZLE_128B: box rows land permuted in 16-byte units (the destination must be 1024-byte aligned)."""
    check_tensor_map_2d(address, element_bytes, rows, row_elements, row_stride_bytes, box_rows, box_elements, swizzle)
    api = api_for(device)
    if api.vendor != "nvidia":
        raise RuntimeError("tensor maps are an NVIDIA (sm_90+) feature")
    out = out or TensorMap()
    dims = (ctypes.c_uint64 * 2)(row_elements, rows)
    strides = (ctypes.c_uint64 * 1)(row_stride_bytes)
    box = (ctypes.c_uint32 * 2)(box_elements, box_rows)
    unit = (ctypes.c_uint32 * 2)(1, 1)
    # interleave NONE, swizzle as asked, L2 promotion 256 B, out-of-bounds fill zeros
    api.check(api.drv.cuTensorMapEncodeTiled(
        ctypes.c_void_p(out.address), ctypes.c_int(_TENSOR_MAP_ELEMENT_TYPES[element_bytes]), ctypes.c_uint32(2),
        ctypes.c_void_p(address), dims, strides, box, unit, ctypes.c_int(0), ctypes.c_int(swizzle), ctypes.c_int(3),
        ctypes.c_int(0)), "cuTensorMapEncodeTiled")
    return out


class _TensorMapSlot(ctypes.Array):
    """A launcher's by-value slot for a TensorMap argument."""
    _type_ = ctypes.c_uint8
    _length_ = TENSOR_MAP_BYTES

    @property
    def value(self):
        return bytes(self)

    @value.setter
    def value(self, tensor_map):
        ctypes.memmove(self, tensor_map.address, TENSOR_MAP_BYTES)


_ARG_TYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int32, "I": ctypes.c_uint32,
              "q": ctypes.c_int64, "f": ctypes.c_float, "T": _TensorMapSlot}


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint),
                ("queue", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


_PROGRAMMATIC_SERIALIZATION = 6  # CUlaunchAttributeID: programmatic serialization with the previous kernel


def _dependent_launch(api):
    """launch(handle, gx, gy, gz, bx, by, bz, shared, queue, params, extra) as cuLaunchKernelEx with
    programmatic dependent launch: the kernel may start while the queue's previous kernel runs, and
    waits for it with griddepcontrol.wait (NVIDIA only). One config per launcher: the launcher's lock
    keeps filling and launching together."""
    if api.vendor != "nvidia":
        raise RuntimeError("dependent launches need the CUDA driver")
    launch_ex = api.drv.cuLaunchKernelEx
    launch_ex.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    attribute = _LaunchAttribute(id=_PROGRAMMATIC_SERIALIZATION)
    attribute.value[0] = 1
    config = _LaunchConfig(attrs=ctypes.pointer(attribute), num_attrs=1)

    def launch(handle, gx, gy, gz, bx, by, bz, shared, queue, params, extra):
        config.grid[:] = (gx, gy, gz)
        config.block[:] = (bx, by, bz)
        config.shared_bytes, config.queue = shared, queue
        return launch_ex(ctypes.byref(config), handle, params, extra)

    return launch


class Function:
    def __init__(self, module, name, handle):
        self.module, self.name, self.handle = module, name, handle

    def launcher(self, arg_types: str, dependent: bool = False):
        """A callable launch(grid, block, shared_bytes, *args) with kernargs laid out once. dependent:
        a programmatic dependent launch of the queue's previous kernel (`_dependent_launch`)."""
        values = [_ARG_TYPES[t]() for t in arg_types]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        api, handle, device = self.module.api, self.handle, self.module.device
        launch = _dependent_launch(api) if dependent else api.launch
        # The argument slots are shared by every call of this launcher; the driver copies them at
        # launch, so only filling and launching must not interleave between host threads.
        slots_in_use = threading.Lock()

        def launch_kernel(grid, block, shared_bytes, *args):
            if len(args) != len(values):
                raise TypeError(f"{self.name}: expected {len(values)} kernel arguments, got {len(args)}")
            queue = current_queue_handle(device)
            with slots_in_use:
                for slot, arg in zip(values, args):
                    slot.value = arg.data_ptr() if isinstance(arg, torch.Tensor) else arg
                code = launch(handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                              shared_bytes, queue, params, None)
            api.check(code, f"launch {self.name}")

        return launch_kernel


_modules = {}
_module_locks = {}  # one per module key: a key compiles once, different keys concurrently
_cache_lock = threading.Lock()
stats = {"compiled": 0, "loaded": 0}  # compiler runs and modules loaded by this process (tests count them)


def _count(what):
    with _cache_lock:
        stats[what] += 1


def build_code(source: str, device: torch.device, options: tuple = (), arch: str = None) -> bytes:
    """Compile `source` for `device` into the disk cache (or find it there) without loading it: what
    a build worker does, so that `load_module` later only loads."""
    api = api_for(device)
    target = arch or kernel_arch(device)
    return _code_object(api, source, _headers_of(source, {}), default_options(device, target) + tuple(options),
                        target)


def load_module(source: str, device: torch.device, options: tuple = (), arch: str = None) -> Module:
    """Compile (or fetch from the disk cache) and load `source` for `device`; cached per process.
    `arch` overrides the compile target (default: the device's own, `kernel_arch`).
    Thread-safe; the compiler calls release the GIL, so threads compile different modules at once."""
    device = normalize_device(device)
    key = (source, tuple(options), device, arch)
    module = _modules.get(key)
    if module is not None:
        return module
    with _cache_lock:
        key_lock = _module_locks.setdefault(key, threading.Lock())
    with key_lock:
        module = _modules.get(key)
        if module is None:
            api = api_for(device)
            headers = _headers_of(source, {})
            target = arch or kernel_arch(device)
            code = _code_object(api, source, headers, default_options(device, target) + tuple(options), target)
            module = _modules[key] = Module(api, device, code)
            _count("loaded")
    return module


def current_queue_handle(device: torch.device) -> int:
    """Raw handle of torch's current queue on `device` (launches go there; keys split-K scratch)."""
    if _current_raw_queue is not None and device.index is not None:
        return _current_raw_queue(device.index)
    return getattr(_current_queue(device), _QUEUE_HANDLE_ATTR)
