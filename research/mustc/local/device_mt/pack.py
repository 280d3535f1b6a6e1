"""Packs the device arms: the decoder LoRA tensors (float16) of the last checkpoint both arms saved and of each arm's newest, with the checkpoint metadata, and each train log (README.md beside this file)."""
import json, sys, glob, os, re, shutil
from safetensors import safe_open
from safetensors.torch import save_file
exp, out = sys.argv[1:3]
os.makedirs(out, exist_ok=True)
steps = [{int(re.findall(r'checkpoint_(\d+)', p)[0]) for p in glob.glob(f'{exp}/{a}/checkpoint_[0-9]*.safetensors')} for a in ('all', 'corpus')]
print('saved', [sorted(s) for s in steps])
for arm, s in zip(('all', 'corpus'), steps):
    if os.path.exists(f'{exp}/{arm}/train_log.jsonl'): shutil.copy(f'{exp}/{arm}/train_log.jsonl', f'{out}/{arm}_train_log.jsonl')
    if not s: continue
    both = steps[0] & steps[1]
    for n in sorted({max(both)} | {max(s)} if both else {max(s)}):
        f = safe_open(f'{exp}/{arm}/checkpoint_{n}.safetensors', 'pt')
        t = {k: f.get_tensor(k).half() for k in f.keys() if 'lora' in k}
        save_file(t, f'{out}/{arm}_{n}.safetensors', metadata=f.metadata())
        print(arm, n, len(t), os.path.getsize(f'{out}/{arm}_{n}.safetensors'))
