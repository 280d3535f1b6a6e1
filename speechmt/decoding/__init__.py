"""Decoding: greedy and beam search over a Translator's decoder cache."""

from speechmt.decoding.search import BeamSearch, DecodeOptions, Hypothesis, beam_search, greedy_search

__all__ = ["BeamSearch", "DecodeOptions", "Hypothesis", "beam_search", "greedy_search"]
