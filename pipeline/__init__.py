"""Stepwise: a serving pipeline for reasoning language models."""

__version__ = "0.1.0"
