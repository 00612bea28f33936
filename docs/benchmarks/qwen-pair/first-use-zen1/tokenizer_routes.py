import sys, time, json, filecmp, tempfile
from pathlib import Path
from transformers import AutoConfig, AutoTokenizer
p = Path(sys.argv[1])
t = time.time(); config = AutoConfig.from_pretrained(p.parent, gguf_file=p.name); print("config", round(time.time()-t,1), config.model_type)
t = time.time(); fast = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name, tokenizer_type=config.model_type); print("fast tok", round(time.time()-t,1), type(fast).__name__)
t = time.time(); full = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name); print("full tok", round(time.time()-t,1), type(full).__name__)
a, b = tempfile.mkdtemp(), tempfile.mkdtemp()
fast.save_pretrained(a); full.save_pretrained(b)
for f in sorted(Path(a).iterdir()):
    print(f.name, filecmp.cmp(f, Path(b) / f.name, shallow=False))
print(sorted(x.name for x in Path(b).iterdir()))
