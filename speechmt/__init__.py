"""speechmt: end-to-end speech-to-text translation.

    import speechmt
    model = speechmt.load_model("exp/st/checkpoint_avg.safetensors")
    for result in speechmt.translate(model, ["talk.wav", "clip.flac"], beam=5):
        print(result.source, result.text)
"""

__version__ = "0.1.0"


def load_model(path, device="cpu", task=None):
    """Rebuilds a model from one checkpoint file, for `task` (None: its own; "asr" transcribes with a
    multi-task model); see speechmt.decoding.translate.load_model."""
    from speechmt.decoding.translate import load_model as _load

    return _load(path, device, task)


def translate(model, inputs, **options):
    """Translates audio files or 16 kHz arrays; see speechmt.decoding.translate.translate."""
    from speechmt.decoding.translate import translate as _translate

    return _translate(model, inputs, **options)
