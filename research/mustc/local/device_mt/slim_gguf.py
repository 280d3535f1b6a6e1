"""Zeroes the token-embedding rows of a GGUF that none of the given jsonl texts use (a transfer copy; README.md beside this file).
usage: slim_gguf.py GGUF (modified in place) JSONL...; reads the tokenizer of $SPEECHMT_HOME/gemma-3-270m"""
import json, os, sys
import numpy as np, gguf
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(os.path.join(os.environ.get('SPEECHMT_HOME', os.path.expanduser('~/.cache/speechmt')), 'gemma-3-270m'))
texts = []
for path in sys.argv[2:]:
    for line in open(path):
        r = json.loads(line)
        for k in ('src_text', 'tgt_text', 'text', 'src', 'tgt'):
            if isinstance(r.get(k), str): texts.append(r[k])
texts += ["English:", "German:", "Spanish:", " English:", " German:", "\nGerman:", "\nEnglish:", "Transcript:", "Translation:"]
keep = set(range(1000))
for i in range(0, len(texts), 5000):
    for ids in tok(texts[i:i+5000], add_special_tokens=True)['input_ids']: keep.update(ids)
    for ids in tok([" " + t for t in texts[i:i+5000]], add_special_tokens=False)['input_ids']: keep.update(ids)
keep.update(tok.all_special_ids)
print(len(texts), 'texts', len(keep), 'kept ids')
r = gguf.GGUFReader(sys.argv[1])
t = [t for t in r.tensors if t.name == 'token_embd.weight'][0]
row = t.n_bytes // 262144
data = np.memmap(sys.argv[1], dtype=np.uint8, mode='r+', offset=t.data_offset, shape=(262144, row))
mask = np.ones(262144, bool); mask[sorted(keep)] = False
data[mask] = 0; data.flush()
print('kept', len(keep), 'of 262144 rows')
