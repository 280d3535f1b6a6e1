"""speechmt: end-to-end speech-to-text translation.

    import speechmt
    model = speechmt.load_model()  # the bundled English -> German model; or a checkpoint path
    for result in speechmt.translate(model, ["talk.wav", "clip.flac"], beam=5):
        print(result.source, result.text)

`help(speechmt.translate)` lists its options; they are `speechmt translate`'s, checked by the same rules.
"""

from importlib.metadata import PackageNotFoundError, version

from speechmt.api import OptionError, load_model, translate

try:
    __version__ = version("speechmt")  # the installed package's metadata: pyproject.toml's version
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["OptionError", "__version__", "load_model", "translate"]
