"""The tokenizers a model reads and writes, one file per kind: sentencepiece.py (speechmt's own, with fixed special
ids and language tags), whisper.py (Whisper's byte-level BPE), lm.py (a pretrained language model's, trimmed on
the target side), and pair.py (a model's source and target tokenizers and their saved form)."""
