"""Where an ng=2 plan goes wrong: per 64-column block and per M tile, the largest error against the
ng=1 plan of the same shape on the same inputs (and against the reference)."""
import sys
sys.path.insert(0, ".")
import torch
from mxfp4_mm import bench
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as P

device = torch.device("cuda")
for (m, n, k), ng2, ng1 in [((1, 128, 256), ('f8', 8, 2, 1, 1, 1, 0, 0, 2), ('f8', 8, 2)),
                            ((17, 256, 768), ('f8', 32, 3, 1, 1, 1, 0, 0, 2), ('f8', 32, 3)),
                            ((130, 2112, 1024), ('f8', 64, 4, 2, 1, 1, 0, 0, 2), ('f8', 64, 4, 2)),
                            ((64, 7168, 2048), ('f8', 64, 6, 1, 1, 1, 0, 0, 2), ('f8', 64, 4))]:
    data = bench.generate_input(m, n, k, 5, device)
    a, _, b_q, b_sh, b_scale_sh = data
    outs = {}
    for name, fields in (("ng2", ng2), ("ng1", ng1)):
        try:
            outs[name] = cuda.make_runner(m, n, k, device, P.plan_from_fields(list(fields)))(a, b_q, b_sh, b_scale_sh).float()
            torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001
            print(m, n, k, name, "raised", repr(error)[:300]); outs[name] = None
    ref = bench.reference(data).float()
    if outs["ng2"] is None:
        continue
    d = (outs["ng2"] - outs["ng1"]).abs()
    print(f"{m}x{n}x{k}: ng2 close {bench.harness_close(outs['ng2'].bfloat16(), ref.bfloat16())}, ng1 close "
          f"{bench.harness_close(outs['ng1'].bfloat16(), ref.bfloat16())}, max |ng2-ng1| {d.max().item():.4g}, nan {outs['ng2'].isnan().sum().item()}")
    blocks = [f"{c // 64}:{d[:, c:c + 64].max().item():.3g}" for c in range(0, n, 64)][:40]
    print("   by 64 columns:", " ".join(blocks))
    print("   by 16 rows:", " ".join(f"{r // 16}:{d[r:r + 16].max().item():.3g}" for r in range(0, m, 16)))
