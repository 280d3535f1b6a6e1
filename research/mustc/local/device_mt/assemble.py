"""Joins LoRA tensors trained on the GPU machine (pack.py's float16 file) with the recipe's MT checkpoint: its speech side and base checksum, the arm's output vocabulary (README.md beside this file).
usage: assemble.py DEVICE_CKPT MT_CKPT OUT"""
import json, sys
from safetensors import safe_open
from safetensors.torch import save_file
dev_path, home_path, out = sys.argv[1:4]
dev, home = safe_open(dev_path, 'pt'), safe_open(home_path, 'pt')
d, h = json.loads(dev.metadata()['state']), json.loads(home.metadata()['state'])
tensors = {k: home.get_tensor(k) for k in home.keys()}
for k in dev.keys():
    assert k in tensors and tensors[k].shape == dev.get_tensor(k).shape, k
    tensors[k] = dev.get_tensor(k).float()
h['tokenizers'] = d['tokenizers']
h['model_config']['tgt_vocab_size'] = d['model_config']['tgt_vocab_size']
h.pop('averaged_from', None)
h['train_config']['train'] = d['train_config']['train']
h['train_config']['data']['dir'] = d['train_config']['data']['dir']
save_file(tensors, out, metadata={**home.metadata(), 'state': json.dumps(h)})
print(out, len(dev.keys()), 'LoRA tensors from', dev_path, 'tgt vocab', h['model_config']['tgt_vocab_size'])
