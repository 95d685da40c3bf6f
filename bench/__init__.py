"""Benchmarks run by ``just bench`` (``python -m bench``); sections are listed in ``__main__``."""
