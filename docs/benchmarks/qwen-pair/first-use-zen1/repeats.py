"""The step-cost curve of the 1.5B measured with 5 repeats and with 3, interleaved (Zen 1)."""
import time
from specdecode.models import load_model
from specdecode.timing import measure
m = load_model("qwen2.5-coder-1.5b")
print(m.kernels, flush=True)
for repeats in (5, 3, 5, 3):
    t = time.time(); c = measure(m.target, repeats=repeats); took = time.time() - t
    one = c.seconds[0]
    print(f"repeats {repeats}: {took:5.1f} s  1-row {one*1e3:6.1f} ms  rows/1-row "
          + " ".join(f"{s/one:.2f}" for s in c.seconds) + "  long " + " ".join(f"{s/one:.2f}" for s in c.long_seconds)
          + f"  per_cached {c.per_cached:.2e}  {c}", flush=True)
