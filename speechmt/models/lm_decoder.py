"""A pretrained decoder-only language model as speechmt's decoder (the shape of today's strongest speech
translators: a speech encoder, a length adapter and a pretrained LM; e.g. Qwen2-Audio, Chu et al. 2024).

Any Hugging Face causal LM (Gemma 3, Qwen2.5, Qwen3, Llama 3, Mistral, Phi-3: a hub id, a local folder or a name
that set-up converted under $SPEECHMT_HOME, such as `gemma-3-270m`; of a multimodal model such as Gemma 3 4B-27B,
its text model alone) reads one sequence per utterance:

    [prompt: <bos>English:] [source: the bridge's speech states, or the source text's own embeddings]
    [target: \\n German: Das ist gut . <eos>]

The source is the encoder output ("memory") that other decoders attend to; here it is spliced into the LM's
input embeddings, each row's padding moved to its start and masked out, and the position ids counted from its
first real token, so that each row is the LM's own sequence whatever the padding. The target's tokens are ids of a trimmed output vocabulary
(speechmt.tokenizers.lm: `vocab` holds their LM ids): the output layer is the LM's own (tied to its input
table on Gemma) restricted to those rows, so a step costs len(vocab) instead of 262k logits, and input
embeddings stay whole.

Decoding is incremental on the LM's own key/value cache (`LMCache`): the first call runs the prompt, source
and the target's first tokens; each later call only the new tokens; beam search reorders the cache's rows.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import Tensor, nn

from speechmt.checks import checked, field_problems, raise_problems
from speechmt.hub import resolve_pretrained
from speechmt.models.components import (
    HF_CONFIGS,
    BuildParts,
    ModelConfigT,
    PretrainedOptions,
    base_dtype_field,
    base_dtype_problem,
    hf_fields,
    kind_field,
)
from speechmt.models.decoder import DecoderConfig
from speechmt.models.memory import enable_hf_checkpointing, torch_dtype

RESOLVED = ("decoder.vocab", "decoder.prompt")
"""What an LM decoder's build reads from the model bundle's `resolved` (speechmt.bundle.ModelBundle.resolved), each
a list of LM ids: the trimmed output vocabulary (speechmt.tokenizers.lm) and the prompt before the source
("<bos>English:"), which a run derives from the LM's tokenizer (speechmt.training.builders.resolved_for)."""
_META_KEYS = ("transformers_version", "architectures", "dtype", "torch_dtype", "_name_or_path", "quantization_config")
# a multimodal checkpoint's text tensors -> a causal LM's names (Gemma 3, Mistral 3, LLaVA-style models)
_TEXT_KEYS = {
    r"^language_model\.model\.": "model.",
    r"^model\.language_model\.": "model.",
    r"^language_model\.lm_head\.": "lm_head.",
}


@dataclass
class LMDecoderConfig(PretrainedOptions, DecoderConfig):
    """decoder kind "lm": a pretrained causal language model from name_or_path, reading [prompt | source |
    target]; d_model is its width. Its trimmed output vocabulary and the prompt before the source, derived from
    the LM's tokenizer and the training targets when a run starts, are no options: the model bundle's `resolved`
    keeps them ("decoder.vocab", "decoder.prompt": RESOLVED)."""

    kind: str = kind_field("lm")
    # up to this many retrieved translation pairs read before each source (text, or the speech bridge's vectors),
    # as few-shot examples (`speechmt data retrieve` writes them beside a split for training; decoding speech
    # retrieves them by the model's own transcript: speechmt.data.retrieval); 0: none
    examples: int = checked(0, lo=0, hi=16)
    # examples: the translation memory that decoding speech searches when none is given (--memory): a manifest,
    # a folder with memory.jsonl, or a folder's name under $SPEECHMT_HOME (`ding-en-de`: `speechmt data
    # synth-memory`); "": none named
    memory: str = ""
    # recompute the layers' activations in the backward pass (less memory, ~1/3 more compute)
    gradient_checkpointing: bool = False
    # the type the frozen pretrained weights are kept in (float32, bfloat16 or float16: half the bytes); what
    # trains (LoRA adapters, LNA's parts) stays float32; needs finetune frozen, lna or lora
    base_dtype: str = base_dtype_field()
    lm_tokens: ClassVar[bool] = True

    def __post_init__(self):
        raise_problems(
            "bad ModelConfig",
            field_problems(self, "decoder.")
            + self.pretrained_problems("decoder")
            + [
                base_dtype_problem("decoder", self.base_dtype, self.finetune != "full"),
                self.memory
                and not self.examples
                and f"decoder.memory ({self.memory!r}) needs decoder.examples > 0 (the memory is where examples come from)",
            ],
        )


