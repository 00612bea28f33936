import sys, time, tempfile, filecmp
from pathlib import Path
from transformers import AutoConfig
from specdecode.models.gguf_check import read_header
from specdecode.models.gguf_config import transformers_config
for p in map(Path, sys.argv[1:]):
    t = time.time(); h = read_header(p); ours = transformers_config(h); t1 = time.time() - t
    t = time.time(); theirs = AutoConfig.from_pretrained(p.parent, gguf_file=p.name); t2 = time.time() - t
    a, b = tempfile.mkdtemp(), tempfile.mkdtemp(); ours.save_pretrained(a); theirs.save_pretrained(b)
    same = filecmp.cmp(Path(a) / "config.json", Path(b) / "config.json", shallow=False)
    print(p.name, f"ours {t1:.1f} s (header included), transformers {t2:.1f} s, config.json identical: {same}", flush=True)
    if not same:
        import json; x, y = json.load(open(Path(a)/"config.json")), json.load(open(Path(b)/"config.json"))
        print({k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)})
