"""Cached teacher states: computed once per split, keyed by the teacher, and joined to examples by id."""

import torch

from speechmt.data.dataset import TextDataset, collate
from speechmt.data.manifest import read_manifest
from speechmt.data.teacher_cache import WithTeacher, cached_teacher_split, teacher_key
from speechmt.models.teacher import load_teacher
from speechmt.tokenizers.sentencepiece import Tokenizer


def test_cache_holds_each_transcripts_states_and_is_read_back(tiny_data, tiny_bert, tmp_path, monkeypatch):
    teacher = load_teacher(str(tiny_bert))
    records = read_manifest(tiny_data / "dev.jsonl")
    store = cached_teacher_split(tmp_path, "dev", teacher, records, batch_size=3)
    assert sorted(store.ids) == sorted(r.id for r in records) and store.dim == 32
    first = teacher.states([records[0].src_text])[0]
    assert torch.allclose(torch.from_numpy(store[records[0].id]), first, atol=2e-3)  # float16
    monkeypatch.setattr(type(teacher), "states", lambda *a: (_ for _ in ()).throw(AssertionError("recomputed")))
    again = cached_teacher_split(tmp_path, "dev", teacher, records)
    assert again.ids == store.ids


def test_another_teacher_gets_another_key(tiny_bert):
    a, b = load_teacher(str(tiny_bert)), load_teacher(str(tiny_bert))
    with torch.no_grad():
        b.model.encoder.layer[0].output.dense.bias += 0.1
    assert teacher_key(a)[0] == teacher_key(load_teacher(str(tiny_bert)))[0] != teacher_key(b)[0]


def test_with_teacher_adds_padded_states_to_batches(tiny_data, tiny_bert, tmp_path):
    teacher = load_teacher(str(tiny_bert))
    records = read_manifest(tiny_data / "train.jsonl")[:3]
    tok = Tokenizer.load(tiny_data / "spm.model")
    ds = WithTeacher(
        TextDataset.from_records(records, tok, tok, tgt_tag="<de>"),
        cached_teacher_split(tmp_path, "train", teacher, records),
    )
    assert len(ds) == 3 and ds.sizes == ds.dataset.sizes
    batch = collate([ds[i] for i in range(3)])
    lengths = [len(teacher.states([r.src_text])[0]) for r in records]
    assert batch.teacher.shape == (3, max(lengths), 32) and batch.teacher_lengths.tolist() == lengths
