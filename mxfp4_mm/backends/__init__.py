"""GEMM backends. Each module exposes:

    NAME: str
    is_available(device: torch.device) -> bool      # cheap; no compilation
    make_runner(m, n, k, device) -> runner          # may compile; raises on failure
    runner(a, b_q, b_shuffle, b_scale_sh) -> bf16 C [M, N], freshly allocated

Inputs reaching a runner are validated (`validate.check_gemm_inputs`), A is contiguous,
and B_q / B_shuffle / B_scale_sh are viewed as uint8. B_shuffle may be None (library callers);
a backend that needs it builds it or declines in make_runner.
"""
