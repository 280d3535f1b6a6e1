"""speechmt: end-to-end speech-to-text translation.

    import speechmt
    model = speechmt.load_model()  # the bundled English -> German model; or a checkpoint path
    for result in speechmt.translate(model, ["talk.wav", "clip.flac"], beam=5):
        print(result.source, result.text)
    report = speechmt.evaluate("model.safetensors", "data/en-de", "tst-COMMON")
    print(report.metrics["BLEU"].score, report.metrics["BLEU"].signature)

`help(speechmt.translate)` lists its options; they are `speechmt translate`'s, checked by the same rules. Every
`speechmt` command calls this API: the everyday ones are here, the others in speechmt.api_data (`speechmt data`),
speechmt.api_interop (`speechmt import`) and speechmt.api_research (`speechmt research`).
"""

from importlib.metadata import PackageNotFoundError, version

from speechmt.api import (
    Cascade,
    OptionError,
    Stream,
    load_cascade,
    load_model,
    simultaneous,
    subtitle_cues,
    subtitles,
    translate,
    write_subtitles,
)
from speechmt.api_evaluate import SimultaneousEvaluation, SimultaneousRun, evaluate, evaluate_simultaneous
from speechmt.api_train import average, export, train

try:
    __version__ = version("speechmt")  # the installed package's metadata: pyproject.toml's version
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Cascade",
    "OptionError",
    "SimultaneousEvaluation",
    "SimultaneousRun",
    "Stream",
    "__version__",
    "average",
    "evaluate",
    "evaluate_simultaneous",
    "export",
    "load_cascade",
    "load_model",
    "simultaneous",
    "subtitle_cues",
    "subtitles",
    "train",
    "translate",
    "write_subtitles",
]
