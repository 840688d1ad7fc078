"""What this machine knows, on disk under the cache folder (`MXFP4_MM_CACHE_DIR`, default
`~/.cache/mxfp4_mm`), in one folder per *identity*: the device, its driver and compilers, torch,
Triton and the package's complete sources (every module and kernel file, whatever is imported).

- The ledger (`ledger.jsonl`, appended by every process): a line before a candidate's first run
  on a shape and one after it returns. A run line whose process is gone without its return line
  means that run faulted or hung there: its whole family is never offered again on this identity.
- The memo (one JSON file per shape and backend set): every candidate's timing, the wrong ones,
  the choice, and whether the sweep is complete. Keyed by the identity and the shape, never data.
"""

import functools
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import torch

NOT_SHIPPED = frozenset({"bundle.py", "floor_kernels.py", "peer_humming.py", "tune.py"})  # build-time and bench-only modules
LEDGER_FILE = "ledger.jsonl"


# ---- identity -----------------------------------------------------------------------------------

def shipped_module_sources() -> dict:
    """{dotted name: source} of every module the submission ships (the bundler writes the same set)."""
    from .. import kernels
    if kernels.BUNDLED_MODULES:
        return dict(kernels.BUNDLED_MODULES)
    modules = {}
    package_dir = Path(__file__).resolve().parent.parent  # a checkout or an install (not bundled)
    for path in sorted(package_dir.rglob("*.py")):
        if path.name in NOT_SHIPPED or "__pycache__" in path.parts:
            continue
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path.read_text()
    return modules


def kernel_sources() -> dict:
    from .. import kernels
    if kernels.BUNDLED:
        return dict(kernels.BUNDLED)
    return {name: kernels.read_source(name) for name in kernels.source_names()}


@functools.lru_cache(maxsize=1)
def package_digest() -> str:
    """Hash of every shipped module and kernel source: the same for the package and its bundle."""
    digest = hashlib.sha256()
    for table in (shipped_module_sources(), kernel_sources()):
        for name in sorted(table):
            digest.update(name.encode() + b"\0" + table[name].encode() + b"\0")
    return digest.hexdigest()


def _driver_versions() -> str:
    import ctypes
    from .. import runtime
    api = runtime.api_for(None)
    version = ctypes.c_int()
    getter = getattr(api.drv, "cuDriverGetVersion" if api.vendor == "nvidia" else "hipDriverGetVersion")
    getter(ctypes.byref(version))
    return f"{api.vendor}-driver-{version.value} {api.rtc_version}"


