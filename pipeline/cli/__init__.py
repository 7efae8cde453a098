"""`stepwise` command line (`python -m pipeline.cli` runs it too): `main.py` the entry,
`parser.py` the grammar, `*_commands.py` the handlers, each loaded when its command runs."""
