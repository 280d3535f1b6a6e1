import pytest
import torch
from torch.utils.data import DataLoader

from speechmt.audio import SpecAugmentConfig
from speechmt.data.batching import BucketBatchSampler
from speechmt.data.dataset import Example, SpeechDataset, StoredFeatures, TextDataset, collate, global_cmvn, load_split
from speechmt.data.mustc import prepare_mustc
from speechmt.data.prepare import PrepareConfig
from speechmt.data.vocab import train_from_manifests
from speechmt.frontend import FbankFrontend
from speechmt.tokenizers.sentencepiece import TokenizerConfig


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from tests.conftest import ASSETS

    out = tmp_path_factory.mktemp("mustc")
    prepare_mustc(ASSETS / "mustc", out, "de", cfg=PrepareConfig(jobs=1))
    tok = train_from_manifests(
        [out / "train.jsonl", out / "dev.jsonl"],
        ("src_text", "tgt_text"),
        TokenizerConfig(vocab_size=120, lang_tags=("<en>", "<de>")),
    )
    return out, tok


def stored(store, out) -> StoredFeatures:
    """The store's features with the global CMVN of the prepared folder `out`."""
    return StoredFeatures(store, FbankFrontend(cmvn=global_cmvn(out)))


def test_speech_dataset_items(prepared):
    out, tok = prepared
    records, store = load_split(out, "train")
    ds = SpeechDataset(records, stored(store, out), tok, tok, src_tag="<en>", tgt_tag="<de>")
    assert ds.sizes.tolist() == [r.n_frames for r in records] == [150, 240, 134, 207, 170, 162]
    ex = ds[1]
    assert ex.id == "ted_1_1" and ex.feats.shape == (240, 80)
    assert ex.src_ids[0] == tok.tag_id("<en>") and ex.tgt_ids[0] == tok.tag_id("<de>")
    assert ex.tgt_ids[-1] == tok.eos_id
    assert tok.decode(ex.tgt_ids[1:].tolist()) == "Wir bauen ein Werkzeug für Sprachübersetzung."
    frames = torch.cat([ds[i].feats for i in range(len(ds))])
    assert frames.mean(0).abs().max() < 1e-3  # global CMVN from the same split
    assert (frames.std(0) - 1).abs().max() < 1e-2


def test_spec_augment_depends_on_epoch_only(prepared):
    out, _ = prepared
    records, store = load_split(out, "train")
    ds = SpeechDataset(records, stored(store, out), spec_augment=SpecAugmentConfig.policy("lb"))
    a = ds[0].feats
    assert torch.equal(a, ds[0].feats)
    ds.set_epoch(1)
    assert not torch.equal(a, ds[0].feats)
    plain = SpeechDataset(records, stored(store, out))[0].feats
    assert (a != plain).any() and (a == plain).float().mean() > 0.5


def test_batches_from_sampler(prepared):
    out, tok = prepared
    records, store = load_split(out, "train")
    ds = SpeechDataset(records, stored(store, out), tgt_tokenizer=tok)
    sampler = BucketBatchSampler(ds.sizes, max_tokens=500, seed=0)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=lambda b: collate(b, tok.pad_id))
    size = {r.id: r.n_frames for r in records}
    seen = []
    for batch in loader:
        assert batch.feats.shape[0] * batch.feats.shape[1] <= 500
        assert batch.feat_lengths.tolist() == [size[i] for i in batch.ids]
        assert batch.tgt.shape == (len(batch), int(batch.tgt_lengths.max()))
        assert (batch.tgt[0, batch.tgt_lengths[0] :] == tok.pad_id).all()
        seen += batch.ids
    assert sorted(seen) == sorted(r.id for r in records)


def test_text_dataset(prepared):
    out, tok = prepared
    records, _ = load_split(out, "dev")
    ds = TextDataset.from_records(records, tok, tok, tgt_tag="<de>")
    batch = collate([ds[0], ds[1]], tok.pad_id)
    assert batch.feats is None and batch.src.shape[0] == 2
    assert ds.sizes == [len(tok.encode(r.src_text)) for r in records]
    assert batch.ids == ["ted_3_0", "ted_3_1"]


def test_mismatched_store_is_an_error(prepared, tmp_path):
    import shutil

    out, _ = prepared
    shutil.copytree(out, tmp_path / "d")
    (tmp_path / "d" / "dev.jsonl").write_text((out / "dev.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(ValueError, match="hold different utterances"):
        load_split(tmp_path / "d", "dev")


def test_collate_pads_source_ids_with_the_sentencepiece_pad():
    """A Whisper decoder pads its targets with its own id; source ids stay SentencePiece's (pad 0)."""
    batch = collate(
        [
            Example(0, "a", None, torch.tensor([5, 6, 3]), torch.tensor([9, 50257])),
            Example(1, "b", None, torch.tensor([7, 3]), torch.tensor([9])),
        ],
        pad_id=50257,
    )
    assert batch.src.tolist() == [[5, 6, 3], [7, 3, 0]] and batch.tgt.tolist() == [[9, 50257], [9, 50257]]