@functools.lru_cache(maxsize=8)
def identity(device: torch.device) -> dict:
    """What every record depends on besides the shape."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        from ..devices import kernel_arch
        try:
            driver = _driver_versions()
        except Exception:  # no run-time compiler here: the backends that need one are unavailable anyway
            driver = None
        name, arch = torch.cuda.get_device_name(device), kernel_arch(device)
    else:
        name, arch, driver = "cpu", platform.machine(), None
    return {"device": name, "arch": arch, "driver": driver, "torch": torch.__version__,
            "toolkit": torch.version.hip or torch.version.cuda, "triton": triton_version,
            "package": package_digest()}


def cache_dir() -> Path:
    return Path(os.environ.get("MXFP4_MM_CACHE_DIR") or Path.home() / ".cache" / "mxfp4_mm")


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:24]


def records_dir(device: torch.device) -> Path:
    return cache_dir() / "tuning" / _digest(identity(device))


def shape_key(shape) -> str:
    return "x".join(map(str, shape))


# ---- processes ----------------------------------------------------------------------------------

def _start_time(pid: int):
    """The process's start time in clock ticks since boot (Linux), None where unknown."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, started) -> bool:
    """Whether process `pid`, started at `started`, still runs (a reused pid does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _start_time(pid)
    return started is None or now is None or now == started


# ---- the ledger ---------------------------------------------------------------------------------

class Ledger:
    """Append-only JSON lines shared by every process of one identity. One write() per line, in
    append mode, so lines of concurrent processes never interleave."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LEDGER_FILE
        self._me = (os.getpid(), _start_time(os.getpid()))
        self._seq = 0

    def _append(self, record):
        record["t"] = round(time.time(), 3)
        line = json.dumps(record, sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def records(self) -> list:
        try:
            text = self.path.read_text()
        except OSError:
            return []
        records = []
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:  # a line cut by a crash mid-write
                pass
        return records

    def begin(self, shape, label, family, limit_s) -> str:
        """Recorded before the candidate's first run on the shape; `limit_s`: how long that run may
        take before a supervisor calls it hung. Returns the run's id for `end`."""
        self._seq += 1
        run = f"{self._me[0]}.{self._me[1]}.{self._seq}"
        self._append({"ev": "run", "id": run, "shape": shape_key(shape), "label": label, "family": family,
                      "pid": self._me[0], "started": self._me[1], "limit_s": limit_s})
        return run

    def end(self, run: str):
        """Recorded when the first run returned (right or wrong: it did not fault)."""
        self._append({"ev": "ran", "id": run})

    def abandon(self, run: str):
        """The run was cut by a deadline, not ended by a fault: neither proven nor ruled out."""
        self._append({"ev": "cut", "id": run})

    def mark(self, family, why, label=None, shape=None):
        """Family `family` faulted or hung (why: "fault" | "hang"): never offered again here."""
        self._append({"ev": "bad", "family": family, "why": why, "label": label,
                      "shape": shape_key(shape) if shape else None})

    def open_runs_of(self, pid):
        """Run records of process `pid` that neither returned nor were cut."""
        records = self.records()
        closed = {r["id"] for r in records if r.get("ev") in ("ran", "cut")}
        return [r for r in records if r.get("ev") == "run" and r["pid"] == pid and r["id"] not in closed]

    def state(self):
        """(proven {(shape key, label)}, bad {family: why}, open [run records still in flight])."""
        records = self.records()
        returned = {r["id"] for r in records if r.get("ev") == "ran"}
        cut = {r["id"] for r in records if r.get("ev") == "cut"}
        bad = {r["family"]: r["why"] for r in reversed(records) if r.get("ev") == "bad"}
        proven, open_runs = set(), []
        for r in records:
            if r.get("ev") == "run" and r["id"] not in cut:
                if r["id"] in returned:
                    proven.add((r["shape"], r["label"]))
                elif _alive(r["pid"], r.get("started")):
                    open_runs.append(r)
                else:  # its process is gone and the run never returned: it took the process down
                    bad.setdefault(r["family"], "fault")
        return proven, bad, open_runs

    def settle(self):
        """Write a `bad` line for every run whose process died in it, so later readers need no
        process checks; returns the families so marked."""
        records = self.records()
        closed = {r["id"] for r in records if r.get("ev") in ("ran", "cut")}
        marked = {r["family"] for r in records if r.get("ev") == "bad"}
        found = []
        for r in records:
            if (r.get("ev") == "run" and r["id"] not in closed and r["family"] not in marked
                    and not _alive(r["pid"], r.get("started"))):
                self.mark(r["family"], "fault", r["label"], tuple(map(int, r["shape"].split("x"))))
                marked.add(r["family"])
                found.append(r["family"])
        return found


def ledger_for(device: torch.device) -> Ledger:
    return Ledger(records_dir(device))


# ---- the memo -----------------------------------------------------------------------------------

class Memo:
    """One shape's measurements on this identity and backend set.

    data = {"shape", "backends", "timed": {label: quick µs}, "wrong": {label: why},
            "failed": {label: why} (build errors), "chosen": label or None, "chosen_us",
            "final": {label: µs}, "complete": bool (every candidate was tried),
            "served": label or None (what a process served from these records), "updated": epoch}
    Labels are "backend:plan label". Once a choice has served, the shape is settled: later sweeps leave
    it alone, so every later process (the benchmark run, then the ranked run) serves the same plan."""

    def __init__(self, device, shape, backends):
        self.shape = tuple(shape)
        self.backends = list(backends)
        self.path = records_dir(device) / f"memo-{shape_key(shape)}-{_digest(self.backends)}.json"
        self.data = self._read() or {"shape": list(self.shape), "backends": self.backends, "timed": {},
                                     "wrong": {}, "failed": {}, "chosen": None, "chosen_us": None,
                                     "final": {}, "complete": False, "served": None}

    def _read(self):
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("shape") == list(self.shape) else None

    def reload(self):
        self.data = self._read() or self.data
        return self

    def save(self):
        self.data["updated"] = round(time.time(), 3)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
            os.replace(tmp, self.path)  # atomic: a reader never sees half a file
        except OSError:
            pass  # a read-only cache only costs measuring again

    def settled(self) -> bool:
        """Nothing more to measure: every candidate was tried, or a choice has served."""
        return bool(self.data["complete"] or self.data.get("served"))

    def mark_served(self, label):
        if self.data.get("served") != label:
            self.data["served"] = label
            self.save()

    def tried(self) -> set:
        d = self.data
        return set(d["timed"]) | set(d["wrong"]) | set(d["failed"])

    def ranked(self) -> list:
        """Timed labels, fastest first: the final re-timing where there is one, else the quick one."""
        d = self.data
        order = sorted(d["timed"], key=lambda label: (d["final"].get(label, d["timed"][label]), label))
        for first in (d["chosen"], d.get("served")):  # what served before, else the choice, leads
            if first in order:
                order.remove(first)
                order.insert(0, first)
        return order
