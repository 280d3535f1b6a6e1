"""Evaluation: corpus metrics (sacreBLEU BLEU and chrF, WER and CER) and evaluation reports."""

from speechmt.evaluation.metrics import Score, bleu, cer, chrf, normalize_for_wer, wer
from speechmt.evaluation.report import (
    EvalReport,
    append_results_row,
    git_commit,
    load_report,
    markdown_row,
    write_report,
)

__all__ = [
    "EvalReport",
    "Score",
    "append_results_row",
    "bleu",
    "cer",
    "chrf",
    "git_commit",
    "load_report",
    "markdown_row",
    "normalize_for_wer",
    "wer",
    "write_report",
]
