"""speechmt: end-to-end speech-to-text translation."""

__version__ = "0.1.0"