def build_lm_decoder(cfg: ModelConfigT, parts: BuildParts) -> tuple[LMDecoder, ModelConfigT]:
    """A causal LM as the decoder, over the output vocabulary and prompt of `parts.resolved` (RESOLVED: what the run
    derived from the LM's tokenizer), and `cfg` with its width as d_model and its trimmed vocabulary's size; its
    complete HF config goes to `parts.resolved` ("decoder.hf_config"; a checkpoint's is read back from there)."""
    d = cfg.decoder
    vocab, prompt = (tuple(parts.resolved.get(key) or ()) for key in RESOLVED)
    decoder = lm_decoder(
        load_causal_lm(
            d.name_or_path, hf_fields("decoder", d, parts.resolved), parts.pretrained, torch_dtype(d.base_dtype)
        ),
        vocab,
        prompt,
    )
    if d.gradient_checkpointing:
        enable_hf_checkpointing(decoder.lm)
    parts.resolved.setdefault(HF_CONFIGS["decoder"], lm_config_dict(decoder.lm))
    return decoder, replace(cfg, d_model=decoder.dim, tgt_vocab_size=len(vocab))


@dataclass
class LMCache:
    """The LM's key/value cache (`kv`, transformers' DynamicCache), each row's attention mask over what it has
    read (R, L) and its next position (R,); `offset`: target tokens read so far; `group`: decoder rows per
    memory row (beam search: the beams of one utterance)."""

    kv: object = None
    mask: Tensor | None = None
    next_position: Tensor | None = None
    offset: int = 0
    group: int = 1

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        """Keeps rows `index` (R',), in that order."""
        self.regroup(index, None, self.group)

    def regroup(self, index: Tensor, memory_index: Tensor | None, group: int) -> None:
        """Keeps decoder rows `index` (R',); the memory is inside the cache already, so `memory_index` only
        says which memory rows later calls pass (their number must be R' / group)."""
        if self.kv is not None:
            self.kv.reorder_cache(index)
            self.mask, self.next_position = self.mask.index_select(0, index), self.next_position.index_select(0, index)
        self.group = group


