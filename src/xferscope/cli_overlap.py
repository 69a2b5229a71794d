"""`xferscope overlap cpu|buffers|gpu`: registered on the CLI group by cli.py."""
