"""Batched text-to-text generation for back-translation and distillation, from either

- a speechmt MT checkpoint (or a multi-task one asked for its text task): its source tokenizer, text encoder and
  beam search, as `speechmt evaluate --task mt` decodes (`CheckpointGenerator`); or
- a plain Hugging Face causal LM (a local folder, a name under $SPEECHMT_HOME such as `gemma-3-270m`, or a hub
  id), greedy, continuing a 3-shot plain-text prompt `German: ...\\nEnglish: ...` and cut at the first newline,
  as the zero-shot peer benchmarks/peers/cascade_whisper_gemma.py does (`FewShotLM`).

Both are `generator(texts) -> list[str]` over one batch; an empty text gives an empty output.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path

import torch

# Everyday sentence pairs written for these prompts (none from any corpus or test set), per language.
SHOTS = {
    "en": (
        "Where is the nearest train station?",
        "I would like a cup of coffee, please.",
        "We are going to visit my grandmother tomorrow.",
    ),
    "de": (
        "Wo ist der nächste Bahnhof?",
        "Ich hätte gern eine Tasse Kaffee, bitte.",
        "Wir besuchen morgen meine Großmutter.",
    ),
    "es": (
        "¿Dónde está la estación de tren más cercana?",
        "Quisiera una taza de café, por favor.",
        "Mañana vamos a visitar a mi abuela.",
    ),
    "fr": (
        "Où est la gare la plus proche ?",
        "Je voudrais une tasse de café, s'il vous plaît.",
        "Nous allons rendre visite à ma grand-mère demain.",
    ),
    "it": (
        "Dov'è la stazione ferroviaria più vicina?",
        "Vorrei una tazza di caffè, per favore.",
        "Domani andiamo a trovare mia nonna.",
    ),
    "nl": (
        "Waar is het dichtstbijzijnde treinstation?",
        "Ik wil graag een kopje koffie, alstublieft.",
        "We gaan morgen bij mijn oma op bezoek.",
    ),
    "pt": (
        "Onde fica a estação de trem mais próxima?",
        "Eu gostaria de uma xícara de café, por favor.",
        "Amanhã vamos visitar minha avó.",
    ),
    "ro": (
        "Unde este cea mai apropiată gară?",
        "Aș dori o ceașcă de cafea, vă rog.",
        "Mâine mergem în vizită la bunica mea.",
    ),
    "ru": (
        "Где ближайший вокзал?",
        "Я бы хотел чашку кофе, пожалуйста.",
        "Завтра мы навестим мою бабушку.",
    ),
}
NAMES = {
    "en": "English",
    "de": "German",
    "es": "Spanish",
    "fr": "French",
    "it": "Italian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
}


class GeneratorError(ValueError):
    """A model that cannot generate the asked text (not a text model, no such folder); one line naming it."""


def few_shot_prompt(source: str, src_lang: str, tgt_lang: str) -> str:
    """The 3-shot prompt asking for the `tgt_lang` of one `src_lang` sentence."""
    shots = "".join(
        f"{NAMES[src_lang]}: {s}\n{NAMES[tgt_lang]}: {t}\n\n" for s, t in zip(SHOTS[src_lang], SHOTS[tgt_lang])
    )
    return f"{shots}{NAMES[src_lang]}: {source.strip()}\n{NAMES[tgt_lang]}:"


class CheckpointGenerator:
    """A speechmt text model (task mt): `generator(texts)` -> its beam search's best translations."""

    def __init__(self, path: str, device: str = "cpu", beam: int = 1, max_len_b: int = 200, task: str | None = None):
        from speechmt.decoding.translate import load_model

        self.lm = load_model(path, device, task)
        if self.lm.source_tokenizer is None or self.lm.task != "mt":
            raise GeneratorError(
                f"{path}: not a text MT model (task {self.lm.task!r}); give an MT checkpoint, or "
                "a multi-task one with --task mt"
            )
        self.options = self.lm.decode_options(beam, max_len_b=max_len_b)
        self.name = Path(path).name

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> list[str]:
        from speechmt.decoding.translate import decode_encoded, encode_texts

        out = [""] * len(texts)
        todo = [i for i, t in enumerate(texts) if t.strip()]
        if todo:
            enc = encode_texts(self.lm, [texts[i] for i in todo])
            for i, nbest in zip(todo, decode_encoded(self.lm, enc, self.options)[0]):
                out[i] = nbest[0]
        return out


class FewShotLM:
    """A causal LM prompted with 3 shots: `generator(texts)` -> greedy continuations up to the first newline."""

    def __init__(self, name_or_path: str, src_lang: str, tgt_lang: str, device: str = "cpu", max_new_tokens: int = 128):
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM

        from speechmt.hub import resolve_pretrained

        for lang in (src_lang, tgt_lang):
            if lang not in NAMES:
                raise GeneratorError(f"no few-shot prompt for language {lang!r}; expected {', '.join(NAMES)}")
        folder = Path(resolve_pretrained(name_or_path))
        if not (folder / "tokenizer.json").is_file() or not (folder / "config.json").is_file():
            raise GeneratorError(f"{name_or_path}: not a causal LM folder (config.json and tokenizer.json)")
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
        cfg = self.model.config
        eos = cfg.eos_token_id[0] if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id
        self.pad_id = cfg.pad_token_id if cfg.pad_token_id is not None else eos
        self.bos = [] if cfg.bos_token_id is None else [cfg.bos_token_id]
        vocab = self.tok.get_vocab_size(with_added_tokens=True)
        newline = [i for i in range(vocab) if "\n" in self.tok.decode([i], skip_special_tokens=False)]
        self.stop = torch.tensor(sorted(set(newline) | ({eos} if eos is not None else set())), device=device)
        self.src_lang, self.tgt_lang, self.device, self.max_new_tokens = src_lang, tgt_lang, device, max_new_tokens
        self.name = folder.name
        # transformers 5.2x names the KV cache `cache`, earlier releases `past_key_values`
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    def _batch(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids (B, T) and attention mask (B, T) of the prompts."""
        ids = [self.bos + enc.ids for enc in self.tok.encode_batch(prompts, add_special_tokens=False)]
        width = max(len(x) for x in ids)
        x = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for row, seq in enumerate(ids):
            x[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        return x.to(self.device), mask.to(self.device)

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str]) -> list[str]:
        out = [""] * len(texts)
        todo = [i for i, t in enumerate(texts) if t.strip()]
        if not todo:
            return out
        x, mask = self._batch([few_shot_prompt(texts[i], self.src_lang, self.tgt_lang) for i in todo])
        done = torch.zeros(len(todo), dtype=torch.bool, device=x.device)
        past, step_ids, new = None, x, []
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        for _ in range(self.max_new_tokens):  # greedy with the KV cache, each row stopped at its newline
            result = self.model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=positions[:, -step_ids.size(1) :],
                use_cache=True,
                **{self._cache_arg: past},
            )
            past = getattr(result, self._cache_arg)
            token = result.logits[:, -1].argmax(-1).masked_fill(done, self.pad_id)
            new.append(token)
            done |= torch.isin(token, self.stop)
            if bool(done.all()):
                break
            step_ids = token[:, None]
            mask = torch.cat([mask, torch.ones_like(step_ids)], 1)
            positions = torch.cat([positions, positions[:, -1:] + 1], 1)
        generated = torch.stack(new, 1).tolist() if new else [[] for _ in todo]
        for row, i in enumerate(todo):
            text = self.tok.decode(generated[row], skip_special_tokens=True)
            out[i] = text.split("\n", 1)[0].strip()
        return out