class LMDecoder(nn.Module):
    """tokens (B, U) of the trimmed vocabulary and memory (B, S, D) -> logits (B, U, len(vocab)).

    `lm`: a transformers causal LM (its `model` body and `lm_head`); `vocab` (V',): the LM ids of the output
    vocabulary; `prompt` (P,): the LM ids read before the source."""

    def __init__(self, lm: nn.Module, vocab: Tensor, prompt: Tensor):
        super().__init__()
        if prompt.numel() == 0:
            raise ValueError("an LM decoder needs a prompt of at least one token before the source")
        self.lm = lm
        self.register_buffer("vocab", vocab.long(), persistent=False)
        self.register_buffer("prompt", prompt.long(), persistent=False)
        self.softcap = getattr(lm.config, "final_logit_softcapping", None)
        self._cache_arg = "cache" if "cache" in inspect.signature(lm.model.forward).parameters else "past_key_values"

    @property
    def dim(self) -> int:
        return self.lm.config.hidden_size

    @property
    def embed(self) -> nn.Embedding:
        """The LM's input embedding (Gemma's scales by sqrt(D) itself)."""
        return self.lm.get_input_embeddings()

    def new_cache(self) -> LMCache:
        return LMCache()

    def forward(self, tokens: Tensor, memory: Tensor, memory_lengths: Tensor, cache: LMCache | None = None) -> Tensor:
        """tokens (R, U): all target positions, or with a cache only the new ones; memory (R / group, S, D) and
        memory_lengths (R / group,) (read on the first call only) -> logits (R, U, V')."""
        group = cache.group if cache is not None else 1
        if tokens.size(0) != memory.size(0) * group:
            raise ValueError(f"{tokens.size(0)} decoder rows for {memory.size(0)} memory rows of {group} each")
        x = self.embed(self.vocab[tokens])  # (R, U, D)
        if cache is None or cache.mask is None:
            x, mask, positions = self._first_inputs(x, memory, memory_lengths, group)
        else:
            mask = torch.cat([cache.mask, cache.mask.new_ones(x.shape[:2])], dim=1)
            positions = cache.next_position[:, None] + torch.arange(x.size(1), device=x.device)
        kv = None
        if cache is not None:
            kv = cache.kv if cache.kv is not None else self._new_kv()
            cache.kv, cache.mask, cache.next_position = kv, mask, positions[:, -1] + 1
            cache.offset += tokens.size(1)
        out = self.lm.model(
            inputs_embeds=x,
            attention_mask=mask,
            position_ids=positions,
            use_cache=cache is not None,
            **{self._cache_arg: kv},
        )
        return self.logits(out.last_hidden_state[:, -tokens.size(1) :])

    def _first_inputs(
        self, x: Tensor, memory: Tensor, memory_lengths: Tensor, group: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """[padding | prompt | memory | target] embeddings (R, P + S + U, D), their mask (1: read) and positions.
        Each row's padding goes first (left padding, as in generation), so that what the LM reads is contiguous
        and a sliding-window layer's window spans the same tokens whatever the padding."""
        if group > 1:
            memory, memory_lengths = memory.repeat_interleave(group, 0), memory_lengths.repeat_interleave(group, 0)
        rows, width = x.size(0), self.prompt.numel() + memory.size(1)
        prompt = self.embed(self.prompt)[None].expand(rows, -1, -1).to(x.dtype)
        source = torch.cat([prompt, memory.to(x.dtype)], dim=1)  # (R, P + S, D), padding at the end
        pad = (memory.size(1) - memory_lengths)[:, None]  # (R, 1)
        index = torch.arange(width, device=x.device)[None] - pad  # (R, P + S): where each slot reads from
        keep = index >= 0
        source = source.gather(1, index.clamp(min=0)[..., None].expand(-1, -1, source.size(-1)))
        source = source.masked_fill(~keep[..., None], 0.0)
        mask = torch.cat([keep, keep.new_ones(x.shape[:2])], dim=1).long()
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        return torch.cat([source, x], dim=1), mask, positions

    def _new_kv(self):
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.lm.config)
        except TypeError:  # transformers 4.x
            return DynamicCache()

    def head_weight(self) -> Tensor:
        """The LM's output rows `vocab` (V', D). Gathered once and reused while the LM's output layer is unchanged
        (frozen, LoRA, decoding): a copy of V' x D values per step saved; gathered afresh where it trains."""
        weight = self.lm.get_output_embeddings().weight
        if weight.requires_grad and torch.is_grad_enabled():
            return weight.index_select(0, self.vocab)
        key = (weight.data_ptr(), weight._version, weight.device, self.vocab.data_ptr())
        if getattr(self, "_head_key", None) != key:
            self._head, self._head_key = weight.detach().index_select(0, self.vocab), key
        return self._head

    def logits(self, hidden: Tensor) -> Tensor:
        """hidden (..., D) -> logits (..., V') over the trimmed vocabulary: the LM's output rows `vocab`."""
        # through a 2-D view: a 3-D `hidden` that is not contiguous (a slice of positions) would make matmul
        # expand the (V', D) weight to every row (a copy of B x V' x D values) instead of folding the batch
        logits = (hidden.reshape(-1, hidden.size(-1)) @ self.head_weight().to(hidden.dtype).t()).view(
            *hidden.shape[:-1], -1
        )
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def load_causal_lm(
    name_or_path: str, hf_config: dict, pretrained: bool = True, dtype: torch.dtype = torch.float32
) -> nn.Module:
    """transformers' causal LM: the pretrained weights of name_or_path in `dtype` (of a multimodal checkpoint such
    as Gemma 3 4B-27B, its text model alone: `text_causal_lm`), or (not `pretrained`: a checkpoint's weights follow)
    a random init of the complete `hf_config`."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if pretrained and name_or_path:
        source = resolve_pretrained(name_or_path)
        try:
            config = AutoConfig.from_pretrained(source)
            text = config.get_text_config(decoder=True)
            if text is not config:
                return text_causal_lm(source, text, dtype)
            return AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(
                f"{name_or_path}: cannot load a causal language model ({str(e).splitlines()[0]}); "
                "run `make setup` (gemma-3-270m) or pass a local folder"
            ) from None
    if not hf_config.get("model_type"):
        raise ValueError("decoder 'lm' without name_or_path needs decoder.hf_config with its model_type")
    fields = {k: v for k, v in hf_config.items() if k not in _META_KEYS}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    return AutoModelForCausalLM.from_config(config, dtype=dtype)


def text_causal_lm(source: str, text_config, dtype: torch.dtype) -> nn.Module:
    """The causal LM of `text_config` (its own class: Gemma3ForCausalLM for Gemma 3's gemma3_text) with the language
    model's weights of the multimodal checkpoint `source`, in either layout transformers writes
    (language_model.model.*, model.language_model.*); the vision tower's tensors stay on disk. ValueError (one
    line) when a text weight is not in the checkpoint."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # no report listing every vision tensor as unexpected
    try:
        lm, info = AutoModelForCausalLM.from_pretrained(
            source, config=text_config, dtype=dtype, key_mapping=_TEXT_KEYS, output_loading_info=True
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    if info["missing_keys"]:
        raise ValueError(f"the multimodal checkpoint has no text weights {sorted(info['missing_keys'])[:3]}")
    return lm


def lm_config_dict(lm: nn.Module) -> dict:
    """The complete HF config of a loaded LM, as a checkpoint's bundle keeps it (resolved "decoder.hf_config")."""
    return {k: v for k, v in lm.config.to_dict().items() if k not in _META_KEYS}


def lm_decoder(lm: nn.Module, vocab: list[int] | tuple[int, ...], prompt: list[int] | tuple[int, ...]) -> LMDecoder:
    """An LMDecoder over a loaded causal LM, with output vocabulary `vocab` (LM ids) and `prompt` (LM ids)."""
    if not vocab:
        raise ValueError(
            "decoder 'lm' needs its output vocabulary (resolved decoder.vocab: the LM ids the targets use, which a "
            "run derives from the LM's tokenizer and a checkpoint's bundle keeps)"
        )
    size = lm.config.vocab_size
    bad = [i for i in (*vocab, *prompt) if not 0 <= int(i) < size]
    if bad:
        raise ValueError(f"decoder.vocab / decoder.prompt hold ids outside the LM's vocabulary of {size}: {bad[:3]}")
    return LMDecoder(lm, torch.tensor(list(vocab)), torch.tensor(list(prompt)))
