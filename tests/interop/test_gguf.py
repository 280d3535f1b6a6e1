"""import-gguf: a tiny random Hugging Face causal LM (Gemma 3 with tied embeddings, Llama with its own output
layer), written as a float32 GGUF file with the `gguf` package under the names and conventions llama.cpp uses,
converted into a folder that must reload with the logits and tokenizer transformers reads from the GGUF itself;
broken inputs give a one-line error. Everything is local: runs offline."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
)

from speechmt.cli import main
from speechmt.interop import HFImportError
from speechmt.interop.gguf import import_gguf, read_gguf_header

gguf = pytest.importorskip("gguf", reason="the gguf package (a speechmt dependency) writes the test files")

TEXT = "the cat sat on the mat"
_WORDS = [
    "▁the",
    "▁cat",
    "▁sat",
    "▁on",
    "▁mat",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "at",
    "th",
    "he",
    "▁t",
    "▁c",
    "▁s",
    "▁o",
    "▁m",
    "ca",
    "sa",
    "ma",
]
TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"] + ["▁"] + list("abcdefghijklmnopqrstuvwxyz") + _WORDS
TYPES = [3, 3, 3, 2] + [1] * (len(TOKENS) - 4)  # control, control, control, unknown, then normal
GGUF_ARCH = {"gemma3": gguf.MODEL_ARCH.GEMMA3, "llama": gguf.MODEL_ARCH.LLAMA}


def _tiny_model(arch: str):
    """A random tiny causal LM: every weight random (norm weights on a 1/16 grid, so llama.cpp's +1 and
    transformers' -1 for Gemma norms are exact)."""
    common = dict(
        vocab_size=len(TOKENS),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    if arch == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common, sliding_window=4, tie_word_embeddings=True))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=False))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randint(-8, 9, p.shape) / 16 if "norm" in name else torch.randn(p.shape) * 0.3)
    return model.eval()


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's interleaving of Llama's q/k rows (the inverse of transformers' reverse permutation)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_tensors(model, arch: str) -> dict[str, np.ndarray]:
    """The model's tensors under GGUF names, as llama.cpp's converter writes them (float32)."""
    config = model.config
    names = gguf.get_tensor_name_map(GGUF_ARCH[arch], config.num_hidden_layers)
    out = {}
    for hf_name, tensor in model.state_dict().items():
        if arch == "gemma3" and hf_name == "lm_head.weight":
            continue  # tied to the embeddings: absent from the file
        module, _, suffix = hf_name.rpartition(".")
        name = f"{names.get_name(module)}.{suffix}"
        w = tensor.numpy().astype(np.float32)
        if arch == "gemma3" and "norm.weight" in name:
            w = w + 1
        if arch == "llama" and ".attn_q." in name:
            w = _permute(w, config.num_attention_heads)
        if arch == "llama" and ".attn_k." in name:
            w = _permute(w, config.num_key_value_heads)
        out[name] = w
    return out


def write_gguf(model, arch: str, path: Path, rename: dict[str, str | None] | None = None) -> Path:
    """A GGUF file of `model` with the metadata transformers' GGUF loader reads, and a SentencePiece-style
    ("llama") tokenizer over TOKENS; `rename` writes tensors under other names (None: leaves them out)."""
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    if arch == "gemma3":
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
        w.add_sliding_window(c.sliding_window)
        w.add_rope_freq_base(1e6)
    else:
        w.add_rope_dimension_count(c.head_dim)
        w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(TOKENS)
    w.add_token_scores([-float(i) for i in range(len(TOKENS))])
    w.add_token_types(TYPES)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(arch != "gemma3")
    rename = rename or {}
    for name, array in _gguf_tensors(model, arch).items():
        if rename.get(name, name) is not None:
            w.add_tensor(rename.get(name, name), array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _gguf_loaded(path: Path):
    """The model and tokenizer as transformers reads them from the GGUF file (the reference)."""
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
    return model, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _logits(model) -> torch.Tensor:
    ids = torch.randint(0, len(TOKENS), (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module", params=["gemma3", "llama"])
def case(request, tmp_path_factory):
    """(architecture, original HF model, GGUF file, converted folder)."""
    arch, root = request.param, tmp_path_factory.mktemp(request.param)
    model = _tiny_model(arch)
    path = write_gguf(model, arch, root / f"tiny-{arch}.gguf")
    return arch, model, path, import_gguf(path, root / "hf")


def test_the_gguf_file_holds_the_original_model(case):
    arch, original, path, _ = case
    loaded, _ = _gguf_loaded(path)
    assert type(loaded) is type(original)
    want, got = original.state_dict(), loaded.state_dict()
    assert sorted(got) == sorted(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert read_gguf_header(path)["architecture"] == arch


def test_the_folder_reloads_with_the_logits_of_the_gguf(case):
    arch, _, path, out = case
    reference, _ = _gguf_loaded(path)
    imported = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(imported) is type(reference)
    assert torch.allclose(_logits(imported), _logits(reference), rtol=0, atol=1e-6)
    want, got = reference.state_dict(), imported.state_dict()
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    tied = arch == "gemma3"
    assert (imported.lm_head.weight is imported.model.embed_tokens.weight) == tied
    on_disk = load_file(out / "model.safetensors")
    assert ("lm_head.weight" in on_disk) != tied and len(on_disk) == len(want) - tied
    assert {t.dtype for t in on_disk.values()} == {torch.float32}


def test_the_folder_holds_a_plain_config_and_the_tokenizer(case):
    arch, _, path, out = case
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert sorted(p.name for p in out.parent.iterdir()) == ["hf", path.name]  # no temporary folder left
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 2
    assert config["architectures"] == [{"gemma3": "Gemma3ForCausalLM", "llama": "LlamaForCausalLM"}[arch]]
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert not {"gguf_file", "is_local", "local_files_only"} & set(tokenizer_config)
    _, reference = _gguf_loaded(path)
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok(TEXT).input_ids
    assert ids == reference(TEXT).input_ids and ids[0] == 2 and 3 not in ids  # <bos> first, no <unk>
    assert tok.decode(ids, skip_special_tokens=True) == TEXT
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<bos>", "<eos>", "<pad>")


def test_bfloat16_weights(case, tmp_path):
    _, _, path, out = case
    half = import_gguf(path, tmp_path / "bf16", dtype="bfloat16")
    assert {t.dtype for t in load_file(half / "model.safetensors").values()} == {torch.bfloat16}
    want = AutoModelForCausalLM.from_pretrained(out).state_dict()
    got = AutoModelForCausalLM.from_pretrained(half, dtype=torch.float32).state_dict()
    assert all(torch.equal(got[k], want[k].bfloat16().float()) for k in want)


def test_cli_converts_and_replaces_an_existing_folder(case, tmp_path, capsys):
    _, _, path, _ = case
    out = tmp_path / "hf"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    assert main(["import", "gguf", str(path), "--out", str(out)]) == 0
    assert "stale.txt" not in {p.name for p in out.iterdir()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    assert f"{out}: Hugging Face causal LM of {path} (float32)" in capsys.readouterr().out


def test_a_relative_path_names_that_file_not_one_in_the_working_directory(case, tmp_path, monkeypatch):
    _, _, path, out = case
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / path.name).write_bytes(path.read_bytes())
    (tmp_path / path.name).write_text("not this one")
    monkeypatch.chdir(tmp_path)
    got = import_gguf(Path("model") / path.name, "hf")
    assert load_file(got / "model.safetensors").keys() == load_file(out / "model.safetensors").keys()


def test_a_failure_while_writing_leaves_no_folder(case, tmp_path, monkeypatch):
    _, _, path, _ = case

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("safetensors.torch.save_file", fail)
    with pytest.raises(OSError, match="disk full"):
        import_gguf(path, tmp_path / "out" / "hf")
    assert list((tmp_path / "out").iterdir()) == []


def _header_only(path: Path, arch: str) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _broken(kind: str, folder: Path) -> Path:
    """A file that import-gguf must refuse, of each kind."""
    path = folder / f"{kind.replace(' ', '-')}.gguf"
    if kind == "missing":
        return path
    if kind == "not gguf":
        path.write_text("English: hello\nGerman: hallo\n")
    elif kind == "old version":
        path.write_bytes(b"GGUF" + struct.pack("<IQQ", 1, 0, 0))
    elif kind == "truncated":
        full = write_gguf(_tiny_model("gemma3"), "gemma3", folder / "full.gguf").read_bytes()
        path.write_bytes(full[:20])
    elif kind == "unreadable architecture":
        _header_only(path, "bert")
    elif kind == "no tensors":
        _header_only(path, "llama")
    elif kind == "missing tensor":
        write_gguf(_tiny_model("llama"), "llama", path, rename={"blk.1.ffn_up.weight": None})
    elif kind == "misnamed tensor":
        write_gguf(_tiny_model("llama"), "llama", path, rename={"blk.1.ffn_up.weight": "blk.1.ffn_upper.weight"})
    return path


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("missing", "no such file (expected a GGUF model file)"),
        ("not gguf", "not a GGUF file (starts with b'Engl', not b'GGUF')"),
        ("old version", "GGUF version 1 is not supported (expected 2 or 3)"),
        ("truncated", "truncated GGUF file (ends inside its header)"),
        ("unreadable architecture", "architecture 'bert' is not one transformers"),
        ("no tensors", "the GGUF file holds no tensors"),
        (
            "missing tensor",
            "its metadata describe a LlamaForCausalLM of 18,848 parameters, but its tensors hold "
            "17,312 values (metadata or tensors missing)",
        ),
        ("misnamed tensor", "1 weights of LlamaForCausalLM are not in the file: model.layers.1.mlp.up_proj.weight"),
    ],
)
def test_bad_input_gives_one_line_naming_the_file(kind, expected, tmp_path, capsys):
    path = _broken(kind, tmp_path)
    with pytest.raises(HFImportError, match=f"^{path}: "):
        import_gguf(path, tmp_path / "hf")
    assert main(["import", "gguf", str(path), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err  # transformers' progress bars may come first
    last = err.splitlines()[-1]
    assert last.startswith(f"speechmt: error: {path}: ") and expected in last, err
    assert err.count("error") == 1 and "Traceback" not in err and "LOAD REPORT" not in err
    assert not (tmp_path / "hf").exists()
