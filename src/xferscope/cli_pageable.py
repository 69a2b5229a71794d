"""`xferscope pageable`: registered on the CLI group by cli.py."""
